package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
)

// diffObjects lists what changed between two states of an object, one line
// per change, in path order:
//
//	~ data.mode: "debug" -> "quiet"
//	+ metadata.labels.tier: "front"
//	- metadata.annotations["example.com/owner"]: "team-a"
//
// Objects and lists of the same length are compared member by member;
// anything else is one change. metadata.resourceVersion (which the table
// shows) is left out, and so is metadata.managedFields (which every write
// touches) unless showManagedFields.
func diffObjects(before, after []byte, showManagedFields bool) ([]string, error) {
	a, err := decodeJSON(before)
	if err != nil {
		return nil, fmt.Errorf("decoding the previous object: %w", err)
	}
	b, err := decodeJSON(after)
	if err != nil {
		return nil, fmt.Errorf("decoding the object: %w", err)
	}
	ignored := ignoredPaths
	if !showManagedFields {
		ignored = append(slices.Clip(ignored), "metadata.managedFields")
	}
	var lines []string
	diffValues(&lines, ignored, nil, a, b)
	return lines, nil
}

func decodeJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber() // numbers compare and print as the API server wrote them
	var v any
	err := dec.Decode(&v)
	return v, err
}

// pathStep is one step of a path: a member name, or a list index.
type pathStep struct {
	name    string
	index   int
	isIndex bool
}

// ignoredPaths are left out of diffs.
var ignoredPaths = []string{"metadata.resourceVersion"}

func diffValues(lines *[]string, ignoredPaths []string, path []pathStep, a, b any) {
	if slices.Contains(ignoredPaths, formatPath(path)) {
		return
	}
	switch a := a.(type) {
	case map[string]any:
		if b, ok := b.(map[string]any); ok {
			keys := slices.Sorted(maps.Keys(a))
			for k := range b {
				if _, ok := a[k]; !ok {
					keys = append(keys, k)
				}
			}
			slices.Sort(keys)
			for _, k := range keys {
				child := append(slices.Clip(path), pathStep{name: k})
				va, inA := a[k]
				vb, inB := b[k]
				switch {
				case !inA:
					if !slices.Contains(ignoredPaths, formatPath(child)) {
						*lines = append(*lines, "+ "+formatPath(child)+": "+formatValue(vb))
					}
				case !inB:
					if !slices.Contains(ignoredPaths, formatPath(child)) {
						*lines = append(*lines, "- "+formatPath(child)+": "+formatValue(va))
					}
				default:
					diffValues(lines, ignoredPaths, child, va, vb)
				}
			}
			return
		}
	case []any:
		if b, ok := b.([]any); ok && len(a) == len(b) {
			for i := range a {
				diffValues(lines, ignoredPaths, append(slices.Clip(path), pathStep{index: i, isIndex: true}), a[i], b[i])
			}
			return
		}
	}
	if !reflect.DeepEqual(a, b) {
		*lines = append(*lines, "~ "+formatPath(path)+": "+formatValue(a)+" -> "+formatValue(b))
	}
}

// formatPath writes a path as --fields takes them, with list indexes:
// spec.containers[0].image, metadata.labels["app.kubernetes.io/name"].
func formatPath(path []pathStep) string {
	var b strings.Builder
	for i, step := range path {
		switch {
		case step.isIndex:
			fmt.Fprintf(&b, "[%d]", step.index)
		case strings.ContainsAny(step.name, ".[]\"' \t\r\n*") || step.name == "":
			quote := `"`
			if strings.Contains(step.name, quote) {
				quote = "'"
			}
			b.WriteString("[" + quote + step.name + quote + "]")
		default:
			if i > 0 {
				b.WriteByte('.')
			}
			b.WriteString(step.name)
		}
	}
	if b.Len() == 0 {
		return "(the object)"
	}
	return b.String()
}

// maxValueLength bounds a value in a diff line: enough for names, phases,
// images and small maps; more is cut.
const maxValueLength = 80

func formatValue(v any) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Sprint(v)
	}
	s := strings.TrimSuffix(buf.String(), "\n")
	if runes := []rune(s); len(runes) > maxValueLength {
		s = string(runes[:maxValueLength-3]) + "..."
	}
	return s
}
