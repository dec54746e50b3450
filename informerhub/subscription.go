package informerhub

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/informerhub/informerhub/informerhub/historystore"
	"github.com/informerhub/informerhub/informerhub/internal/event"
	"github.com/informerhub/informerhub/informerhub/internal/feed"
	"github.com/informerhub/informerhub/informerhub/internal/selection"
	"github.com/informerhub/informerhub/informerhub/internal/token"
)

// Subscription is one subscriber's stream of events. Next must be called
// from one goroutine at a time; Close may be called from any.
//
// A subscription moves through phases, each a type whose step Next calls
// (phase.go, replay.go):
//  1. initial events, when asked for (initialPhase): ADDED for every
//     matching object of a point-in-time clone of the state, then a
//     bookmark that ends them;
//  2. replay, when resuming from a token the history cannot place (older
//     than the history, or ahead of the feed): the changes after the
//     token's resourceVersion, from an upstream watch (replay);
//  3. catch-up (catchUpPhase): the history records after its position,
//     read straight from the feed's history (no queue, so a slow start
//     cannot overflow);
//  4. live (livePhase): once caught up, it joins the feed's live
//     subscribers, atomically with the last record it read, and receives
//     records through its bounded queue (member). A live subscriber whose
//     queue is full when a record comes falls behind: it leaves the live
//     subscribers, passes what its queue holds, and catches up again from
//     the history (phase 3), as etcd's watch cache serves its lagging
//     watchers; so a burst (a relist's thousands of differences) delays a
//     subscriber, never ends it. It ends (*TooSlowError) only if the
//     history no longer holds its position by the time it reads on.
type Subscription struct {
	deps  *StreamDeps
	lease feed.Lease
	// wake has a token when Next, waiting, has something to look at: a
	// delivery queued, the subscription failed, a tick of its bookmark
	// clock. One channel rather than one per cause: a goroutine waiting in
	// a select holds a record per case, and a replica holds 100,000 of
	// them.
	wake chan struct{}
	// Owned by the goroutine calling Next.
	phase phase
	quiet quietClock
	// lastToken points to the resume token of the last event Next
	// returned (or the start token); Err reads it from any goroutine.
	lastToken atomic.Pointer[string]
	closeOnce sync.Once
}

// subscribe starts a subscription of a feed at its current position, or at
// the token's. A token the history cannot place is replayed from the API
// server, whose watch opens here, bounded by ctx, so that a version the API
// server no longer has is refused before the subscription starts.
func subscribe(ctx context.Context, deps *StreamDeps, entry *feed.Entry, p *watchParams) (*Subscription, error) {
	s := &Subscription{deps: deps, wake: make(chan struct{}, 1)}
	s.lease.Init(entry, p.sel, feed.LeaseTerms{Projection: p.proj, IncludePrevious: p.includePrevious, Encoding: p.encoding,
		Owner: p.owner, NeverReplay: p.neverReplay, Woken: p.woken}, s.wake)
	tok := p.tok
	initial := p.sendInitialEvents || (tok != nil && tok.Initial)
	o, how, err := s.lease.Open(tok, initial)
	if err != nil {
		return nil, err
	}
	switch how {
	case feed.OpenedLive:
		s.phase = &livePhase{s: s}
	case feed.OpenedReplay:
		s.phase = s.replay(o.Start.RV)
	}
	f := s.lease.Feed()
	if o.Build != nil {
		o.Tree, o.Eq = f.BuildIndex(o.Build, o.Tree)
	}
	if err := s.open(ctx, &o, p.lazyReplay); err != nil {
		s.abandon()
		return nil, err
	}
	switch {
	case initial: // Lease.Open gives a phase only to the others
		s.phase = newInitialPhase(s, &o, tok)
	case s.phase == nil: // neither live nor replaying yet
		s.phase = &catchUpPhase{s: s, at: o.Start}
	}
	var startToken string
	switch {
	case tok != nil && (tok.Initial || !initial):
		// Resuming: the token the client holds stays its resume point
		// until it receives something newer.
		startToken = f.Events().Token(*tok)
	case initial:
		startToken = f.Events().Token(token.Token{Pos: o.Start, Initial: true, Selector: s.lease.Selector().Fingerprint()})
	default:
		startToken = f.Events().Token(token.Token{Pos: o.Start})
	}
	s.lastToken.Store(&startToken)
	s.quiet.start(s.deps.BookmarkInterval/2, s.wake)
	return s, nil
}

// open finishes what Lease.Open started, without the feed's lock: it opens
// a replay's upstream watch, and places a token among the disk's records,
// which never change once written.
func (s *Subscription) open(ctx context.Context, o *feed.Opening, lazyReplay bool) error {
	f := s.lease.Feed()
	if r, ok := s.phase.(*replay); ok {
		var err error
		if o.Ahead {
			err = r.upstream.checkNotAhead(ctx, r.rv)
		}
		if err == nil && (!lazyReplay || r.upstream.tryAcquire()) {
			err = r.open(ctx) // else its first step opens it
		}
		if err != nil {
			r.stop()
			return err
		}
	}
	if o.Loc.SearchUpTo != 0 {
		seq, err := f.FindOnDisk(ctx, o.Loc.SearchFrom, o.Loc.SearchUpTo, o.Start.RV)
		switch {
		case errors.Is(err, historystore.ErrMissing) && o.Replayable:
			// Retention deleted where the token continues since Lease.Open
			// placed it: as for a token the memory no longer reaches, the
			// API server answers (exactly, or 410: OUT_OF_RANGE).
			r := s.replay(o.Start.RV)
			s.phase = r
			o.Loc = feed.Located{}
			if lazyReplay && !r.upstream.tryAcquire() {
				return nil // its first step opens it
			}
			if err := r.open(ctx); err != nil {
				r.stop()
				return err
			}
			return nil
		case err != nil:
			return feed.ReadError(f, err)
		}
		o.Start.Seq = seq
	}
	return nil
}

// abandon gives back what a subscription that could not start took.
func (s *Subscription) abandon() { s.lease.Abandon() }

// replay makes the subscription replay from rv, and returns the replay;
// its watch opens on the next step, unless subscribe opens it first.
// Making it needs no lock: what it reads of the lease is set when it
// opened; the lease then counts it and keeps its end for Close.
func (s *Subscription) replay(rv uint64) *replay {
	r := newReplay(s, rv)
	s.lease.StartReplay(r.end)
	return r
}

// Next returns the next event. It blocks until there is one, the context
// ends, or the subscription fails. A failed subscription returns the same
// error on every later call.
func (s *Subscription) Next(ctx context.Context) (*Event, error) {
	for {
		if err := s.Err(); err != nil {
			return nil, err
		}
		ev, next, err := s.phase.step(ctx)
		if next != nil {
			s.phase = next
		}
		if err != nil {
			return nil, err
		}
		if ev != nil && event.Failure(ev) != nil {
			s.lease.Fail(event.Failure(ev))
			return nil, s.Err()
		}
		if ev != nil {
			return s.sent(ev), nil
		}
	}
}

// sent records ev as the last event returned.
func (s *Subscription) sent(ev *Event) *Event {
	s.lastToken.Store(&ev.ResumeToken)
	s.lease.Feed().Counters().Sent.Add(1)
	s.quiet.reset()
	return ev
}

// stoppedOrCanceled is the check of the phases that do not wait on
// channels.
func (s *Subscription) stoppedOrCanceled(ctx context.Context) error {
	f := s.lease.Feed()
	select {
	case <-f.Stopped():
		return f.Err()
	case <-ctx.Done():
		return ctx.Err()
	default:
		return nil
	}
}

// errOf is what the subscription returns for a failure of its lease:
// falling behind the history becomes a *TooSlowError with its last token.
func (s *Subscription) errOf(err error) error {
	if err == feed.ErrLeftBehind {
		return &TooSlowError{Resource: s.lease.Feed().Info().Resource, ResumeToken: s.ResumeToken()}
	}
	return err
}

// leftBehind says that the subscription's lease left it behind
// (feed.Lease.leaveBehindLocked) for reading slower than its resource type
// changes, and returns what the caller gets.
func (s *Subscription) leftBehind() error {
	if !s.lease.Terms().NeverReplay { // a counter's counts afresh: nobody is disconnected
		s.lease.Feed().Log().Warn("subscriber fell further behind than the history; disconnecting it", "selector", s.describe())
	}
	return s.Err()
}

// Done is closed when the subscription can deliver no more: it fell behind
// further than the history, its informer stopped, or it was closed. Next
// then returns Err. A caller blocked elsewhere (in a send to a client that
// stopped reading) can watch Done to give up on that client.
func (s *Subscription) Done() <-chan struct{} { return s.lease.Failed().Done() }

// Handed tells the subscription that its transport has taken the event
// Next returned last, encoded, and is about to write it: the writes of its
// connection need not wait for it any longer (see Woken). Without it, Next
// says so itself when called again. Call it from the goroutine that calls
// Next.
func (s *Subscription) Handed() { s.lease.Member().Handed() }

// AfterFail arranges for f to run, in its own goroutine, once Done is
// closed (at once if it is), as context.AfterFunc does for a context; stop
// cancels that. A caller blocked elsewhere, in a send to a client that
// stopped reading, learns of the failure without a goroutine waiting on
// Done.
func (s *Subscription) AfterFail(f func()) (stop func()) { return s.lease.Failed().After(f) }

// Err returns why the subscription failed, once Done is closed; otherwise
// nil.
func (s *Subscription) Err() error {
	if !s.lease.Failed().IsEnded() {
		return nil
	}
	return s.errOf(s.lease.Failure())
}

// ResumeToken returns the token of the last event Next returned, or the one
// the subscription started from. It may be called from any goroutine.
func (s *Subscription) ResumeToken() string { return *s.lastToken.Load() }

// Close ends the subscription and releases its informer.
// A Next blocked in another goroutine returns ErrSubscriptionClosed.
func (s *Subscription) Close() {
	s.closeOnce.Do(func() {
		if cancelReplay := s.lease.Close(); cancelReplay != nil {
			cancelReplay()
		}
		s.quiet.stop()
		s.deps.Feeds.Release(s.lease.Entry())
	})
}

// describe says what the subscription selects, for a log line.
func (s *Subscription) describe() string {
	sel, vw := s.lease.Selector(), s.lease.View()
	desc := fmt.Sprintf("namespace=%q labels=%q fields=%q", sel.Namespace(), selection.Canonical(sel.Labels()), selection.Canonical(sel.Fields()))
	if sel.Shard() != nil {
		desc += fmt.Sprintf(" shard=%q", selection.Truncate(sel.Shard().String()))
	}
	if sel.Filter() != nil {
		desc += fmt.Sprintf(" filter=%q", selection.Truncate(sel.Filter().Expr()))
	}
	if vw != selection.DefaultView {
		desc += fmt.Sprintf(" view=%q", selection.Truncate(vw.Key()))
	}
	return desc
}

// quietClock is a subscription's bookmark clock: it ticks every half
// Config.BookmarkInterval, and an event sent resets it, so two ticks in a
// row mean the stream has been quiet for at most one interval. A tick
// counts in due and wakes the subscription's Next, which takes them
// (ticked): a Next busy for longer than a tick (a catch-up reading the
// disk) takes every tick that came meanwhile at once.
type quietClock struct {
	due   atomic.Int32
	ticks int // owned by the goroutine calling Next

	mu      sync.Mutex // guards timer and stopped
	timer   *time.Timer
	stopped bool
}

// start ticks every interval, waking wake, until stop.
func (q *quietClock) start(interval time.Duration, wake chan struct{}) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.timer = time.AfterFunc(interval, func() {
		q.due.Add(1)
		poke(wake)
		q.mu.Lock()
		defer q.mu.Unlock()
		if !q.stopped {
			q.timer.Reset(interval)
		}
	})
}

func (q *quietClock) stop() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.stopped = true
	q.timer.Stop()
}

// ticked takes the ticks that came, if any, and reports whether the
// stream has now been quiet for two in a row.
func (q *quietClock) ticked() bool {
	n := q.due.Swap(0)
	if n == 0 {
		return false
	}
	q.ticks += int(n)
	return q.ticks >= 2
}

// poke puts a token in wake, unless one is there.
func poke(wake chan struct{}) {
	select {
	case wake <- struct{}{}:
	default:
	}
}

// reset restarts the count after an event was sent: ticks that came
// before it do not count.
func (q *quietClock) reset() {
	q.ticks = 0
	q.due.Store(0)
}
