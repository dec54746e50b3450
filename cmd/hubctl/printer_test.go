package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	hubclient "github.com/informerhub/informerhub/clients/go"
)

func TestTables(t *testing.T) {
	for _, tt := range []struct {
		name   string
		header []string
		rows   [][]string
		want   string
	}{
		{
			name:   "columns as wide as their widest value",
			header: []string{"NAMESPACE", "NAME", "AGE"},
			rows:   [][]string{{"a", "short", "1s"}, {"kube-system", "a-name-longer-than-its-header", "2m"}},
			want: "NAMESPACE     NAME                            AGE\n" +
				"a             short                           1s\n" +
				"kube-system   a-name-longer-than-its-header   2m\n",
		},
		{
			name:   "empty cells, and kubectl's minimum width",
			header: []string{"G", "VERSION", "RESOURCE"},
			rows:   [][]string{{"", "v1", "configmaps"}, {"apps", "v1", "deployments"}},
			want: "G      VERSION   RESOURCE\n" +
				"       v1        configmaps\n" +
				"apps   v1        deployments\n",
		},
		{name: "no rows, no header", header: []string{"NAME"}},
	} {
		var out bytes.Buffer
		tbl := newTable(&out, tt.header...)
		for _, row := range tt.rows {
			tbl.row(row...)
		}
		if err := tbl.flush(); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tt.want, out.String()); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.name, diff)
		}
	}
}

func TestObjectsWithoutManagedFields(t *testing.T) {
	const (
		with    = `{"metadata":{"name":"a","managedFields":[{"manager":"kubectl"}]},"data":{"html":"<b>&</b>","n":1.50}}`
		without = `{"data":{"html":"\u003cb\u003e\u0026\u003c/b\u003e","n":1.50},"metadata":{"name":"a"}}`
		label   = `{"metadata":{"name":"a","labels":{"x":"managedFields"}}}`
	)
	for _, tt := range []struct {
		object, want string
		show         bool
	}{
		{with, without, false},
		{with, with, true},
		{label, label, false}, // the word elsewhere: as sent
		{without, without, false},
	} {
		p := &printer{showManagedFields: tt.show}
		got, err := p.object([]byte(tt.object))
		if err != nil || string(got) != tt.want {
			t.Errorf("object(%s), show=%v = %s, %v; want %s", tt.object, tt.show, got, err, tt.want)
		}
	}
}

// TestHTMLCharacters: -o json writes <, > and & as \u003c, \u003e and
// \u0026, as kubectl's -o json does, whether managedFields were taken out
// or not; -o yaml as they are.
func TestHTMLCharacters(t *testing.T) {
	object := []byte(`{"metadata":{"name":"a","managedFields":[{"manager":"m"}]},"data":{"html":"<b>&</b>"}}`)
	for _, tt := range []struct {
		format string
		show   bool
		want   string
	}{
		{"json", false, `"html":"\u003cb\u003e\u0026\u003c/b\u003e"`},
		{"json", true, `"html":"\u003cb\u003e\u0026\u003c/b\u003e"`},
		{"yaml", false, "html: <b>&</b>\n"},
		{"yaml", true, "html: <b>&</b>\n"},
	} {
		var out bytes.Buffer
		p := &printer{stdout: &out, format: tt.format, showManagedFields: tt.show}
		o, err := p.object(object)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.document(listJSON{Items: []json.RawMessage{o}}); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), tt.want) {
			t.Errorf("-o %s, show-managed-fields=%v printed %s; want %s in it", tt.format, tt.show, out.String(), tt.want)
		}
	}
}

// TestDocuments: YAML documents are separated by ---, with none before
// the first, as kubectl prints them.
func TestDocuments(t *testing.T) {
	var out bytes.Buffer
	p := &printer{stdout: &out, format: "yaml"}
	if err := p.document(map[string]string{"kind": "List"}); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "kind: List\n" {
		t.Errorf("one document: %q", got)
	}
	if err := p.document(map[string]int{"total": 2}); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "kind: List\n---\ntotal: 2\n" {
		t.Errorf("two documents: %q", got)
	}
}

func TestNoResources(t *testing.T) {
	for namespace, want := range map[string]string{"demo": "No resources found in demo namespace.\n", "": "No resources found\n"} {
		var stderr bytes.Buffer
		(&printer{stderr: &stderr}).noResources(namespace)
		if stderr.String() != want {
			t.Errorf("noResources(%q) = %q, want %q", namespace, stderr.String(), want)
		}
	}
}

// TestEventPrinter prints watches as kubectl get -w does: the initial
// objects aligned together, each later event at once in the same columns,
// wider if it must be; YAML documents separated by ---, none before the
// first; managedFields only if asked for; an empty initial list said on
// stderr.
func TestEventPrinter(t *testing.T) {
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := func() time.Time { return created.Add(90 * time.Second) }
	event := func(typ hubclient.EventType, name, rv string) hubclient.Event {
		return hubclient.Event{Type: typ, ResourceVersion: rv, ResumeToken: "t" + rv,
			Object: []byte(fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q,"namespace":"demo","resourceVersion":%q,"creationTimestamp":"2026-01-01T00:00:00Z","managedFields":[{"manager":"m"}]}}`, name, rv))}
	}
	clusterScoped := func(typ hubclient.EventType, name, rv string) hubclient.Event {
		return hubclient.Event{Type: typ, ResourceVersion: rv, ResumeToken: "t" + rv,
			Object: fmt.Appendf(nil, `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":%q,"resourceVersion":%q,"creationTimestamp":"2026-01-01T00:00:00Z"}}`, name, rv)}
	}
	initialEnd := hubclient.Event{Type: hubclient.Bookmark, ResourceVersion: "3", ResumeToken: "t3", InitialEventsEnd: true}
	for _, tt := range []struct {
		name              string
		format            string
		showManagedFields bool
		withNamespace     bool
		many              bool
		resource          []string // of each event, with many
		batching          bool
		events            []hubclient.Event
		want, wantErr     string
	}{
		{
			name:     "initial objects aligned together, later ones in their columns; EVENT as wide as MODIFIED*~? from the start",
			batching: true,
			events: []hubclient.Event{event(hubclient.Added, "a", "1"), event(hubclient.Added, "a-longer-name", "2"), initialEnd,
				event(hubclient.Modified, "b", "4"), event(hubclient.Added, "a-name-wider-than-any-before", "5"), event(hubclient.Deleted, "c", "6")},
			want: "EVENT         NAME            RESOURCEVERSION   AGE\n" +
				"ADDED         a               1                 90s\n" +
				"ADDED         a-longer-name   2                 90s\n" +
				"MODIFIED      b               4                 90s\n" +
				"ADDED         a-name-wider-than-any-before   5                 90s\n" +
				"DELETED       c                              6                 90s\n",
		},
		{
			name: "the widest EVENT, with every mark, shifts no column",
			events: []hubclient.Event{event(hubclient.Added, "a", "1"),
				func() hubclient.Event {
					e := event(hubclient.Modified, "a", "2")
					e.Resync, e.FromRelist, e.FilterError = true, true, "no such key: x"
					return e
				}()},
			want: "EVENT         NAME   RESOURCEVERSION   AGE\n" +
				"ADDED         a      1                 90s\n" +
				"MODIFIED*~?   a      2                 90s\n",
			wantErr: "(the events marked ~ were found by a relist of the hub: what happened in between is unknown)\n" +
				"(the filter could not decide on demo/a, sent as if it matched: no such key: x)\n",
		},
		{
			name:          "every namespace (-A): with NAMESPACE, as kubectl get -A",
			withNamespace: true,
			events:        []hubclient.Event{event(hubclient.Added, "a", "1")},
			want: "EVENT         NAMESPACE   NAME   RESOURCEVERSION   AGE\n" +
				"ADDED         demo        a      1                 90s\n",
		},
		{
			name:          "several types, every namespace: a cluster-scoped object's NAMESPACE is empty",
			many:          true,
			withNamespace: true,
			resource:      []string{"configmaps", "namespaces"},
			events:        []hubclient.Event{event(hubclient.Added, "a", "1"), clusterScoped(hubclient.Added, "demo", "2")},
			want: "EVENT         RESOURCE          NAMESPACE   NAME   RESOURCEVERSION   AGE\n" +
				"ADDED         configmaps        demo        a      1                 90s\n" +
				"ADDED         namespaces                    demo   2                 90s\n",
		},
		{
			// Each event flushed at once: RESOURCE as wide as the widest
			// type watched from the start.
			name:     "several types in a namespace",
			many:     true,
			resource: []string{"configmaps", "serviceaccounts"},
			events:   []hubclient.Event{event(hubclient.Added, "a", "1"), event(hubclient.Added, "b", "2")},
			want: "EVENT         RESOURCE          NAME   RESOURCEVERSION   AGE\n" +
				"ADDED         configmaps        a      1                 90s\n" +
				"ADDED         serviceaccounts   b      2                 90s\n",
		},
		{
			name:     "an empty initial list",
			batching: true,
			events:   []hubclient.Event{initialEnd},
			wantErr:  "No resources found in demo namespace.\n",
		},
		{
			name:   "YAML: --- between documents, without managedFields",
			format: "yaml",
			events: []hubclient.Event{event(hubclient.Added, "a", "1"), event(hubclient.Deleted, "a", "2")},
			want: "object:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    creationTimestamp: \"2026-01-01T00:00:00Z\"\n    name: a\n    namespace: demo\n    resourceVersion: \"1\"\nresourceVersion: \"1\"\nresumeToken: t1\ntype: ADDED\n" +
				"---\nobject:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    creationTimestamp: \"2026-01-01T00:00:00Z\"\n    name: a\n    namespace: demo\n    resourceVersion: \"2\"\nresourceVersion: \"2\"\nresumeToken: t2\ntype: DELETED\n",
		},
		{
			name:              "JSON with --show-managed-fields",
			format:            "json",
			showManagedFields: true,
			events:            []hubclient.Event{event(hubclient.Added, "a", "1")},
			want:              `{"type":"ADDED","object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"demo","resourceVersion":"1","creationTimestamp":"2026-01-01T00:00:00Z","managedFields":[{"manager":"m"}]}},"resourceVersion":"1","resumeToken":"t1"}` + "\n",
		},
	} {
		var stdout, stderr bytes.Buffer
		p := eventPrinter{printer: &printer{stdout: &stdout, stderr: &stderr, now: now, format: tt.format, showManagedFields: tt.showManagedFields, withNamespace: tt.withNamespace},
			namespace: "demo", batching: tt.batching, many: tt.many}
		if tt.many {
			p.resources = []string{"configmaps", "namespaces", "serviceaccounts"}
		}
		for i, e := range tt.events {
			resource := ""
			if tt.many {
				resource = tt.resource[i]
			}
			if err := p.print(e, resource, e.ResumeToken, e.InitialEventsEnd); err != nil {
				t.Fatalf("%s: %v", tt.name, err)
			}
		}
		if diff := cmp.Diff(tt.want, stdout.String()); diff != "" {
			t.Errorf("%s: stdout (-want +got):\n%s", tt.name, diff)
		}
		if diff := cmp.Diff(tt.wantErr, stderr.String()); diff != "" {
			t.Errorf("%s: stderr (-want +got):\n%s", tt.name, diff)
		}
	}
}
