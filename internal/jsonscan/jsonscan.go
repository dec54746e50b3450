package jsonscan

import (
	"bytes"
	"encoding/json"
	"errors"
	"unicode/utf8"
)

// This file reads JSON documents in place: it finds where values start and
// end without decoding them, so that the hub can read a few fields of an
// object (field selectors) or copy parts of it (projection) at the cost of
// one scan, with no allocation per value, and with the API server's own
// bytes for everything it keeps.
//
// The input is JSON the API server produced, but nothing here trusts it:
// every function is bounded by the input's length, never recurses on it,
// and returns ErrBadJSON rather than panicking on anything malformed.

var ErrBadJSON = errors.New("malformed JSON")

// SkipSpace returns the index of the first non-space byte at or after i.
func SkipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// StringEnd returns the index just after the string that starts at b[i]
// (a '"'), and whether it holds escapes.
func StringEnd(b []byte, i int) (end int, escaped bool, err error) {
	if i >= len(b) || b[i] != '"' {
		return 0, false, ErrBadJSON
	}
	// Most of a Kubernetes object's bytes are in strings: find each quote
	// with IndexByte (vectorized), and tell a closing one from an escaped
	// one by the backslashes before it.
	from := i + 1
	for j := from; ; {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return 0, false, ErrBadJSON
		}
		q := j + k
		backslashes := 0
		for p := q - 1; p >= from && b[p] == '\\'; p-- {
			backslashes++
		}
		if backslashes%2 == 0 {
			return q + 1, bytes.IndexByte(b[from:q], '\\') >= 0, nil
		}
		j = q + 1
	}
}

// ValueEnd returns the index just after the value that starts at b[i].
// Nested values are skipped by counting brackets, outside strings, without
// recursion.
func ValueEnd(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, ErrBadJSON
	}
	switch b[i] {
	case '"':
		end, _, err := StringEnd(b, i)
		return end, err
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1, nil
				}
			case '"':
				end, _, err := StringEnd(b, i)
				if err != nil {
					return 0, err
				}
				i = end - 1
			}
		}
		return 0, ErrBadJSON
	default: // a number, true, false or null: up to the next delimiter
		start := i
		for i < len(b) {
			switch b[i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				if i == start {
					return 0, ErrBadJSON
				}
				return i, nil
			}
			i++
		}
		if i == start {
			return 0, ErrBadJSON
		}
		return i, nil
	}
}

// Member is one member of a JSON object: its key as written (quotes
// included) and its value's bounds.
type Member struct {
	KeyStart   int    // where the member starts: its key's opening quote
	Key        []byte // the key's JSON string, quotes included
	Escaped    bool   // the key holds escapes: compare KeyString, not Key
	Start, End int    // the value is b[Start:End]
}

// KeyIs reports whether the member's key is name.
func (m *Member) KeyIs(name string) bool {
	if !m.Escaped {
		k := m.Key[1 : len(m.Key)-1]
		return len(k) == len(name) && string(k) == name
	}
	return m.KeyString() == name
}

// KeyString returns the member's key as encoding/json decodes it: escapes
// resolved, invalid UTF-8 replaced by U+FFFD.
func (m *Member) KeyString() string {
	if k := m.Key[1 : len(m.Key)-1]; !m.Escaped && utf8.Valid(k) {
		return string(k)
	}
	var s string
	if json.Unmarshal(m.Key, &s) != nil {
		return ""
	}
	return s
}

// EachMember calls fn with each member of the object that starts at b[i],
// until fn returns false. It returns the index just after the object.
func EachMember(b []byte, i int, fn func(m *Member) bool) (int, error) {
	if i >= len(b) || b[i] != '{' {
		return 0, ErrBadJSON
	}
	i = SkipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, nil
	}
	stopped := false
	var m Member
	for {
		keyEnd, escaped, err := StringEnd(b, i)
		if err != nil {
			return 0, err
		}
		m.KeyStart, m.Key, m.Escaped = i, b[i:keyEnd], escaped
		i = SkipSpace(b, keyEnd)
		if i >= len(b) || b[i] != ':' {
			return 0, ErrBadJSON
		}
		m.Start = SkipSpace(b, i+1)
		if m.End, err = ValueEnd(b, m.Start); err != nil {
			return 0, err
		}
		if !stopped && !fn(&m) {
			stopped = true
		}
		i = SkipSpace(b, m.End)
		if i >= len(b) {
			return 0, ErrBadJSON
		}
		switch b[i] {
		case ',':
			i = SkipSpace(b, i+1)
		case '}':
			return i + 1, nil
		default:
			return 0, ErrBadJSON
		}
	}
}

// MemberValue returns where the value of the member name starts, in the
// object that starts at b[i], and whether it has one. It reads no further
// than that member's key (skipping the values before it), so that finding
// an early member of a large object costs little; unlike EachMember, it
// does not check the rest of the object.
func MemberValue(b []byte, i int, name string) (start int, found bool, err error) {
	if i >= len(b) || b[i] != '{' {
		return 0, false, ErrBadJSON
	}
	i = SkipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return 0, false, nil
	}
	var m Member
	for {
		keyEnd, escaped, err := StringEnd(b, i)
		if err != nil {
			return 0, false, err
		}
		m.KeyStart, m.Key, m.Escaped = i, b[i:keyEnd], escaped
		i = SkipSpace(b, keyEnd)
		if i >= len(b) || b[i] != ':' {
			return 0, false, ErrBadJSON
		}
		i = SkipSpace(b, i+1)
		if m.KeyIs(name) {
			if i >= len(b) {
				return 0, false, ErrBadJSON
			}
			return i, true, nil
		}
		if i, err = ValueEnd(b, i); err != nil {
			return 0, false, err
		}
		i = SkipSpace(b, i)
		if i >= len(b) {
			return 0, false, ErrBadJSON
		}
		switch b[i] {
		case ',':
			i = SkipSpace(b, i+1)
		case '}':
			return 0, false, nil
		default:
			return 0, false, ErrBadJSON
		}
	}
}

// EachElement calls fn with the bounds of each element of the array that
// starts at b[i]. It returns the index just after the array.
func EachElement(b []byte, i int, fn func(start, end int)) (int, error) {
	if i >= len(b) || b[i] != '[' {
		return 0, ErrBadJSON
	}
	i = SkipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1, nil
	}
	for {
		end, err := ValueEnd(b, i)
		if err != nil {
			return 0, err
		}
		fn(i, end)
		i = SkipSpace(b, end)
		if i >= len(b) {
			return 0, ErrBadJSON
		}
		switch b[i] {
		case ',':
			i = SkipSpace(b, i+1)
		case ']':
			return i + 1, nil
		default:
			return 0, ErrBadJSON
		}
	}
}

// Lookup returns the value at path in the JSON object b, descending through
// objects only: nil when some step is missing or not an object.
func Lookup(b []byte, path ...string) []byte {
	start, end, ok := LookupBounds(b, path...)
	if !ok {
		return nil
	}
	return b[start:end]
}

// LookupBounds returns where the value at path starts and ends in the JSON
// object b, and whether there is one (see Lookup).
func LookupBounds(b []byte, path ...string) (start, end int, ok bool) {
	start, end = SkipSpace(b, 0), len(b)
	for _, name := range path {
		if start >= end || b[start] != '{' {
			return 0, 0, false
		}
		found := false
		_, err := EachMember(b[:end], start, func(m *Member) bool {
			if m.KeyIs(name) {
				start, end, found = m.Start, m.End, true
				return false
			}
			return true
		})
		if err != nil || !found {
			return 0, 0, false
		}
	}
	if start >= end {
		return 0, 0, false
	}
	return start, start + len(bytes.TrimRight(b[start:end], " \t\r\n")), true
}

// ScalarString returns what a field selector compares of a JSON scalar: a
// string's value, or a number's or boolean's text. ok is false for null,
// objects and arrays (and nothing at all).
func ScalarString(v []byte) (s string, ok bool) {
	if len(v) == 0 {
		return "", false
	}
	switch v[0] {
	case '"':
		if bytes.IndexByte(v, '\\') < 0 {
			return string(v[1 : len(v)-1]), true
		}
		if json.Unmarshal(v, &s) != nil {
			return "", false
		}
		return s, true
	case '{', '[', 'n':
		return "", false
	}
	return string(v), true
}
