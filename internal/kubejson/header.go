package kubejson

import (
	"errors"
	"fmt"

	"github.com/informerhub/informerhub/internal/jsonscan"
)

// InitialEventsEndAnnotation marks the bookmark that ends a watch-list's
// initial events (metav1.InitialEventsAnnotationKey).
const InitialEventsEndAnnotation = "k8s.io/initial-events-end"

// ErrWrongType is a member of another JSON type than the field it decodes
// into (a name that is a number), which encoding/json fails on as well.
var ErrWrongType = errors.New("wrong JSON type")

// Header is what the hub reads of an object's JSON.
type Header struct {
	APIVersion, Kind                      string
	Name, Namespace, UID, ResourceVersion string
	Labels                                map[string]string
	// InitialEventsEnd is the annotation that ends a watch-list's initial
	// events, on its bookmark; the (often large) annotations of ordinary
	// objects are checked, not copied into maps.
	InitialEventsEnd bool

	// ManagedFields is set when the (last) metadata holds managedFields.
	ManagedFields bool
	// Metadata is where the last metadata member's object lies in the
	// object, from its '{' to just after its '}'; Metadatas counts the
	// metadata members, whose duplicates encoding/json merges.
	Metadata  [2]int
	Metadatas int
}

// DecodeHeader reads the JSON object that starts at b[i] (after any space)
// into hdr, checking its syntax as encoding/json does, and returns the index
// just after it. Values the hub does not read are checked, not decoded.
// Like encoding/json it leaves a field as it was for null and merges
// duplicate members into what it read before; unlike it, it stops at the
// first error.
func DecodeHeader(b []byte, i int, hdr *Header) (int, error) { return decodeHeader(b, i, 0, hdr) }

// decodeHeader is DecodeHeader for an object inside depth arrays and
// objects of its document (which count towards jsonscan.MaxDepth).
func decodeHeader(b []byte, i, depth int, hdr *Header) (int, error) {
	if i = jsonscan.SkipSpace(b, i); i >= len(b) {
		return 0, jsonscan.ErrUnexpectedEnd
	}
	if jsonscan.IsNull(b, i) {
		return i + 4, nil
	}
	if b[i] != '{' {
		return 0, wrongType(b, i, depth, "an object must be a JSON object")
	}
	start := i
	depth++ // of the members' values
	return jsonscan.CheckMembers(b, i, func(m *jsonscan.Member) (int, error) {
		switch {
		case m.KeyIs("apiVersion"):
			return readString(b, m, depth, &hdr.APIVersion)
		case m.KeyIs("kind"):
			return readString(b, m, depth, &hdr.Kind)
		case m.KeyIs("metadata"):
			return readMetadata(b, m, start, depth, hdr)
		}
		return jsonscan.CheckValueIn(b, m.Start, depth)
	})
}

// readMetadata reads the metadata of the object that starts at b[start];
// the metadata is inside depth arrays and objects.
func readMetadata(b []byte, m *jsonscan.Member, start, depth int, hdr *Header) (int, error) {
	if jsonscan.IsNull(b, m.Start) {
		return m.Start + 4, nil
	}
	if b[m.Start] != '{' {
		return 0, wrongType(b, m.Start, depth, "metadata must be an object")
	}
	hdr.Metadatas++
	depth++
	end, err := jsonscan.CheckMembers(b, m.Start, func(f *jsonscan.Member) (int, error) {
		switch {
		case f.KeyIs("name"):
			return readString(b, f, depth, &hdr.Name)
		case f.KeyIs("namespace"):
			return readString(b, f, depth, &hdr.Namespace)
		case f.KeyIs("uid"):
			return readString(b, f, depth, &hdr.UID)
		case f.KeyIs("resourceVersion"):
			return readString(b, f, depth, &hdr.ResourceVersion)
		case f.KeyIs("labels"):
			return readLabels(b, f, depth, &hdr.Labels)
		case f.KeyIs("annotations"):
			return readInitialEventsEnd(b, f, depth, &hdr.InitialEventsEnd)
		case f.KeyIs("managedFields"):
			hdr.ManagedFields = true
		}
		return jsonscan.CheckValueIn(b, f.Start, depth)
	})
	hdr.Metadata = [2]int{m.Start - start, end - start}
	return end, err
}

// readString reads a string member into s, or only checks it when s is
// nil; null leaves s as it was. The member is inside depth arrays and
// objects.
func readString(b []byte, m *jsonscan.Member, depth int, s *string) (int, error) {
	switch {
	case b[m.Start] == '"' && s == nil:
		end, _, err := jsonscan.CheckString(b, m.Start)
		return end, err
	case b[m.Start] == '"':
		v, end, err := jsonscan.String(b, m.Start)
		if err != nil {
			return 0, err
		}
		*s = v
		return end, nil
	case jsonscan.IsNull(b, m.Start):
		return m.Start + 4, nil
	}
	return 0, wrongType(b, m.Start, depth, m.KeyString()+" must be a string")
}

// wrongType is the error of a value at b[i], inside depth arrays and
// objects, that is not of the type its member needs: ErrWrongType, unless
// its syntax is wrong too, which encoding/json reports first.
func wrongType(b []byte, i, depth int, what string) error {
	if _, err := jsonscan.CheckValueIn(b, i, depth); err != nil {
		return err
	}
	return fmt.Errorf("%w: %s", ErrWrongType, what)
}

// readLabels reads a map of strings into labels, adding to what is there
// (null empties it), as encoding/json does.
func readLabels(b []byte, m *jsonscan.Member, depth int, labels *map[string]string) (int, error) {
	if jsonscan.IsNull(b, m.Start) {
		*labels = nil
		return m.Start + 4, nil
	}
	if b[m.Start] != '{' {
		return 0, wrongType(b, m.Start, depth, "labels must be an object")
	}
	if *labels == nil {
		*labels = map[string]string{}
	}
	return jsonscan.CheckMembers(b, m.Start, func(l *jsonscan.Member) (int, error) {
		var v string // null: the empty string
		end, err := readString(b, l, depth+1, &v)
		if err != nil {
			return 0, err
		}
		(*labels)[l.KeyString()] = v
		return end, nil
	})
}

// readInitialEventsEnd reads annotations, a map of strings, for the one the
// reflector needs from a watch-list's bookmark; as in a map, later members
// override earlier ones, and null empties it.
func readInitialEventsEnd(b []byte, m *jsonscan.Member, depth int, end *bool) (int, error) {
	if jsonscan.IsNull(b, m.Start) {
		*end = false
		return m.Start + 4, nil
	}
	if b[m.Start] != '{' {
		return 0, wrongType(b, m.Start, depth, "annotations must be an object")
	}
	return jsonscan.CheckMembers(b, m.Start, func(a *jsonscan.Member) (int, error) {
		if !a.KeyIs(InitialEventsEndAnnotation) {
			return readString(b, a, depth+1, nil)
		}
		var v string
		e, err := readString(b, a, depth+1, &v)
		*end = err == nil && v == "true"
		return e, err
	})
}

// DecodeObject reads b, which must hold one JSON object (and space), into
// hdr, and returns where the object starts and ends.
func DecodeObject(b []byte, hdr *Header) (start, end int, err error) {
	start = jsonscan.SkipSpace(b, 0)
	if end, err = DecodeHeader(b, start, hdr); err != nil {
		return 0, 0, err
	}
	if jsonscan.SkipSpace(b, end) != len(b) {
		return 0, 0, fmt.Errorf("%w: data after the object", jsonscan.ErrBadJSON)
	}
	return start, end, nil
}

// WithoutManagedFields returns obj, read into hdr, without
// metadata.managedFields, its other bytes as they were (space between the
// metadata's members dropped). ok is false when it cannot: obj has more
// than one metadata member, which encoding/json would merge.
func WithoutManagedFields(obj []byte, hdr *Header) (out []byte, ok bool, err error) {
	if !hdr.ManagedFields {
		return obj, true, nil
	}
	if hdr.Metadatas != 1 {
		return nil, false, nil
	}
	from, to := hdr.Metadata[0], hdr.Metadata[1]
	// The members kept, then one allocation of the size they take: the
	// result is cached for as long as the object lives.
	var small [16][2]int
	kept, size := small[:0], from+1+len(obj)-(to-1)
	_, err = jsonscan.CheckMembers(obj[:to], from, func(m *jsonscan.Member) (int, error) {
		end, err := jsonscan.CheckValue(obj, m.Start)
		if err != nil || m.KeyIs("managedFields") {
			return end, err
		}
		kept = append(kept, [2]int{m.KeyStart, end})
		size += end - m.KeyStart + 1
		return end, nil
	})
	if err != nil {
		return nil, false, err
	}
	out = make([]byte, 0, size)
	out = append(out, obj[:from+1]...)
	for i, k := range kept {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, obj[k[0]:k[1]]...)
	}
	return append(out, obj[to-1:]...), true, nil
}
