package server

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/server/cork"
)

// A stream of the service (a Watch, WatchMany, Count or Snapshot) is served
// by its handler's goroutine alone: grpc-go runs one per stream, and a
// stream costs that goroutine, a few timers and no goroutine more, so that
// a replica holds 100,000 idle ones. The handler sends what next produces
// (streamRun.serve). What must end a stream from outside reaches it
// through streamRun.end, from a timer's goroutine or another: a client
// that stopped reading (a send blocked for MaxSendStall), a subscription
// that failed while a send was blocked, a recheck that found the caller's
// access gone, Drain. end cancels the stream's context, which wakes a
// handler waiting for its next message; a send blocked on a client that
// stopped reading is cut off (see cutter), and a client that reads on gets
// what was in flight, then the status with the token to resume from, on
// every protocol.

// errStalled ends a stream whose client stopped reading.
var errStalled = errors.New("the client stopped reading")

// errSendStopped refuses a send once the stream was ended.
var errSendStopped = errors.New("the stream has ended")

// panicError is a panic of a stream's handler, turned into an error.
type panicError struct {
	value any
	stack []byte
}

func (e *panicError) Error() string { return fmt.Sprintf("panic: %v\n%s", e.value, e.stack) }

// cutter ends a stream with a status, from any goroutine, whose send is
// blocked on its client: grpc-go's transport stream, whose WriteStatus
// queues the status behind what its transport holds of the stream and
// cancels the stream, which fails the blocked send (whose own status then
// changes nothing) and frees the handler; and the HTTP side's
// (connectStream), which cannot write past the blocked send, and gives the
// client Config.StalledSendGrace to read on before a write deadline fails
// the send. The handler's goroutine, blocked in the send, cannot return
// the status itself. Either way, a client that reads on receives what was
// in flight, then the status.
type cutter interface {
	WriteStatus(*status.Status) error
}

type cutterKey struct{}

// cutterOf returns the cutter of the stream whose context is ctx: the HTTP
// side's, or grpc-go's transport stream; nil if there is none.
func cutterOf(ctx context.Context) cutter {
	if c, ok := ctx.Value(cutterKey{}).(cutter); ok {
		return c
	}
	c, _ := grpc.ServerTransportStreamFromContext(ctx).(cutter)
	return c
}

// streamRun is one running stream: its context, what its handler has
// sent, and the timers that watch it.
type streamRun struct {
	s      *Server
	stream grpc.ServerStream
	// conn is the stream's connection, when it shares its writes among
	// its streams (package cork); nil otherwise.
	conn *cork.Conn
	// ctx is the stream's, ended by end with the cause.
	ctx    context.Context
	cancel context.CancelCauseFunc
	// lastSent is the resume token of the last message handed to gRPC
	// (the start token before any), which the client receives before any
	// status that follows.
	lastSent atomic.Pointer[string]
	// ending returns the status the stream ends with for a cause: the
	// handler's, set before it serves.
	ending func(cause error) error
	// out carries each message of a stream whose subscription counts in
	// its connection's Woken (out.handed set), for the codec to say when it
	// was handed on; owned by the handler's goroutine.
	out outgoing

	mu sync.Mutex // guards the fields below
	// sends counts the sends started; sending is set while one is in
	// progress.
	sends   uint64
	sending bool
	// cut is set once the stream was cut off: no send starts after.
	cut bool
	// finished is set once the handler is done with the stream.
	finished bool
	// final is the status the stream ended with, once decided.
	final error
	// watchdog fires at nextStall, when it checks that a send has not
	// stayed blocked since the last check (blockedAt is the send in
	// progress then; 0: none), and at nextRecheck, when it rechecks the
	// caller's access (see fire). One timer for both: a replica holds
	// 100,000 streams.
	watchdog    *time.Timer
	nextStall   time.Time
	blockedAt   uint64
	rechecks    *rechecker // nil: no rechecks
	nextRecheck time.Time  // zero while a recheck runs
	// stopFailWatch stops watching the subscription's failure.
	stopFailWatch func()
}

// newStreamRun starts watching a stream whose resume token is startToken
// ("" for a stream without one).
func (s *Server) newStreamRun(stream grpc.ServerStream, startToken string) *streamRun {
	r := &streamRun{s: s, stream: stream, conn: cork.ConnOf(stream.Context()),
		ending: func(err error) error { return toStatus(s.log, err) }}
	r.ctx, r.cancel = context.WithCancelCause(stream.Context())
	r.lastSent.Store(&startToken)
	r.mu.Lock()
	r.nextStall = time.Now().Add(s.cfg.MaxSendStall)
	r.watchdog = time.AfterFunc(s.cfg.MaxSendStall, r.fire)
	r.mu.Unlock()
	return r
}

// woken is what the hub counts this stream in while it was woken for
// events it has not sent (informerhub.WatchRequest.Woken): its connection's,
// or nil.
func (r *streamRun) woken() *informerhub.Woken {
	if r.conn == nil {
		return nil
	}
	return r.conn.Woken()
}

// lastToken returns the token of the last message handed to gRPC.
func (r *streamRun) lastToken() string { return *r.lastSent.Load() }

// setToken sets the token the stream resumes from before its first send:
// the subscription's start, once it has one.
func (r *streamRun) setToken(token string) { r.lastSent.Store(&token) }

// watchFailure ends the stream StalledSendGrace after its subscription
// failed, should a send be blocked then: a handler that is not in a send
// learns of the failure from next. afterFail is the subscription's
// AfterFail.
func (r *streamRun) watchFailure(afterFail func(func()) func()) {
	stop := afterFail(func() { r.end(errStalled, r.s.cfg.StalledSendGrace) })
	r.mu.Lock()
	r.stopFailWatch = stop
	r.mu.Unlock()
}

// recheck rechecks the caller's access every AuthzRecheckInterval with
// check, and ends the stream when the caller lost it.
func (r *streamRun) recheck(check func(context.Context) error) {
	rc := newRechecker(check, r.s.cfg.AuthzRecheckInterval, r.s.log)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rechecks = rc
	now := time.Now()
	r.nextRecheck = now.Add(rc.next())
	r.armLocked(now)
}

// serveFrom serves a stream from the subscription open makes: open runs on
// a goroutine of its own (see onOwnStack), so that the long wait for
// events holds none of its stack; then every event Next yields is sent,
// as message says (its message, and its resume token: see serve), until
// the stream ends. A Watch, a WatchMany and a Count are served so.
func serveFrom[S interface {
	Next(context.Context) (E, error)
	Close()
}, E any](s *Server, r *streamRun, open func() (S, func(), error), message func(E) (any, *string)) error {
	var sub S
	var release func()
	var err error
	if panicked := onOwnStack(func() { sub, release, err = open() }); panicked != nil {
		return toStatus(s.log, panicked)
	}
	if err != nil {
		return err
	}
	defer release()
	// Finished first: closing the subscription fails it, which would run
	// the hook that watches for a failure.
	defer sub.Close()
	defer r.finish()
	return r.serve(func(ctx context.Context) (any, *string, bool, error) {
		e, err := sub.Next(ctx)
		if err != nil {
			return nil, nil, false, err
		}
		msg, token := message(e)
		return msg, token, false, nil
	})
}

// serve sends what next produces until it fails or produces the last
// message, and returns the status the stream ends with. next's token
// points to msg's resume token (nil when it has none) and must not change
// afterwards: a pointer into the shared event costs nothing per message,
// where the address of a copy would be an allocation. A panic ends the
// stream with INTERNAL (and is logged), so that one stream's cannot end the
// process. serve waits about 5 KiB deep and its sends peak under the 8 KiB
// a goroutine starts with: what deepens that path doubles every idle
// stream's stack (docs/architecture.md, "A stream costs one goroutine").
func (r *streamRun) serve(next func(ctx context.Context) (msg any, token *string, last bool, err error)) (err error) {
	defer func() {
		if p := recover(); p != nil {
			r.mu.Lock()
			defer r.mu.Unlock()
			err = r.finalLocked(&panicError{value: p, stack: debug.Stack()})
		}
	}()
	for {
		msg, token, last, err := next(r.ctx)
		if err == nil {
			err = r.send(msg, token)
		}
		if err != nil {
			return r.ended(err)
		}
		if last {
			return nil
		}
	}
}

// send sends msg, unless the stream was ended: a caller whose access a
// recheck revoked, or a stream Drain ended, receives nothing more than it
// had, whatever its queue still holds.
func (r *streamRun) send(msg any, token *string) error {
	r.mu.Lock()
	if r.cut || r.ctx.Err() != nil {
		r.mu.Unlock()
		return errSendStopped
	}
	r.sends++
	r.sending = true
	r.mu.Unlock()
	if r.out.handed != nil {
		r.out.msg = msg
		msg = &r.out
	}
	err := r.stream.SendMsg(msg)
	r.mu.Lock()
	r.sending = false
	if err == nil && token != nil {
		r.lastSent.Store(token)
	}
	r.mu.Unlock()
	return err
}

// ended returns the status the stream ends with, err being what ended its
// serve: the cause end gave, if it was ended.
func (r *streamRun) ended(err error) error {
	if r.ctx.Err() != nil {
		err = context.Cause(r.ctx)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.finalLocked(err)
}

// finalLocked returns the status the stream ends with, deciding it for
// cause unless it was decided. The caller holds mu.
func (r *streamRun) finalLocked(cause error) error {
	if r.final == nil {
		r.final = r.ending(cause)
	}
	return r.final
}

// end ends the stream for cause, unless it has ended: a handler waiting
// for its next message returns at once, one in a send within grace, after
// which the send is cut off.
func (r *streamRun) end(cause error, grace time.Duration) {
	r.cancel(cause)
	r.mu.Lock()
	sending, sends := r.sending, r.sends
	r.mu.Unlock()
	switch {
	case !sending:
	case grace <= 0:
		r.cutSend(sends)
	default:
		time.AfterFunc(grace, func() {
			if r.cutSend(sends) {
				r.s.log.Warn("ending a stream whose client stopped reading", "cause", context.Cause(r.ctx))
			}
		})
	}
}

// cutSend cuts off the send numbered sends if it is still in progress,
// and reports whether it did: the stream ends at once with the status its
// cause gives.
func (r *streamRun) cutSend(sends uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.sending || r.sends != sends || r.cut {
		return false
	}
	r.cut = true
	st := r.finalLocked(context.Cause(r.ctx))
	if c := cutterOf(r.ctx); c != nil {
		_ = c.WriteStatus(status.Convert(st))
	}
	return true
}

// fire is the watchdog's: a stall check, or a recheck, or both, when due.
// A send in progress at a stall check and still at the next means its
// client has read nothing for MaxSendStall at least: the stream ends. A
// recheck runs in the watchdog's goroutine, after the next firing is set,
// so that an API server slow to answer delays no stall check (which fires
// in a goroutine of its own).
func (r *streamRun) fire() {
	now := time.Now()
	r.mu.Lock()
	if r.finished {
		r.mu.Unlock()
		return
	}
	stalled := false
	if !now.Before(r.nextStall) {
		stalled = r.sending && r.sends == r.blockedAt
		r.blockedAt = 0
		if r.sending {
			r.blockedAt = r.sends
		}
		r.nextStall = now.Add(r.s.cfg.MaxSendStall)
	}
	recheck := r.rechecks != nil && !r.nextRecheck.IsZero() && !now.Before(r.nextRecheck)
	if recheck {
		r.nextRecheck = time.Time{} // running
	}
	r.armLocked(now)
	r.mu.Unlock()
	if stalled {
		r.s.log.Warn("ending a stream whose client has not read for a while", "stall", r.s.cfg.MaxSendStall)
		r.end(errStalled, 0)
		return
	}
	if recheck {
		r.runRecheck()
	}
}

// runRecheck rechecks the caller's access, and ends the stream if it was
// lost; else schedules the next.
func (r *streamRun) runRecheck() {
	err := r.rechecks.run(r.ctx)
	if r.ctx.Err() != nil {
		return // the stream ended while the recheck ran
	}
	after, lost := r.rechecks.decide(err)
	if lost != nil {
		r.end(lost, r.s.cfg.StalledSendGrace)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	r.nextRecheck = now.Add(after)
	r.armLocked(now)
}

// armLocked sets the watchdog to fire at the next stall check or recheck,
// whichever is first. The caller holds mu.
func (r *streamRun) armLocked(now time.Time) {
	if r.finished {
		return
	}
	next := r.nextStall
	if !r.nextRecheck.IsZero() && r.nextRecheck.Before(next) {
		next = r.nextRecheck
	}
	r.watchdog.Reset(next.Sub(now))
}

// finish stops the stream's timers, once its handler is done with it. A
// second call does nothing.
func (r *streamRun) finish() {
	r.cancel(nil)
	r.mu.Lock()
	if r.finished {
		r.mu.Unlock()
		return
	}
	r.finished = true
	r.watchdog.Stop()
	stop := r.stopFailWatch
	r.mu.Unlock()
	if stop != nil {
		stop()
	}
}
