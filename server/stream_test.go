package server

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/server/auth"
)

// blockingStream is a stream whose sends block from the blockAt-th on
// until release is closed.
type blockingStream struct {
	grpc.ServerStream
	blockAt          int32
	blocked, release chan struct{}
	sends            atomic.Int32
}

func (s *blockingStream) SendMsg(any) error {
	if s.sends.Add(1) == s.blockAt {
		close(s.blocked)
		<-s.release
	}
	return nil
}

// TestNoSendStartsOnceTheHandlerEndsTheStream: a stalled stream is ended
// with the token of the last message sent; when the blocked send then goes
// through, the sender starts no other (gRPC forbids sends after the handler
// returns, and the client would receive more than the token says).
func TestNoSendStartsOnceTheHandlerEndsTheStream(t *testing.T) {
	stream := &blockingStream{blockAt: 2, blocked: make(chan struct{}), release: make(chan struct{})}
	s := New(nil, Config{Logger: discard, MaxSendStall: time.Millisecond})
	snd := newSender(stream, "t0")
	var produced atomic.Int32
	next := func() (any, *string, bool, error) {
		token := fmt.Sprint("t", produced.Add(1))
		return nil, &token, false, nil
	}
	if err := s.supervise(context.Background(), snd, nil, nil, next); !errors.Is(err, errStalled) {
		t.Fatalf("supervise: %v, want errStalled", err)
	}
	<-stream.blocked
	if got := snd.lastToken(); got != "t1" {
		t.Fatalf("the handler would report token %q, want t1 (the second send is blocked)", got)
	}
	close(stream.release)
	goleak.VerifyNone(t) // waits for the sender to return
	if n := stream.sends.Load(); n != 2 {
		t.Fatalf("%d sends, want 2: the sender went on after the handler ended the stream", n)
	}
}

// idleNext is a sender's next that produces nothing until ctx ends.
func idleNext(ctx context.Context) func() (any, *string, bool, error) {
	return func() (any, *string, bool, error) {
		<-ctx.Done()
		return nil, nil, false, ctx.Err()
	}
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
		done := make(chan error, 1)
		// rechecks counts the rechecks that completed; asked, those that
		// asked the API server twice. Rechecks never overlap, so the
		// reviews one made are those counted while it ran.
		var rechecks, asked atomic.Int32
		go func() {
			done <- s.supervise(ctx, newSender(&blockingStream{}, "t0"), nil,
				func(ctx context.Context) error {
					before := reviews.Load()
					_, err := s.recheckAccess(ctx, []informerhub.Selector{sel})
					if err == nil {
						rechecks.Add(1)
						if reviews.Load()-before == 2 {
							asked.Add(1)
						}
					}
					return err
				}, idleNext(ctx))
		}()
		time.Sleep(10*time.Second + 500*time.Millisecond)
		cancel()
		<-done
		// A recheck that the end interrupted is not waited for by
		// supervise; the bubble must not end before it does.
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
		stream := &blockingStream{blockAt: 1, blocked: make(chan struct{}), release: make(chan struct{})}
		defer close(stream.release)
		hang := func(ctx context.Context) error {
			<-ctx.Done()
			return &authUnavailableError{err: ctx.Err()}
		}
		token := "t"
		next := func() (any, *string, bool, error) { return nil, &token, false, nil }
		start := time.Now()
		if err := s.supervise(context.Background(), newSender(stream, "t0"), nil, hang, next); !errors.Is(err, errStalled) {
			t.Fatalf("supervise: %v, want errStalled", err)
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
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		start := time.Now()
		err := s.supervise(ctx, newSender(&blockingStream{}, "t0"), nil, unavailable, idleNext(ctx))
		var lost *accessLostError
		if !errors.As(err, &lost) || !errors.Is(err, down) {
			t.Fatalf("supervise: %v, want an accessLostError for the outage", err)
		}
		// Noticed at the first recheck after three intervals; rechecks
		// come 0.75s to 1.25s apart.
		if took := time.Since(start); took < maxUnconfirmedRechecks*time.Second || took > maxUnconfirmedRechecks*time.Second+1250*time.Millisecond {
			t.Fatalf("ended after %v, want after %d unconfirmed rechecks", took, maxUnconfirmedRechecks)
		}
	})
}
