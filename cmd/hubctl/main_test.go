package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime/schema"

	hubclient "github.com/informerhub/informerhub/clients/go"
)

func TestPickResource(t *testing.T) {
	res := func(group, version, resource, kind, singular string, short ...string) hubclient.Resource {
		return hubclient.Resource{GroupVersionResource: schema.GroupVersionResource{Group: group, Version: version, Resource: resource},
			Kind: kind, SingularName: singular, ShortNames: short, Namespaced: true}
	}
	served := []hubclient.Resource{
		res("", "v1", "configmaps", "ConfigMap", "configmap", "cm"),
		res("apps", "v1", "deployments", "Deployment", "deployment", "deploy"),
		res("example.com", "v1alpha1", "widgets", "Widget", "widget"),
		res("example.com", "v1beta2", "widgets", "Widget", "widget"),
		res("example.com", "v1beta10", "widgets", "Widget", "widget"),
		res("example.com", "v1", "widgets", "Widget", "widget"),
		res("other.io", "v2", "widgets", "Widget", "widget"),
		res("", "v1", "events", "Event", "event", "ev"),
		res("events.k8s.io", "v1", "events", "Event", "event", "ev"),
	}
	tests := []struct {
		name, group, version string
		exact                bool
		want                 hubclient.Resource
		err                  string
	}{
		{name: "configmaps", want: served[0]},
		{name: "configmap", want: served[0]},
		{name: "cm", want: served[0]},
		{name: "ConfigMap", want: served[0]},
		{name: "ConfigMaps", want: served[0]},
		{name: "configmaps.v1", want: served[0]},
		{name: "cm.v1", want: served[0]},
		{name: "deployments.apps", want: served[1]},
		{name: "deploy.apps", want: served[1]},
		{name: "deployments.v1.apps", want: served[1]},
		{name: "deployments", want: served[1]}, // the one group that serves it
		{name: "deploy", want: served[1]},
		{name: "Deployment", want: served[1]},
		{name: "events", want: served[7]}, // the core group first
		{name: "events.events.k8s.io", want: served[8]},
		{name: "widgets", err: `"widgets" is served by 2 API groups: name one, e.g. widgets.example.com or widgets.other.io`},
		{name: "widgets.example.com", want: served[5]},
		{name: "widgets.example.com", version: "v1beta2", want: served[3]},
		{name: "widgets.v1beta10.example.com", want: served[4]},
		{name: "widgets", exact: true, group: "example.com", version: "v1alpha1", want: served[2]},
		{name: "widgets", exact: true, group: "other.io", want: served[6]},
		{name: "widget", exact: true, group: "other.io", err: "no resource type"}, // --resource takes the plural
		{name: "deployments", group: "apps", want: served[1]},                     // RESOURCE with --group
		{name: "widgets", group: "example.com", version: "v1beta10", want: served[4]},
		{name: "widgets.nope.io", err: "no resource type"},
		{name: "confgmaps", err: "did you mean configmaps?"},
		{name: "deploymnt", err: "did you mean deployments.apps?"},
		{name: "zzzzzz", err: "(hubctl resources lists them)"},
	}
	for _, tt := range tests {
		got, err := pickResource(served, tt.name, tt.exact, tt.group, tt.version)
		switch {
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("pickResource(%q, exact=%v, group=%q, version=%q) = %v, %v; want an error with %q", tt.name, tt.exact, tt.group, tt.version, got.GroupVersionResource, err, tt.err)
		case tt.err == "" && (err != nil || !cmp.Equal(got, tt.want)):
			t.Errorf("pickResource(%q, exact=%v, group=%q, version=%q) = %v, %v; want %v", tt.name, tt.exact, tt.group, tt.version, got.GroupVersionResource, err, tt.want.GroupVersionResource)
		}
	}
}

func TestFlagsAfterTheResource(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	ns := fs.String("n", "", "")
	positional, err := parseInterspersed(fs, []string{"-n", "a", "configmaps", "-n", "b"})
	if err != nil || *ns != "b" || len(positional) != 1 || positional[0] != "configmaps" {
		t.Fatalf("positional %v, namespace %q, err %v", positional, *ns, err)
	}
}

func TestHelpAndUsage(t *testing.T) {
	for _, tt := range []struct {
		args []string
		code int
	}{
		{[]string{"-h"}, 0},
		{[]string{"--insecure", "watch", "-h"}, 0},
		{[]string{"--insecure", "resources", "-h"}, 0},
		{[]string{}, 2},
		{[]string{"--insecure", "--ca-file", "x", "resources"}, 2},
		{[]string{"--insecure", "--cert-file", "x", "--key-file", "y", "resources"}, 2},
		{[]string{"--cert-file", "x", "resources"}, 2},
		{[]string{"--ca-file", "/nonexistent", "resources"}, 2},
		{[]string{"--cert-file", "/nonexistent", "--key-file", "/nonexistent", "resources"}, 2},
		{[]string{"--insecure", "watch", "--output", "xml", "configmaps"}, 2},
		{[]string{"--insecure", "watch", "-A", "-n", "demo", "configmaps"}, 2},
		{[]string{"--token-file", "/nonexistent", "resources"}, 2},
		{[]string{"--insecure", "count", "--field", "status", "configmaps"}, 2},
		{[]string{"--insecure", "watch", "--fields", "a,,b", "configmaps"}, 2},
		{[]string{"--insecure", "snapshot", "--show-previous", "configmaps"}, 2}, // watch only
		{[]string{"--insecure", "resources", "-o", "xml"}, 2},
		{[]string{"--insecure", "watch", "cm,"}, 2},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), tt.args, &stdout, &stderr, time.Now); code != tt.code {
			t.Errorf("hubctl %q exited %d, want %d: %s", tt.args, code, tt.code, stderr.String())
		}
	}
}

func TestDiffObjects(t *testing.T) {
	before := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","resourceVersion":"1","labels":{"app":"web","app.kubernetes.io/name":"web"},
		"managedFields":[{"manager":"a"}]},"spec":{"containers":[{"name":"app","image":"nginx:1"},{"name":"side","image":"envoy"}],"replicas":1.50},
		"status":{"phase":"Pending","conditions":[{"type":"Ready"}]}}`
	after := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","resourceVersion":"2","labels":{"app":"web","tier":"front"},
		"managedFields":[{"manager":"b"}]},"spec":{"containers":[{"name":"app","image":"nginx:2"},{"name":"side","image":"envoy"}],"replicas":1.50},
		"status":{"phase":"Running","conditions":[{"type":"Ready"},{"type":"Initialized"}],"message":"` + strings.Repeat("é", 100) + `"}}`
	got, err := diffObjects([]byte(before), []byte(after), false)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`- metadata.labels["app.kubernetes.io/name"]: "web"`,
		`+ metadata.labels.tier: "front"`,
		`~ spec.containers[0].image: "nginx:1" -> "nginx:2"`,
		`~ status.conditions: [{"type":"Ready"}] -> [{"type":"Ready"},{"type":"Initialized"}]`,
		`+ status.message: "` + strings.Repeat("é", 76) + `...`,
		`~ status.phase: "Pending" -> "Running"`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("diff (-want +got):\n%s", diff)
	}
	if got, err := diffObjects([]byte(after), []byte(after), false); err != nil || len(got) != 0 {
		t.Errorf("an object against itself: %q, %v", got, err)
	}
	if _, err := diffObjects([]byte("{"), []byte(after), false); err == nil {
		t.Error("a previous object that is not JSON: no error")
	}
	// Asked for (--show-managed-fields, or a --field naming them), the
	// managedFields' changes are shown.
	got, err = diffObjects([]byte(before), []byte(after), true)
	if err != nil {
		t.Fatal(err)
	}
	if want := `~ metadata.managedFields[0].manager: "a" -> "b"`; !slices.Contains(got, want) {
		t.Errorf("with managedFields: %q, want %q among them", got, want)
	}
}

// TestFieldsNamingManagedFields: a --field that names metadata.managedFields
// (or a path within them) asks for them, which -o json and yaml then keep.
func TestFieldsNamingManagedFields(t *testing.T) {
	for _, tt := range []struct {
		fields []string
		want   bool
	}{
		{[]string{"metadata.managedFields"}, true},
		{[]string{"status.phase", ".metadata.managedFields"}, true},
		{[]string{`metadata["managedFields"]`}, true},
		{[]string{"metadata.managedFields.manager"}, true},
		{[]string{"metadata.labels", "status"}, false},
		{[]string{"metadata"}, false}, // all of metadata: kubectl's default, without them
		{[]string{"spec.managedFields"}, false},
		{[]string{"metadata.managedFieldsX"}, false},
		{[]string{"metadata..managedFields"}, false}, // not a path: the hub says why
		{nil, false},
	} {
		if got := namesManagedFields(tt.fields); got != tt.want {
			t.Errorf("namesManagedFields(%q) = %v, want %v", tt.fields, got, tt.want)
		}
	}
}

func TestFieldsFlag(t *testing.T) {
	for _, tt := range []struct {
		values []string
		want   fieldList
		ok     bool
	}{
		{[]string{"status.phase"}, fieldList{"status.phase"}, true},
		{[]string{"status.phase, metadata.labels", "spec.nodeName"}, fieldList{"status.phase", "metadata.labels", "spec.nodeName"}, true},
		{[]string{`metadata.labels["a,b"],data`}, fieldList{`metadata.labels["a,b"]`, "data"}, true},
		{[]string{`metadata.annotations['x.io/y,z'],status`}, fieldList{`metadata.annotations['x.io/y,z']`, "status"}, true},
		{[]string{"status.phase,"}, nil, false},
		{[]string{""}, nil, false},
	} {
		var got fieldList
		var err error
		for _, v := range tt.values {
			if err = got.Set(v); err != nil {
				break
			}
		}
		if (err == nil) != tt.ok || tt.ok && !cmp.Equal(tt.want, got) {
			t.Errorf("--fields %q: %q, %v; want %q (ok=%v)", tt.values, got, err, tt.want, tt.ok)
		}
	}
}
