package conformance

import (
	"context"
	"errors"
	"io"
	"strconv"
	"sync"
	"testing"
	"time"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/test/checker"
)

// manyRun is a WatchMany of probes, read in the background into one
// transcript per watch.
type manyRun struct {
	t      *testing.T
	s      *scenario
	probes []probe
	req    *informerhubv1.WatchManyRequest
	client informerhubv1.InformerHubServiceClient
	ctx    context.Context // nil: Background
	trs    []*checker.Transcript

	mu         sync.Mutex // guards the fields below
	cancel     context.CancelFunc
	done       chan struct{}
	err        error
	composite  string   // the last response's token
	composites []string // every response's, in order
	initial    bool     // the initial events are over
	bookmarks  []uint64 // each watch's highest bookmark of the stream
	changed    chan struct{}
}

func (m *manyRun) open(token string) {
	m.t.Helper()
	m.req.ResumeToken = token
	base := m.ctx
	if base == nil {
		base = context.Background()
	}
	ctx, cancel := context.WithCancel(base)
	stream, err := m.client.WatchMany(ctx, m.req)
	if err != nil {
		cancel()
		m.t.Fatalf("WatchMany: %v", err)
	}
	for _, tr := range m.trs {
		tr.Open(tr.LastToken())
	}
	m.mu.Lock()
	m.cancel, m.done, m.err, m.bookmarks = cancel, make(chan struct{}), nil, make([]uint64, len(m.trs))
	done := m.done
	m.mu.Unlock()
	go func() {
		defer close(done)
		for {
			resp, err := stream.Recv()
			if err == nil {
				var e checker.Event
				if e, err = checker.FromWatchResponse(resp.GetEvent()); err == nil {
					i := int(resp.GetIndex())
					m.trs[i].Record(e)
					m.mu.Lock()
					m.composite = resp.GetResumeToken()
					m.composites = append(m.composites, m.composite)
					m.initial = m.initial || resp.GetInitialEventsEnd()
					if e.Type == checker.Bookmark {
						v, _ := strconv.ParseUint(e.ResourceVersion, 10, 64)
						m.bookmarks[i] = max(m.bookmarks[i], v)
					}
					m.notifyLocked()
					m.mu.Unlock()
					continue
				}
			}
			if errors.Is(err, io.EOF) {
				err = nil
			}
			m.mu.Lock()
			m.err = err
			m.notifyLocked()
			m.mu.Unlock()
			return
		}
	}()
}

func (m *manyRun) notifyLocked() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// await waits until cond holds, failing the test if the stream ends
// first, or after a minute.
func (m *manyRun) await(what string, cond func() bool) {
	m.t.Helper()
	deadline := time.After(time.Minute)
	for {
		m.mu.Lock()
		ok, err, changed, done := cond(), m.err, m.changed, m.done
		m.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-done:
			m.t.Fatalf("the WatchMany ended (%v) before %s", err, what)
		case <-changed:
		case <-deadline:
			m.t.Fatalf("the WatchMany: not %s after a minute", what)
		}
	}
}

// awaitEnd waits until the stream has ended, and returns why.
func (m *manyRun) awaitEnd() error {
	m.t.Helper()
	m.mu.Lock()
	done := m.done
	m.mu.Unlock()
	select {
	case <-done:
	case <-time.After(time.Minute):
		m.t.Fatal("the WatchMany has not ended after a minute")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

func (m *manyRun) cut() {
	m.mu.Lock()
	cancel, done := m.cancel, m.done
	m.mu.Unlock()
	cancel()
	<-done
}

// TestWatchMany: every probe as one watch of one WatchMany, with initial
// events; cut, and resumed with its composite token once the history (of
// 32 changes) has moved past every watch: each replays, and each watch
// gets what a Watch of it would.
func TestWatchMany(t *testing.T) {
	s := newScenario(t, smallPayload)
	cfg := hubConfig()
	cfg.HistorySize = 32
	h := startHub(t, cluster.Config, cfg)
	m := &manyRun{t: t, s: s, probes: probesFor(colWatchMany), req: &informerhubv1.WatchManyRequest{},
		client: grpcDialer(t, h.Addr), changed: make(chan struct{})}
	for _, p := range m.probes {
		w := p.request(s)
		w.SendInitialEvents = true
		m.req.Watches = append(m.req.Watches, w)
		m.trs = append(m.trs, &checker.Transcript{})
	}
	m.open("")
	m.await("the initial events' end", func() bool { return m.initial })
	s.churn(1)
	m.await("a response after the churn", func() bool { return m.composite != "" })
	m.cut()
	s.churn(3) // 36 changes of each kind: past the history
	before := statsAll(t, h.Hub)
	m.mu.Lock()
	token := m.composite
	m.mu.Unlock()
	m.open(token)
	s.churn(1)
	s.settle()
	m.await("every watch's bookmark at the last change of its kind", func() bool {
		for i, p := range m.probes {
			if m.bookmarks[i] < s.lastRV[p.kind] {
				return false
			}
		}
		return true
	})
	after := statsAll(t, h.Hub)
	wantReplays := map[*kind]uint64{}
	for _, p := range m.probes {
		wantReplays[p.kind]++
	}
	for k, n := range wantReplays {
		if replays := after[k].Replays - before[k].Replays; replays < n {
			t.Errorf("%s: %d replays of %d watches, want one each at least", k.gvr.Resource, replays, n)
		}
	}
	if t.Failed() {
		return
	}
	for i, p := range m.probes {
		t.Run(string(p.row), func(t *testing.T) {
			passIfOK(t, p.row, colWatchMany)
			r := &probeRun{t: t, p: p, s: s, tr: m.trs[i]}
			r.check(checker.Options{InitialEvents: true})
		})
	}
	if !t.Failed() {
		pass(t, rowManyWatches, colWatchMany)
		pass(t, rowManyToken, colWatchMany)
	}
}
