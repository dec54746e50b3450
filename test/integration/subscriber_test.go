package integration

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/runtime/schema"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/test/checker"
)

// subscriber is a client of the hub that records what it receives in a
// checker.Transcript and, as a well-behaved client does, watches again from
// its last token whenever its stream ends for a reason retrying can fix (the
// hub died or shut down, the connection dropped, it fell behind). It never
// starts over: a token the hub cannot continue from fails the test.
type subscriber struct {
	t    *testing.T
	opts checker.Options
	sel  *informerhubv1.ResourceSelector
	// client returns the hub to (re)connect to; tests move subscribers
	// between replicas through it.
	client func() informerhubv1.InformerHubServiceClient
	tr     checker.Transcript

	// delay makes a slow client: it waits this long after each response.
	delay time.Duration

	mu           sync.Mutex // guards names, arrivals, listed, resumes, failure, changed and cancelStream
	cancelStream context.CancelFunc
	names        map[string]bool
	arrivals     map[string]time.Time // by resourceVersion, of changes
	// listed is set once the initial events ended: before, the last
	// token is one of initial events, which only the hub that gave it
	// continues (another replica, or a restarted hub without a disk
	// history, answers OUT_OF_RANGE, as the proto says).
	listed bool

	resumes  int
	failure  error
	changed  chan struct{} // closed and replaced whenever the fields above change
	cancel   context.CancelFunc
	finished chan struct{}
}

// subscribe starts a subscriber with initial events on ns, with an optional
// label selector.
func subscribe(t *testing.T, client func() informerhubv1.InformerHubServiceClient, ns, labelSelector string) *subscriber {
	t.Helper()
	return subscribeSlowly(t, client, ns, labelSelector, 0)
}

// subscribeSlowly is subscribe for a client that waits delay after each
// response it reads.
func subscribeSlowly(t *testing.T, client func() informerhubv1.InformerHubServiceClient, ns, labelSelector string, delay time.Duration) *subscriber {
	t.Helper()
	sel := watchSelector(ns)
	sel.LabelSelector = labelSelector
	ctx, cancel := context.WithCancel(context.Background())
	s := &subscriber{
		t: t, sel: sel, client: client, delay: delay,
		opts:     checker.Options{Namespace: ns, LabelSelector: labelSelector, InitialEvents: true},
		names:    map[string]bool{},
		arrivals: map[string]time.Time{},
		changed:  make(chan struct{}),
		cancel:   cancel,
		finished: make(chan struct{}),
	}
	go s.run(ctx)
	t.Cleanup(s.stop)
	return s
}

func (s *subscriber) stop() {
	s.cancel()
	<-s.finished
}

func (s *subscriber) run(ctx context.Context) {
	defer close(s.finished)
	req := &informerhubv1.WatchRequest{Selector: s.sel, SendInitialEvents: true}
	backoff := 20 * time.Millisecond
	for {
		err := s.stream(ctx, req)
		if ctx.Err() != nil {
			return
		}
		if status.Code(err) == codes.Canceled {
			err = nil // reconnect ended the stream
		}
		if !retriable(err) {
			s.fail(err)
			return
		}
		s.mu.Lock()
		s.resumes++
		s.notifyLocked()
		s.mu.Unlock()
		req = &informerhubv1.WatchRequest{Selector: s.sel, ResumeToken: s.tr.LastToken()}
		select {
		case <-time.After(backoff): // retry backoff, as any client has
		case <-ctx.Done():
			return
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// stream runs one Watch until it ends, or reconnect ends it.
func (s *subscriber) stream(parent context.Context, req *informerhubv1.WatchRequest) error {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	s.mu.Lock()
	s.cancelStream = cancel
	s.mu.Unlock()
	stream, err := s.client().Watch(ctx, req)
	if err != nil {
		return err
	}
	s.tr.Open(req.ResumeToken)
	for {
		resp, err := stream.Recv()
		if err != nil {
			s.tr.Close(err)
			return err
		}
		e, err := checker.FromWatchResponse(resp)
		if err != nil {
			s.fail(err)
			return nil
		}
		s.tr.Record(e)
		s.mu.Lock()
		s.names[e.Name] = true
		s.listed = s.listed || resp.GetInitialEventsEnd()
		if e.Type != checker.Bookmark {
			s.arrivals[e.ResourceVersion] = time.Now()
		}
		s.notifyLocked()
		s.mu.Unlock()
		if s.delay > 0 {
			time.Sleep(s.delay) // a slow client, not synchronisation
		}
	}
}

// retriable reports whether watching again from the last token is the
// right answer to how a stream ended.
func retriable(err error) bool {
	if err == nil || errors.Is(err, io.EOF) {
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.ResourceExhausted:
		return true
	}
	return false
}

func (s *subscriber) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failure = err
	s.notifyLocked()
}

func (s *subscriber) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// waitFor waits until the subscriber has received an event of the object
// named name, and the end of its initial events: a test that then moves it
// to another hub, or kills its hub, moves a token of changes, which any
// hub continues. (Under load, the initial events may still be under way
// when the workload's changes are made: they list them.) A hang is a bug;
// the bound only turns it into a failure.
func (s *subscriber) waitFor(t *testing.T, name string) {
	t.Helper()
	timeout := time.After(2 * time.Minute)
	for {
		s.mu.Lock()
		seen, listed, failure, changed := s.names[name], s.listed, s.failure, s.changed
		s.mu.Unlock()
		if failure != nil {
			t.Fatalf("subscriber %v failed: %v", s.sel, failure)
		}
		if seen && listed {
			return
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("subscriber %v did not receive %s", s.sel, name)
		}
	}
}

// arrival returns when the subscriber received the change at
// resourceVersion rv.
func (s *subscriber) arrival(rv string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.arrivals[rv]
	return at, ok
}

// resumed counts the streams that ended and were resumed.
func (s *subscriber) resumed() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.resumes
}

// check validates the subscriber's transcript against the reference, and
// its final state against a LIST.
func (s *subscriber) check(t *testing.T, ref *checker.Reference, relisted bool) {
	t.Helper()
	opts := s.opts
	opts.Relisted = relisted
	events := s.tr.Events()
	if len(events) == 0 {
		t.Fatalf("subscriber %v received nothing", s.sel)
	}
	ctx := ctxFor(t)
	if err := ref.WaitFor(ctx, events[len(events)-1].ResourceVersion); err != nil {
		t.Fatal(err)
	}
	if err := checker.Check(ref, &s.tr, opts); err != nil {
		t.Errorf("subscriber %v: %v", s.sel, err)
	}
	if err := checker.CheckState(ctx, dyn, configMaps, &s.tr, opts); err != nil {
		t.Errorf("subscriber %v: %v", s.sel, err)
	}
}

// startReference records the namespace's changes straight from the API
// server; start it before the subscribers.
func startReference(t *testing.T, ns string) *checker.Reference {
	t.Helper()
	return startReferenceOf(t, configMaps, ns)
}

// startReferenceOf is startReference of any resource type (ns "" for all
// namespaces, or a cluster-scoped type).
func startReferenceOf(t *testing.T, gvr schema.GroupVersionResource, ns string) *checker.Reference {
	t.Helper()
	// For the test's whole life, however long the machine's load makes
	// it: ctxFor bounds a step, not a test.
	ref, err := checker.StartReference(t.Context(), dyn, gvr, ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ref.Stop(); err != nil {
			t.Errorf("reference: %v", err)
		}
	})
	return ref
}

// reconnect ends the subscriber's current stream, as a client moving to
// another replica does; it watches again from its last token.
func (s *subscriber) reconnect() {
	s.mu.Lock()
	cancel := s.cancelStream
	s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}
