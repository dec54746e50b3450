package informerhub_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	fcache "k8s.io/client-go/tools/cache/testing"

	"github.com/informerhub/informerhub/informerhub"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var (
	configMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	namespaces = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
)

// fakeCluster is a Resolver and Source backed by client-go's
// FakeControllerSource, one per resource type. It models sequential
// resourceVersions and a 410 after ResetWatch; it is for testing the hub's
// logic, not proof of behaviour against a real API server.
type fakeCluster struct {
	mu      sync.Mutex
	sources map[schema.GroupVersionResource]*fcache.FakeControllerSource
	infos   map[schema.GroupVersionResource]informerhub.ResourceInfo
	started map[schema.GroupVersionResource]int // informers started per resource
}

func newFakeCluster(t *testing.T) *fakeCluster {
	c := &fakeCluster{
		sources: map[schema.GroupVersionResource]*fcache.FakeControllerSource{},
		infos:   map[schema.GroupVersionResource]informerhub.ResourceInfo{},
		started: map[schema.GroupVersionResource]int{},
	}
	c.infos[configMaps] = informerhub.ResourceInfo{Resource: configMaps, Kind: "ConfigMap", Namespaced: true}
	c.infos[namespaces] = informerhub.ResourceInfo{Resource: namespaces, Kind: "Namespace"}
	for gvr := range c.infos {
		src := fcache.NewFakeControllerSource()
		c.sources[gvr] = src
		// Registered before any hub, so it runs after the hub has closed.
		t.Cleanup(src.Shutdown)
	}
	return c
}

func (c *fakeCluster) Resolve(_ context.Context, gvr schema.GroupVersionResource) (informerhub.ResourceInfo, error) {
	info, ok := c.infos[gvr]
	if !ok {
		return informerhub.ResourceInfo{}, &informerhub.ResourceError{Resource: gvr, Err: informerhub.ErrUnknownResource}
	}
	return info, nil
}

func (c *fakeCluster) Resources(context.Context) ([]informerhub.ResourceInfo, error) {
	return []informerhub.ResourceInfo{c.infos[configMaps], c.infos[namespaces]}, nil
}

func (c *fakeCluster) ListerWatcher(info informerhub.ResourceInfo) cache.ListerWatcher {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.started[info.Resource]++
	return noWatchList{c.sources[info.Resource]}
}

func (c *fakeCluster) informersStarted(gvr schema.GroupVersionResource) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.started[gvr]
}

// noWatchList tells the reflector the fake cannot stream initial events.
type noWatchList struct{ *fcache.FakeControllerSource }

func (noWatchList) IsWatchListSemanticsUnSupported() bool { return true }

func (c *fakeCluster) cms() *fcache.FakeControllerSource { return c.sources[configMaps] }

func configMap(ns, name string, labels map[string]string, data string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, UID: types.UID(ns + "/" + name)},
		Data:       map[string]string{"v": data},
	}
}

func newHub(t *testing.T, c *fakeCluster, cfg informerhub.Config) *informerhub.Hub {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	h := informerhub.New(cfg, c, c)
	t.Cleanup(h.Close)
	return h
}

func watch(t *testing.T, h *informerhub.Hub, req informerhub.WatchRequest) *informerhub.Subscription {
	t.Helper()
	if req.Selector.Resource.Empty() {
		req.Selector.Resource = configMaps
	}
	s, err := h.Watch(context.Background(), req)
	if err != nil {
		t.Fatalf("Watch(%+v): %v", req, err)
	}
	t.Cleanup(s.Close)
	return s
}

// ev is an event in a form tests compare: type, object key, data and
// resourceVersion.
type ev struct {
	Type string
	Key  string
	Data string
	RV   string
	End  bool
}

func (e ev) String() string {
	return fmt.Sprintf("%s %s %q rv=%s end=%v", e.Type, e.Key, e.Data, e.RV, e.End)
}

func toEv(t *testing.T, e *informerhub.Event) ev {
	t.Helper()
	out := ev{Type: e.Type.String(), RV: e.ResourceVersion, End: e.InitialEventsEnd}
	if e.Type == informerhub.EventBookmark {
		out.RV = ""
		return out
	}
	var cm corev1.ConfigMap
	if err := json.Unmarshal([]byte(e.Object), &cm); err != nil {
		t.Fatalf("event object is not a ConfigMap: %v: %s", err, e.Object)
	}
	out.Key = cm.Namespace + "/" + cm.Name
	out.Data = cm.Data["v"]
	if cm.ResourceVersion != e.ResourceVersion && e.Type != informerhub.EventDeleted {
		t.Errorf("event resourceVersion %s differs from its object's %s", e.ResourceVersion, cm.ResourceVersion)
	}
	return out
}

// next returns the next event, failing the test after a generous bound so a
// bug shows as a failure, not a hang. The bound is not synchronisation:
// events arrive as soon as the informer delivers them.
func next(t *testing.T, s *informerhub.Subscription) *informerhub.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e, err := s.Next(ctx)
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return e
}

// nextChange returns the next event that is not a periodic bookmark.
func nextChange(t *testing.T, s *informerhub.Subscription) *informerhub.Event {
	t.Helper()
	for {
		e := next(t, s)
		if e.Type != informerhub.EventBookmark || e.InitialEventsEnd {
			return e
		}
	}
}

// collect reads events until one for the marker object arrives, and returns
// those before it. Writing a marker last and reading up to it proves that
// nothing else was delivered in between, without waiting for silence.
func collect(t *testing.T, s *informerhub.Subscription, markerKey string) []ev {
	t.Helper()
	var out []ev
	for {
		e := toEv(t, nextChange(t, s))
		if e.Key == markerKey {
			return out
		}
		out = append(out, e)
	}
}

func nextErr(t *testing.T, s *informerhub.Subscription) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		e, err := s.Next(ctx)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				t.Fatal("Next did not fail")
			}
			return err
		}
		_ = e
	}
}
