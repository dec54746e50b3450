package upstream

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// fakeDiscovery serves group versions from a map and counts the asks.
type fakeDiscovery struct {
	mu    sync.Mutex
	lists map[string]*metav1.APIResourceList
	asks  map[string]int
}

func (d *fakeDiscovery) ServerResourcesForGroupVersionWithContext(_ context.Context, gv string) (*metav1.APIResourceList, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.asks[gv]++
	if l, ok := d.lists[gv]; ok {
		return l, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{}, gv)
}

func (d *fakeDiscovery) ServerGroupsAndResourcesWithContext(context.Context) ([]*metav1.APIGroup, []*metav1.APIResourceList, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var lists []*metav1.APIResourceList
	for _, l := range d.lists {
		lists = append(lists, l)
	}
	return nil, lists, nil
}

func (d *fakeDiscovery) ServerPreferredResourcesWithContext(context.Context) ([]*metav1.APIResourceList, error) {
	return nil, errors.New("not used")
}

func (d *fakeDiscovery) ServerPreferredNamespacedResourcesWithContext(context.Context) ([]*metav1.APIResourceList, error) {
	return nil, errors.New("not used")
}

func (d *fakeDiscovery) add(gv string, resources ...metav1.APIResource) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lists[gv] = &metav1.APIResourceList{GroupVersion: gv, APIResources: resources}
}

func (d *fakeDiscovery) asked(gv string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.asks[gv]
}

var watchVerbs = metav1.Verbs{"get", "list", "watch"}

func TestDiscoveryFindsNewResourcesOnAMiss(t *testing.T) {
	d := &fakeDiscovery{lists: map[string]*metav1.APIResourceList{}, asks: map[string]int{}}
	d.add("v1", metav1.APIResource{Name: "configmaps", Kind: "ConfigMap", Namespaced: true, Verbs: watchVerbs})
	r := NewDiscovery(d, DiscoveryConfig{MissRefreshInterval: time.Hour})
	ctx := context.Background()
	widgets := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}

	if _, err := r.Resolve(ctx, widgets); !errors.Is(err, ErrNotServed) {
		t.Fatalf("Resolve before the CRD: %v, want ErrNotServed", err)
	}
	// Misses within the refresh interval do not ask again, even concurrently.
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() { _, _ = r.Resolve(ctx, widgets) })
	}
	wg.Wait()
	if n := d.asked("example.com/v1"); n != 1 {
		t.Fatalf("discovery asked %d times about example.com/v1, want 1", n)
	}

	d.add("example.com/v1", metav1.APIResource{Name: "widgets", Kind: "Widget", Namespaced: true, Verbs: watchVerbs})
	r = NewDiscovery(d, DiscoveryConfig{MissRefreshInterval: time.Nanosecond})
	if _, err := r.Resolve(ctx, widgets); err != nil {
		t.Fatalf("Resolve after the CRD: %v", err)
	}
	info, err := r.Resolve(ctx, schema.GroupVersionResource{Version: "v1", Resource: "configmaps"})
	if err != nil || info.Kind != "ConfigMap" || !info.Namespaced {
		t.Fatalf("Resolve(configmaps) = %+v, %v", info, err)
	}
}

func TestDiscoveryForgetsUnknownGroupVersions(t *testing.T) {
	d := &fakeDiscovery{lists: map[string]*metav1.APIResourceList{}, asks: map[string]int{}}
	d.add("v1", metav1.APIResource{Name: "configmaps", Kind: "ConfigMap", Namespaced: true, Verbs: watchVerbs})
	r := NewDiscovery(d, DiscoveryConfig{})
	ctx := context.Background()
	if _, err := r.Resolve(ctx, schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}); err != nil {
		t.Fatal(err)
	}
	for i := range maxGroupVersions + 100 {
		_, _ = r.Resolve(ctx, schema.GroupVersionResource{Group: fmt.Sprintf("g%d.example.com", i), Version: "v1", Resource: "x"})
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.groupVersions); n > maxGroupVersions {
		t.Fatalf("%d group versions remembered, want at most %d", n, maxGroupVersions)
	}
	if r.groupVersions[schema.GroupVersion{Version: "v1"}].resources == nil {
		t.Fatal("a group version the cluster serves was forgotten")
	}
}

func TestDiscoveryRejectsWhatCannotBeWatched(t *testing.T) {
	d := &fakeDiscovery{lists: map[string]*metav1.APIResourceList{}, asks: map[string]int{}}
	d.add("v1",
		metav1.APIResource{Name: "pods", Kind: "Pod", Namespaced: true, Verbs: watchVerbs},
		metav1.APIResource{Name: "pods/status", Kind: "Pod", Namespaced: true, Verbs: metav1.Verbs{"get", "patch"}},
		metav1.APIResource{Name: "bindings", Kind: "Binding", Namespaced: true, Verbs: metav1.Verbs{"create"}},
	)
	r := NewDiscovery(d, DiscoveryConfig{})
	ctx := context.Background()
	for _, resource := range []string{"pods/status", "bindings"} {
		var unwatchable *UnwatchableError
		if _, err := r.Resolve(ctx, schema.GroupVersionResource{Version: "v1", Resource: resource}); !errors.As(err, &unwatchable) {
			t.Errorf("Resolve(%s): %v, want an UnwatchableError", resource, err)
		}
	}
	all, err := r.Resources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 || all[0].Resource.Resource != "pods" {
		t.Fatalf("Resources = %+v, want only pods", all)
	}
}

// TestAWatchWhoseConnectionDropsIsTriedAgain: as with client-go's
// Request.Watch, a watch whose connection drops before the API server
// answers is opened again rather than failed, so the reflector does not
// list everything again; then it reads the stream's events.
func TestAWatchWhoseConnectionDropsIsTriedAgain(t *testing.T) {
	var requests atomic.Int32
	done := make(chan struct{})
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if requests.Add(1) == 1 {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close() // dropped before any answer
			}
			return
		}
		if r.URL.Query().Get("watch") != "true" || r.URL.Path != "/api/v1/configmaps" {
			http.Error(w, "unexpected "+r.URL.String(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintln(w, `{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"7"}}}`)
		w.(http.Flusher).Flush()
		<-done
	}))
	defer server.Close()
	defer close(done)
	source, err := NewSource(&rest.Config{Host: server.URL}, server.Client(), false)
	if err != nil {
		t.Fatal(err)
	}
	lw := cache.ToListerWatcherWithContext(source.ListerWatcher(ResourceInfo{Resource: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}}, ""))
	w, err := lw.WatchWithContext(t.Context(), metav1.ListOptions{ResourceVersion: "5"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	ev := <-w.ResultChan()
	obj, ok := ev.Object.(*Object)
	if ev.Type != watch.Added || !ok || obj.Name != "a" || obj.ResourceVersion != "7" {
		t.Fatalf("got %v %#v, want the ADDED ConfigMap a@7", ev.Type, ev.Object)
	}
	if n := requests.Load(); n != 2 {
		t.Fatalf("%d requests, want the dropped one and one more", n)
	}
}
