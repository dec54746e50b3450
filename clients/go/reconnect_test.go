package hubclient_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	hubclient "github.com/informerhub/informerhub/clients/go"
	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
)

// logLines records what a client logs, one line per record, without the
// time.
type logLines struct {
	mu    sync.Mutex
	lines []string
	// stop, if set, is called at the line numbered stopAt, on the
	// goroutine that logs it.
	stop   func()
	stopAt int
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, strings.TrimSuffix(string(p), "\n"))
	if l.stop != nil && len(l.lines) == l.stopAt {
		l.stop()
	}
	return len(p), nil
}

func (l *logLines) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// options log to l, with a backoff without jitter, so that the backoffs
// logged are known: 1ms, 2ms, 4ms, then 5ms.
func (l *logLines) options() []hubclient.Option {
	log := slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}))
	return []hubclient.Option{hubclient.WithLogger(log),
		hubclient.WithBackoff(hubclient.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond, Jitter: -1})}
}

const logged = `resource="/v1, Resource=configmaps" namespace=ns`

// TestWatchLogsEachFailedAttemptAndTheRecovery: a stream that ends is
// logged at info, every attempt that fails after it at warn with its
// number, the gRPC code and message and the backoff, and the recovery at
// info; a healthy watch logs nothing.
func TestWatchLogsEachFailedAttemptAndTheRecovery(t *testing.T) {
	hub := newFakeHub("hub",
		script{header: "t0", responses: []*informerhubv1.WatchResponse{added("a", "1", "t1"), added("b", "2", "t2")}, end: unavailable},
		script{end: unavailable}, // the hub is down: refused before the stream is established
		script{end: unavailable},
		script{header: "t2", responses: []*informerhubv1.WatchResponse{modified("a", "3", "t3")}},
	)
	var log logLines
	w := startWatch(t, serveFakes(t, log.options(), hub), hubclient.WatchOptions{})
	next(t, w)
	next(t, w)
	if got := log.get(); len(got) != 0 {
		t.Fatalf("a healthy watch logged %q", got)
	}
	if e := next(t, w); e.Name != "a" || e.RV != "3" {
		t.Fatalf("got %v, want a at 3", e)
	}
	want := []string{
		`level=INFO msg="watch interrupted; reconnecting" ` + logged + ` code=Unavailable error=gone backoff=1ms`,
		`level=WARN msg="not connected to the hub; retrying after a backoff" ` + logged + ` code=Unavailable error=gone attempt=1 backoff=1ms`,
		`level=WARN msg="not connected to the hub; retrying after a backoff" ` + logged + ` code=Unavailable error=gone attempt=2 backoff=2ms`,
		`level=INFO msg="reconnected to the hub" ` + logged + ` attempts=2`,
	}
	if diff := cmp.Diff(want, log.get()); diff != "" {
		t.Errorf("log (-want +got):\n%s", diff)
	}
}

// TestWatchOfADeadHubWarnsAtEveryAttempt: a watch that never reaches the
// hub warns from its first attempt on.
func TestWatchOfADeadHubWarnsAtEveryAttempt(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The third warning ends the watch, from Next's own goroutine: Next
	// then returns at the end of that attempt.
	log := logLines{stop: cancel, stopAt: 3}
	w := serveFakes(t, log.options(), &fakeHub{name: "dead", dead: true}).Watch(ctx, configMaps, hubclient.WatchOptions{})
	defer w.Close()
	if _, err := w.Next(); err != context.Canceled {
		t.Fatalf("Next: %v, want context.Canceled", err)
	}
	got := log.get()
	if len(got) != 3 {
		t.Fatalf("logged %q, want 3 lines", got)
	}
	for i, line := range got {
		// The message is gRPC's, about the dial that failed.
		prefix := `level=WARN msg="not connected to the hub; retrying after a backoff" ` + logged + ` code=Unavailable error=`
		suffix := fmt.Sprintf(" attempt=%d backoff=%dms", i+1, 1<<i)
		if !strings.HasPrefix(line, prefix) || !strings.HasSuffix(line, suffix) {
			t.Errorf("line %d: %s\nwant %s...%s", i, line, prefix, suffix)
		}
	}
}

// TestListerWatcherLogsEachFailedAttemptAndTheRecovery: an informer's
// reflector retries the 429s of a hub that is down after logging them
// only at verbosity 2 and 4: the ListerWatcher says what happens, as a
// Watcher does.
func TestListerWatcherLogsEachFailedAttemptAndTheRecovery(t *testing.T) {
	hub := newFakeHub("hub",
		script{header: "t0", responses: []*informerhubv1.WatchResponse{added("a", "1", "t1")}},
		script{header: "t1", end: unavailable}, // the hub goes away
		script{end: unavailable},               // it is down: refused before the stream is established
		script{header: "t1", responses: []*informerhubv1.WatchResponse{modified("a", "2", "t2")}},
	)
	var log logLines
	lw := serveFakes(t, log.options(), hub).ListerWatcher(configMaps)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// firstEvent opens a watch as the reflector does, and returns its first
	// event's type.
	firstEvent := func() watch.EventType {
		w, err := lw.WatchWithContext(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		return (<-w.ResultChan()).Type
	}
	if got := firstEvent(); got != watch.Added {
		t.Fatalf("first watch: %s, want ADDED", got)
	}
	if got := log.get(); len(got) != 0 {
		t.Fatalf("a healthy watch logged %q", got)
	}
	for range 2 {
		if got := firstEvent(); got != watch.Error {
			t.Fatalf("a watch of a hub that is down: %s, want the 429 error", got)
		}
	}
	if got := firstEvent(); got != watch.Modified {
		t.Fatalf("last watch: %s, want MODIFIED", got)
	}
	want := []string{
		`level=INFO msg="watch interrupted; the reflector reconnects after its backoff" ` + logged + ` code=Unavailable error=gone`,
		`level=WARN msg="not connected to the hub; the reflector retries after its backoff" ` + logged + ` code=Unavailable error=gone attempt=1`,
		`level=INFO msg="reconnected to the hub" ` + logged + ` attempts=1`,
	}
	if diff := cmp.Diff(want, log.get()); diff != "" {
		t.Errorf("log (-want +got):\n%s", diff)
	}

	// A hub that cannot be reached refuses the watch itself.
	var deadLog logLines
	lw = serveFakes(t, deadLog.options(), &fakeHub{name: "dead", dead: true}).ListerWatcher(configMaps)
	for range 2 {
		if _, err := lw.WatchWithContext(ctx, metav1.ListOptions{}); err == nil {
			t.Fatal("a watch of a dead hub opened")
		}
	}
	got := deadLog.get()
	if len(got) != 2 || !strings.Contains(got[0], "level=WARN") || !strings.HasSuffix(got[0], " attempt=1") || !strings.HasSuffix(got[1], " attempt=2") {
		t.Errorf("a dead hub logged %q, want two warnings, attempts 1 and 2", got)
	}
}

// TestStreamsThatFailBeforeTheyDeliverBackOff: a hub that accepts each
// stream (its headers) and then fails it before any response, as one
// whose API server is down does, counts as a failed attempt: the backoff
// grows, and a response ends the failures.
func TestStreamsThatFailBeforeTheyDeliverBackOff(t *testing.T) {
	hub := newFakeHub("hub",
		script{header: "t0", end: unavailable},
		script{header: "t0", end: unavailable},
		script{header: "t0", end: unavailable},
		script{header: "t0", end: unavailable},
		script{header: "t0", responses: []*informerhubv1.WatchResponse{added("a", "1", "t1")}},
	)
	var log logLines
	w := startWatch(t, serveFakes(t, log.options(), hub), hubclient.WatchOptions{})
	if e := next(t, w); e.Name != "a" {
		t.Fatalf("got %v, want a", e)
	}
	var want []string
	for i, backoff := range []string{"1ms", "2ms", "4ms", "5ms"} {
		if i > 0 {
			want = append(want, fmt.Sprintf(`level=INFO msg="reconnected to the hub" `+logged+` attempts=%d`, i))
		}
		want = append(want, fmt.Sprintf(`level=WARN msg="the hub ended the stream before it delivered anything; retrying after a backoff" `+
			logged+` code=Unavailable error=gone attempt=%d backoff=%s`, i+1, backoff))
	}
	want = append(want, `level=INFO msg="reconnected to the hub" `+logged+` attempts=4`)
	if diff := cmp.Diff(want, log.get()); diff != "" {
		t.Errorf("log (-want +got):\n%s", diff)
	}
}
