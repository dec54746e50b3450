package stream

import (
	"context"
	"errors"

	"github.com/informerhub/informerhub/informerhub/historystore"
	"github.com/informerhub/informerhub/informerhub/internal/event"
	"github.com/informerhub/informerhub/informerhub/internal/feed"
	"github.com/informerhub/informerhub/informerhub/internal/selection"
	"github.com/informerhub/informerhub/informerhub/internal/state"
	"github.com/informerhub/informerhub/informerhub/internal/token"
)

// phase is a stage of a subscription's stream (see Subscription). step
// returns the next event; or the phase that follows, to step next; or why
// the subscription ends. It returns none of them when it has merely made
// progress: Next checks that the subscription goes on, and steps again.
type phase interface {
	step(ctx context.Context) (ev *event.Event, next phase, err error)
}

// initialPhase sends a subscription's initial events: ADDED for every
// matching object of the state as it was at start, in order, then a
// bookmark that ends them, after which the subscription catches up from
// start.
type initialPhase struct {
	s      *Stream
	cursor *Cursor
	start  state.Position
	clone  *state.Clone // what the cursor walks, counted (Lease.Clone)
}

// newInitialPhase rolls the state's clone o.tree back to o.start, and walks
// it; tok, when it is a token of initial events, says how far an earlier
// subscription got.
func newInitialPhase(s *Stream, o *feed.Opening, tok *token.Token) *initialPhase {
	// A clone of an index tree holds only the objects with its label, then
	// as now.
	tree, eq := o.Tree, o.Eq
	for i := len(o.Undo) - 1; i >= 0; i-- {
		switch r := o.Undo[i]; {
		case r.Previous != nil && (eq == nil || eq.CarriedBy(r.Previous)):
			tree.ReplaceOrInsert(r.Previous)
		case eq == nil || eq.CarriedBy(r.Object):
			tree.Delete(r.Object)
		}
	}
	p := &initialPhase{s: s, cursor: NewCursor(tree, s.lease.Selector(), eq), start: o.Start, clone: o.Clone}
	if tok != nil && tok.Initial && tok.AfterName != "" {
		p.cursor.skipThrough(&state.Object{Namespace: tok.AfterNamespace, Name: tok.AfterName})
	}
	return p
}

func (p *initialPhase) step(ctx context.Context) (*event.Event, phase, error) {
	s := p.s
	if err := s.stoppedOrCanceled(ctx); err != nil {
		return nil, nil, err
	}
	if err := p.clone.Err(); err != nil {
		return nil, nil, err
	}
	o, done := p.cursor.step()
	events, vw := s.lease.Feed().Events(), s.lease.View()
	switch {
	case o.obj != nil:
		ev := events.Initial(o.obj, token.Token{Pos: p.start, Initial: true, Selector: s.lease.Selector().Fingerprint()}, vw, o.Undecided)
		return ev, nil, nil
	case !done:
		return nil, nil, nil // a scanned batch matched nothing; check ctx again
	}
	s.lease.EndClone()
	return events.Bookmark(p.start, true, vw.Encoding()), &catchUpPhase{s: s, at: p.start}, nil
}

// catchUpPhase reads a subscription's records straight from its feed's
// history, in memory or on disk, a batch at a time and with no queue, from
// at until it has read them all; then it joins the live subscribers.
type catchUpPhase struct {
	s *Stream
	// at is the position of everything passed on; its seq is the last
	// record's.
	at state.Position
	// fromBehind is set when catching up after falling behind: losing its
	// place in the history then ends the subscription, rather than
	// replaying from the API server what it was too slow to read.
	fromBehind bool
	// backlog holds the batch read, passed up to backlog[next].
	backlog []*state.Record
	next    int
	eval    selection.Evaluation // the scratch of the filter's evaluations
}

// catchUpBatch is how many records a catch-up reads of the history at a
// time, under the feed's lock.
const catchUpBatch = 256

func (c *catchUpPhase) step(ctx context.Context) (*event.Event, phase, error) {
	if err := c.s.stoppedOrCanceled(ctx); err != nil {
		return nil, nil, err
	}
	for {
		if ev, err := c.pass(); ev != nil || err != nil {
			return ev, nil, err
		}
		// A catch-up that reads much and selects little (a selective
		// subscriber, hours of history on disk) is as quiet as a live
		// stream with nothing to send: it gets bookmarks too, at the
		// position it has read up to; never inside a relist's batch, whose
		// records carry the version before the relist, older than the
		// objects' own it may have sent.
		if c.at.Offset == 0 && c.s.quiet.ticked() {
			f := c.s.lease.Feed()
			return f.Events().Bookmark(c.at, false, c.s.lease.View().Encoding()), nil, nil
		}
		batch, diskUpTo, next, err := c.fetch()
		switch {
		case err != nil || next != nil:
			return nil, next, err
		case diskUpTo != 0:
			batch, err := c.readDisk(ctx, diskUpTo)
			if err != nil {
				next, err := c.diskFailed(ctx, err)
				return nil, next, err
			}
			// Back to Next, which checks ctx before the next batch: a scan
			// of the disk that selects nothing stops when its caller goes.
			c.backlog, c.next = batch, 0
			return nil, nil, nil
		}
		c.backlog, c.next = batch, 0
	}
}

// pass returns the event of the next record of the backlog the
// subscription selects, if any.
func (c *catchUpPhase) pass() (*event.Event, error) {
	s := c.s
	for c.next < len(c.backlog) {
		r := c.backlog[c.next]
		c.backlog[c.next] = nil
		c.next++
		c.at = r.Pos
		c.eval.Reset()
		v, undecided := s.lease.Selector().Variant(r, &c.eval)
		if v != state.VariantNone {
			events := s.lease.Feed().Events()
			if ev := events.OfRecord(r, v, s.lease.View()); ev != nil {
				return events.MarkedOf(r, v, s.lease.View(), ev, undecided), nil
			}
		}
	}
	return nil, nil
}

// fetch reads the next batch of records after c.at from the history in
// memory (Lease.Fetch, under the feed's lock). When the memory no longer
// holds them, it returns the position up to which the disk has them, to be
// read without the lock (the memory keeps every record not yet written); else the phase
// that follows: live, when there is nothing more to read; a replay, when
// the history moved past the subscriber; or why the subscription ends.
func (c *catchUpPhase) fetch() (batch []*state.Record, diskUpTo uint64, next phase, err error) {
	s := c.s
	// One that fell behind reads slower than the resource type changes: a
	// replay would only move that load to the API server.
	batch, diskUpTo, what, err := s.lease.Fetch(c.at, catchUpBatch, c.backlog[:0], !c.fromBehind && !s.lease.Terms().NeverReplay)
	switch {
	case err != nil:
		return nil, 0, nil, s.errOf(err)
	case what == feed.FetchedBehind:
		return nil, 0, nil, s.leftBehind()
	case what == feed.FetchedReplay:
		// The history moved past this subscriber while it caught up: what
		// it needs next is only upstream now.
		return nil, 0, s.replay(c.at.RV), nil
	case what == feed.FetchedLive:
		return nil, 0, &livePhase{s: s}, nil
	}
	return batch, diskUpTo, nil, nil
}

// readDisk reads a batch of the feed's history on disk after c.at, before
// upTo.
func (c *catchUpPhase) readDisk(ctx context.Context, upTo uint64) ([]*state.Record, error) {
	return c.s.lease.Feed().ReadDisk(ctx, c.at.Seq, upTo, c.backlog[:0])
}

// diskFailed handles a failed read of the disk history: the disk failed,
// or retention deleted what it was reading. Then, as when the memory's
// history moves past a subscriber (fetch), one that fell behind is
// disconnected, and another replays from the API server, which answers
// exactly or with 410 (OUT_OF_RANGE); a position no version names
// (inside a relist's batch) expires.
func (c *catchUpPhase) diskFailed(ctx context.Context, err error) (phase, error) {
	s := c.s
	f := s.lease.Feed()
	switch {
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case !errors.Is(err, historystore.ErrMissing):
		return nil, f.ReadError(err)
	}
	switch {
	case c.fromBehind || s.lease.Terms().NeverReplay:
		s.lease.LeaveBehind()
		return nil, s.leftBehind()
	case c.at.Offset != 0 || c.at.RV == 0:
		return nil, f.Expired(false)
	}
	return s.replay(c.at.RV), nil
}

// livePhase reads a live subscriber's queue, which its feed fills with the
// records it selects, and sends a bookmark when the stream has been quiet
// for Config.BookmarkInterval. When the subscriber fell behind, it passes
// what its queue holds, then catches up from where it fell behind.
type livePhase struct{ s *Stream }

func (p *livePhase) step(ctx context.Context) (*event.Event, phase, error) {
	s := p.s
	m, f := s.lease.Reader(), s.lease.Feed()
	for {
		if s.lease.HasFailed() {
			// Checked first so a subscriber that failed stops at once.
			return nil, nil, s.Err()
		}
		// Nor does a caller who gave up get what its queue holds.
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		select {
		case <-f.Stopped():
			// Its feed fails its subscribers as it stops; this is for one
			// that broke stopping (feed.Feed.stopAfterPanic).
			return nil, nil, f.Err()
		default:
		}
		// Read before the queue: once behind is set nothing more is
		// queued, so a queue found empty after has passed everything up to
		// behindAt.
		behind := m.IsBehind()
		d, ok := m.Pop()
		if ok {
			v := d.Variant &^ state.UndecidedFlag
			if ev := f.Events().OfRecord(d.Record, v, s.lease.View()); ev != nil {
				if d.Variant&state.UndecidedFlag != 0 {
					// Cached on the objects: looked up, rarely evaluated again.
					_, undecided := s.lease.Selector().Variant(d.Record, nil)
					ev = f.Events().MarkedOf(d.Record, v, s.lease.View(), ev, undecided)
				}
				return ev, nil, nil
			}
			// Nothing the subscriber asked for changed: its position
			// moves on with the next event or bookmark.
			continue
		}
		// Behind, and the queue it filled is empty: catch up from where it
		// fell behind. Checked before every wait, so a wait on an empty
		// queue never misses the switch (behind is only set on a full one).
		if behind {
			return nil, &catchUpPhase{s: s, at: s.lease.FellBehindAt(), fromBehind: true}, nil
		}
		if s.quiet.ticked() {
			// Everything up to the feed's position has been dispatched;
			// if none of it is waiting here, this subscriber has it all.
			pos, pending := s.lease.QuietAt()
			if pending == 0 && !m.IsBehind() {
				return f.Events().Bookmark(pos, false, s.lease.View().Encoding()), nil, nil
			}
		}
		// Two cases, not one per cause: failures, deliveries and ticks
		// all wake s.wake (see Stream.wake).
		m.Waiting()
		select {
		case <-s.wake:
			m.Awake()
		case <-ctx.Done():
			m.Awake()
			return nil, nil, ctx.Err()
		}
	}
}
