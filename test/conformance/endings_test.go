package conformance

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/internal/testhub"
	"github.com/informerhub/informerhub/test/checker"
)

// logCount counts a hub's log lines with one message, for a test to wait
// for what the hub does on its own and says it did (cut a stream off).
type logCount struct {
	msg     string
	mu      sync.Mutex // guards n and changed
	n       int
	changed chan struct{}
}

func newLogCount(msg string) *logCount { return &logCount{msg: msg, changed: make(chan struct{})} }

// logger logs to the test's log, counting.
func (c *logCount) logger(t *testing.T) *slog.Logger {
	return slog.New(&countingHandler{Handler: testhub.TestLogger(t).Handler(), count: c})
}

// await waits until n lines were logged.
func (c *logCount) await(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		c.mu.Lock()
		got, changed := c.n, c.changed
		c.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("the hub logged %q %d times in a minute, want %d", c.msg, got, n)
		}
	}
}

type countingHandler struct {
	slog.Handler
	count *logCount
}

func (h *countingHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.count.msg {
		h.count.mu.Lock()
		h.count.n++
		close(h.count.changed)
		h.count.changed = make(chan struct{})
		h.count.mu.Unlock()
	}
	return h.Handler.Handle(ctx, r)
}

func (h *countingHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &countingHandler{Handler: h.Handler.WithAttrs(attrs), count: h.count}
}

func (h *countingHandler) WithGroup(name string) slog.Handler {
	return &countingHandler{Handler: h.Handler.WithGroup(name), count: h.count}
}

// blockedStreams is a Watch of ConfigMaps of one namespace on every
// protocol, each of whose readers stops; then objects of 512 KiB change
// until every protocol's buffers are full and the hub's sends to it block.
type blockedStreams struct {
	t  *testing.T
	ns string
	// ref records every ConfigMap; ticks is a namespace no stream selects.
	ref   *checker.Reference
	ticks string
	runs  map[string]*probeRun // by protocol
	rv    uint64               // of the last change
}

// largeData is a ConfigMap's data of about 512 KiB in round r.
func largeData(r int) map[string]string {
	return map[string]string{"payload": fmt.Sprint(r, ":") + strings.Repeat("p", 512<<10)}
}

func newBlockedStreams(t *testing.T, ns string, h *testhub.Served, ctx context.Context) *blockedStreams {
	t.Helper()
	ref, err := checker.StartReference(context.Background(), dyn, configMaps, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ref.Stop() })
	b := &blockedStreams{t: t, ns: ns, ref: ref, ticks: createNamespace(t, "ticks"), runs: map[string]*probeRun{}}
	for i := range 4 {
		b.write(i, 0, true)
	}
	p := probe{row: rowEndingsStatus, kind: kindConfigMaps,
		request: func(*scenario) *informerhubv1.WatchRequest {
			return watchOf(kindConfigMaps, &informerhubv1.ResourceSelector{Namespace: ns})
		}}
	for _, proto := range testhub.Protocols {
		dial := dialProtocol(proto)
		if proto.Name == "grpc" {
			dial = grpcDialer
		}
		r := newProbeRun(t, nil, p, dial(t, h.Addr))
		r.ctx = ctx
		_, token, rv := snapshotEvents(t, ctx, r.client, r.req)
		r.from = rv
		r.open(token, false)
		r.pause()
		b.runs[proto.Name] = r
	}
	for round := 1; round <= 8; round++ {
		for i := range 4 {
			b.write(i, round, false)
		}
	}
	return b
}

func (b *blockedStreams) write(i, round int, create bool) {
	b.t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("big-", i)}, Data: largeData(round)}
	var err error
	if create {
		cm, err = kube.CoreV1().ConfigMaps(b.ns).Create(context.Background(), cm, metav1.CreateOptions{})
	} else {
		cm, err = kube.CoreV1().ConfigMaps(b.ns).Update(context.Background(), cm, metav1.UpdateOptions{})
	}
	if err != nil {
		b.t.Fatal(err)
	}
	b.rv, _ = strconv.ParseUint(cm.ResourceVersion, 10, 64)
}

// readOn lets every reader read on, and returns how each stream ended.
func (b *blockedStreams) readOn() map[string]error {
	b.t.Helper()
	for _, r := range b.runs {
		r.resume()
	}
	ended := map[string]error{}
	for name, r := range b.runs {
		ended[name] = r.awaitEnd()
	}
	return ended
}

// readOnGrace is the StalledSendGrace of the hubs whose clients stop
// reading: over HTTP, how long the client has to read on once the stream
// was cut, which a loaded machine reading megabytes of JSON needs.
const readOnGrace = 10 * time.Second

// TestAStreamEndedWhileItsSendIsBlockedSaysWhy: a stream the hub must end
// while its send is blocked on a client that stopped reading (its access
// revoked; it read nothing for --max-send-stall) ends, on every protocol,
// with its status and the token to resume from, which the client reads
// once it reads on, after what was in flight: gRPC queues it behind that;
// over HTTP the blocked send completes when the client reads on, within
// StalledSendGrace of the cut, and the status follows. The token resumes
// exactly.
func TestAStreamEndedWhileItsSendIsBlockedSaysWhy(t *testing.T) {
	t.Run("access revoked", func(t *testing.T) {
		ns := createNamespace(t, "revoked")
		ctx := reader(t, ns, "reader")
		cut := newLogCount("ending a stream whose client stopped reading")
		cfg := hubConfig()
		cfg.Logger = cut.logger(t)
		scfg := authServerConfig()
		scfg.StalledSendGrace = readOnGrace
		h := testhub.Serve(t, cluster.Config, cfg, scfg)
		b := newBlockedStreams(t, ns, h, ctx)
		revoke(t, ns, "reader")
		cut.await(t, len(b.runs))
		for name, err := range b.readOn() {
			t.Run(name, func(t *testing.T) {
				if c, ok := protocolColumns[name]; ok {
					passIfOK(t, rowEndingsStatus, c)
				}
				endedWith(t, name, err, codes.PermissionDenied, tokensOf(b.runs[name].tr))
			})
		}
	})
	t.Run("client too slow", func(t *testing.T) {
		ns := createNamespace(t, "stalled")
		cut := newLogCount("ending a stream whose client has not read for a while")
		cfg := hubConfig()
		cfg.Logger = cut.logger(t)
		scfg := serverConfig()
		scfg.MaxSendStall, scfg.StalledSendGrace = 3*time.Second, readOnGrace
		h := testhub.Serve(t, cluster.Config, cfg, scfg)
		b := newBlockedStreams(t, ns, h, context.Background())
		cut.await(t, len(b.runs))
		for name, err := range b.readOn() {
			t.Run(name, func(t *testing.T) {
				if c, ok := protocolColumns[name]; ok {
					passIfOK(t, rowEndingsStatus, c)
				} else {
					passIfOK(t, rowEndingsStatus, colLive)
				}
				r := b.runs[name]
				endedWith(t, name, err, codes.ResourceExhausted, tokensOf(r.tr))
				r.t = t
				r.open(errorInfoOf(err).GetMetadata()["resume_token"], false)
				last := strconv.FormatUint(b.rv, 10)
				r.await("the last change", func(int, uint64) bool {
					return slices.ContainsFunc(r.tr.Events(), func(e checker.Event) bool { return e.ResourceVersion == last && e.Type != checker.Bookmark })
				})
				tr := r.tr.Copy()
				reach(t, b.ref, kindConfigMaps, b.ticks, reachOf(tr))
				if err := checker.Check(b.ref, tr, checker.Options{Namespace: ns, FromResourceVersion: r.from}); err != nil {
					t.Error(err)
				}
			})
		}
	})
}
