package upstream

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
	fcache "k8s.io/client-go/tools/cache/testing"
)

// crdSource serves CRDs from a fake, as raw objects.
type crdSource struct{ src *fcache.FakeControllerSource }

func (s crdSource) ListerWatcher(ResourceInfo, string) cache.ListerWatcher { return s.src }

func crd(name, scope string, versions map[string][]string) *Object {
	var vs []string
	for v, paths := range versions {
		var fields []string
		for _, p := range paths {
			fields = append(fields, `{"jsonPath":"`+p+`"}`)
		}
		vs = append(vs, `{"name":"`+v+`","selectableFields":[`+strings.Join(fields, ",")+`]}`)
	}
	o := &Object{JSON: []byte(`{"metadata":{"name":"` + name + `"},"spec":{"scope":"` + scope + `","versions":[` + strings.Join(vs, ",") + `]}}`)}
	o.ObjectMeta = metav1.ObjectMeta{Name: name}
	return o
}

// TestCRDFieldsFollowTheirCRD checks that a custom resource's fields are
// its CRD's selectableFields of the version asked for, and follow the CRD
// as it changes and goes.
func TestCRDFieldsFollowTheirCRD(t *testing.T) {
	src := fcache.NewFakeControllerSource()
	defer src.Shutdown()
	src.Add(crd("widgets.example.com", "Namespaced", map[string][]string{"v1": {".spec.color"}, "v2": {".spec.hue"}}))
	c := NewCRDFields(crdSource{src}, slog.New(slog.DiscardHandler))
	c.Start()
	defer c.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	widgets := func(version string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: "example.com", Version: version, Resource: "widgets"}
	}
	names := func(gvr schema.GroupVersionResource) []string {
		t.Helper()
		set, isCRD, err := c.fields(ctx, gvr)
		if err != nil {
			t.Fatal(err)
		}
		if !isCRD {
			return nil
		}
		return set.Names()
	}
	if got := names(widgets("v1")); !slices.Equal(got, []string{"metadata.name", "metadata.namespace", "spec.color"}) {
		t.Errorf("v1: %v", got)
	}
	if got := names(widgets("v2")); !slices.Equal(got, []string{"metadata.name", "metadata.namespace", "spec.hue"}) {
		t.Errorf("v2: %v", got)
	}
	if got := names(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}); got != nil {
		t.Errorf("a built-in type is a custom resource with fields %v", got)
	}

	src.Modify(crd("widgets.example.com", "Cluster", map[string][]string{"v1": {".spec.color", ".spec.size"}}))
	waitFor(t, func() bool {
		return slices.Equal(names(widgets("v1")), []string{"metadata.name", "spec.color", "spec.size"})
	})
	src.Delete(crd("widgets.example.com", "Cluster", nil))
	waitFor(t, func() bool { return names(widgets("v1")) == nil })
}

// TestCRDPrinterColumnsOfTheirVersion checks that a custom resource's
// printer columns are its CRD's additionalPrinterColumns of the version
// asked for, every attribute kept, and follow the CRD as it changes.
func TestCRDPrinterColumnsOfTheirVersion(t *testing.T) {
	crdWithColumns := func(v1Columns string) *Object {
		o := &Object{JSON: []byte(`{"metadata":{"name":"widgets.example.com"},"spec":{"scope":"Namespaced","versions":[` +
			`{"name":"v1","additionalPrinterColumns":[` + v1Columns + `]},` +
			`{"name":"v2"}]}}`)}
		o.ObjectMeta = metav1.ObjectMeta{Name: "widgets.example.com"}
		return o
	}
	src := fcache.NewFakeControllerSource()
	defer src.Shutdown()
	src.Add(crdWithColumns(`{"name":"Color","type":"string","description":"the paint","jsonPath":".spec.color"},` +
		`{"name":"Size","type":"integer","format":"int32","priority":1,"jsonPath":".spec.size"}`))
	c := NewCRDFields(crdSource{src}, slog.New(slog.DiscardHandler))
	c.Start()
	defer c.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	columns := func(version string) []PrinterColumn {
		t.Helper()
		v, isCRD, err := c.version(ctx, schema.GroupVersionResource{Group: "example.com", Version: version, Resource: "widgets"})
		if err != nil {
			t.Fatal(err)
		}
		if !isCRD {
			t.Fatalf("%s: not a custom resource", version)
		}
		return v.columns
	}
	want := []PrinterColumn{
		{Name: "Color", Type: "string", Description: "the paint", JSONPath: ".spec.color"},
		{Name: "Size", Type: "integer", Format: "int32", Priority: 1, JSONPath: ".spec.size"},
	}
	if got := columns("v1"); !slices.Equal(got, want) {
		t.Errorf("v1: %+v, want %+v", got, want)
	}
	if got := columns("v2"); len(got) != 0 {
		t.Errorf("v2 lists no columns, got %+v", got)
	}
	if got := columns("v3"); len(got) != 0 {
		t.Errorf("v3 is not a version of the CRD, got columns %+v", got)
	}

	src.Modify(crdWithColumns(`{"name":"Hue","type":"string","jsonPath":".spec.hue"}`))
	waitFor(t, func() bool {
		return slices.Equal(columns("v1"), []PrinterColumn{{Name: "Hue", Type: "string", JSONPath: ".spec.hue"}})
	})

	// A CRD's author cannot grow every ListResources answer: the first
	// MaxPrinterColumns columns, each string cut at a character within
	// MaxPrinterColumnBytes.
	long := strings.Repeat("é", MaxPrinterColumnBytes) // 2 bytes each
	var many []string
	for i := range MaxPrinterColumns + 10 {
		many = append(many, fmt.Sprintf(`{"name":"c%d-%s","type":"string","description":"%s","jsonPath":".spec.x"}`, i, long, long))
	}
	src.Modify(crdWithColumns(strings.Join(many, ",")))
	waitFor(t, func() bool { return len(columns("v1")) > 1 })
	got := columns("v1")
	if len(got) != MaxPrinterColumns {
		t.Errorf("%d columns kept, want %d", len(got), MaxPrinterColumns)
	}
	for _, c := range got {
		if len(c.Name) > MaxPrinterColumnBytes || len(c.Description) > MaxPrinterColumnBytes || !utf8.ValidString(c.Name) || !utf8.ValidString(c.Description) {
			t.Fatalf("a column kept %d and %d bytes (valid UTF-8: %v, %v), want at most %d, cut at a character",
				len(c.Name), len(c.Description), utf8.ValidString(c.Name), utf8.ValidString(c.Description), MaxPrinterColumnBytes)
		}
	}
	if !strings.HasPrefix(got[0].Name, "c0-é") || got[MaxPrinterColumns-1].JSONPath != ".spec.x" {
		t.Errorf("not the first columns, or their paths lost: %.20q ... %q", got[0].Name, got[MaxPrinterColumns-1].JSONPath)
	}
}

// waitFor waits until cond holds: the informer delivers a CRD's change in
// its own time, with nothing to wait on but its effect.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
