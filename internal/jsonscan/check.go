package jsonscan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// This file reads JSON in place as jsonscan.go does, but checks its syntax
// on the way as encoding/json does, so that a decoder built on it accepts
// exactly the documents encoding/json accepts. The hub's ingest reads each
// object the API server sends once with it: the pass that finds a watch
// event's end is the pass that reads its metadata.

// ErrUnexpectedEnd is ErrBadJSON at the input's end: the value may be
// whole once more of it has arrived.
var ErrUnexpectedEnd = fmt.Errorf("%w: unexpected end of input", ErrBadJSON)

// MaxDepth is how deeply CheckValue lets arrays and objects nest, as
// encoding/json does.
const MaxDepth = 10000

// CheckString returns the index just after the string that starts at b[i]
// (a '"'), and whether it holds escapes. It fails on what encoding/json
// rejects in a string: control characters and unknown escapes.
func CheckString(b []byte, i int) (end int, escaped bool, err error) {
	if i >= len(b) {
		return 0, false, ErrUnexpectedEnd
	}
	if b[i] != '"' {
		return 0, false, ErrBadJSON
	}
	i++
	stop := -1 // the next quote at or after i, or len(b)
	for {
		// Most of an object's bytes are in strings: find the next quote
		// with IndexByte (vectorized), then check what lies before it.
		// An escaped quote moves past it; other escapes keep it, so a
		// string of many escapes is still read once.
		if stop < i {
			if q := bytes.IndexByte(b[i:], '"'); q >= 0 {
				stop = i + q
			} else {
				stop = len(b)
			}
		}
		for ; i < stop; i++ {
			c := b[i]
			if c < 0x20 {
				return 0, false, fmt.Errorf("%w: control character %#x in a string", ErrBadJSON, c)
			}
			if c == '\\' {
				break
			}
		}
		if i == stop {
			if stop == len(b) {
				return 0, false, ErrUnexpectedEnd
			}
			return stop + 1, escaped, nil
		}
		// An escape at b[i].
		escaped = true
		if i+1 >= len(b) {
			return 0, false, ErrUnexpectedEnd
		}
		switch b[i+1] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			i += 2
		case 'u':
			for k := i + 2; k < i+6; k++ {
				if k >= len(b) {
					return 0, false, ErrUnexpectedEnd
				}
				if !isHex(b[k]) {
					return 0, false, fmt.Errorf("%w: bad \\u escape", ErrBadJSON)
				}
			}
			i += 6
		default:
			return 0, false, fmt.Errorf("%w: unknown escape \\%c", ErrBadJSON, b[i+1])
		}
	}
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// checkNumber returns the index just after the number that starts at b[i],
// checking JSON's grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func checkNumber(b []byte, i int) (int, error) {
	digits := func(i int) (int, error) {
		start := i
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
		if i == start {
			if i == len(b) {
				return 0, ErrUnexpectedEnd
			}
			return 0, fmt.Errorf("%w: bad number", ErrBadJSON)
		}
		return i, nil
	}
	if b[i] == '-' {
		i++
	}
	if i >= len(b) {
		return 0, ErrUnexpectedEnd
	}
	var err error
	if b[i] == '0' {
		i++
	} else if i, err = digits(i); err != nil {
		return 0, err
	}
	if i < len(b) && b[i] == '.' {
		if i, err = digits(i + 1); err != nil {
			return 0, err
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i, err = digits(i); err != nil {
			return 0, err
		}
	}
	return i, nil
}

// checkLiteral returns the index just after true, false or null at b[i].
func checkLiteral(b []byte, i int) (int, error) {
	var lit string
	switch b[i] {
	case 't':
		lit = "true"
	case 'f':
		lit = "false"
	default:
		lit = "null"
	}
	n := min(len(lit), len(b)-i)
	if string(b[i:i+n]) != lit[:n] {
		return 0, fmt.Errorf("%w: invalid literal", ErrBadJSON)
	}
	if n < len(lit) {
		return 0, ErrUnexpectedEnd
	}
	return i + n, nil
}

// CheckValue returns the index just after the value that starts at b[i]
// (after any space), checking its syntax as encoding/json does. Nested
// values are read without recursion, at most MaxDepth deep.
func CheckValue(b []byte, i int) (int, error) { return CheckValueIn(b, i, 0) }

// CheckValueIn is CheckValue for a value inside depth arrays and objects of
// its document, which count towards MaxDepth.
func CheckValueIn(b []byte, i, depth int) (int, error) {
	var small [32]byte
	open := small[:0] // the '{' and '[' the value is inside
	var err error
	for {
		// At a value.
		if i = SkipSpace(b, i); i >= len(b) {
			return 0, ErrUnexpectedEnd
		}
		switch c := b[i]; {
		case c == '{' || c == '[':
			closer := byte('}')
			if c == '[' {
				closer = ']'
			}
			if depth+len(open) == MaxDepth {
				return 0, fmt.Errorf("%w: nested more than %d deep", ErrBadJSON, MaxDepth)
			}
			if i = SkipSpace(b, i+1); i >= len(b) {
				return 0, ErrUnexpectedEnd
			}
			if b[i] == closer {
				i++
				break
			}
			open = append(open, c)
			if c == '{' {
				if i, err = checkKey(b, i); err != nil {
					return 0, err
				}
			}
			continue
		case c == '"':
			if i, _, err = CheckString(b, i); err != nil {
				return 0, err
			}
		case c == '-' || '0' <= c && c <= '9':
			if i, err = checkNumber(b, i); err != nil {
				return 0, err
			}
		case c == 't' || c == 'f' || c == 'n':
			if i, err = checkLiteral(b, i); err != nil {
				return 0, err
			}
		default:
			return 0, fmt.Errorf("%w: unexpected %q", ErrBadJSON, c)
		}
		// After a value: close what it ends, or go on to the next one.
		for {
			if len(open) == 0 {
				return i, nil
			}
			if i = SkipSpace(b, i); i >= len(b) {
				return 0, ErrUnexpectedEnd
			}
			top := open[len(open)-1]
			if b[i] == ',' {
				i++
				if top == '{' {
					if i, err = checkKey(b, SkipSpace(b, i)); err != nil {
						return 0, err
					}
				}
				break
			}
			if top == '{' && b[i] == '}' || top == '[' && b[i] == ']' {
				open = open[:len(open)-1]
				i++
				continue
			}
			return 0, fmt.Errorf("%w: unexpected %q after a value", ErrBadJSON, b[i])
		}
	}
}

// checkKey reads an object's key at b[i] and the colon after it, and
// returns where its value starts.
func checkKey(b []byte, i int) (int, error) {
	_, _, start, err := readKey(b, i)
	return start, err
}

// readKey reads an object's key at b[i] and the colon after it, and
// returns where the key ends, whether it holds escapes, and where its
// value starts (len(b) if nothing follows the colon).
func readKey(b []byte, i int) (keyEnd int, escaped bool, valueStart int, err error) {
	if keyEnd, escaped, err = CheckString(b, i); err != nil {
		return 0, false, 0, err
	}
	if i = SkipSpace(b, keyEnd); i >= len(b) {
		return 0, false, 0, ErrUnexpectedEnd
	}
	if b[i] != ':' {
		return 0, false, 0, fmt.Errorf("%w: expected ':' after a key", ErrBadJSON)
	}
	return keyEnd, escaped, SkipSpace(b, i+1), nil
}

// CheckMembers reads the object that starts at b[i], checking its syntax,
// and calls read with each member in turn: read must consume the value at
// m.Start (with CheckValue, or by reading it) and return where it ends.
// CheckMembers returns the index just after the object.
func CheckMembers(b []byte, i int, read func(m *Member) (int, error)) (int, error) {
	if i >= len(b) {
		return 0, ErrUnexpectedEnd
	}
	if b[i] != '{' {
		return 0, ErrBadJSON
	}
	if i = SkipSpace(b, i+1); i >= len(b) {
		return 0, ErrUnexpectedEnd
	}
	if b[i] == '}' {
		return i + 1, nil
	}
	var m Member
	for {
		keyEnd, escaped, start, err := readKey(b, i)
		if err != nil {
			return 0, err
		}
		if start >= len(b) {
			return 0, ErrUnexpectedEnd
		}
		m.KeyStart, m.Key, m.Escaped, m.Start = i, b[i:keyEnd], escaped, start
		if m.End, err = read(&m); err != nil {
			return 0, err
		}
		if i = SkipSpace(b, m.End); i >= len(b) {
			return 0, ErrUnexpectedEnd
		}
		switch b[i] {
		case ',':
			i = SkipSpace(b, i+1)
		case '}':
			return i + 1, nil
		default:
			return 0, fmt.Errorf("%w: unexpected %q after a member", ErrBadJSON, b[i])
		}
	}
}

// CheckElements reads the array that starts at b[i], checking its syntax,
// and calls read with each element's start; read must consume the element
// and return where it ends. CheckElements returns the index just after the
// array.
func CheckElements(b []byte, i int, read func(start int) (int, error)) (int, error) {
	if i >= len(b) {
		return 0, ErrUnexpectedEnd
	}
	if b[i] != '[' {
		return 0, ErrBadJSON
	}
	if i = SkipSpace(b, i+1); i >= len(b) {
		return 0, ErrUnexpectedEnd
	}
	if b[i] == ']' {
		return i + 1, nil
	}
	for {
		end, err := read(i)
		if err != nil {
			return 0, err
		}
		if i = SkipSpace(b, end); i >= len(b) {
			return 0, ErrUnexpectedEnd
		}
		switch b[i] {
		case ',':
			if i = SkipSpace(b, i+1); i >= len(b) {
				return 0, ErrUnexpectedEnd
			}
		case ']':
			return i + 1, nil
		default:
			return 0, fmt.Errorf("%w: unexpected %q after an element", ErrBadJSON, b[i])
		}
	}
}

// String reads the string at b[i] (checked), and returns its value as
// encoding/json decodes it (escapes resolved, invalid UTF-8 replaced by
// U+FFFD) and the index just after it.
func String(b []byte, i int) (string, int, error) {
	end, escaped, err := CheckString(b, i)
	if err != nil {
		return "", 0, err
	}
	s := b[i+1 : end-1]
	if !escaped && utf8.Valid(s) {
		return string(s), end, nil
	}
	var out string
	if err := json.Unmarshal(b[i:end], &out); err != nil {
		return "", 0, fmt.Errorf("%w: %v", ErrBadJSON, err)
	}
	return out, end, nil
}

// IsNull reports whether b[i:] starts with the literal null.
func IsNull(b []byte, i int) bool {
	return len(b)-i >= 4 && string(b[i:i+4]) == "null"
}

// FrameEnd finds where a stream's next JSON value ends, across reads: it
// counts brackets outside strings without checking anything else, so that
// a reader can wait for a whole value before checking it once. The zero
// FrameEnd starts at a value's first byte.
type FrameEnd struct {
	depth    int
	inString bool
	escape   bool // the last byte read was a backslash in a string
	started  bool
	null     int // the bytes of a null value read so far
}

// Scan reads b, the bytes of the value that follow those already scanned,
// and returns the index in b just after the value's end, or -1 if the
// value goes on past b. It only frames objects, arrays and null: a stream
// of watch events is a stream of objects.
func (f *FrameEnd) Scan(b []byte) (int, error) {
	quote := -1 // the next quote in a string, once found, or len(b)
	for i := 0; i < len(b); i++ {
		if !f.started && (f.null > 0 || b[i] == 'n') {
			if b[i] != "null"[f.null] {
				return 0, fmt.Errorf("%w: invalid literal", ErrBadJSON)
			}
			if f.null++; f.null == len("null") {
				return i + 1, nil
			}
			continue
		}
		if f.inString {
			if f.escape {
				f.escape = false
				continue
			}
			// The next quote is searched for again only once i has
			// passed it (an escaped one), so that a string of many
			// escapes is read once.
			if quote < i {
				if q := bytes.IndexByte(b[i:], '"'); q >= 0 {
					quote = i + q
				} else {
					quote = len(b)
				}
			}
			if bs := bytes.IndexByte(b[i:quote], '\\'); bs >= 0 {
				i += bs
				f.escape = true
				continue
			}
			if quote == len(b) {
				return -1, nil
			}
			i = quote
			f.inString = false
			continue
		}
		switch b[i] {
		case ' ', '\t', '\n', '\r':
		case '"':
			f.inString = true
		case '{', '[':
			f.depth++
			f.started = true
		case '}', ']':
			if f.depth--; f.depth == 0 {
				return i + 1, nil
			}
			if f.depth < 0 {
				return 0, ErrBadJSON
			}
		default:
			if !f.started {
				return 0, fmt.Errorf("%w: a stream value must be an object, an array or null", ErrBadJSON)
			}
		}
	}
	return -1, nil
}
