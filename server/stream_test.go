package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/informerhub/hubtest"
	"github.com/informerhub/informerhub/informerhub/upstream"
	"github.com/informerhub/informerhub/server/auth"
)

// blockingStream is a stream whose sends block from the blockAt-th on
// until release is closed, or its cutter is called: then they fail. Its
// context carries that cutter, as a stream's carries grpc-go's transport
// stream.
type blockingStream struct {
	grpc.ServerStream
	ctx              context.Context
	blockAt          int32
	blocked, release chan struct{}
	sends            atomic.Int32
	cut              chan *status.Status // receives the status a cut wrote
}

func newBlockingStream(blockAt int32) *blockingStream {
	s := &blockingStream{blockAt: blockAt, blocked: make(chan struct{}), release: make(chan struct{}), cut: make(chan *status.Status, 1)}
	s.ctx = context.WithValue(context.Background(), cutterKey{}, s)
	return s
}

func (s *blockingStream) Context() context.Context { return s.ctx }

func (s *blockingStream) SendMsg(any) error {
	if s.sends.Add(1) == s.blockAt {
		close(s.blocked)
		select {
		case <-s.release:
		case st := <-s.cut:
			s.cut <- st
			return errors.New("cut off")
		}
	}
	return nil
}

func (s *blockingStream) WriteStatus(st *status.Status) error {
	s.cut <- st
	return nil
}

// endingWithToken makes r end with an error that says its cause and the
// token it would resume from.
func endingWithToken(r *streamRun) {
	r.ending = func(cause error) error { return fmt.Errorf("%w at %s", cause, r.lastToken()) }
}

// TestAStalledSendIsCutOffWithTheLastToken: a send blocked on a client that
// stopped reading is cut off after MaxSendStall, the stream ending at once
// with the token of the last message sent; no send starts after (gRPC
// forbids sends once the stream has ended, and the client would receive
// more than the token says).
func TestAStalledSendIsCutOffWithTheLastToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stream := newBlockingStream(2)
		s := New(nil, Config{Logger: discard, MaxSendStall: time.Second})
		r := s.newStreamRun(stream, "t0")
		defer r.finish()
		endingWithToken(r)
		var produced atomic.Int32
		next := func(context.Context) (any, *string, bool, error) {
			token := fmt.Sprint("t", produced.Add(1))
			return nil, &token, false, nil
		}
		start := time.Now()
		err := r.serve(next)
		if !errors.Is(err, errStalled) || !strings.HasSuffix(err.Error(), " at t1") {
			t.Fatalf("serve: %v, want errStalled at t1 (the second send is blocked)", err)
		}
		// Seen blocked at the first check, still at the second.
		if took := time.Since(start); took != 2*time.Second {
			t.Fatalf("cut off after %v, want 2s", took)
		}
		if st := <-stream.cut; st.Message() != err.Error() {
			t.Fatalf("the cut wrote %q, want the status serve returned, %q", st.Message(), err)
		}
		if n := stream.sends.Load(); n != 2 {
			t.Fatalf("%d sends, want 2: a send started after the stream was cut off", n)
		}
	})
}

// idleNext is a stream's next that produces nothing until ctx ends.
func idleNext(ctx context.Context) (any, *string, bool, error) {
	<-ctx.Done()
	return nil, nil, false, ctx.Err()
}

// TestRecheckAsksTheAPIServerEveryInterval: a running Watch's access is
// decided by the API server at every recheck, not answered from the
// previous recheck's decision (which is almost an interval old when the
// API server takes a moment to answer).
func TestRecheckAsksTheAPIServerEveryInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var reviews atomic.Int32
		kube := fake.NewClientset()
		kube.PrependReactor("create", "subjectaccessreviews", func(action k8stesting.Action) (bool, runtime.Object, error) {
			reviews.Add(1)
			time.Sleep(5 * time.Millisecond) // the API server takes a moment
			review := action.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
			review.Status.Allowed = true
			return true, review, nil
		})
		s := New(nil, Config{Logger: discard, MaxSendStall: time.Hour, AuthzRecheckInterval: time.Second,
			Authorizer: auth.NewSubjectAccessReview(kube.AuthorizationV1().SubjectAccessReviews(), auth.SubjectAccessReviewConfig{})})
		sel := informerhub.Selector{Resource: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Namespace: "a"}
		ctx, cancel := context.WithCancel(context.Background())
		stream := newBlockingStream(0)
		stream.ctx = ctx
		r := s.newStreamRun(stream, "t0")
		done := make(chan error, 1)
		// rechecks counts the rechecks that completed; asked, those that
		// asked the API server twice. Rechecks never overlap, so the
		// reviews one made are those counted while it ran.
		var rechecks, asked atomic.Int32
		r.recheck(func(ctx context.Context) error {
			before := reviews.Load()
			_, err := s.recheckAccess(ctx, []informerhub.Selector{sel})
			if err == nil {
				rechecks.Add(1)
				if reviews.Load()-before == 2 {
					asked.Add(1)
				}
			}
			return err
		})
		go func() { done <- r.serve(idleNext) }()
		time.Sleep(10*time.Second + 500*time.Millisecond)
		cancel()
		<-done
		r.finish()
		// A recheck that the end interrupted is not waited for by
		// finish; the bubble must not end before it does.
		time.Sleep(time.Second)
		synctest.Wait()
		// Rechecks come 0.75s to 1.25s apart.
		if n := rechecks.Load(); n < 8 || n > 14 {
			t.Fatalf("%d rechecks in 10.5s, want one about every second", n)
		}
		if n, want := asked.Load(), rechecks.Load(); n != want {
			t.Fatalf("%d of %d rechecks made 2 SubjectAccessReviews (list and watch); want all", n, want)
		}
	})
}

// TestAHangingRecheckDelaysNothingElse: while a recheck waits for an API
// server that does not answer, a client that stopped reading is still
// ended after MaxSendStall.
func TestAHangingRecheckDelaysNothingElse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The recheck starts at 1s and hangs; the stall is seen at 1.4s.
		s := New(nil, Config{Logger: discard, MaxSendStall: 700 * time.Millisecond, AuthzRecheckInterval: time.Second})
		stream := newBlockingStream(1)
		r := s.newStreamRun(stream, "t0")
		defer r.finish()
		r.ending = func(err error) error { return err }
		hang := func(ctx context.Context) error {
			<-ctx.Done()
			return &authUnavailableError{err: ctx.Err()}
		}
		r.recheck(hang)
		token := "t"
		next := func(context.Context) (any, *string, bool, error) { return nil, &token, false, nil }
		start := time.Now()
		if err := r.serve(next); !errors.Is(err, errStalled) {
			t.Fatalf("serve: %v, want errStalled", err)
		}
		if took := time.Since(start); took != 1400*time.Millisecond {
			t.Fatalf("the stalled client was ended after %v, want 1.4s (the second stall check)", took)
		}
	})
}

// TestAccessThatCannotBeConfirmedEnds: when the API server cannot answer
// rechecks, a stream keeps running for a while, then ends rather than run
// unauthorized.
func TestAccessThatCannotBeConfirmedEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New(nil, Config{Logger: discard, MaxSendStall: time.Hour, AuthzRecheckInterval: time.Second})
		down := errors.New("connection refused")
		unavailable := func(context.Context) error { return &authUnavailableError{err: down} }
		r := s.newStreamRun(newBlockingStream(0), "t0")
		defer r.finish()
		r.ending = func(err error) error { return err }
		r.recheck(unavailable)
		start := time.Now()
		err := r.serve(idleNext)
		var lost *accessLostError
		if !errors.As(err, &lost) || !errors.Is(err, down) {
			t.Fatalf("serve: %v, want an accessLostError for the outage", err)
		}
		// Noticed at the first recheck after three intervals; rechecks
		// come 0.75s to 1.25s apart.
		if took := time.Since(start); took < maxUnconfirmedRechecks*time.Second || took > maxUnconfirmedRechecks*time.Second+1250*time.Millisecond {
			t.Fatalf("ended after %v, want after %d unconfirmed rechecks", took, maxUnconfirmedRechecks)
		}
	})
}

// TestACallsLogLineSaysWhoAndWhat: the one line a finished call is logged
// with says its protocol, its caller, and what it selected (see callLog).
func TestACallsLogLineSaysWhoAndWhat(t *testing.T) {
	cluster := hubtest.NewCluster(t)
	hub := informerhub.New(informerhub.Config{Logger: discard}, cluster, cluster)
	defer hub.Close()
	logs := &logWriter{wrote: make(chan struct{}, 1)}
	conn := dial(t, hub, Config{Authenticator: &nameAuthenticator{}, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	client := informerhubv1.NewInformerHubServiceClient(conn)
	if resp, err := firstResponse(t, client, as("alice"), cmInitial); err != nil || !resp.InitialEventsEnd {
		t.Fatalf("a Watch: %v", err)
	}
	many, err := client.WatchMany(as("bob"), &informerhubv1.WatchManyRequest{Watches: []*informerhubv1.WatchRequest{
		{Selector: cmSelector}, {Selector: &informerhubv1.ResourceSelector{Version: "v1", Resource: "pods"}}}})
	if err == nil {
		_, err = many.Header()
	}
	if err != nil {
		t.Fatalf("a WatchMany: %v", err)
	}
	conn.Close() // ends both calls, which then log their lines
	want := []map[string]any{
		{"grpc.method": "Watch", "protocol": "grpc", "user": "alice", "resource": "configmaps.v1", "namespace": "a"},
		{"grpc.method": "WatchMany", "protocol": "grpc", "user": "bob", "resources": "configmaps.v1,pods.v1"},
	}
	timeout := time.After(time.Minute)
	for _, w := range want {
		// The server logs once the handler has returned.
		line := logs.lineWith("finished call", w["grpc.method"])
		for line == nil {
			select {
			case <-logs.wrote:
			case <-timeout:
				t.Fatalf("no line for %s's end in %s", w["grpc.method"], logs.String())
			}
			line = logs.lineWith("finished call", w["grpc.method"])
		}
		for k, v := range w {
			if line[k] != v {
				t.Errorf("%s's line has %s=%v, want %v: %v", w["grpc.method"], k, line[k], v, line)
			}
		}
	}
}

// logWriter keeps what a JSON slog handler writes, and signals each write.
type logWriter struct {
	mu    sync.Mutex // guards buf
	buf   strings.Builder
	wrote chan struct{}
}

func (l *logWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	select {
	case l.wrote <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (l *logWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// lineWith returns the first line with msg and grpc.method method; nil if
// there is none yet.
func (l *logWriter) lineWith(msg string, method any) map[string]any {
	for _, text := range strings.Split(l.String(), "\n") {
		var line map[string]any
		if json.Unmarshal([]byte(text), &line) == nil && line["msg"] == msg && line["grpc.method"] == method {
			return line
		}
	}
	return nil
}

// TestAnIdleWatchHoldsOneGoroutine: an idle Watch costs the server the
// goroutine grpc-go runs its handler on, and no other of the hub's (see
// stream.go): a replica holds 100,000 of them.
func TestAnIdleWatchHoldsOneGoroutine(t *testing.T) {
	cluster := hubtest.NewCluster(t)
	hub := informerhub.New(informerhub.Config{Logger: discard}, cluster, cluster)
	defer hub.Close()
	client := serveWith(t, hub, Config{Logger: discard, MaxSubscriptionsPerIdentity: 1000, RateBurstPerIdentity: 1000})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	open := func() {
		stream, err := client.Watch(ctx, &informerhubv1.WatchRequest{Selector: cmSelector})
		if err == nil {
			_, err = stream.Header()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	open() // the informer and the connection's goroutines start
	before := settledGoroutines(t)
	const n = 50
	for range n {
		open()
	}
	after := settledGoroutines(t)
	if got := after["server.(*Server).Watch"] - before["server.(*Server).Watch"]; got != n {
		t.Fatalf("%d more goroutines in Watch handlers, want %d: %v then %v", got, n, before, after)
	}
	if got := after[""] - before[""]; got != n {
		t.Fatalf("%d more goroutines run the hub's code for %d idle Watches, want %d: %v", got, n, n, after)
	}
}

// serverFrame is a frame of package server in a goroutine profile, the
// function's name without its arguments.
var serverFrame = regexp.MustCompile(`^github\.com/informerhub/informerhub/server\.(.+?)\((?:0x|\{|\)|\.\.\.)`)

// hubGoroutines counts the goroutines whose stacks hold the hub's code
// (under ""), and of those, each function of package server they run.
// settledGoroutines is hubGoroutines once no stream's setup runs: a
// client has a stream's headers while the goroutine that opened it (see
// onOwnStack) is still returning, which on a loaded machine takes a while.
// The bound only turns a setup that never ends into a failure.
func settledGoroutines(t *testing.T) map[string]int {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		counts := hubGoroutines(t)
		if counts["server.(*Server).openWatch"] == 0 {
			return counts
		}
		if time.Now().After(deadline) {
			t.Fatalf("streams still open a minute on: %v", counts)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func hubGoroutines(t *testing.T) map[string]int {
	t.Helper()
	var buf strings.Builder
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 2); err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for _, g := range strings.Split(buf.String(), "\n\n") {
		if !strings.Contains(g, "github.com/informerhub/informerhub/") || strings.Contains(g, "testing.tRunner") {
			continue
		}
		counts[""]++
		for _, line := range strings.Split(g, "\n") {
			if m := serverFrame.FindStringSubmatch(line); m != nil {
				counts["server."+m[1]]++
			}
		}
	}
	return counts
}

// TestNothingIsSentOnceTheStreamEnded: a stream that a recheck (or Drain)
// ends sends nothing more, whatever its subscription still has to give.
func TestNothingIsSentOnceTheStreamEnded(t *testing.T) {
	s := New(nil, Config{Logger: discard})
	stream := newBlockingStream(0)
	r := s.newStreamRun(stream, "t0")
	defer r.finish()
	endingWithToken(r)
	lost := &accessLostError{err: errors.New("revoked")}
	var produced atomic.Int32
	next := func(context.Context) (any, *string, bool, error) {
		n := produced.Add(1)
		if n == 3 {
			r.end(lost, time.Minute) // as a recheck does, from its timer
		}
		token := fmt.Sprint("t", n)
		return nil, &token, false, nil // a queue that is never empty
	}
	err := r.serve(next)
	if !errors.Is(err, lost) || !strings.HasSuffix(err.Error(), " at t2") {
		t.Fatalf("serve: %v, want the lost access at t2", err)
	}
	if n := stream.sends.Load(); n != 2 {
		t.Fatalf("%d sends, want 2: the stream went on after it ended", n)
	}
}

// panickyResolver panics resolving the resource type "boom".
type panickyResolver struct{ *hubtest.Cluster }

func (r panickyResolver) Resolve(ctx context.Context, gvr schema.GroupVersionResource) (upstream.ResourceInfo, error) {
	if gvr.Resource == "boom" {
		panic("the resolver broke")
	}
	return r.Cluster.Resolve(ctx, gvr)
}

// TestAPanicSettingUpAWatchEndsThatCallOnly: a panic in what a Watch's
// setup runs (on a goroutine of its own, see onOwnStack) ends that call
// with INTERNAL, and the hub serves on.
func TestAPanicSettingUpAWatchEndsThatCallOnly(t *testing.T) {
	cluster := hubtest.NewCluster(t)
	hub := informerhub.New(informerhub.Config{Logger: discard, EncodeEvent: EncodeEvent}, panickyResolver{cluster}, cluster)
	client := serveWith(t, hub, Config{Logger: discard})
	w, err := client.Watch(context.Background(), &informerhubv1.WatchRequest{Selector: &informerhubv1.ResourceSelector{Version: "v1", Resource: "boom"}})
	if err == nil {
		_, err = w.Recv()
	}
	if status.Code(err) != codes.Internal {
		t.Fatalf("a Watch whose setup panicked: %v, want INTERNAL", err)
	}
	if resp, err := firstResponse(t, client, context.Background(), cmInitial); err != nil || !resp.InitialEventsEnd {
		t.Fatalf("the next Watch: %v", err)
	}
}
