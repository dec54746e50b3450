package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestPickResource(t *testing.T) {
	served := []schema.GroupVersionResource{
		{Version: "v1", Resource: "configmaps"},
		{Group: "apps", Version: "v1", Resource: "deployments"},
		{Group: "example.com", Version: "v1alpha1", Resource: "widgets"},
		{Group: "example.com", Version: "v1beta2", Resource: "widgets"},
		{Group: "example.com", Version: "v1beta10", Resource: "widgets"},
		{Group: "example.com", Version: "v1", Resource: "widgets"},
		{Group: "other.io", Version: "v2", Resource: "widgets"},
	}
	tests := []struct {
		name, group, version string
		exact                bool
		want                 schema.GroupVersionResource
		found                bool
	}{
		{name: "configmaps", want: served[0], found: true},
		{name: "configmaps.v1", want: served[0], found: true},
		{name: "deployments.apps", want: served[1], found: true},
		{name: "deployments.v1.apps", want: served[1], found: true},
		{name: "deployments", found: false}, // not in the core group
		{name: "widgets.example.com", want: served[5], found: true},
		{name: "widgets.example.com", version: "v1beta2", want: served[3], found: true},
		{name: "widgets.v1beta10.example.com", want: served[4], found: true},
		{name: "widgets", exact: true, group: "example.com", version: "v1alpha1", want: served[2], found: true},
		{name: "widgets", exact: true, group: "other.io", want: served[6], found: true},
		{name: "deployments", group: "apps", want: served[1], found: true}, // RESOURCE with --group
		{name: "widgets", group: "example.com", version: "v1beta10", want: served[4], found: true},
		{name: "widgets.nope.io", found: false},
	}
	for _, tt := range tests {
		got, found := pickResource(served, tt.name, tt.exact, tt.group, tt.version)
		if found != tt.found || got != tt.want {
			t.Errorf("pickResource(%q, exact=%v, group=%q, version=%q) = %v, %v; want %v, %v",
				tt.name, tt.exact, tt.group, tt.version, got, found, tt.want, tt.found)
		}
	}
}

func TestTables(t *testing.T) {
	var out bytes.Buffer
	c := &cli{stdout: &out}
	tbl := c.table(false, "GROUP", "VERSION", "RESOURCE")
	tbl.row("", "v1", "configmaps")
	tbl.row("apps", "v1", "deployments")
	tbl.flush()
	want := "GROUP   VERSION   RESOURCE\n" +
		"        v1        configmaps\n" +
		"apps    v1        deployments\n"
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}

	out.Reset()
	tbl = c.table(true, "EVENT", "NAME", "AGE")
	tbl.row("ADDED", "short", "1s")
	tbl.row("MODIFIED", "a-name-longer-than-its-column-is-wide", "2m")
	tbl.row("DELETED", "b", "3h")
	want = "EVENT       NAME                               AGE\n" +
		"ADDED       short                              1s\n" +
		"MODIFIED    a-name-longer-than-its-column-is-wide   2m\n" +
		"DELETED     b                                       3h\n"
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("streaming table (-want +got):\n%s", diff)
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
		{[]string{"--insecure", "watch", "--output", "yaml", "configmaps"}, 2},
		{[]string{"--insecure", "watch", "--fields", "a,,b", "configmaps"}, 2},
		{[]string{"--insecure", "snapshot", "--show-previous", "configmaps"}, 2}, // watch only
		{[]string{"--insecure", "resources", "-o", "yaml"}, 2},
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
	got, err := diffObjects([]byte(before), []byte(after))
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
	if got, err := diffObjects([]byte(after), []byte(after)); err != nil || len(got) != 0 {
		t.Errorf("an object against itself: %q, %v", got, err)
	}
	if _, err := diffObjects([]byte("{"), []byte(after)); err == nil {
		t.Error("a previous object that is not JSON: no error")
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
