package informerhub_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fcache "k8s.io/client-go/tools/cache/testing"

	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/informerhub/hubtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var (
	configMaps = hubtest.ConfigMaps
	namespaces = hubtest.Namespaces
	pods       = hubtest.Pods
	configMap  = hubtest.ConfigMap
)

// fakeCluster adds short names for the tests of this package.
type fakeCluster struct{ *hubtest.Cluster }

func newFakeCluster(t *testing.T) *fakeCluster { return &fakeCluster{hubtest.NewCluster(t)} }

func (c *fakeCluster) cms() *fcache.FakeControllerSource { return c.ConfigMaps() }

func (c *fakeCluster) informersStarted(gvr schema.GroupVersionResource) int {
	return c.InformersStarted(gvr)
}

func newHub(t *testing.T, c *fakeCluster, cfg informerhub.Config) *informerhub.Hub {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	h := informerhub.New(cfg, c.Cluster, c.Cluster)
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

// await waits until ch is closed, failing the test after a generous
// bound so that a bug shows as a failure, not a hang.
func await(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(time.Minute):
		t.Fatalf("%s: not after a minute", what)
	}
}

// awaitCondition waits until cond holds, checking every millisecond, for
// a state the hub signals no one of (a subscription gone live), failing
// the test after a minute.
func awaitCondition(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after a minute", what)
		}
		time.Sleep(time.Millisecond)
	}
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

// bigData is 4 KiB of a ConfigMap's data.
var bigData = strings.Repeat("x", 4<<10)

// putBig adds or modifies ConfigMap ns/(i%10), with 4 KiB of data: the
// first ten calls add them, each later one replaces 4 KiB.
func putBig(c *fakeCluster, i int) {
	cm := configMap("ns", fmt.Sprint(i%10), nil, fmt.Sprint(i)+bigData)
	if i < 10 {
		c.cms().Add(cm)
		return
	}
	c.cms().Modify(cm)
}
