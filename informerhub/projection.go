package informerhub

import (
	"fmt"
	"slices"
	"strings"

	"github.com/informerhub/informerhub/internal/jsonscan"
)

// A projection keeps only some fields of each object it is applied to, as
// the paths of a WatchRequest's or SnapshotRequest's fields say. It works on
// the object's JSON in place (jsonscan.go): what it keeps are the API
// server's own bytes, in the API server's order.
//
// A path names object members from the top, separated by dots:
// "status.phase", "metadata.labels". A member whose name holds a dot or a
// bracket is written in brackets and quotes: metadata.labels["app.kubernetes.io/name"]
// (or with single quotes). Through a list, a path applies to each element:
// "spec.containers.image" keeps the image of every container; elements that
// are objects stay in the list (as {} when they have none of the fields), so
// positions line up, and other elements are dropped. A path that continues
// past a string, number, boolean or null selects nothing there.
//
// apiVersion, kind, and metadata name, namespace, uid and resourceVersion
// are always kept: every projected object still says what it is.
type projection struct {
	// key identifies the projection: the canonical paths, sorted and
	// joined. Requests that ask for the same fields in another order or
	// spelling share one projection.
	key string
	// paths are the canonical paths asked for.
	paths []string
	// tree is what apply keeps: the paths and the fields always kept.
	tree *projNode
	// asksResourceVersion is set when the paths asked for hold
	// metadata.resourceVersion (see sameAsked).
	asksResourceVersion bool
}

// projNode is one step of a projection: keep the whole value, or only the
// children named.
type projNode struct {
	whole    bool
	children map[string]*projNode
}

// alwaysKept are the paths every projection keeps.
var alwaysKept = [][]string{
	{"apiVersion"}, {"kind"},
	{"metadata", "name"}, {"metadata", "namespace"}, {"metadata", "uid"}, {"metadata", "resourceVersion"},
}

// Limits of a path, so that a projection costs a bounded amount to parse
// and apply whatever a request holds.
const (
	maxFieldPathLength = 512
	maxFieldPathDepth  = 32
)

// parseProjection validates the paths of a request's fields. It returns
// nil for none.
func parseProjection(paths []string, maxPaths int) (*projection, error) {
	if len(paths) == 0 {
		return nil, nil
	}
	if len(paths) > maxPaths {
		return nil, &RequestError{Field: FieldFields, Err: ErrInvalidRequest,
			Reason: fmt.Sprintf("%d fields asked for; at most %d are allowed: ask for a common parent instead", len(paths), maxPaths)}
	}
	p := &projection{tree: &projNode{}}
	for _, s := range paths {
		segments, err := parseFieldPath(s)
		if err != nil {
			return nil, &RequestError{Field: FieldFields, Err: ErrInvalidRequest, Reason: fmt.Sprintf("%q: %v", truncate(s), err)}
		}
		p.tree.add(segments)
		p.paths = append(p.paths, formatFieldPath(segments))
		if segments[0] == "metadata" && (len(segments) == 1 || segments[1] == "resourceVersion") {
			p.asksResourceVersion = true
		}
	}
	for _, segments := range alwaysKept {
		p.tree.add(segments)
	}
	slices.Sort(p.paths)
	p.paths = slices.Compact(p.paths)
	p.key = strings.Join(p.paths, "\n")
	return p, nil
}

// add makes n keep the value at path.
func (n *projNode) add(path []string) {
	for _, name := range path {
		if n.whole {
			return // a parent is kept whole already
		}
		if n.children == nil {
			n.children = map[string]*projNode{}
		}
		child := n.children[name]
		if child == nil {
			child = &projNode{}
			n.children[name] = child
		}
		n = child
	}
	n.whole, n.children = true, nil
}

// merge makes n keep what other keeps too.
func (n *projNode) merge(other *projNode) {
	if n.whole {
		return
	}
	if other.whole {
		n.whole, n.children = true, nil
		return
	}
	for name, child := range other.children {
		if n.children == nil {
			n.children = map[string]*projNode{}
		}
		mine := n.children[name]
		if mine == nil {
			mine = &projNode{}
			n.children[name] = mine
		}
		mine.merge(child)
	}
}

// apply returns the projection of the JSON object obj.
func (p *projection) apply(obj []byte) ([]byte, error) {
	return project(p.tree, obj, len(obj)/4)
}

// sameAsked reports whether two projections of states of one object agree
// on the paths asked for. They always agree on the identity every
// projection keeps (apiVersion, kind, name, namespace, uid), and never on
// its resourceVersion: the paths asked for are the same in both unless the
// bytes differ elsewhere than there.
func (p *projection) sameAsked(a, b []byte) bool {
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

func project(n *projNode, obj []byte, sizeHint int) ([]byte, error) {
	start := jsonscan.SkipSpace(obj, 0)
	if start >= len(obj) || obj[start] != '{' {
		return nil, jsonscan.ErrBadJSON
	}
	out, end, _, err := n.appendProjected(make([]byte, 0, sizeHint), obj, start)
	if err == nil && jsonscan.SkipSpace(obj, end) != len(obj) {
		err = jsonscan.ErrBadJSON // more than one value
	}
	return out, err
}

// appendProjected appends to dst what n keeps of the value that starts at
// obj[start], and returns where the value ends and whether it kept
// anything. It reads each byte once: a value it keeps whole or skips it
// scans to its end, one it descends into it walks.
func (n *projNode) appendProjected(dst, obj []byte, start int) (out []byte, end int, kept bool, err error) {
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
func (n *projNode) child(key []byte, escaped bool) *projNode {
	if !escaped {
		return n.children[string(key[1:len(key)-1])] // no allocation: the compiler sees the conversion is for a map lookup
	}
	m := jsonscan.Member{Key: key, Escaped: true}
	return n.children[m.KeyString()]
}

// parseFieldPath splits a path into the member names it steps through.
func parseFieldPath(s string) ([]string, error) {
	if s == "" {
		return nil, fmt.Errorf("a path is empty")
	}
	if len(s) > maxFieldPathLength {
		return nil, fmt.Errorf("a path is longer than %d bytes", maxFieldPathLength)
	}
	var segments []string
	rest := strings.TrimPrefix(s, ".") // ".status.phase", as in JSONPath and CRD selectableFields
	for {
		var name string
		if rest != "" && rest[0] == '[' {
			quote := byte(0)
			if len(rest) > 1 {
				quote = rest[1]
			}
			if quote != '"' && quote != '\'' {
				return nil, fmt.Errorf(`brackets hold a quoted name, e.g. metadata.labels["app.kubernetes.io/name"]; list indexes are not supported (a path applies to every element of a list)`)
			}
			closing := strings.IndexByte(rest[2:], quote)
			if closing < 0 || len(rest) < closing+4 || rest[closing+3] != ']' {
				return nil, fmt.Errorf("a bracketed name is not closed: write [\"name\"] or ['name']")
			}
			name, rest = rest[2:closing+2], rest[closing+4:]
			if name == "" {
				return nil, fmt.Errorf("a bracketed name is empty")
			}
		} else {
			end := strings.IndexAny(rest, ".[")
			if end < 0 {
				end = len(rest)
			}
			name, rest = rest[:end], rest[end:]
			if name == "" {
				return nil, fmt.Errorf("a path has an empty step: names are separated by single dots, e.g. status.phase")
			}
			if i := strings.IndexAny(name, "]\"' \t\r\n*"); i >= 0 {
				return nil, fmt.Errorf("%q cannot be in a plain name: write names that hold it in brackets, e.g. metadata.labels[\"app.kubernetes.io/name\"]; wildcards are not supported", name[i])
			}
		}
		segments = append(segments, name)
		if len(segments) > maxFieldPathDepth {
			return nil, fmt.Errorf("a path is more than %d steps deep", maxFieldPathDepth)
		}
		switch {
		case rest == "":
			return segments, nil
		case rest[0] == '.':
			rest = rest[1:]
			if rest == "" {
				return nil, fmt.Errorf("a path ends with a dot")
			}
		case rest[0] == '[':
		default:
			return nil, fmt.Errorf("expected a dot or a bracket after %q", name)
		}
	}
}

// formatFieldPath writes a path in its canonical form: plain names where
// they can be, bracketed and double-quoted where not.
func formatFieldPath(segments []string) string {
	var b strings.Builder
	for i, name := range segments {
		if strings.ContainsAny(name, ".[]\"' \t\r\n*") {
			// A name parsed from brackets never holds both quotes.
			quote := "\""
			if strings.Contains(name, quote) {
				quote = "'"
			}
			b.WriteString("[" + quote + name + quote + "]")
			continue
		}
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(name)
	}
	return b.String()
}
