package stream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/informerhub/informerhub/informerhub/historystore"
	"github.com/informerhub/informerhub/informerhub/internal/errs"
	"github.com/informerhub/informerhub/informerhub/internal/event"
	"github.com/informerhub/informerhub/informerhub/internal/feed"
	"github.com/informerhub/informerhub/informerhub/internal/selection"
	"github.com/informerhub/informerhub/informerhub/internal/token"
)

// Stream is a subscription's stream of events: the implementation of
// informerhub.Subscription, which documents its methods. Its phases are in
// the package's doc.
type Stream struct {
	deps  *Deps
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

// Open starts the stream of a subscription of entry's feed at its current
// position, or at the token's. A token the history cannot place is replayed from the API
// server, whose watch opens here, bounded by ctx, so that a version the API
// server no longer has is refused before the subscription starts.
func (s *Stream) Open(ctx context.Context, deps *Deps, entry *feed.Entry, p *Params) error {
	s.deps, s.wake = deps, make(chan struct{}, 1)
	s.lease.Init(entry, p.Selector, feed.LeaseTerms{Projection: p.Projection, IncludePrevious: p.IncludePrevious, Encoding: p.Encoding,
		Owner: p.Owner, NeverReplay: p.NeverReplay, Woken: p.Woken}, s.wake)
	tok := p.Token
	initial := p.SendInitialEvents || (tok != nil && tok.Initial)
	o, how, err := s.lease.Open(tok, initial)
	if err != nil {
		return err
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
	if err := s.openUnlocked(ctx, &o, p.LazyReplay); err != nil {
		s.abandon()
		return err
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
	return nil
}

// openUnlocked finishes what Lease.Open started, without the feed's lock: it opens
// a replay's upstream watch, and places a token among the disk's records,
// which never change once written.
func (s *Stream) openUnlocked(ctx context.Context, o *feed.Opening, lazyReplay bool) error {
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
			return f.ReadError(err)
		}
		o.Start.Seq = seq
	}
	return nil
}

// abandon gives back what a subscription that could not start took.
func (s *Stream) abandon() { s.lease.Abandon() }

// replay makes the subscription replay from rv, and returns the replay;
// its watch opens on the next step, unless Open opens it first.
// Making it needs no lock: what it reads of the lease is set when it
// opened; the lease then counts it and keeps its end for Close.
func (s *Stream) replay(rv uint64) *replay {
	r := newReplay(s, rv)
	s.lease.StartReplay(r.end)
	return r
}

// Next returns the next event; see Subscription.Next.
func (s *Stream) Next(ctx context.Context) (*event.Event, error) {
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
func (s *Stream) sent(ev *event.Event) *event.Event {
	s.lastToken.Store(&ev.ResumeToken)
	s.lease.Feed().Counters().Sent.Add(1)
	s.quiet.reset()
	return ev
}

// stoppedOrCanceled is the check of the phases that do not wait on
// channels.
func (s *Stream) stoppedOrCanceled(ctx context.Context) error {
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
func (s *Stream) errOf(err error) error {
	if err == feed.ErrLeftBehind {
		return &errs.TooSlowError{Resource: s.lease.Feed().Info().Resource, ResumeToken: s.ResumeToken()}
	}
	return err
}

// leftBehind says that the subscription's lease left it behind
// (feed.Lease.leaveBehindLocked) for reading slower than its resource type
// changes, and returns what the caller gets.
func (s *Stream) leftBehind() error {
	if !s.lease.Terms().NeverReplay { // a counter's counts afresh: nobody is disconnected
		s.lease.Feed().Log().Warn("subscriber fell further behind than the history; disconnecting it", "selector", s.Describe())
	}
	return s.Err()
}

// Done is closed when the stream can deliver no more; see
// Subscription.Done.
func (s *Stream) Done() <-chan struct{} { return s.lease.Done() }

// Handed says the transport took the last event; see Subscription.Handed.
func (s *Stream) Handed() { s.lease.Reader().Handed() }

// AfterFail runs f once Done is closed; see Subscription.AfterFail.
func (s *Stream) AfterFail(f func()) (stop func()) { return s.lease.AfterFail(f) }

// Err returns why the stream failed, once Done is closed; otherwise nil.
func (s *Stream) Err() error {
	if !s.lease.HasFailed() {
		return nil
	}
	return s.errOf(s.lease.Failure())
}

// ResumeToken is the token of the last event Next returned, or the start's.
func (s *Stream) ResumeToken() string { return *s.lastToken.Load() }

// Close ends the stream and releases its feed's entry.
func (s *Stream) Close() {
	s.closeOnce.Do(func() {
		if cancelReplay := s.lease.Close(); cancelReplay != nil {
			cancelReplay()
		}
		s.quiet.stop()
		s.deps.Feeds.Release(s.lease.Entry())
	})
}

// Describe says what the stream selects, for a log line.
func (s *Stream) Describe() string {
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

// Feed is the stream's feed.
func (s *Stream) Feed() *feed.Feed { return s.lease.Feed() }
