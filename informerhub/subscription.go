package informerhub

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/google/btree"

	"github.com/informerhub/informerhub/informerhub/celfilter"
	"github.com/informerhub/informerhub/informerhub/historystore"
)

// Subscription is one subscriber's stream of events. Next must be called
// from one goroutine at a time; Close may be called from any.
//
// A subscription moves through these phases:
//  1. initial events, when asked for: ADDED for every matching object of a
//     point-in-time clone of the state, then a bookmark that ends them;
//  2. replay, when resuming from a token the history cannot place (older
//     than the history, or ahead of the feed): the changes after the
//     token's resourceVersion, from an upstream watch (see replay);
//  3. catch-up: the history records after its start position, read straight
//     from the feed's history (no queue, so a slow start cannot overflow);
//  4. live: once caught up, it joins the feed's subscribers, atomically with
//     the last record it read, and receives records through its bounded
//     queue. A live subscriber whose queue is full when a record comes
//     falls behind: it leaves the live subscribers, passes what its queue
//     holds, and catches up again from the history (phase 3), as etcd's
//     watch cache serves its lagging watchers; so a burst (a relist's
//     thousands of differences) delays a subscriber, never ends it. It
//     ends (*TooSlowError) only if the history no longer holds its
//     position by the time it reads on.
type Subscription struct {
	feed  *feed
	sel   *selector
	view  *view         // the form events take; see view.go
	queue chan delivery // set when the subscription goes live
	// queueBytes is what the queue counts in the hub's memory until the
	// subscription is closed. Guarded by feed.mu.
	queueBytes int64
	// group is the subscription's group among the feed's live
	// subscribers, while it is one (dispatch.go). Guarded by feed.mu.
	group *subscriberGroup

	// failed is closed, under feed.mu, when the subscription can deliver no
	// more: it fell behind further than the history (failure is
	// errLeftBehind) or its informer stopped (failure is why). failure is
	// written before the close.
	failed  chan struct{}
	failure error
	closed  bool // guarded by feed.mu: Close was called; never go live
	// released is set, under feed.mu, once the subscription has given back
	// its share of the feed's filters and views (releaseLocked).
	released bool
	// owner is the request's (WatchRequest.Owner), for the limits per
	// owner. Set under feed.mu before the subscription is shared.
	owner string

	// lastToken points to the resume token of the last event Next
	// returned (or the start token); Err reads it from any goroutine.
	lastToken atomic.Pointer[string]

	closeOnce sync.Once

	// cancelReplay ends the current replay's upstream watch; nil without
	// one. Guarded by feed.mu: Close calls it from any goroutine.
	cancelReplay context.CancelFunc

	// behind is set, under feed.mu, when the live subscription's queue
	// was full for a record: it is no longer live, and behindAt (guarded by
	// feed.mu) is the position it has everything up to once its queue is
	// passed. Atomic so that Next checks it without the lock.
	behind   atomic.Bool
	behindAt position

	// Owned by the goroutine calling Next.
	eval        evaluation // scratch of the filter's evaluations in catch-up and replays
	phase       phase
	start       position     // where the subscription started
	initial     *stateCursor // phase initial
	replay      *replay      // phase replay
	backlog     []*record    // phase catch-up: records read, not yet passed
	backlogNext int
	at          position // phase catch-up: the position of everything passed (its seq is the last record's)
	// caughtUpFromBehind is set while catching up after falling behind:
	// losing its place in the history then ends the subscription, rather
	// than replaying from the API server what it was too slow to read.
	caughtUpFromBehind bool
	quietTicks         int // bookmark ticks since the last event returned
	bookmarks          *time.Ticker
}

// errLeftBehind marks a subscription that fell behind further than the
// history; Err turns it into a *TooSlowError with the subscription's last
// token.
var errLeftBehind = errors.New("fell behind the history")

type phase uint8

const (
	phaseInitial phase = iota
	phaseReplay
	phaseCatchUp
	phaseLive
)

// delivery is a record queued for a live subscriber.
type delivery struct {
	rec     *record
	variant variant
}

const catchUpBatch = 256

// subscribe starts a subscription at the current position, or at the token's.
// A token the history cannot place is replayed from the API server, whose
// watch opens here, bounded by ctx, so that a version the API server no
// longer has is refused before the subscription starts.
func (f *feed) subscribe(ctx context.Context, req *watchParams) (*Subscription, error) {
	sel, tok := req.sel, req.tok
	s := &Subscription{feed: f, sel: sel, failed: make(chan struct{})}
	initial := req.sendInitialEvents || (tok != nil && tok.initial)
	var undo []*record
	ahead := false // the token is ahead of the feed

	f.mu.Lock()
	if f.err != nil {
		f.mu.Unlock()
		return nil, f.err
	}
	if err := s.acquireLocked(req); err != nil {
		f.mu.Unlock()
		return nil, err
	}
	s.start = f.pos
	var loc located
	if tok != nil {
		var err error
		loc, err = f.locateLocked(tok.pos)
		if err == nil && loc.onDisk && initial {
			// Initial events as of a point only the disk holds would roll
			// the state back through every change since.
			err = f.expiredErrorLocked(false)
		}
		switch {
		case err == nil:
			s.start = loc.pos
		case replayable(tok) && !initial && (errors.Is(err, ErrTokenExpired) || errors.Is(err, ErrTokenAhead)):
			s.start = position{rv: tok.pos.rv}
			s.startReplayLocked(s.start.rv)
			ahead = errors.Is(err, ErrTokenAhead)
		default:
			s.releaseLocked()
			f.mu.Unlock()
			if errors.Is(err, ErrTokenExpired) {
				f.counters.expiredTokens.Add(1)
			}
			return nil, err
		}
	}
	var tree *btree.BTreeG[*object] // what initial events walk
	var eq *labelPair               // the label of tree's objects; nil when it is the state
	switch {
	case s.replay != nil:
	case initial:
		// A clone is O(1); the feed's later writes copy what they touch.
		tree, eq = f.cloneForLocked(sel)
		undo, _ = f.history.after(s.start.seq, int(f.pos.seq-s.start.seq), nil)
		s.phase = phaseInitial
	case s.start.seq == f.pos.seq:
		s.goLiveLocked()
	default:
		s.phase = phaseCatchUp
	}
	f.mu.Unlock()

	if s.replay != nil {
		var err error
		if ahead {
			err = f.checkNotAhead(ctx, s.start.rv)
		}
		if err == nil {
			err = s.replay.open(ctx, s)
		}
		if err != nil {
			s.replay.stop()
			f.mu.Lock()
			s.releaseLocked()
			f.mu.Unlock()
			return nil, err
		}
	}
	if loc.searchUpTo != 0 {
		// Placed by resourceVersion among the disk's records, outside the
		// lock: they never change once written.
		seq, err := f.hub.disk.lastAtOrBefore(ctx, f.resource, loc.searchFrom, loc.searchUpTo, s.start.rv)
		if err != nil {
			f.mu.Lock()
			s.releaseLocked()
			f.mu.Unlock()
			return nil, f.diskError(err)
		}
		s.start.seq = seq
	}
	s.at = s.start
	if initial {
		// Roll the clone back to the start position. A clone of an index
		// tree holds only the objects with its label, then as now.
		for i := len(undo) - 1; i >= 0; i-- {
			switch r := undo[i]; {
			case r.prev != nil && (eq == nil || eq.carriedBy(r.prev)):
				tree.ReplaceOrInsert(r.prev)
			case eq == nil || eq.carriedBy(r.obj):
				tree.Delete(r.obj)
			}
		}
		s.initial = newStateCursor(tree, sel)
		if tok != nil && tok.initial && tok.afterName != "" {
			s.initial.skipThrough(&object{namespace: tok.afterNamespace, name: tok.afterName})
		}
	}
	var startToken string
	switch {
	case tok != nil && (tok.initial || !initial):
		// Resuming: the token the client holds stays its resume point
		// until it receives something newer.
		startToken = f.token(*tok)
	case initial:
		startToken = f.token(token{pos: s.start, initial: true, selector: sel.fingerprint})
	default:
		startToken = f.token(token{pos: s.start})
	}
	s.lastToken.Store(&startToken)
	s.bookmarks = time.NewTicker(f.hub.cfg.BookmarkInterval / 2)
	return s, nil
}

// acquireLocked takes what the subscription holds of the feed while it
// lasts: a share of its filter and its view, within the feed's limits on
// distinct ones, overall and per owner. The caller holds feed.mu;
// releaseLocked gives them back.
func (s *Subscription) acquireLocked(req *watchParams) error {
	f := s.feed
	s.owner = req.owner
	var projKey string
	if req.proj != nil {
		projKey = req.proj.Key()
	}
	if err := f.checkOwnerLocked(s.owner, s.sel.filter, projKey); err != nil {
		return err
	}
	if err := f.refusedErrorLocked(s.sel); err != nil {
		return err
	}
	if flt := s.sel.filter; flt != nil {
		use := f.filters[flt.Expr()]
		if use == nil {
			if len(f.filters) >= f.hub.cfg.MaxFiltersPerResource {
				return &LimitError{Resource: f.info.Resource, Limit: LimitFilters, Max: f.hub.cfg.MaxFiltersPerResource}
			}
			use = &filterUse{filter: flt}
			f.filters[flt.Expr()] = use
		}
		use.refs++
	}
	v, err := f.acquireViewLocked(req.proj, req.includePrevious, req.encoding)
	if err != nil {
		s.releaseFilterLocked()
		return err
	}
	s.view = v
	f.addOwnerLocked(s.owner, s.sel.filter, projKey, 1)
	return nil
}

// releaseLocked gives back what acquireLocked took, once.
func (s *Subscription) releaseLocked() {
	if s.released {
		return
	}
	s.released = true
	s.releaseFilterLocked()
	var projKey string
	if s.view.proj != nil {
		projKey = s.view.proj.Key()
	}
	s.feed.addOwnerLocked(s.owner, s.sel.filter, projKey, -1)
	s.feed.releaseViewLocked(s.view)
}

func (s *Subscription) releaseFilterLocked() {
	if flt := s.sel.filter; flt != nil {
		f := s.feed
		if use := f.filters[flt.Expr()]; use != nil {
			if use.refs--; use.refs == 0 {
				delete(f.filters, flt.Expr())
			}
		}
	}
}

// ownerUse is the distinct filters and projections one owner's
// subscriptions of a feed hold, with how many hold each.
type ownerUse struct {
	filters, projections map[string]int
}

// checkOwnerLocked refuses a subscription that would take its owner past
// Config.MaxFiltersPerOwner or MaxProjectionsPerOwner distinct ones, so that
// no one client takes every slot of the resource type.
func (f *feed) checkOwnerLocked(owner string, flt *celfilter.Filter, projKey string) error {
	use := f.owners[owner]
	if owner == "" || use == nil {
		return nil
	}
	if flt != nil && use.filters[flt.Expr()] == 0 && len(use.filters) >= f.hub.cfg.MaxFiltersPerOwner {
		return &LimitError{Resource: f.info.Resource, Limit: LimitFiltersPerOwner, Max: f.hub.cfg.MaxFiltersPerOwner}
	}
	if projKey != "" && use.projections[projKey] == 0 && len(use.projections) >= f.hub.cfg.MaxProjectionsPerOwner {
		return &LimitError{Resource: f.info.Resource, Limit: LimitProjectionsPerOwner, Max: f.hub.cfg.MaxProjectionsPerOwner}
	}
	return nil
}

// addOwnerLocked counts (delta 1) or uncounts (-1) a subscription of owner's
// holding a filter and a projection.
func (f *feed) addOwnerLocked(owner string, flt *celfilter.Filter, projKey string, delta int) {
	if owner == "" || flt == nil && projKey == "" {
		return
	}
	use := f.owners[owner]
	if use == nil {
		use = &ownerUse{filters: map[string]int{}, projections: map[string]int{}}
		f.owners[owner] = use
	}
	count := func(m map[string]int, key string) {
		if m[key] += delta; m[key] <= 0 {
			delete(m, key)
		}
	}
	if flt != nil {
		count(use.filters, flt.Expr())
	}
	if projKey != "" {
		count(use.projections, projKey)
	}
	if len(use.filters) == 0 && len(use.projections) == 0 {
		delete(f.owners, owner)
	}
}

// Next returns the next event. It blocks until there is one, the context
// ends, or the subscription fails. A failed subscription returns the same
// error on every later call.
func (s *Subscription) Next(ctx context.Context) (*Event, error) {
	for {
		if err := s.Err(); err != nil {
			return nil, err
		}
		switch s.phase {
		case phaseInitial:
			if err := s.stoppedOrCanceled(ctx); err != nil {
				return nil, err
			}
			o, done := s.initial.step()
			if s.initial.costly() {
				return nil, s.endCostly(&s.initial.eval)
			}
			if o != nil {
				return s.sent(s.initialEvent(o)), nil
			}
			if !done {
				continue // a scanned batch matched nothing; check ctx again
			}
			s.initial = nil
			s.phase = phaseCatchUp
			return s.sent(s.bookmark(s.start, true)), nil
		case phaseReplay:
			ev, err := s.nextReplay(ctx)
			if ev != nil || err != nil {
				return ev, err
			}
		case phaseCatchUp:
			if err := s.stoppedOrCanceled(ctx); err != nil {
				return nil, err
			}
			ev, err := s.nextCatchUp(ctx)
			if ev != nil || err != nil {
				return ev, err
			}
		case phaseLive:
			ev, err := s.nextLive(ctx)
			if ev != nil || err != nil {
				return ev, err
			}
		}
	}
}

// stoppedOrCanceled is the check of the phases that do not wait on channels.
func (s *Subscription) stoppedOrCanceled(ctx context.Context) error {
	select {
	case <-s.feed.stopped:
		return s.feed.err
	case <-ctx.Done():
		return ctx.Err()
	default:
		return nil
	}
}

// nextCatchUp returns the next selected history record, or nil once the
// subscription has caught up and gone live.
func (s *Subscription) nextCatchUp(ctx context.Context) (*Event, error) {
	f := s.feed
	for {
		for s.backlogNext < len(s.backlog) {
			r := s.backlog[s.backlogNext]
			s.backlog[s.backlogNext] = nil
			s.backlogNext++
			s.at = r.pos
			s.eval.reset()
			v := s.sel.variant(r, &s.eval)
			if len(s.eval.costly) > 0 {
				return nil, s.endCostly(&s.eval)
			}
			if v != variantNone {
				if ev := f.event(r, v, s.view); ev != nil {
					return s.sent(ev), nil
				}
			}
		}
		f.mu.Lock()
		if err := s.endedLocked(); err != nil {
			f.mu.Unlock()
			return nil, err
		}
		batch, ok := f.history.after(s.at.seq, catchUpBatch, s.backlog[:0])
		if !ok && f.disk != nil && f.disk.holds(s.at.seq) {
			// Older than the memory: a batch from the disk, read outside
			// the lock; the memory keeps every record not yet written.
			upTo := f.history.first
			f.mu.Unlock()
			batch, err := f.readDisk(ctx, s.at.seq+1, upTo, s.backlog[:0])
			if err != nil {
				return nil, s.diskFailed(ctx, err)
			}
			// Back to Next, which checks ctx before the next batch: a scan
			// of the disk that selects nothing stops when its caller goes.
			s.backlog, s.backlogNext = batch, 0
			return nil, nil
		}
		if !ok {
			// The history moved past this subscriber while it caught up:
			// what it needs next is only upstream now.
			if s.caughtUpFromBehind {
				// It reads slower than the resource type changes: a
				// replay would only move that load to the API server.
				f.counters.slowDisconnects.Add(1)
				f.log.Warn("subscriber fell further behind than the history; disconnecting it", "selector", s.describe())
				s.failLocked(errLeftBehind)
				f.mu.Unlock()
				return nil, s.Err()
			}
			if s.at.offset != 0 || s.at.rv == 0 {
				// Inside a relist's batch: no version says what it has.
				f.mu.Unlock()
				return nil, f.expired(false)
			}
			s.startReplayLocked(s.at.rv)
			f.mu.Unlock()
			return nil, nil
		}
		if len(batch) == 0 {
			s.goLiveLocked()
			f.mu.Unlock()
			s.backlog, s.backlogNext = nil, 0
			return nil, nil
		}
		f.mu.Unlock()
		s.backlog, s.backlogNext = batch, 0
	}
}

// diskFailed ends the subscription on a failed read of the disk history:
// retention deleted what it was reading (it is too slow, or its token
// expired), or the disk failed.
func (s *Subscription) diskFailed(ctx context.Context, err error) error {
	f := s.feed
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if !errors.Is(err, historystore.ErrMissing) {
		return f.diskError(err)
	}
	if s.caughtUpFromBehind {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.counters.slowDisconnects.Add(1)
		if s.failure == nil {
			s.failLocked(errLeftBehind)
		}
		return s.Err()
	}
	return f.expired(false)
}

// endedLocked returns why the subscription can go no further, if it can't:
// it failed (or was closed), or its informer stopped. The caller holds
// feed.mu.
func (s *Subscription) endedLocked() error {
	if s.failure != nil {
		return s.Err()
	}
	if s.feed.err != nil {
		return s.feed.err
	}
	// Refused since the subscription started (see filteruse.go)?
	return s.feed.refusedErrorLocked(s.sel)
}

// endCostly ends the subscription on its filter exceeding its cost in one
// of its own evaluations (initial events, catch-up, a replay), and refuses
// the filter on the feed, ending its other subscriptions too.
func (s *Subscription) endCostly(ev *evaluation) error {
	f := s.feed
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tripLocked(ev.costly, s.sel)
	ev.costly = nil
	if s.failure == nil {
		s.failLocked(f.refusedErrorLocked(s.sel))
	}
	return s.Err()
}

// goLiveLocked makes s one of the feed's live subscribers. The caller holds
// feed.mu and has passed every record up to the feed's position.
func (s *Subscription) goLiveLocked() {
	if s.queue == nil {
		s.queue = make(chan delivery, s.feed.hub.cfg.QueueSize)
		if !s.closed {
			s.queueBytes = QueueBytes(cap(s.queue))
			s.feed.hub.memory.queues.Force(s.queueBytes)
		}
	}
	s.phase = phaseLive
	s.caughtUpFromBehind = false
	s.behind.Store(false)
	if !s.closed {
		s.feed.live.add(s)
	}
}

// QueueBytes is what a live subscriber's queue of size changes holds, in
// the hub's memory budget (Config.MemoryBudget); 0 takes the default size.
func QueueBytes(size int) int64 {
	if size <= 0 {
		size = DefaultQueueSize
	}
	return int64(size) * int64(unsafe.Sizeof(delivery{}))
}

// fellBehindLocked takes s, whose queue is full, out of the live subscribers
// (the caller has removed it): it has everything up to at once it has passed
// its queue, and catches up from there. The caller holds feed.mu.
func (s *Subscription) fellBehindLocked(at position) {
	s.behindAt = at
	s.behind.Store(true)
	s.feed.counters.fellBehind.Add(1)
}

// nextLive returns the next event of the queue; or nil, once the
// subscription fell behind and has passed its queue, to catch up.
func (s *Subscription) nextLive(ctx context.Context) (*Event, error) {
	f := s.feed
	for {
		// Once behind is set nothing more is queued, and the queue was
		// full: when it is empty, everything up to behindAt has been passed.
		// Checked before every wait, so a wait on an empty queue never
		// misses the switch (behind is only set on a full one).
		if s.behind.Load() && len(s.queue) == 0 {
			f.mu.Lock()
			s.at, s.phase, s.caughtUpFromBehind = s.behindAt, phaseCatchUp, true
			f.mu.Unlock()
			return nil, nil
		}
		select {
		case <-s.failed:
			// Checked first so a subscriber that failed stops at once.
			return nil, s.Err()
		default:
		}
		select {
		case d := <-s.queue:
			if ev := f.event(d.rec, d.variant, s.view); ev != nil {
				return s.sent(ev), nil
			}
			// Nothing the subscriber asked for changed: its position
			// moves on with the next event or bookmark.
		case <-s.failed:
			return nil, s.Err()
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.bookmarks.C:
			// Ticks come every half interval: two quiet ones in a row
			// mean the stream has been silent for at most one interval.
			if s.quietTicks++; s.quietTicks < 2 {
				continue
			}
			// Everything up to the feed's position has been dispatched;
			// if none of it is waiting here, this subscriber has it all.
			f.mu.Lock()
			pending := len(s.queue)
			pos := f.pos
			f.mu.Unlock()
			if pending > 0 || s.behind.Load() {
				continue
			}
			return s.sent(s.bookmark(pos, false)), nil
		}
	}
}

// failLocked ends a live subscription; the caller holds feed.mu.
func (s *Subscription) failLocked(err error) {
	s.failure = err
	close(s.failed)
}

// Done is closed when the subscription can deliver no more: it fell behind
// further than the history, its informer stopped, or it was closed. Next then returns Err.
// A caller blocked elsewhere (in a send to a client that stopped reading) can
// watch Done to give up on that client.
func (s *Subscription) Done() <-chan struct{} { return s.failed }

// Err returns why the subscription failed, once Done is closed; otherwise nil.
func (s *Subscription) Err() error {
	select {
	case <-s.failed:
	default:
		return nil
	}
	if s.failure == errLeftBehind {
		return s.tooSlow()
	}
	return s.failure
}

// sent records ev as the last event returned.
func (s *Subscription) sent(ev *Event) *Event {
	s.lastToken.Store(&ev.ResumeToken)
	s.feed.counters.sent.Add(1)
	s.quietTicks = 0
	return ev
}

func (s *Subscription) initialEvent(o *object) *Event {
	ev := &Event{
		Type:            EventAdded,
		Object:          s.feed.project(s.view, o.json),
		ResourceVersion: strconv.FormatUint(o.rv, 10),
		ResumeToken: s.feed.token(token{pos: s.start, initial: true, selector: s.sel.fingerprint,
			afterNamespace: o.namespace, afterName: o.name}),
		Encoding: s.view.encoding,
	}
	s.feed.hub.encode(ev)
	return ev
}

func (s *Subscription) bookmark(pos position, initialEventsEnd bool) *Event {
	ev := &Event{
		Type:             EventBookmark,
		ResourceVersion:  strconv.FormatUint(pos.rv, 10),
		ResumeToken:      s.feed.token(token{pos: pos}),
		InitialEventsEnd: initialEventsEnd,
		Encoding:         s.view.encoding,
	}
	s.feed.hub.encode(ev)
	return ev
}

func (s *Subscription) tooSlow() error {
	return &TooSlowError{Resource: s.feed.info.Resource, ResumeToken: s.ResumeToken()}
}

// ResumeToken returns the token of the last event Next returned, or the one
// the subscription started from. It may be called from any goroutine.
func (s *Subscription) ResumeToken() string { return *s.lastToken.Load() }

// Close ends the subscription and releases its informer.
// A Next blocked in another goroutine returns ErrSubscriptionClosed.
func (s *Subscription) Close() {
	s.closeOnce.Do(func() {
		f := s.feed
		f.mu.Lock()
		s.closed = true
		f.hub.memory.queues.Force(-s.queueBytes)
		s.queueBytes = 0
		f.live.remove(s)
		s.releaseLocked()
		if s.failure == nil {
			s.failLocked(ErrSubscriptionClosed)
		}
		cancelReplay := s.cancelReplay
		f.mu.Unlock()
		if cancelReplay != nil {
			cancelReplay()
		}
		s.bookmarks.Stop()
		f.hub.release(f)
	})
}

func (s *Subscription) describe() string {
	desc := fmt.Sprintf("namespace=%q labels=%q fields=%q", s.sel.namespace, canonical(s.sel.labels), canonical(s.sel.fields))
	if s.sel.filter != nil {
		desc += fmt.Sprintf(" filter=%q", truncate(s.sel.filter.Expr()))
	}
	if s.view != defaultView {
		desc += fmt.Sprintf(" view=%q", truncate(s.view.key))
	}
	return desc
}

// stateCursor walks the matching objects of a state clone in order, scanning
// a bounded batch at a time, reading the clone without locks. The clone may
// be of a label index tree (see cloneForLocked), which holds fewer objects
// in the same order.
type stateCursor struct {
	tree    *btree.BTreeG[*object]
	sel     *selector
	buf     []*object
	bufNext int
	// from is where the next batch starts; fromExclusive skips from itself.
	from          *object
	fromExclusive bool
	done          bool
	examined      int // objects tested against sel, for tests
	// eval is the scratch of the filter's evaluations; once it holds a
	// filter that exceeded its cost, the cursor stops (see costly).
	eval evaluation
}

// costly reports whether the cursor stopped on a filter that exceeded its
// cost.
func (c *stateCursor) costly() bool { return len(c.eval.costly) > 0 }

const cursorBatch = 128

func newStateCursor(tree *btree.BTreeG[*object], sel *selector) *stateCursor {
	return &stateCursor{tree: tree, sel: sel, from: &object{namespace: sel.namespace}}
}

// skipThrough makes the cursor continue after o.
func (c *stateCursor) skipThrough(o *object) {
	if c.sel.namespace != "" && o.namespace != c.sel.namespace {
		if o.namespace > c.sel.namespace {
			c.done = true
		}
		return
	}
	c.from, c.fromExclusive = o, true
}

// next returns the next matching object, or nil at the end.
func (c *stateCursor) next() *object {
	if !c.more() {
		return nil
	}
	return c.take()
}

// step is next bounded to scanning one batch: it returns nil and done=false
// when that batch matched nothing, so a caller can check for cancellation
// between batches of a large state.
func (c *stateCursor) step() (o *object, done bool) {
	if c.bufNext >= len(c.buf) {
		if c.done {
			return nil, true
		}
		c.fill()
		if c.bufNext >= len(c.buf) {
			return nil, c.done
		}
	}
	return c.take(), false
}

func (c *stateCursor) take() *object {
	o := c.buf[c.bufNext]
	c.buf[c.bufNext] = nil
	c.bufNext++
	return o
}

// peek returns the object next will return, or nil at the end.
func (c *stateCursor) peek() *object {
	if !c.more() {
		return nil
	}
	return c.buf[c.bufNext]
}

// more reports whether next will return an object.
func (c *stateCursor) more() bool {
	for c.bufNext >= len(c.buf) {
		if c.done {
			return false
		}
		c.fill()
	}
	return true
}

func (c *stateCursor) fill() {
	c.buf, c.bufNext = c.buf[:0], 0
	scanned := 0
	finished := true
	c.tree.AscendGreaterOrEqual(c.from, func(o *object) bool {
		if c.fromExclusive && !objectLess(c.from, o) {
			return true // o is from itself
		}
		if c.sel.namespace != "" && o.namespace != c.sel.namespace {
			return false // past the namespace
		}
		c.from, c.fromExclusive = o, true
		c.examined++
		c.eval.reset()
		if c.sel.matches(o, &c.eval) {
			c.buf = append(c.buf, o)
		}
		if c.costly() {
			finished = true
			return false
		}
		scanned++
		if len(c.buf) == cursorBatch || scanned == 16*cursorBatch {
			finished = false
			return false
		}
		return true
	})
	c.done = finished
}
