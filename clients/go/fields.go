package hubclient

import "strings"

// asksForResourceVersion tells whether the paths of a projection ask for
// metadata.resourceVersion itself ("metadata", or
// "metadata.resourceVersion"), rather than get it as one of the fields every
// projected object keeps: then every change changes what the caller asked
// for, and the hub sends each.
func asksForResourceVersion(paths []string) bool {
	for _, p := range paths {
		segments, ok := fieldPathSegments(p)
		if ok && segments[0] == "metadata" && (len(segments) == 1 || len(segments) == 2 && segments[1] == "resourceVersion") {
			return true
		}
	}
	return false
}

// fieldPathSegments splits a path of WatchOptions.Fields into the member
// names it steps through, as the hub does: names separated by dots, a name
// that holds a dot written in brackets and quotes
// (metadata.labels["app.kubernetes.io/name"], or with single quotes), and
// an optional leading dot. ok is false for a path the hub refuses.
func fieldPathSegments(path string) (segments []string, ok bool) {
	rest := strings.TrimPrefix(path, ".")
	for {
		var name string
		if strings.HasPrefix(rest, `["`) || strings.HasPrefix(rest, `['`) {
			quote := rest[1]
			closing := strings.IndexByte(rest[2:], quote)
			if closing < 1 || len(rest) < closing+4 || rest[closing+3] != ']' {
				return nil, false
			}
			name, rest = rest[2:closing+2], rest[closing+4:]
		} else {
			end := strings.IndexAny(rest, ".[")
			if end < 0 {
				end = len(rest)
			}
			name, rest = rest[:end], rest[end:]
			if name == "" {
				return nil, false
			}
		}
		segments = append(segments, name)
		switch {
		case rest == "":
			return segments, true
		case rest[0] == '.' && len(rest) > 1:
			rest = rest[1:]
		case rest[0] == '[':
		default:
			return nil, false
		}
	}
}
