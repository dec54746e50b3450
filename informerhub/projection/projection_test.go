package projection

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

const podJSON = `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"web-1","namespace":"shop","uid":"u-1","resourceVersion":"42","labels":{"app":"web","app.kubernetes.io/name":"web"},"managedFields":[{"manager":"kubectl","operation":"Update"}]},` +
	`"spec":{"nodeName":"node-a","containers":[{"name":"app","image":"nginx:1","ports":[{"containerPort":80}]},{"name":"side","image":"envoy"}],"hostNetwork":true},` +
	`"status":{"phase":"Running","podIPs":[{"ip":"10.0.0.1"}],"conditions":[]}}`

func TestProjection(t *testing.T) {
	tests := []struct {
		name  string
		paths []string
		want  string
	}{
		{
			name:  "a scalar, with the identity always kept",
			paths: []string{"status.phase"},
			want:  `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"web-1","namespace":"shop","uid":"u-1","resourceVersion":"42"},"status":{"phase":"Running"}}`,
		},
		{
			name:  "a map whole, beside the always-kept metadata",
			paths: []string{"metadata.labels"},
			want:  `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"web-1","namespace":"shop","uid":"u-1","resourceVersion":"42","labels":{"app":"web","app.kubernetes.io/name":"web"}}}`,
		},
		{
			name:  "a bracketed name with dots, and a leading dot",
			paths: []string{`.metadata.labels["app.kubernetes.io/name"]`},
			want:  `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"web-1","namespace":"shop","uid":"u-1","resourceVersion":"42","labels":{"app.kubernetes.io/name":"web"}}}`,
		},
		{
			name:  "through a list, each element",
			paths: []string{"spec.containers.image"},
			want:  `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"web-1","namespace":"shop","uid":"u-1","resourceVersion":"42"},"spec":{"containers":[{"image":"nginx:1"},{"image":"envoy"}]}}`,
		},
		{
			name:  "elements without the field stay as {}",
			paths: []string{"spec.containers.ports"},
			want:  `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"web-1","namespace":"shop","uid":"u-1","resourceVersion":"42"},"spec":{"containers":[{"ports":[{"containerPort":80}]},{}]}}`,
		},
		{
			name:  "a path past a scalar selects nothing",
			paths: []string{"status.phase.x", "spec.nodeName"},
			want:  `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"web-1","namespace":"shop","uid":"u-1","resourceVersion":"42"},"spec":{"nodeName":"node-a"},"status":{}}`,
		},
		{
			name:  "a missing field",
			paths: []string{"spec.missing"},
			want:  `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"web-1","namespace":"shop","uid":"u-1","resourceVersion":"42"},"spec":{}}`,
		},
		{
			name:  "a parent covers its children",
			paths: []string{"metadata.labels.app", "metadata"},
			want:  `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"web-1","namespace":"shop","uid":"u-1","resourceVersion":"42","labels":{"app":"web","app.kubernetes.io/name":"web"},"managedFields":[{"manager":"kubectl","operation":"Update"}]}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse(tt.paths, 10)
			if err != nil {
				t.Fatal(err)
			}
			got, err := p.Apply([]byte(podJSON))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("projection of %q:\n got %s\nwant %s", tt.paths, got, tt.want)
			}
			if !json.Valid(got) {
				t.Errorf("projection is not valid JSON: %s", got)
			}
		})
	}
}

func TestProjectionKeyIgnoresOrderAndSpelling(t *testing.T) {
	a, err := Parse([]string{"status.phase", `metadata["labels"]`, "status.phase"}, 10)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Parse([]string{".metadata.labels", "status['phase']"}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if a.key != b.key {
		t.Errorf("keys differ: %q and %q", a.key, b.key)
	}
	if want := []string{"metadata.labels", "status.phase"}; !reflect.DeepEqual(a.paths, want) {
		t.Errorf("paths = %q, want %q", a.paths, want)
	}
}

func TestProjectionSameAsked(t *testing.T) {
	p, err := Parse([]string{"status.phase"}, 10)
	if err != nil {
		t.Fatal(err)
	}
	same := func(a, b string) bool {
		t.Helper()
		pa, err := p.Apply([]byte(a))
		if err != nil {
			t.Fatal(err)
		}
		pb, err := p.Apply([]byte(b))
		if err != nil {
			t.Fatal(err)
		}
		return p.SameAsked(pa, pb)
	}
	newer := strings.Replace(strings.Replace(podJSON, `"42"`, `"43"`, 1), `"node-a"`, `"node-b"`, 1)
	if !same(podJSON, newer) {
		t.Error("a change of resourceVersion and spec only: not the same")
	}
	running := strings.Replace(newer, `"Running"`, `"Failed"`, 1)
	if same(podJSON, running) {
		t.Error("a change of status.phase: the same")
	}
	// Asking for the resourceVersion makes every change one asked for.
	p, err = Parse([]string{"status.phase", "metadata.resourceVersion"}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if same(podJSON, newer) {
		t.Error("asked for metadata.resourceVersion: a change of it is the same")
	}
}

func TestParseFieldPathRejects(t *testing.T) {
	for _, path := range []string{
		"", ".", "status.", "status..phase", "spec.containers[0].image", "spec.containers[*]",
		"metadata.labels[app]", `metadata.labels["app"`, `metadata.labels[""]`, "a b", "spec.*",
		`metadata.labels["a"]x`, strings.Repeat("a.", maxPathDepth+1) + "a",
		"metadata.labels.app.kubernetes.io/name", // a label key is one name: ["app.kubernetes.io/name"]
		strings.Repeat("a", maxPathLength+1),
	} {
		if segments, err := ParsePath(path); err == nil {
			t.Errorf("ParsePath(%q) = %q, want an error", path, segments)
		}
	}
	if _, err := Parse(make([]string, 3), 2); err == nil {
		t.Error("more paths than allowed: no error")
	}
}

func TestFieldPathRoundTrip(t *testing.T) {
	for _, path := range []string{"status.phase", `metadata.labels["app.kubernetes.io/name"]`, `metadata.annotations['say "hi"']`, `a["b.c"]["d[e]"].f`, `metadata.labels["example/foo"]`, `metadata.labels['a/b']`} {
		segments, err := ParsePath(path)
		if err != nil {
			t.Fatalf("ParsePath(%q): %v", path, err)
		}
		again, err := ParsePath(FormatPath(segments))
		if err != nil || !reflect.DeepEqual(again, segments) {
			t.Errorf("%q formats as %q, which parses as %q (%v)", path, FormatPath(segments), again, err)
		}
	}
}

// FuzzProjection checks the in-place projection against the same
// projection of the decoded document, and that it never fails on JSON that
// encoding/json accepts.
func FuzzProjection(f *testing.F) {
	f.Add([]byte(podJSON), "spec.containers.image")
	f.Add([]byte(`{"a":[1,{"b":2},[{"b":3}]],"b":{"b":{}}}`), "a.b")
	f.Add([]byte(`{ "a" : { "b\"" : [ ] } , "c":null}`), `a["b\""]`)
	f.Fuzz(func(t *testing.T, doc []byte, path string) {
		if !json.Valid(doc) {
			return
		}
		var decoded map[string]any
		dec := json.NewDecoder(bytes.NewReader(doc))
		dec.UseNumber()
		if dec.Decode(&decoded) != nil || dec.More() || decoded == nil {
			return
		}
		var rest any
		if dec.Decode(&rest) == nil {
			return // trailing data: not one document
		}
		segments, err := ParsePath(path)
		if err != nil {
			return
		}
		tree := &Tree{}
		tree.Add(segments)
		got, err := tree.Apply(bytes.TrimSpace(doc), 0)
		if err != nil {
			t.Fatalf("project(%s, %q): %v", doc, path, err)
		}
		var gotDecoded any
		d := json.NewDecoder(bytes.NewReader(got))
		d.UseNumber()
		if err := d.Decode(&gotDecoded); err != nil {
			t.Fatalf("projection of %s by %q is not JSON: %s", doc, path, got)
		}
		if want, _ := referenceProject(tree, decoded); !reflect.DeepEqual(gotDecoded, want) && !duplicateKeys(doc) {
			t.Fatalf("projection of %s by %q:\n got %s\nwant %#v", doc, path, got, want)
		}
	})
}

// referenceProject is the projection of a decoded document, and whether it
// keeps anything.
func referenceProject(n *Tree, v any) (any, bool) {
	if n.whole {
		return v, true
	}
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, child := range n.children {
			if cv, ok := v[k]; ok {
				if p, kept := referenceProject(child, cv); kept {
					out[k] = p
				}
			}
		}
		return out, true
	case []any:
		out := []any{}
		for _, e := range v {
			if p, kept := referenceProject(n, e); kept {
				out = append(out, p)
			}
		}
		return out, true
	}
	return nil, false
}

// duplicateKeys reports whether a document repeats a key in an object,
// where encoding/json keeps the last and the projection keeps both.
func duplicateKeys(doc []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(doc))
	type frame struct {
		object bool
		keys   map[string]bool
		atKey  bool
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch tok := tok.(type) {
		case json.Delim:
			switch tok {
			case '{':
				if top != nil && top.object {
					top.atKey = true
				}
				stack = append(stack, &frame{object: true, keys: map[string]bool{}, atKey: true})
				continue
			case '[':
				if top != nil && top.object {
					top.atKey = true
				}
				stack = append(stack, &frame{})
				continue
			default:
				stack = stack[:len(stack)-1]
				continue
			}
		case string:
			if top != nil && top.object && top.atKey {
				if top.keys[tok] {
					return true
				}
				top.keys[tok] = true
				top.atKey = false
				continue
			}
		}
		if top != nil && top.object {
			top.atKey = true
		}
	}
}
