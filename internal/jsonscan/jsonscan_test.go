package jsonscan

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestLookup(t *testing.T) {
	b := []byte(`{"kind":"Pod","metadata":{"name":"web-1","labels":{"app":"web","app.kubernetes.io/name":"web"}},"spec":{"nodeName":"node-a","hostNetwork":true},"status":{"phase":"Running","conditions":[]}}`)
	for _, tt := range []struct {
		path []string
		want string
	}{
		{[]string{"spec", "nodeName"}, `"node-a"`},
		{[]string{"spec", "hostNetwork"}, `true`},
		{[]string{"metadata", "labels", "app.kubernetes.io/name"}, `"web"`},
		{[]string{"status", "conditions"}, `[]`},
		{[]string{"spec", "missing"}, ``},
		{[]string{"status", "phase", "deeper"}, ``},
	} {
		if got := string(Lookup(b, tt.path...)); got != tt.want {
			t.Errorf("Lookup(%q) = %s, want %s", tt.path, got, tt.want)
		}
	}
	if got := Lookup([]byte(`{"a\u0062":1, "x" : { "y" : "z\"" } }`), "ab"); string(got) != "1" {
		t.Errorf("an escaped key: %s", got)
	}
	if got, ok := ScalarString(Lookup([]byte(`{"x" : { "y" : "z\"\u00e9" } }`), "x", "y")); !ok || got != `z"é` {
		t.Errorf("an escaped value: %q, %v", got, ok)
	}
}

// FuzzScan checks that no input makes the scanner panic or run past its
// input, and that it finds the end of every document encoding/json
// accepts where encoding/json does.
func FuzzScan(f *testing.F) {
	f.Add([]byte(`{"a":[1,{"b":"c\\\""}],"d":null}`))
	f.Add([]byte(`[ "x" , { } ]`))
	f.Add([]byte(`{"a":`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		start := SkipSpace(doc, 0)
		end, err := ValueEnd(doc, start)
		if err == nil && (end < start || end > len(doc)) {
			t.Fatalf("ValueEnd(%q) = %d, outside the input", doc, end)
		}
		_ = Lookup(doc, "a", "b")
		if at, found, err := MemberValue(doc, start, "a"); err == nil && found && (at <= start || at >= len(doc)) {
			t.Fatalf("MemberValue(%q) = %d, outside the object", doc, at)
		}
		_, _ = EachMember(doc, start, func(m *Member) bool { _ = m.KeyString(); return true })
		_, _ = EachElement(doc, start, func(int, int) {})
		if !json.Valid(doc) {
			return
		}
		// In a valid object, MemberValue finds the first member of the name,
		// as EachMember does.
		if start < len(doc) && doc[start] == '{' {
			want, wantFound := 0, false
			_, _ = EachMember(doc, start, func(m *Member) bool {
				if m.KeyIs("a") {
					want, wantFound = m.Start, true
					return false
				}
				return true
			})
			if at, found, err := MemberValue(doc, start, "a"); err != nil || found != wantFound || at != want {
				t.Fatalf("MemberValue(%q) = %d, %v, %v; EachMember found %d, %v", doc, at, found, err, want, wantFound)
			}
		}
		trimmed := bytes.TrimSpace(doc)
		if err != nil || end != start+len(trimmed) {
			t.Fatalf("ValueEnd(%q) = %d, %v; want %d", doc, end, err, start+len(trimmed))
		}
	})
}
