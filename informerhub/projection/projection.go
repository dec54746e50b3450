package projection

import (
	"fmt"
	"slices"
	"strings"

	"github.com/informerhub/informerhub/internal/jsonscan"
)

// Projection is the fields a request asks for. A path names object members
// from the top, separated by dots: "status.phase", "metadata.labels". A
// member whose name holds a dot or a bracket is written in brackets and
// quotes: metadata.labels["app.kubernetes.io/name"] (or with single quotes).
// Through a list, a path applies to each element: "spec.containers.image"
// keeps the image of every container; elements that are objects stay in the
// list (as {} when they have none of the fields), so positions line up, and
// other elements are dropped. A path that continues past a string, number,
// boolean or null selects nothing there.
//
// apiVersion, kind, and metadata name, namespace, uid and resourceVersion
// are always kept: every projected object still says what it is.
type Projection struct {
	// key identifies the projection: the canonical paths, sorted and
	// joined. Requests that ask for the same fields in another order or
	// spelling share one projection.
	key string
	// paths are the canonical paths asked for.
	paths []string
	// tree is what Apply keeps: the paths and the fields always kept.
	tree *Tree
	// asksResourceVersion is set when the paths asked for hold
	// metadata.resourceVersion (see SameAsked).
	asksResourceVersion bool
}

// alwaysKept are the paths every projection keeps.
var alwaysKept = [][]string{
	{"apiVersion"}, {"kind"},
	{"metadata", "name"}, {"metadata", "namespace"}, {"metadata", "uid"}, {"metadata", "resourceVersion"},
}

// PathError is a path of a request that does not parse.
type PathError struct {
	Path string
	Err  error
}

func (e *PathError) Error() string { return fmt.Sprintf("%q: %v", e.Path, e.Err) }
func (e *PathError) Unwrap() error { return e.Err }

// TooManyPathsError refuses a request for more paths than allowed.
type TooManyPathsError struct{ Paths, Max int }

func (e *TooManyPathsError) Error() string {
	return fmt.Sprintf("%d fields asked for; at most %d are allowed: ask for a common parent instead", e.Paths, e.Max)
}

// Parse validates the paths of a request's fields: a *TooManyPathsError
// for more than maxPaths, a *PathError for one that does not parse. It
// returns nil for none.
func Parse(paths []string, maxPaths int) (*Projection, error) {
	if len(paths) == 0 {
		return nil, nil
	}
	if len(paths) > maxPaths {
		return nil, &TooManyPathsError{Paths: len(paths), Max: maxPaths}
	}
	p := &Projection{tree: &Tree{}}
	for _, s := range paths {
		segments, err := ParsePath(s)
		if err != nil {
			return nil, &PathError{Path: s, Err: err}
		}
		p.tree.Add(segments)
		p.paths = append(p.paths, FormatPath(segments))
		if segments[0] == "metadata" && (len(segments) == 1 || segments[1] == "resourceVersion") {
			p.asksResourceVersion = true
		}
	}
	for _, segments := range alwaysKept {
		p.tree.Add(segments)
	}
	slices.Sort(p.paths)
	p.paths = slices.Compact(p.paths)
	p.key = strings.Join(p.paths, "\n")
	return p, nil
}

// Key identifies what the projection keeps: projections with equal keys
// keep the same fields.
func (p *Projection) Key() string { return p.key }

// Apply returns the projection of the JSON object obj.
func (p *Projection) Apply(obj []byte) ([]byte, error) {
	return p.tree.Apply(obj, len(obj)/4)
}

// SameAsked reports whether two projections of states of one object agree
// on the paths asked for. They always agree on the identity every
// projection keeps (apiVersion, kind, name, namespace, uid), and never on
// its resourceVersion: the paths asked for are the same in both unless the
// bytes differ elsewhere than there.
func (p *Projection) SameAsked(a, b []byte) bool {
	if p.asksResourceVersion {
		return false
	}
	aFrom, aTo, aOK := jsonscan.LookupBounds(a, "metadata", "resourceVersion")
	bFrom, bTo, bOK := jsonscan.LookupBounds(b, "metadata", "resourceVersion")
	if !aOK || !bOK {
		return string(a) == string(b)
	}
	return string(a[:aFrom]) == string(b[:bFrom]) && string(a[aTo:]) == string(b[bTo:])
}

// Tree is a set of paths to keep of JSON objects: at each step, the whole
// value, or only the children named. The zero Tree keeps nothing.
type Tree struct {
	whole    bool
	children map[string]*Tree
}

// Whole is the Tree that keeps everything. Never modify it.
var Whole = &Tree{whole: true}

// Add makes t keep the value at path.
func (t *Tree) Add(path []string) {
	n := t
	for _, name := range path {
		if n.whole {
			return // a parent is kept whole already
		}
		if n.children == nil {
			n.children = map[string]*Tree{}
		}
		child := n.children[name]
		if child == nil {
			child = &Tree{}
			n.children[name] = child
		}
		n = child
	}
	n.whole, n.children = true, nil
}

// Merge makes t keep what other keeps too.
func (t *Tree) Merge(other *Tree) {
	if t.whole {
		return
	}
	if other.whole {
		t.whole, t.children = true, nil
		return
	}
	for name, child := range other.children {
		if t.children == nil {
			t.children = map[string]*Tree{}
		}
		mine := t.children[name]
		if mine == nil {
			mine = &Tree{}
			t.children[name] = mine
		}
		mine.Merge(child)
	}
}

// Apply returns what t keeps of the JSON object obj, in a buffer of
// sizeHint bytes to start with. It fails on anything but one JSON object
// (jsonscan.ErrBadJSON).
func (t *Tree) Apply(obj []byte, sizeHint int) ([]byte, error) {
	start := jsonscan.SkipSpace(obj, 0)
	if start >= len(obj) || obj[start] != '{' {
		return nil, jsonscan.ErrBadJSON
	}
	out, end, _, err := t.appendProjected(make([]byte, 0, sizeHint), obj, start)
	if err == nil && jsonscan.SkipSpace(obj, end) != len(obj) {
		err = jsonscan.ErrBadJSON // more than one value
	}
	return out, err
}

// appendProjected appends to dst what n keeps of the value that starts at
// obj[start], and returns where the value ends and whether it kept
// anything. It reads each byte once: a value it keeps whole or skips it
// scans to its end, one it descends into it walks.
func (n *Tree) appendProjected(dst, obj []byte, start int) (out []byte, end int, kept bool, err error) {
	if n.whole {
		end, err := jsonscan.ValueEnd(obj, start)
		if err != nil {
			return dst, 0, false, err
		}
		return append(dst, obj[start:end]...), end, true, nil
	}
	var closing byte
	switch obj[start] {
	case '{':
		closing = '}'
	case '[':
		closing = ']'
	default: // a scalar where the path goes on: nothing here
		end, err := jsonscan.ValueEnd(obj, start)
		return dst, end, false, err
	}
	dst = append(dst, obj[start])
	first := true
	i := jsonscan.SkipSpace(obj, start+1)
	if i < len(obj) && obj[i] == closing {
		return append(dst, closing), i + 1, true, nil
	}
	for {
		// One member (its key, then its value) or element.
		child, mark := n, len(dst)
		if closing == '}' {
			keyEnd, escaped, err := jsonscan.StringEnd(obj, i)
			if err != nil {
				return dst, 0, false, err
			}
			key := obj[i:keyEnd]
			if i = jsonscan.SkipSpace(obj, keyEnd); i >= len(obj) || obj[i] != ':' {
				return dst, 0, false, jsonscan.ErrBadJSON
			}
			i = jsonscan.SkipSpace(obj, i+1)
			if child = n.child(key, escaped); child != nil {
				if !first {
					dst = append(dst, ',')
				}
				dst = append(dst, key...)
				dst = append(dst, ':')
			}
		} else if !first {
			dst = append(dst, ',')
		}
		var valueEnd int
		if child == nil {
			if valueEnd, err = jsonscan.ValueEnd(obj, i); err != nil {
				return dst, 0, false, err
			}
		} else {
			var keptValue bool
			if dst, valueEnd, keptValue, err = child.appendProjected(dst, obj, i); err != nil {
				return dst, 0, false, err
			}
			if keptValue {
				first = false
			} else {
				dst = dst[:mark]
			}
		}
		if i = jsonscan.SkipSpace(obj, valueEnd); i >= len(obj) {
			return dst, 0, false, jsonscan.ErrBadJSON
		}
		switch obj[i] {
		case ',':
			i = jsonscan.SkipSpace(obj, i+1)
		case closing:
			return append(dst, closing), i + 1, true, nil
		default:
			return dst, 0, false, jsonscan.ErrBadJSON
		}
	}
}

// child returns the node of an object member's key (its JSON string,
// quotes included), nil if n keeps nothing of it.
func (n *Tree) child(key []byte, escaped bool) *Tree {
	if !escaped {
		return n.children[string(key[1:len(key)-1])] // no allocation: the compiler sees the conversion is for a map lookup
	}
	m := jsonscan.Member{Key: key, Escaped: true}
	return n.children[m.KeyString()]
}
