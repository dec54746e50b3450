package projection

import (
	"fmt"
	"strings"
)

// Limits of a path, so that a projection costs a bounded amount to parse
// and apply whatever a request holds.
const (
	maxPathLength = 512
	maxPathDepth  = 32
)

// ParsePath splits a path into the member names it steps through.
func ParsePath(s string) ([]string, error) {
	if s == "" {
		return nil, fmt.Errorf("a path is empty")
	}
	if len(s) > maxPathLength {
		return nil, fmt.Errorf("a path is longer than %d bytes", maxPathLength)
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
			if i := strings.IndexAny(name, "]\"' \t\r\n*/"); i >= 0 {
				return nil, fmt.Errorf("%q cannot be in a plain name: write names that hold it in brackets, e.g. metadata.labels[\"app.kubernetes.io/name\"]; wildcards are not supported", name[i])
			}
		}
		segments = append(segments, name)
		if len(segments) > maxPathDepth {
			return nil, fmt.Errorf("a path is more than %d steps deep", maxPathDepth)
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

// FormatPath writes a path in its canonical form: plain names where they
// can be, bracketed and double-quoted where not.
func FormatPath(segments []string) string {
	var b strings.Builder
	for i, name := range segments {
		if strings.ContainsAny(name, ".[]\"' \t\r\n*/") {
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
