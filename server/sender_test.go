package server

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
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
	next := func() (any, string, bool, error) {
		return nil, fmt.Sprint("t", produced.Add(1)), false, nil
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
