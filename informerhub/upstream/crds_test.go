package upstream

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

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
