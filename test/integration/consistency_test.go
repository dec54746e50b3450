package integration

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/informerhub/informerhub/informerhub"
)

// TestTheConsistencyCheckFindsAndRepairsADroppedChange loses one change
// between the API server and the hub, as a bug in a watch path would: the
// hub's transport drops one MODIFIED event of its ConfigMap watch. The
// hub's cache then differs from the API server's at the same
// resourceVersion. Its consistency check finds that within an interval,
// names the object, and relists; every subscriber receives the missing
// change (from the relist) and ends up equal to the API server's LIST.
func TestTheConsistencyCheckFindsAndRepairsADroppedChange(t *testing.T) {
	ns := namespace(t)
	w := newWorkload(t, ns, 10)
	createConfigMap(t, ns, "victim", map[string]string{"team": "a"}, "v0")
	ref := startReference(t, ns)
	restConfig, dropped := droppingOneChange(cluster.Config, ns, "victim")
	logs := &lockedBuffer{}
	diverged := make(chan struct{})
	h := startHubAt(t, restConfig, informerhub.Config{
		ConsistencyCheckInterval: 200 * time.Millisecond,
		Logger: slog.New(&signalHandler{
			Handler: slog.NewTextHandler(io.MultiWriter(logs, newTestWriter(t)), &slog.HandlerOptions{Level: slog.LevelInfo}),
			prefix:  "the cache differs from the API server", seen: diverged, once: &sync.Once{},
		}),
	})
	subs := []*subscriber{subscribe(t, h.current, ns, ""), subscribe(t, h.current, ns, "team=a")}
	m := w.marker()
	for _, s := range subs {
		s.waitFor(t, m)
	}

	updateConfigMap(t, ns, "victim", map[string]string{"team": "a"}, "v1")
	select {
	case <-dropped:
	case <-ctxFor(t).Done():
		t.Fatal("the change to victim never reached the hub's watch")
	}
	// Changes after it move the hub's position past the lost change: its
	// cache there lacks it.
	w.step(5)
	select {
	case <-diverged:
	case <-ctxFor(t).Done():
		t.Fatalf("no consistency check found the lost change: %+v", statsOf(t, h))
	}
	w.settle(subs) // the relist's differences, then everything after them
	for _, s := range subs {
		s.check(t, ref, true)
	}
	st := statsOf(t, h)
	if st.ChecksDiverged == 0 || st.Relists == 0 {
		t.Errorf("diverged checks %d, relists %d; want both counted", st.ChecksDiverged, st.Relists)
	}
	text := logs.String()
	line := ""
	for l := range strings.SplitSeq(text, "\n") {
		if strings.Contains(l, "the cache differs from the API server") {
			line = l
			break
		}
	}
	if line == "" {
		t.Fatalf("the hub did not log the difference; its log:\n%s", text)
	}
	if want := ns + "/victim"; !strings.Contains(line, want) {
		t.Errorf("the log line does not name %s: %s", want, line)
	}
	if strings.Count(line, ns+"/") != 1 {
		t.Errorf("the log line names other objects than victim: %s", line)
	}
}

// TestACompactedPositionIsNoFalseAlarm: a check whose position etcd
// compacted before it could list it counts it as compacted, and neither
// alarms nor relists. The hub watches PodTemplates, which no other test
// writes, through an API server without a watch cache: no bookmarks move
// its position on, and every LIST is served by etcd.
func TestACompactedPositionIsNoFalseAlarm(t *testing.T) {
	skipped := make(chan struct{})
	api := etcdAPIServer(t)
	h := startHubAt(t, api.Config, informerhub.Config{
		Retain:                   []string{"podtemplates"},
		ConsistencyCheckInterval: 200 * time.Millisecond,
		Logger: slog.New(&signalHandler{
			Handler: slog.NewTextHandler(newTestWriter(t), &slog.HandlerOptions{Level: slog.LevelInfo}),
			prefix:  "consistency check skipped", seen: skipped, once: &sync.Once{},
		}),
	})
	podTemplates := func() informerhub.ResourceStats {
		for _, st := range h.Stats() {
			if st.Resource.Resource == "podtemplates" {
				return st
			}
		}
		return informerhub.ResourceStats{}
	}
	// A snapshot waits for the informer's first list: its position is
	// then one etcd has.
	snap, err := h.Snapshot(ctxFor(t), informerhub.SnapshotRequest{Selector: informerhub.Selector{
		Resource: schema.GroupVersionResource{Version: "v1", Resource: "podtemplates"}}})
	if err != nil {
		t.Fatal(err)
	}
	snap.Close()
	// Something else moves etcd past the informer's position, then etcd
	// forgets every revision before its newest.
	createConfigMap(t, namespace(t), "elsewhere", nil, "")
	if _, err := cluster.Compact(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-skipped:
	case <-ctxFor(t).Done():
		t.Fatalf("no check met the compacted position: %+v", podTemplates())
	}
	if st := podTemplates(); st.ChecksCompacted == 0 || st.ChecksDiverged != 0 || st.Relists != 0 {
		t.Errorf("compacted %d, diverged %d, relists %d; want compacted only", st.ChecksCompacted, st.ChecksDiverged, st.Relists)
	}
}

// droppingOneChange returns a copy of restConfig whose watches of
// ConfigMaps lose the first MODIFIED event of ns/name, and a channel
// closed when it is lost. The API server's JSON watch streams hold one
// event per line.
func droppingOneChange(restConfig *rest.Config, ns, name string) (*rest.Config, <-chan struct{}) {
	cfg := rest.CopyConfig(restConfig)
	dropped := make(chan struct{})
	var once sync.Once
	match := [][]byte{[]byte(`"type":"MODIFIED"`), []byte(fmt.Sprintf(`"name":%q,"namespace":%q`, name, ns))}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			q := req.URL.Query()
			if err != nil || !strings.HasSuffix(req.URL.Path, "/configmaps") || (q.Get("watch") != "true" && q.Get("watch") != "1") {
				return resp, err
			}
			resp.Body = &lineFilter{src: bufio.NewReader(resp.Body), body: resp.Body, drop: func(line []byte) bool {
				if !bytes.Contains(line, match[0]) || !bytes.Contains(line, match[1]) {
					return false
				}
				lose := false
				once.Do(func() { lose = true; close(dropped) })
				return lose
			}}
			return resp, nil
		})
	})
	return cfg, dropped
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// lineFilter passes on a body's lines but those drop says to lose.
type lineFilter struct {
	src     *bufio.Reader
	body    io.Closer
	pending []byte
	drop    func([]byte) bool
}

func (f *lineFilter) Read(p []byte) (int, error) {
	for len(f.pending) == 0 {
		line, err := f.src.ReadBytes('\n')
		if len(line) > 0 && !f.drop(line) {
			f.pending = line
		}
		if err != nil {
			if len(f.pending) > 0 {
				break
			}
			return 0, err
		}
	}
	n := copy(p, f.pending)
	f.pending = f.pending[n:]
	return n, nil
}

func (f *lineFilter) Close() error { return f.body.Close() }

// lockedBuffer is a bytes.Buffer that a logger and a test share.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
