package feed

import (
	"context"
	"errors"

	"github.com/informerhub/informerhub/informerhub/internal/errs"
	"github.com/informerhub/informerhub/informerhub/internal/event"
	"github.com/informerhub/informerhub/informerhub/internal/fanout"
	"github.com/informerhub/informerhub/informerhub/internal/selection"
	"github.com/informerhub/informerhub/informerhub/internal/state"
	"github.com/informerhub/informerhub/informerhub/internal/token"
	"github.com/informerhub/informerhub/informerhub/projection"
)

// Lease is what a subscription holds of its feed while it lasts: the hub's
// entry for the feed, which keeps the feed running; its admission (its
// selector's filter, its view, on its owner's account); and how it ends.
// failed is closed once, with failure, when the subscription can deliver no
// more: it was closed, fell behind further than the history, or its feed
// stopped.
type Lease struct {
	entry *Entry
	// member is the subscription as its feed's live dispatch knows it.
	member fanout.Member
	feed   *Feed
	sel    *selection.Selector
	view   *selection.View
	terms  LeaseTerms
	// failed ends when failure is set; failure may be read without the
	// lock once it has.
	failed Ending

	// Guarded by feed.mu.
	failure  error
	closed   bool // Close was called: never go live
	released bool // the admission was given back
	// cancelReplay ends the current replay's upstream watch; nil without
	// one. Close calls it from any goroutine.
	cancelReplay context.CancelFunc
	// clone is the state clone the initial events read, until they end.
	clone *state.Clone
}

// closeClone closes the lease's state clone, if it has one. The caller
// holds feed.mu.
func (l *Lease) closeClone() {
	if l.clone != nil {
		l.feed.store.clones.Close(l.clone)
		l.clone = nil
	}
}

// ErrLeftBehind marks a subscription that fell behind further than the
// history; Subscription.Err turns it into a *TooSlowError with the
// subscription's last token.
var ErrLeftBehind = errors.New("fell behind the history")

// LeaseTerms are what a subscription asks of its feed, besides its
// selector: its view (projection, previous state, encoding), on whose
// account (for the limits per owner), and how it ends when its history
// moves past it.
type LeaseTerms struct {
	Projection      *projection.Projection
	IncludePrevious bool
	Encoding        event.Encoding
	// Owner is WatchRequest.Owner.
	Owner string
	// NeverReplay makes a subscription that loses its place in the history
	// fail as one that fell behind (ErrLeftBehind), rather than replay
	// from the API server: a counter's, which counts afresh from the
	// state instead.
	NeverReplay bool
	// Woken, when set, is the subscriber's connection's.
	Woken *fanout.Woken
}

// Init makes l the lease of a subscription of sel on entry's feed, asking
// for terms, whose reader waits on wake.
func (l *Lease) Init(entry *Entry, sel *selection.Selector, terms LeaseTerms, wake chan struct{}) {
	l.entry, l.feed, l.sel, l.terms = entry, entry.feed, sel, terms
	l.member.Init(sel, (*lockedLease)(l), wake, terms.Woken)
}

// lockedLease is the lease as its member's fanout.Subscriber, whose Fail
// the dispatcher calls under the feed's lock: a type of its own, so that
// the Lease's exported Fail, which takes the lock, can never be handed to
// the dispatcher in its place.
type lockedLease Lease

func (l *lockedLease) Fail(err error) { (*Lease)(l).failLocked(err) }

// acquire takes the subscription's admission on the feed, and its view.
// The caller holds feed.mu.
func (l *Lease) acquire() error {
	v, err := l.feed.admission.Acquire(l.terms.Owner, l.sel, l.terms.Projection, l.terms.IncludePrevious, l.terms.Encoding)
	if err != nil {
		return err
	}
	l.view = v
	return nil
}

// release gives back what acquire took, once. The caller holds feed.mu.
func (l *Lease) release() {
	if l.released || l.view == nil {
		return
	}
	l.released = true
	l.feed.admission.Release(l.terms.Owner, l.sel, l.view)
}

// failLocked ends the subscription with err, unless it has ended, and
// wakes its reader. The caller holds feed.mu.
func (l *Lease) failLocked(err error) {
	if l.failure != nil {
		return
	}
	l.failure = err
	l.failed.Close()
	l.member.Wake()
}

// The lease's sections under its feed's lock, for the subscription's
// phases, which do not take the lock for them.

// EndClone closes the lease's state clone: the initial events are done.
func (l *Lease) EndClone() {
	l.feed.mu.Lock()
	defer l.feed.mu.Unlock()
	l.closeClone()
}

// Abandon gives back what a subscription that could not start took.
func (l *Lease) Abandon() {
	l.feed.mu.Lock()
	defer l.feed.mu.Unlock()
	l.closeClone()
	l.release()
}

// FellBehindAt is where the subscription's member fell behind.
func (l *Lease) FellBehindAt() state.Position {
	l.feed.mu.Lock()
	defer l.feed.mu.Unlock()
	return l.member.FellBehindAt()
}

// QuietAt returns the feed's position and, at that position, the
// deliveries queued for the member: none means the subscriber has
// everything up to it.
func (l *Lease) QuietAt() (pos state.Position, pending int) {
	l.feed.mu.Lock()
	defer l.feed.mu.Unlock()
	return l.feed.store.pos, l.member.Reader().Pending()
}

// Close ends the lease for a subscription closed: it never goes live
// again, leaves the live subscribers, gives back its clone, its queue's
// memory and its admission, and fails with ErrSubscriptionClosed. It
// returns the replay's cancel to call, if one runs; the caller then
// releases the feed's entry.
func (l *Lease) Close() (cancelReplay context.CancelFunc) {
	f := l.feed
	f.mu.Lock()
	l.closed = true
	l.closeClone()
	f.live.Remove(&l.member)
	counted := l.member.Leave()
	l.release()
	l.failLocked(errs.ErrSubscriptionClosed)
	cancelReplay = l.cancelReplay
	f.mu.Unlock()
	if counted {
		l.member.UncountWoken() // not under the lock: Woken.OnZero is the transport's
	}
	return cancelReplay
}

// Fail ends the subscription with err, unless it has ended: an event
// could not be made of an object, or its replay failed.
func (l *Lease) Fail(err error) {
	l.feed.mu.Lock()
	defer l.feed.mu.Unlock()
	l.failLocked(err)
}

// endedLocked returns why the lease can go no further, if it can't: its
// failure (the stream says it to the caller), or its feed's. The
// caller holds the feed's lock.
func (l *Lease) endedLocked() error {
	switch {
	case l.failure != nil:
		return l.failure
	case l.feed.err != nil:
		return l.feed.err
	}
	return nil
}

// Rejoin ends the lease's replay if its feed's history holds every
// selected change after rv: it forgets the replay's cancel (the caller
// stops the replay) and returns where the catch-up continues, but for
// its resourceVersion, the replay's.
func (l *Lease) Rejoin(rv uint64) (at state.Position, ok bool) {
	l.feed.mu.Lock()
	defer l.feed.mu.Unlock()
	return l.rejoinLocked(rv)
}

func (l *Lease) rejoinLocked(rv uint64) (at state.Position, ok bool) {
	seq, ok := l.feed.store.joinable(rv)
	if !ok {
		return state.Position{}, false
	}
	l.cancelReplay = nil
	return state.Position{Epoch: l.feed.epoch, Seq: seq}, true
}

// PollReplay is Rejoin for a replay between its upstream's events: unless
// the lease has ended (ended), it rejoins the history, or returns a
// channel closed when the feed's position next moves.
func (l *Lease) PollReplay(rv uint64) (at state.Position, ok bool, advanced <-chan struct{}, ended error) {
	l.feed.mu.Lock()
	defer l.feed.mu.Unlock()
	if err := l.endedLocked(); err != nil {
		return state.Position{}, false, nil, err
	}
	if at, ok := l.rejoinLocked(rv); ok {
		return at, true, nil, nil
	}
	return state.Position{}, false, l.feed.store.advancedCh(), nil
}

// joinLocked makes the lease's member one of the feed's live
// subscribers. The caller holds the feed's lock and has passed every
// record up to the feed's position.
func (l *Lease) joinLocked() {
	f := l.feed
	l.member.Join(&f.live, f.deps.Memory.Queues, f.deps.QueueSize, l.closed)
}

// StartReplay counts a replay the subscription starts, and keeps its
// cancel for Close; it ends it at once if the subscription was closed.
func (l *Lease) StartReplay(cancel context.CancelFunc) {
	l.feed.mu.Lock()
	defer l.feed.mu.Unlock()
	l.feed.counters.Replays.Add(1)
	l.cancelReplay = cancel
	if l.closed {
		cancel()
	}
}

// leaveBehindLocked ends the subscription for reading slower than its
// resource type changes: counted first, so that whoever its failure wakes
// finds it in the feed's statistics. The caller holds the feed's lock.
func (l *Lease) leaveBehindLocked() {
	if l.terms.NeverReplay { // a counter's: it counts afresh
		l.feed.counters.Recounts.Add(1)
	} else {
		l.feed.counters.SlowDisconnects.Add(1)
	}
	l.failLocked(ErrLeftBehind)
}

// LeaveBehind is leaveBehindLocked for a caller without the lock.
func (l *Lease) LeaveBehind() {
	l.feed.mu.Lock()
	defer l.feed.mu.Unlock()
	l.leaveBehindLocked()
}

// Fetched is what a catch-up does after fetch.
type Fetched uint8

const (
	FetchedBatch  Fetched = iota // read the batch of records from memory
	FetchedDisk                  // read the disk's, up to diskUpTo, off the lock
	FetchedLive                  // none left: it joined the live subscribers
	FetchedReplay                // the history moved past it: replay from its version
	FetchedBehind                // it fell behind further than the history: failed
)

// Fetch reads the next batch of at most max records after at from the
// feed's history in memory, into dst, under the feed's lock. When the
// memory no longer holds them, the disk may (FetchedDisk: up to
// diskUpTo, which memory holds from, as it keeps every record not yet
// written); else, mayReplay says whether the subscriber may replay from
// the API server (FetchedReplay) or falls behind (FetchedBehind, the lease
// failed with ErrLeftBehind). A position inside a relist's batch, which no
// version names, expires. With nothing more to read, the lease joins the
// live subscribers (FetchedLive), atomically with the last record read.
// err is the lease's failure or its feed's, or an expiry.
func (l *Lease) Fetch(at state.Position, max int, dst []*state.Record, mayReplay bool) (batch []*state.Record, diskUpTo uint64, next Fetched, err error) {
	f := l.feed
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := l.endedLocked(); err != nil {
		return nil, 0, 0, err
	}
	batch, ok := f.store.history.After(at.Seq, max, dst)
	switch {
	case !ok && f.diskHoldsLocked(at.Seq):
		return nil, f.store.history.First, FetchedDisk, nil
	case !ok && !mayReplay:
		l.leaveBehindLocked()
		return nil, 0, FetchedBehind, nil
	case !ok && (at.Offset != 0 || at.RV == 0):
		return nil, 0, 0, f.expiredLocked(false)
	case !ok:
		return nil, 0, FetchedReplay, nil
	case len(batch) == 0:
		l.joinLocked()
		return nil, 0, FetchedLive, nil
	}
	return batch, 0, FetchedBatch, nil
}

// Opened says how a subscription starts, after Lease.Open: catching up
// (or with initial events), live, or replaying.
type Opened uint8

const (
	OpenedCatchUp Opened = iota
	OpenedLive
	OpenedReplay
)

// Open takes the subscription's admission and places its start, under the
// feed's lock: a subscription that starts live joins the live subscribers
// here (OpenedLive), atomically with the feed's position; one whose token
// the history cannot place replays from o.Start.RV (OpenedReplay: the
// caller makes the replay, before anyone can close the subscription).
func (l *Lease) Open(tok *token.Token, initial bool) (o Opening, how Opened, err error) {
	f := l.feed
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return o, 0, f.err
	}
	if err := l.acquire(); err != nil {
		return o, 0, err
	}
	defer func() {
		if err != nil {
			l.release()
		}
	}()
	o.Start = f.store.pos
	if tok != nil {
		o.Replayable = tok.Replayable() && !initial
		loc, err := f.store.locate(tok.Pos)
		if err == nil && loc.onDisk && initial {
			// Initial events as of a point only the disk holds would roll
			// the state back through every change since.
			err = f.store.expiredError(false)
		}
		switch {
		case err == nil:
			o.Start, o.Loc = loc.pos, loc
		case tok.Replayable() && !initial && (errors.Is(err, errs.ErrTokenExpired) || errors.Is(err, errs.ErrTokenAhead)):
			o.Start, o.Ahead = state.Position{RV: tok.Pos.RV}, errors.Is(err, errs.ErrTokenAhead)
			return o, OpenedReplay, nil
		default:
			if errors.Is(err, errs.ErrTokenExpired) {
				f.counters.ExpiredTokens.Add(1)
			}
			return o, 0, err
		}
	}
	switch {
	case initial:
		// A clone is O(1); the feed's later writes copy what they touch,
		// and count what it keeps (state.Clones).
		o.Tree, o.Eq, o.Build = f.store.cloneFor(l.sel)
		l.clone = f.store.clones.Take()
		o.Clone = l.clone
		o.Undo, _ = f.store.history.After(o.Start.Seq, int(f.store.pos.Seq-o.Start.Seq), nil)
	case o.Start.Seq == f.store.pos.Seq:
		l.joinLocked()
		return o, OpenedLive, nil
	}
	return o, OpenedCatchUp, nil
}

// The lease's parts its subscription reads without the feed's lock: set
// by Init and Open, before the subscription is shared.

// Entry is the hub's entry for the lease's feed.
func (l *Lease) Entry() *Entry { return l.entry }

// Done is closed when the subscription can deliver no more; Failure then
// says why.
func (l *Lease) Done() <-chan struct{} { return l.failed.Done() }

// HasFailed reports whether Done is closed.
func (l *Lease) HasFailed() bool { return l.failed.IsEnded() }

// AfterFail runs f once Done is closed, in its own goroutine; see
// Ending.After.
func (l *Lease) AfterFail(f func()) (stop func()) { return l.failed.After(f) }

// Failure is why the subscription failed; read it only once Done is
// closed.
func (l *Lease) Failure() error { return l.failure }

// Feed is the lease's feed.
func (l *Lease) Feed() *Feed { return l.feed }

// Reader is the reader's side of the subscription's member of the live
// subscribers: its queue, and its reader's state for its connection.
func (l *Lease) Reader() fanout.Reader { return l.member.Reader() }

// Selector is what the subscription selects.
func (l *Lease) Selector() *selection.Selector { return l.sel }

// Terms are what the subscription asked of its feed besides its selector.
func (l *Lease) Terms() LeaseTerms { return l.terms }

// View is the subscription's view, once Open has taken it.
func (l *Lease) View() *selection.View { return l.view }
