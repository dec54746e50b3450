package informerhub

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/btree"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/cache"

	"github.com/informerhub/informerhub/informerhub/budget"
	"github.com/informerhub/informerhub/informerhub/historystore"
	"github.com/informerhub/informerhub/informerhub/upstream"
)

// feed is the one informer of one resource type and everything the hub keeps
// for it: the current state, a history of recent changes, and the live
// subscribers. Its process method is the informer's only handler.
//
// The informer is built from client-go's Reflector and RealFIFO in atomic
// mode, with process as its Process function. Unlike a SharedInformer's
// handlers, process sees a relist as one ReplacedAll delta and sees
// bookmarks, so the hub computes the true differences of a relist itself,
// and its position follows the API server even while nothing changes.
type feed struct {
	hub      *Hub
	info     upstream.ResourceInfo
	resource string // the resource as tokens name it
	epoch    uint64
	log      *slog.Logger
	counters *resourceCounters // the resource type's, shared with the feeds before and after this one

	lw         cache.ListerWatcher // also opens the upstream watches of replays
	cancel     context.CancelFunc
	done       chan struct{} // closed when the informer's goroutines have exited
	synced     chan struct{} // closed when the initial list is in state
	listFailed chan struct{} // closed when a list fails before the first sync
	stopped    chan struct{} // closed by stop; err says why

	// Guarded by hub.mu.
	refs int // subscriptions and snapshots using the feed, and its retainer (retain.go)
	// retainedRefs is the refs of Config.Retain's retainer (0 or 1).
	retainedRefs int
	idleGen      uint64
	idleTimer    idleTimer

	mu sync.Mutex // guards the fields below; state, history and pos advance together
	// state is the current objects, ordered by namespace and name. Clones
	// are taken for snapshots and initial events; it is never mutated
	// outside mu.
	state *btree.BTreeG[*object]
	// index indexes some label keys of state; it changes with state, by
	// putLocked and deleteLocked.
	index   labelIndex
	history history
	// stateBytes counts the state's objects in the hub's memory.state.
	stateBytes *budget.Bytes
	// oldestAt is when the history's oldest record arrived (Unix
	// nanoseconds), or 0 when memory eviction may take none; written under
	// mu (noteOldestLocked), read without it (Hub.evictOldest).
	oldestAt atomic.Int64
	pos      position
	live     dispatcher    // live subscribers
	advanced chan struct{} // closed when pos moves; see advancedLocked
	// views are the forms subscribers receive objects in (view.go), by
	// key; projections counts the views of each distinct projection, and
	// filters the subscriptions of each distinct filter, both for the
	// limits on them (Config.MaxProjectionsPerResource and
	// MaxFiltersPerResource).
	views       map[string]*view
	projections map[string]int
	filters     map[string]*filterUse
	// refused are the selectors refused until the time given because their
	// filter exceeded its cost, by the digest of their key (see
	// filteruse.go).
	refused map[[sha256.Size]byte]time.Time
	// owners are what each owner's subscriptions hold (see
	// checkOwnerLocked).
	owners map[string]*ownerUse
	// relists are the version ranges relists jumped across that the
	// history still reaches; see insideRelistLocked.
	relists  []versionRange
	isSynced bool
	listErr  error // the last list error before the first sync
	// progressAt is when the upstream last delivered anything (a list, a
	// change, a bookmark); failingSince is when its lists and watches
	// started failing since then (zero while they do not), and upstreamErr
	// the last failure. See watchError.
	progressAt, failingSince time.Time
	upstreamErr              error
	staleCheck               *time.Timer // see checkStale; stopped with the feed
	// disk is the resource type's history on disk while this feed writes
	// it (durable.go); nil without one. restore is what the disk held when
	// the feed started, until its first list takes it; epochs are the
	// earlier runs whose records the disk holds (see recordedLocked).
	disk            *diskLog
	restore         *restored
	epochs          []historystore.Epoch
	err             error // why the feed stopped; set once, before stopped is closed
	closeListFailed sync.Once
}

// idleTimer is the subset of *time.Timer the hub uses, so tests can see it.
type idleTimer interface{ Stop() bool }

const btreeDegree = 32

func newFeed(h *Hub, info upstream.ResourceInfo, counters *resourceCounters) *feed {
	return &feed{
		hub:         h,
		counters:    counters,
		info:        info,
		resource:    upstream.FormatResource(info.Resource),
		epoch:       rand.Uint64() | 1, // never 0, the epoch of replayed events' tokens
		log:         h.log.With("resource", upstream.FormatResource(info.Resource)),
		done:        make(chan struct{}),
		synced:      make(chan struct{}),
		listFailed:  make(chan struct{}),
		stopped:     make(chan struct{}),
		state:       btree.NewG(btreeDegree, objectLess),
		index:       newLabelIndex(h.memory.indexes),
		stateBytes:  budget.Counter(h.memory.state),
		live:        newDispatcher(),
		views:       map[string]*view{},
		projections: map[string]int{},
		filters:     map[string]*filterUse{},
		refused:     map[[sha256.Size]byte]time.Time{},
		owners:      map[string]*ownerUse{},
	}
}

// start runs the informer until ctx ends or the feed stops.
func (f *feed) start(ctx context.Context, lw cache.ListerWatcher) {
	f.lw = lw
	if f.hub.disk != nil {
		lw = &diskListerWatcher{ListerWatcherWithContext: cache.ToListerWatcherWithContext(lw), feed: f}
	}
	ctx, f.cancel = context.WithCancel(ctx)
	fifo := cache.NewRealFIFOWithOptions(cache.RealFIFOOptions{
		Name:                  "informerhub " + f.resource,
		AtomicEvents:          true,
		UnlockWhileProcessing: true,
		EmitDeltaTypeBookmark: true,
	})
	controller := cache.New(&cache.Config{
		Queue:                        fifo,
		ListerWatcher:                newCountedListerWatcher(lw, &f.counters.watchRestarts),
		Process:                      f.process,
		ObjectDescription:            f.resource,
		WatchErrorHandlerWithContext: f.watchError,
	})
	go func() {
		defer close(f.done)
		controller.RunWithContext(ctx)
	}()
	f.log.Info("informer started")
}

// stop ends the feed: its subscribers end with err, its informer stops.
func (f *feed) stop(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopLocked(err)
}

func (f *feed) stopLocked(err error) {
	if f.err != nil {
		return
	}
	f.err = err
	// Stopped before any subscriber learns of it: whoever a failure wakes
	// sees the feed stopped.
	close(f.stopped)
	if f.staleCheck != nil {
		f.staleCheck.Stop()
	}
	f.live.each(func(s *Subscription) {
		f.live.remove(s)
		s.failLocked(err)
	})
	f.cancel()
	// Its memory is the next feed's to fill: what it holds goes once its
	// last subscriber lets go of it.
	if f.isSynced {
		f.history.release()
	}
	f.oldestAt.Store(0)
	if f.disk != nil {
		f.hub.disk.notify() // to write what is left, and let the next feed start from it
	}
	f.index.release()
	f.stateBytes.Drain()
	f.log.Info("informer stopped", "reason", err)
}

func (f *feed) isStopped() bool {
	select {
	case <-f.stopped:
		return true
	default:
		return false
	}
}

// waitSynced waits until the initial list is in state. It fails fast when
// listing fails, so clients learn of an unreachable or forbidding API server
// instead of hanging; the informer keeps retrying in the background.
func (f *feed) waitSynced(ctx context.Context) error {
	select {
	case <-f.synced:
		return nil
	case <-f.stopped:
		return f.err
	case <-ctx.Done():
		return ctx.Err()
	case <-f.listFailed:
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.isSynced {
			return nil
		}
		if apierrors.IsNotFound(f.listErr) {
			// Discovery knew the resource, the API server no longer serves
			// it (a CRD was just deleted).
			return &ResourceError{Resource: f.info.Resource, Err: ErrUnknownResource}
		}
		return &ResourceError{Resource: f.info.Resource, Err: fmt.Errorf("%w: listing failed: %w", ErrUnavailable, f.listErr)}
	}
}

// watchError is called by the reflector when a list or watch fails.
func (f *feed) watchError(_ context.Context, _ *cache.Reflector, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	// The stored state is the first list when the disk holds the type
	// (f.restore, until it is processed): an error before the sync is
	// then its watch's (the API server no longer has the stored version,
	// and the Reflector lists), not a failed list.
	if !f.isSynced && f.restore == nil {
		f.listErr = err
		f.closeListFailed.Do(func() { close(f.listFailed) })
		f.log.Warn("listing failed; retrying", "error", err)
		return
	}
	if apierrors.IsNotFound(err) {
		// The resource type is gone (its CRD was deleted): say so rather
		// than keep subscribers waiting for changes that cannot come.
		f.stopLocked(&ResourceError{Resource: f.info.Resource, Err: ErrUnknownResource})
		return
	}
	f.log.Info("upstream watch ended; the informer resumes or relists", "error", err)
	f.upstreamErr = err
	if f.failingSince.IsZero() {
		// Failing from now: unless the upstream delivers again within
		// MaxUpstreamFailure, the feed ends (see checkStale).
		f.failingSince = time.Now()
		if f.staleCheck != nil {
			f.staleCheck.Stop()
		}
		f.staleCheck = time.AfterFunc(f.hub.cfg.MaxUpstreamFailure, f.checkStale)
	}
}

// checkStale ends the feed if its lists and watches have failed, with
// nothing delivered, for MaxUpstreamFailure (its 403s after the hub lost
// its RBAC, an API server it cannot reach): its subscribers end with
// ErrUnavailable and their tokens rather than wait on a position that no
// longer moves, and the next request starts a fresh informer, which
// resumes their tokens exactly once the API server serves it again.
func (f *feed) checkStale() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil || f.failingSince.IsZero() || time.Since(f.failingSince) < f.hub.cfg.MaxUpstreamFailure {
		return // stopped, or it delivered since; a later failure armed its own check
	}
	f.log.Warn("the API server has delivered nothing for a while; ending the informer and its streams",
		"failingFor", time.Since(f.failingSince).Round(time.Second), "error", f.upstreamErr)
	f.stopLocked(&ResourceError{Resource: f.info.Resource, Err: fmt.Errorf("%w: the API server has delivered nothing for %v: %w",
		ErrUnavailable, f.hub.cfg.MaxUpstreamFailure, f.upstreamErr)})
}

// process is the informer's one handler. It never blocks on subscribers:
// dispatch is a non-blocking send to bounded queues.
//
// A panic here is a bug in the hub, not the cluster's doing: it stops this
// feed (its subscribers end with an internal error, and the next request
// starts a fresh informer) instead of crashing the process and every
// other resource type's streams with it.
func (f *feed) process(obj any, _ bool) (err error) {
	defer func() {
		if p := recover(); p != nil {
			f.log.Error("panic processing a change; stopping the informer", "panic", p, "stack", string(debug.Stack()))
			err = fmt.Errorf("informerhub: panic processing a change: %v", p)
			f.stop(&ResourceError{Resource: f.info.Resource, Err: err})
		}
	}()
	deltas, ok := obj.(cache.Deltas)
	if !ok {
		return fmt.Errorf("informerhub: process got %T, not cache.Deltas", obj)
	}
	prepared := f.prepare(deltas) // filters, before the lock
	// After the lock is released: it may evict from any feed, this one too.
	defer f.hub.reclaim()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil
	}
	f.progressAt, f.failingSince, f.upstreamErr = time.Now(), time.Time{}, nil
	for i, d := range deltas {
		if err := f.applyLocked(d, prepared[i]); err != nil {
			// The hub cannot represent the stream faithfully; end it loudly
			// rather than lose changes silently. Subscribers retry, which
			// starts a fresh informer.
			f.log.Error("cannot apply a change; stopping the informer", "error", err)
			f.stopLocked(&ResourceError{Resource: f.info.Resource, Err: fmt.Errorf("%w: %v", ErrUnavailable, err)})
			return err
		}
	}
	return nil
}

// applyLocked takes one delta; p is what prepare made of it, if anything.
func (f *feed) applyLocked(d cache.Delta, p prepared) error {
	switch d.Type {
	case cache.ReplacedAll:
		info, ok := d.Object.(cache.ReplacedAllInfo)
		if !ok {
			return fmt.Errorf("ReplacedAll delta holds %T", d.Object)
		}
		return f.replaceLocked(info)
	case cache.Bookmark:
		info, ok := d.Object.(cache.BookmarkInfo)
		if !ok {
			return fmt.Errorf("bookmark delta holds %T", d.Object)
		}
		rv, err := parseResourceVersion(info.ResourceVersion)
		if err != nil {
			return err
		}
		if f.isSynced && rv > f.pos.rv {
			f.pos.rv = rv
			f.notifyAdvancedLocked()
			if f.disk != nil {
				f.hub.disk.notify()
			}
		}
		return nil
	case cache.SyncAll, cache.Sync:
		return nil // resync is off
	}
	if !f.isSynced {
		return errors.New("a change arrived before the initial list")
	}
	o := p.obj
	if o == nil {
		var err error
		if o, err = newObject(d.Object); err != nil {
			return err
		}
	}
	switch d.Type {
	case cache.Added, cache.Updated, cache.Replaced:
		prev, exists := f.state.Get(o)
		if exists && prev.rv == o.rv {
			return nil // not a change
		}
		f.putLocked(o)
		f.appendLocked(&record{typ: typeOf(exists), obj: o, prev: prev, rv: max(o.rv, f.pos.rv)}, 0, p.eval)
	case cache.Deleted:
		prev, exists := f.deleteLocked(o)
		if !exists {
			return nil
		}
		f.appendLocked(&record{typ: EventDeleted, obj: o, prev: prev, rv: max(o.rv, f.pos.rv)}, 0, p.eval)
	default:
		return fmt.Errorf("unexpected delta type %q", d.Type)
	}
	return nil
}

func typeOf(existed bool) EventType {
	if existed {
		return EventModified
	}
	return EventAdded
}

// replaceLocked takes a LIST: the first one becomes the initial state; a
// later one (a relist after the watch failed or expired) is turned into the
// true differences against the state, as one batch of records. Objects whose
// resourceVersion did not change produce nothing.
func (f *feed) replaceLocked(info cache.ReplacedAllInfo) error {
	listRV, err := parseResourceVersion(info.ResourceVersion)
	if err != nil {
		return fmt.Errorf("list: %w", err)
	}
	objs := make([]*object, len(info.Objects))
	for i, obj := range info.Objects {
		if objs[i], err = newObject(obj); err != nil {
			return err
		}
	}
	if !f.isSynced {
		for _, o := range objs {
			f.putLocked(o)
		}
		var base uint64 // the seq of the initial state
		floorAt := time.Now().UnixNano()
		if r := f.restore; r != nil {
			// The list is the disk's state (diskListerWatcher): the
			// records continue the disk's, and this run is one more epoch.
			f.restore = nil
			base, floorAt = r.meta.LastSeq, r.meta.LastAt
			f.epochs = r.meta.Epochs
			for _, rg := range r.meta.Relists {
				f.relists = append(f.relists, versionRange{from: rg.From, to: rg.To})
			}
		}
		f.pos = position{epoch: f.epoch, seq: base, rv: listRV}
		f.history = newHistory(f.hub.cfg.HistorySize, f.hub.cfg.HistoryBytes, listRV, floorAt, f.hub.memory.history)
		f.history.startAfter(base)
		if f.disk != nil {
			f.history.persisted = base // the state at base is written with the first records
		}
		f.isSynced = true
		close(f.synced)
		f.log.Info("informer synced", "objects", len(objs), "resourceVersion", listRV)
		return nil
	}

	type change struct {
		typ       EventType
		obj, prev *object
	}
	var changes []change
	listed := make(map[[2]string]struct{}, len(objs))
	for _, o := range objs {
		listed[[2]string{o.namespace, o.name}] = struct{}{}
	}
	f.state.Ascend(func(old *object) bool {
		if _, ok := listed[[2]string{old.namespace, old.name}]; !ok {
			changes = append(changes, change{typ: EventDeleted, obj: old, prev: old})
		}
		return true
	})
	for _, o := range objs {
		old, exists := f.state.Get(o)
		switch {
		case !exists:
			changes = append(changes, change{typ: EventAdded, obj: o})
		case old.uid != o.uid:
			// Deleted and created again while the hub was not watching.
			changes = append(changes, change{typ: EventDeleted, obj: old, prev: old}, change{typ: EventAdded, obj: o})
		case old.rv != o.rv:
			changes = append(changes, change{typ: EventModified, obj: o, prev: old})
		}
	}
	batchRV, relistFrom := max(listRV, f.pos.rv), f.pos.rv
	f.counters.relists.Add(1)
	f.log.Info("informer relisted", "objects", len(objs), "changes", len(changes), "resourceVersion", listRV)
	// Remembered even when the relist changed nothing: objects may have
	// come and gone in between, unseen.
	// Against what memory and disk reach: the disk keeps what they say.
	floor := f.floorRVLocked()
	f.relists = slices.DeleteFunc(f.relists, func(r versionRange) bool { return r.to <= floor })
	if batchRV > relistFrom {
		f.relists = append(f.relists, versionRange{from: relistFrom, to: batchRV})
	}
	f.history.beginRelist()
	defer f.history.endRelist()
	for i, c := range changes {
		if c.typ == EventDeleted {
			f.deleteLocked(c.obj)
		} else {
			f.putLocked(c.obj)
		}
		offset := uint32(i + 1)
		if i == len(changes)-1 {
			offset = 0 // the batch is complete: the position is listRV
		}
		f.appendLocked(&record{typ: c.typ, obj: c.obj, prev: c.prev, rv: batchRV, fromRelist: true}, offset, nil)
	}
	f.pos.rv = batchRV
	f.notifyAdvancedLocked()
	return nil
}

// putLocked adds o to the state, or replaces the object of its namespace and
// name, and returns what it replaced.
func (f *feed) putLocked(o *object) (prev *object, existed bool) {
	prev, existed = f.state.ReplaceOrInsert(o)
	f.index.update(prev, o)
	f.stateBytes.Force(objectSize(o))
	if existed {
		f.stateBytes.Force(-objectSize(prev))
	}
	return prev, existed
}

// deleteLocked removes the object of o's namespace and name from the state,
// and returns it.
func (f *feed) deleteLocked(o *object) (prev *object, existed bool) {
	prev, existed = f.state.Delete(o)
	if existed {
		f.index.update(prev, nil)
		f.stateBytes.Force(-objectSize(prev))
	}
	return prev, existed
}

// appendLocked adds r to the history, advances the position and hands r to
// every live subscriber that selects it. A record inside a relist batch has
// an offset, and its position keeps the version before the batch: only the
// batch's last record (offset 0) completes it at r.rv. ev holds what
// filters evaluated of r before the lock (nil: nothing).
func (f *feed) appendLocked(r *record, offset uint32, ev *evaluation) {
	before := f.pos
	r.pos = position{epoch: f.epoch, seq: f.pos.seq + 1, rv: r.rv, offset: offset}
	r.received = time.Now().UnixNano()
	f.counters.received.Add(1)
	if offset != 0 {
		r.pos.rv = f.pos.rv
	}
	f.history.push(r)
	f.noteOldestLocked()
	if f.disk != nil {
		f.hub.disk.notify()
	}
	f.pos = r.pos
	f.notifyAdvancedLocked()
	if ev == nil {
		ev = &evaluation{}
	}
	f.live.dispatch(r, func(g *subscriberGroup) {
		v := g.sel.variant(r, ev)
		if v == variantNone {
			return
		}
		for s := range g.subs {
			select {
			case s.queue <- delivery{rec: r, variant: v}:
			default:
				// Never wait for a subscriber: it has everything up to
				// before, and reads on from the history (see
				// Subscription.fellBehindLocked).
				f.live.remove(s)
				s.fellBehindLocked(before)
			}
		}
	})
	if len(ev.costly) > 0 {
		f.tripLocked(ev.costly, nil)
	}
}

// located is where a token's position continues in this feed.
type located struct {
	pos position
	// onDisk is set when pos is below the oldest record in memory, on disk.
	// A position of another instance is then still to be placed by its
	// resourceVersion among the disk's records from searchFrom (the disk's
	// oldest when it was located: if retention takes it meanwhile, the
	// search fails rather than skip what went) up to searchUpTo (set).
	onDisk                 bool
	searchFrom, searchUpTo uint64
}

// locateLocked turns a token's position into one of this feed instance.
func (f *feed) locateLocked(p position) (located, error) {
	if p.epoch == f.epoch || f.recordedLocked(p) {
		// A seq of this feed's numbering: this run's, or an earlier run's
		// that the disk holds.
		if p.seq > f.pos.seq {
			return located{}, &RequestError{Field: FieldResumeToken, Err: ErrInvalidToken,
				Reason: "resume token points past the end of this hub's stream"}
		}
		if p.seq+1 >= f.history.first {
			return located{pos: p}, nil
		}
		if f.disk != nil && f.disk.holds(p.seq) {
			return located{pos: p, onDisk: true}, nil
		}
		return located{}, f.expiredErrorLocked(false)
	}
	// A token of another instance: only its resourceVersion means
	// something here.
	if p.offset != 0 || p.rv < f.floorRVLocked() {
		return located{}, f.expiredErrorLocked(false)
	}
	if p.rv > f.pos.rv {
		return located{}, &ResourceError{Resource: f.info.Resource, Err: fmt.Errorf(
			"%w: the token is at resourceVersion %d, the hub at %d; retry shortly", ErrTokenAhead, p.rv, f.pos.rv)}
	}
	if f.insideRelistLocked(p.rv) {
		// The hub never saw the state there, so it cannot tell which of the
		// relist's changes the client already has.
		return located{}, f.expiredErrorLocked(false)
	}
	if p.rv >= f.history.floorRV {
		return located{pos: position{epoch: f.epoch, seq: f.history.lastAtOrBefore(p.rv), rv: p.rv}}, nil
	}
	first, _, _, _ := f.disk.window() // reached: floorRVLocked took the disk's floor
	return located{pos: position{epoch: f.epoch, rv: p.rv}, onDisk: true, searchFrom: first, searchUpTo: f.history.first - 1}, nil
}

// floorRVLocked is the oldest resourceVersion the feed resumes from without
// the API server: its memory's, or its disk's when that reaches further.
func (f *feed) floorRVLocked() uint64 {
	rv, _ := f.oldestLocked()
	return rv
}

// oldestLocked returns the oldest position the feed resumes from without
// the API server, and when it got there (Unix nanoseconds).
func (f *feed) oldestLocked() (rv uint64, at int64) {
	rv, at = f.history.floorRV, f.history.floorAt
	if f.disk != nil {
		if first, _, diskRV, diskAt := f.disk.window(); first < f.history.first {
			rv, at = diskRV, diskAt
		}
	}
	return rv, at
}

// expiredErrorLocked is the ErrTokenExpired of a token older than what the
// feed resumes from, saying what that is.
func (f *feed) expiredErrorLocked(upstream bool) *ExpiredError {
	e := &ExpiredError{Resource: f.info.Resource, Upstream: upstream}
	if f.isSynced {
		rv, at := f.oldestLocked()
		e.OldestResourceVersion, e.Oldest = rv, time.Unix(0, at)
	}
	return e
}

// expired counts an answer of ErrTokenExpired, and returns it. The caller
// does not hold f.mu.
func (f *feed) expired(upstream bool) *ExpiredError {
	f.counters.expiredTokens.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.expiredErrorLocked(upstream)
}

// versionRange is the resourceVersions after from, up to and including to.
type versionRange struct{ from, to uint64 }

// insideRelistLocked reports whether rv lies strictly inside the versions a
// relist jumped across: a client there holds a state the hub never saw.
func (f *feed) insideRelistLocked(rv uint64) bool {
	for _, r := range f.relists {
		if r.from < rv && rv < r.to {
			return true
		}
	}
	return false
}

func (f *feed) token(t token) string {
	t.resource = f.resource
	return t.encode()
}
