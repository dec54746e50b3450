package feed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/cache"

	"github.com/informerhub/informerhub/informerhub/celfilter"
	"github.com/informerhub/informerhub/informerhub/internal/errs"
	"github.com/informerhub/informerhub/informerhub/internal/event"
	"github.com/informerhub/informerhub/informerhub/internal/fanout"
	"github.com/informerhub/informerhub/informerhub/internal/selection"
	"github.com/informerhub/informerhub/informerhub/internal/state"
	"github.com/informerhub/informerhub/informerhub/upstream"
)

// Feed is the one informer of one resource type, and what the hub keeps of
// it: the store (state, history, position), the live subscribers it hands
// each change to, what its subscribers asked of it (admission), and what it
// knows of its upstream (readiness). Its process method is the informer's
// only handler, and the only writer of the store.
//
// The informer is built from client-go's Reflector and RealFIFO in atomic
// mode, with process as its Process function. Unlike a SharedInformer's
// handlers, process sees a relist as one ReplacedAll delta and sees
// bookmarks, so the hub computes the true differences of a relist itself,
// and its position follows the API server even while nothing changes.
type Feed struct {
	deps     *Deps // what the hub's feeds share
	info     upstream.ResourceInfo
	resource string // the resource type as tokens name it
	epoch    uint64 // this instance's, never 0 (replayed events' tokens)
	log      *slog.Logger
	counters *Counters // the resource type's, outliving the feed
	events   Events
	lw       cache.ListerWatcher   // also opens the cluster-wide upstream watches of replays, and lists for checks
	lwc      *countedListerWatcher // the informer's; relists it after a check diverged
	cancel   context.CancelFunc    // stops the informer
	done     chan struct{}         // closed when the informer's goroutines have exited
	stopped  chan struct{}         // closed by stop; err says why

	// mu guards the five below. One lock, because a change is recorded in
	// the store and handed to the live subscribers at once, a subscriber
	// joins them exactly after the last record it read. Nothing is sent
	// under it: live subscribers are handed changes through queues that
	// never block.
	mu        sync.Mutex
	store     *store
	live      fanout.Dispatcher
	admission selection.Admission
	ready     readiness
	err       error // why the feed stopped; set once, before stopped is closed
}

func New(deps *Deps, info upstream.ResourceInfo, counters *Counters) *Feed {
	resource := upstream.FormatResource(info.Resource)
	log := deps.Log.With("resource", resource)
	epoch := rand.Uint64() | 1
	return &Feed{
		deps:     deps,
		info:     info,
		resource: resource,
		epoch:    epoch,
		log:      log,
		counters: counters,
		events: Events{resource: resource, gvr: info.Resource, encode: deps.Encode, memory: deps.Memory,
			failures: &counters.ObjectErrors, log: log},
		done:      make(chan struct{}),
		stopped:   make(chan struct{}),
		store:     newStore(info.Resource, epoch, deps, log),
		live:      fanout.NewDispatcher(),
		admission: selection.NewAdmission(info.Resource, deps.Limits),
		ready:     newReadiness(),
	}
}

// Start runs the informer until ctx ends or the feed stops, on a goroutine
// of running.
func (f *Feed) Start(ctx context.Context, lw cache.ListerWatcher, running *sync.WaitGroup) {
	f.lw = lw
	if f.deps.Disk != nil && f.deps.Disk.Writes(f.resource) {
		lw = f.deps.Disk.ListerWatcher(cache.ToListerWatcherWithContext(lw), f.resource, f, f.log)
	}
	ctx, f.cancel = context.WithCancel(ctx)
	fifo := cache.NewRealFIFOWithOptions(cache.RealFIFOOptions{
		Name:                  "informerhub " + f.resource,
		AtomicEvents:          true,
		UnlockWhileProcessing: true,
		EmitDeltaTypeBookmark: true,
	})
	f.lwc = newCountedListerWatcher(lw, &f.counters.WatchRestarts, f.watched)
	controller := cache.New(&cache.Config{
		Queue:                        fifo,
		ListerWatcher:                f.lwc,
		Process:                      f.Process,
		ObjectDescription:            f.resource,
		WatchErrorHandlerWithContext: f.watchError,
	})
	running.Go(func() {
		defer close(f.done)
		controller.RunWithContext(ctx)
	})
	if f.deps.Check.Interval > 0 {
		running.Go(func() { f.checkLoop(ctx, f.deps.Check) })
	}
	f.log.Info("informer started")
}

// Stop ends the feed: its subscribers end with err, its informer stops.
func (f *Feed) Stop(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopLocked(err)
}

func (f *Feed) stopLocked(err error) {
	if f.err != nil {
		return
	}
	f.err = err
	// Stopped before any subscriber learns of it: whoever a failure wakes
	// sees the feed stopped.
	close(f.stopped)
	f.ready.stop()
	f.live.End(err)
	f.cancel()
	f.store.release()
	if f.store.disk.log != nil {
		f.store.disk.log.Notify() // to write what is left, and let the next feed start from it
	}
	f.log.Info("informer stopped", "reason", err)
}

// IsStopped reports whether the feed has stopped.
func (f *Feed) IsStopped() bool {
	select {
	case <-f.stopped:
		return true
	default:
		return false
	}
}

// waitSynced waits until the initial list is in the store. It fails fast
// when listing fails, so clients learn of an unreachable or forbidding API
// server instead of hanging; the informer keeps retrying in the background.
func (f *Feed) waitSynced(ctx context.Context) error {
	select {
	case <-f.ready.synced:
		return nil
	case <-f.stopped:
		return f.err
	case <-ctx.Done():
		return ctx.Err()
	case <-f.ready.listFailed:
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.store.synced {
			return nil
		}
		if apierrors.IsNotFound(f.ready.listErr) {
			// Discovery knew the resource, the API server no longer serves
			// it (a CRD was just deleted).
			return &errs.ResourceError{Resource: f.info.Resource, Err: errs.ErrUnknownResource}
		}
		return &errs.ResourceError{Resource: f.info.Resource, Err: fmt.Errorf("%w: listing failed: %w", errs.ErrUnavailable, f.ready.listErr)}
	}
}

// watchError is called by the reflector when a list or watch fails.
func (f *Feed) watchError(_ context.Context, _ *cache.Reflector, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	// The stored state is the first list when the disk holds the type
	// (store.disk.restore, until it is processed): an error before the sync is
	// then its watch's (the API server no longer has the stored version,
	// and the Reflector lists), not a failed list.
	if !f.store.synced && f.store.disk.restore == nil {
		f.ready.failedToList(err)
		f.log.Warn("listing failed; retrying", "error", err)
		return
	}
	if errors.Is(err, errRelist) {
		f.log.Info("relisting to repair the cache")
		return
	}
	if apierrors.IsNotFound(err) {
		// The resource type is gone (its CRD was deleted): say so rather
		// than keep subscribers waiting for changes that cannot come.
		f.stopLocked(&errs.ResourceError{Resource: f.info.Resource, Err: errs.ErrUnknownResource})
		return
	}
	f.log.Info("upstream watch ended; the informer resumes or relists", "error", err)
	f.ready.failed(err, time.Now(), f.deps.MaxUpstreamFailure, f.checkStale)
}

// watched is told whether each watch opened (err nil) or not. The
// reflector passes most watches that did not open to watchError, but
// retries a refused connection and a 429 itself, with backoff, without
// calling it: an API server the hub cannot reach would otherwise never
// count as failing, in Stats or for MaxUpstreamFailure. A watch that opens
// ends a run of failures, though it delivers nothing yet: after such a
// retry the reflector watches on without a list, and a quiet resource may
// deliver nothing for a while. Before the first list is in the store, a
// failure counts from the next, as in watchError.
func (f *Feed) watched(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil || (!f.store.synced && f.store.disk.restore == nil) {
		return
	}
	if err == nil {
		f.ready.recovered()
		return
	}
	f.log.Info("the API server did not open a watch; the informer retries", "error", err)
	f.ready.failed(err, time.Now(), f.deps.MaxUpstreamFailure, f.checkStale)
}

// checkStale ends the feed if its lists and watches have failed, with
// nothing delivered, for MaxUpstreamFailure (its 403s after the hub lost
// its RBAC, an API server it cannot reach): its subscribers end with
// ErrUnavailable and their tokens rather than wait on a position that no
// longer moves, and the next request starts a fresh informer, which
// resumes their tokens exactly once the API server serves it again.
func (f *Feed) checkStale() {
	f.mu.Lock()
	defer f.mu.Unlock()
	stale, failingFor, lastErr := f.ready.stale(time.Now(), f.deps.MaxUpstreamFailure)
	if f.err != nil || !stale {
		return // stopped, or it delivered since; a later failure armed its own check
	}
	f.log.Warn("the API server has delivered nothing for a while; ending the informer and its streams",
		"failingFor", failingFor.Round(time.Second), "error", lastErr)
	f.stopLocked(&errs.ResourceError{Resource: f.info.Resource, Err: fmt.Errorf("%w: the API server has delivered nothing for %v: %w",
		errs.ErrUnavailable, f.deps.MaxUpstreamFailure, lastErr)})
}

// Process is the informer's one handler. It never blocks on subscribers:
// dispatch is a non-blocking send to bounded queues.
//
// A panic here is a bug in the hub, not the cluster's doing: it stops this
// feed (its subscribers end with an internal error, and the next request
// starts a fresh informer) instead of crashing the process and every
// other resource type's streams with it.
func (f *Feed) Process(obj any, _ bool) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = f.stopAfterPanic(p)
		}
	}()
	deltas, ok := obj.(cache.Deltas)
	if !ok {
		return fmt.Errorf("informerhub: process got %T, not cache.Deltas", obj)
	}
	return f.apply(deltas, f.prepare(deltas)) // filters and relists before the lock
}

// apply takes deltas under the feed's lock, with what prepare made of
// them.
func (f *Feed) apply(deltas cache.Deltas, prepared []prepared) error {
	// After the lock is released: it may evict from any feed, this one too.
	defer f.deps.Memory.Reclaim()
	f.mu.Lock()
	locked := time.Now()
	defer func() {
		held := time.Since(locked)
		wakes := f.live.TakeWakes()
		f.mu.Unlock()
		wakes.Wake()
		for _, p := range prepared {
			if p.relist != nil {
				p.relist.log(f.log, held)
			}
		}
	}()
	if f.err != nil {
		return nil
	}
	f.ready.progressed(time.Now())
	for i, d := range deltas {
		if err := f.applyLocked(d, prepared[i]); err != nil {
			// The hub cannot represent the stream faithfully; end it loudly
			// rather than lose changes silently. Subscribers retry, which
			// starts a fresh informer.
			f.log.Error("cannot apply a change; stopping the informer", "error", err)
			f.stopLocked(&errs.ResourceError{Resource: f.info.Resource, Err: fmt.Errorf("%w: %v", errs.ErrUnavailable, err)})
			return err
		}
	}
	return nil
}

// stopAfterPanic stops the feed after its handler panicked with p, and
// returns the error the informer gets. The feed's state may be half
// updated, so stopping may panic too: then it still ends the informer and
// its subscribers, by what needs no state (the context, the stopped
// channel, each lease's failed channel), rather than let the second panic
// end the process.
func (f *Feed) stopAfterPanic(p any) (err error) {
	f.log.Error("panic processing a change; stopping the informer", "panic", p, "stack", string(debug.Stack()))
	err = fmt.Errorf("informerhub: panic processing a change: %v", p)
	failure := &errs.ResourceError{Resource: f.info.Resource, Err: err}
	defer func() {
		if p2 := recover(); p2 != nil {
			f.log.Error("panic stopping the informer after a panic; ending it without its state", "panic", p2, "stack", string(debug.Stack()))
			f.cancel()
			defer func() {
				if p3 := recover(); p3 != nil { // the subscribers end with their callers
					f.log.Error("panic ending the subscribers of a broken informer", "panic", p3)
				}
			}()
			f.store.oldestAt.Store(0) // memory evicts nothing of it
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.err == nil {
				f.err = failure
			}
			select {
			case <-f.stopped:
			default:
				close(f.stopped)
			}
			f.live.FailAll(failure)
			f.store.release() // what it counts in the budget

		}
	}()
	if f.deps.StopHook != nil {
		f.deps.StopHook()
	}
	f.Stop(failure)
	return err
}

// applyLocked takes one delta; p is what prepare made of it, if anything.
func (f *Feed) applyLocked(d cache.Delta, p prepared) error {
	switch d.Type {
	case cache.ReplacedAll:
		info, ok := d.Object.(cache.ReplacedAllInfo)
		if !ok {
			return fmt.Errorf("ReplacedAll delta holds %T", d.Object)
		}
		return f.replaceLocked(info, p.relist)
	case cache.Bookmark:
		info, ok := d.Object.(cache.BookmarkInfo)
		if !ok {
			return fmt.Errorf("bookmark delta holds %T", d.Object)
		}
		rv, err := state.ParseResourceVersion(info.ResourceVersion)
		if err != nil {
			return err
		}
		f.store.bookmark(rv)
		return nil
	case cache.SyncAll, cache.Sync:
		return nil // resync is off
	}
	if !f.store.synced {
		return errors.New("a change arrived before the initial list")
	}
	o := p.obj
	if o == nil {
		var err error
		if o, err = state.NewObject(d.Object); err != nil {
			return err
		}
	}
	switch d.Type {
	case cache.Added, cache.Updated, cache.Replaced:
		prev, exists := f.store.state.Get(o)
		if exists && prev.RV == o.RV {
			return nil // not a change
		}
		f.store.put(o)
		f.recordLocked(&state.Record{Type: typeOf(exists), Object: o, Previous: prev, RV: max(o.RV, f.store.pos.RV)}, 0, p.eval)
	case cache.Deleted:
		prev, exists := f.store.delete(o)
		if !exists {
			return nil
		}
		f.recordLocked(&state.Record{Type: event.Deleted, Object: o, Previous: prev, RV: max(o.RV, f.store.pos.RV)}, 0, p.eval)
	default:
		return fmt.Errorf("unexpected delta type %q", d.Type)
	}
	return nil
}

func typeOf(existed bool) event.Type {
	if existed {
		return event.Modified
	}
	return event.Added
}

// replaceLocked takes a LIST: the first one becomes the initial state; a
// later one (a relist after the watch failed or expired) is turned into the
// true differences against the state, recorded as one batch (relistLocked).
// p is what prepare made of it before the lock, which it completes with
// what it did, for process to log once it has released the lock.
func (f *Feed) replaceLocked(info cache.ReplacedAllInfo, p *preparedRelist) error {
	listRV, err := state.ParseResourceVersion(info.ResourceVersion)
	if err != nil {
		return fmt.Errorf("list: %w", err)
	}
	if !p.decoded {
		p.objs = make([]*state.Object, len(info.Objects))
		for i, obj := range info.Objects {
			if p.objs[i], err = state.NewObject(obj); err != nil {
				return err
			}
		}
		p.decoded = true
	}
	p.listRV = listRV
	if !f.store.synced {
		if p.first == nil {
			p.first = stateOf(p.objs)
		}
		f.store.sync(p.first, listRV)
		f.ready.markSynced()
		p.synced = true
		return nil
	}
	f.relistLocked(p, listRV)
	return nil
}

// recordLocked records r in the store and hands it to every live
// subscriber that selects it (see store.record for offset). ev holds what
// filters evaluated of r before the lock (nil: nothing).
func (f *Feed) recordLocked(r *state.Record, offset uint32, ev *selection.Evaluation) {
	before := f.store.record(r, offset)
	f.counters.Received.Add(1)
	f.live.TurnPeak(r.Received)
	if ev == nil {
		ev = &selection.Evaluation{}
	}
	f.live.Deliver(r, ev, before, &f.counters.FellBehind)
	f.boundUnwrittenLocked()
}

// boundUnwrittenLocked spills the feed's disk history when what it has
// waiting to be written went past Config.HistoryMaxUnwrittenBytes (see
// spillDiskLocked). The caller holds f.mu and has just recorded.
func (f *Feed) boundUnwrittenLocked() {
	if max := f.deps.HistoryMaxUnwrittenBytes; f.store.disk.unwritten > max {
		f.spillDiskLocked(fmt.Errorf("the changes waiting to be written hold %d bytes, more than HistoryMaxUnwrittenBytes (%d)", f.store.disk.unwritten, max))
	}
}

// prepared is what the informer's handler makes of a delta before the
// feed's lock: its object, and the evaluation of the filters in use on it
// and on the state it replaces; or, for a list, what prepareRelist makes
// of it (never nil).
type prepared struct {
	obj    *state.Object
	eval   *selection.Evaluation
	relist *preparedRelist
}

// prepare evaluates filters on the objects of deltas before the feed's
// lock, where dispatch will. Dispatch runs under the lock, which every
// subscription takes to catch up, go live or read a bookmark's position;
// so the handler decodes each change's objects and evaluates the filters on
// them first, and dispatch reads the results from the change's evaluation.
// As dispatch would, it evaluates a filter on an object only for the live
// groups the object may concern (by their triggers) whose namespace, label
// and field selectors select it: a filter costs only the objects its
// subscribers would otherwise receive. Only the groups that go live in
// between have their filters evaluated under the lock. A list, which
// RealFIFO hands over alone, is prepared by prepareRelist.
//
// It builds each change's object (and its hash, for the state's digests)
// whether or not a filter is in use, and returns nothing for what it
// cannot prepare (applyLocked reports its errors).
func (f *Feed) prepare(deltas cache.Deltas) []prepared {
	out := make([]prepared, len(deltas))
	if len(deltas) == 1 && deltas[0].Type == cache.ReplacedAll {
		if info, ok := deltas[0].Object.(cache.ReplacedAllInfo); ok {
			out[0].relist = f.prepareRelist(info)
			return out
		}
	}
	for i, d := range deltas {
		switch d.Type {
		case cache.ReplacedAll:
			out[i].relist = &preparedRelist{} // found under the lock
		case cache.Added, cache.Updated, cache.Replaced, cache.Deleted:
			// Built here, with its hash, not under the lock; one that
			// is not an object is reported by applyLocked.
			if o, err := state.NewObject(d.Object); err == nil {
				out[i].obj = o
			}
		}
	}
	plans := f.planLocked(deltas, out)
	for i, plan := range plans {
		if len(plan) == 0 {
			continue
		}
		ev := &selection.Evaluation{}
		filters := make([]*celfilter.Filter, 0, len(plan))
		for _, e := range plan {
			if !slices.Contains(filters, e.Filter) {
				filters = append(filters, e.Filter)
			}
		}
		ev.Share(filters) // one decode of each object for all filters
		for _, e := range plan {
			ev.Matches(e.Filter, e.Object, &f.counters.FilterErrors)
		}
		out[i].eval = ev
	}
	return out
}

// planLocked returns for each delta whose object prepare built the
// filters dispatch will evaluate on its object and on the state it
// replaces; under the feed's lock (released however it returns: process
// recovers from panics by stopping the feed, which takes the lock).
func (f *Feed) planLocked(deltas cache.Deltas, out []prepared) [][]fanout.FilterOn {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.admission.FilterCount() == 0 || !f.store.synced || f.err != nil {
		return nil
	}
	plans := make([][]fanout.FilterOn, len(deltas))
	// The state each delta replaces: the state's, or an earlier delta's of
	// the same object.
	pending := map[state.Key]*state.Object{}
	for i, d := range deltas {
		o := out[i].obj
		if o == nil {
			continue
		}
		key := state.Key{Namespace: o.Namespace, Name: o.Name}
		prev, ok := pending[key]
		if !ok {
			prev, _ = f.store.state.Get(o)
		}
		// Dispatch tests a deletion's previous state only.
		if d.Type == cache.Deleted {
			plans[i] = f.live.FiltersFor(nil, prev)
			pending[key] = nil
		} else {
			plans[i] = f.live.FiltersFor(o, prev)
			pending[key] = o
		}
	}
	return plans
}

// Expired counts an answer of ErrTokenExpired, and returns it. The caller
// does not hold f.mu.
func (f *Feed) Expired(upstream bool) *errs.ExpiredError {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.expiredLocked(upstream)
}

// expiredLocked is expired for a caller that holds f.mu.
func (f *Feed) expiredLocked(upstream bool) *errs.ExpiredError {
	f.counters.ExpiredTokens.Add(1)
	return f.store.expiredError(upstream)
}

// The feed's side of the hub's memory budget (memory.Holder).

// OldestAt is when the store's oldest record that may be evicted arrived.
func (f *Feed) OldestAt() int64 { return f.store.oldestAt.Load() }

// EvictForMemory evicts the store's oldest records while the hub is over
// its memory budget, up to the first that arrived after until. It evicts
// nothing, and reports false, if the feed's lock is taken: the feed is busy
// (recording a relist, say), and reclaims after its own work.
func (f *Feed) EvictForMemory(until int64) (evicted int, ok bool) {
	if !f.mu.TryLock() {
		return 0, false
	}
	defer f.mu.Unlock()
	evicted = f.store.evictForMemory(until)
	f.counters.EvictedForMemory.Add(uint64(evicted))
	return evicted, true
}

// Levels are what a feed holds now and how its upstream fares, for the
// hub's Resources and Stats; see ResourceStats for what each is.
type Levels struct {
	CachedObjects int
	// Synced is set once the informer has synced; the history's and the
	// disk's levels are zero until then.
	Synced                       bool
	HistoryEvents                int
	HistoryBytes                 int64
	HistoryFloorRV               uint64 // a token from here on resumes from memory
	HistoryOldest, HistoryNewest time.Time
	// RetainedRV is the oldest version a token resumes from without the
	// API server, in memory or on disk, and RetainedSince when the feed
	// reached it.
	RetainedRV    uint64
	RetainedSince time.Time
	DiskPending   uint64

	UpstreamProgress, UpstreamFailingSince time.Time
	SubscriberGroups, Filters, Projections int
	QueuePeak                              int
}

// Levels returns the feed's current levels: what it keeps counted, in
// O(1), whatever the subscribers and objects.
func (f *Feed) Levels() Levels {
	f.mu.Lock()
	defer f.mu.Unlock()
	var l Levels
	f.store.levels(&l)
	l.UpstreamProgress, l.UpstreamFailingSince = f.ready.progressAt, f.ready.failingSince
	l.SubscriberGroups, l.Filters, l.Projections = f.live.GroupCount(), f.admission.FilterCount(), f.admission.ProjectionCount()
	l.QueuePeak = f.live.QueuePeak(time.Now().UnixNano())
	return l
}

// UnwrittenBytes returns what the feed's changes waiting for the disk hold;
// false if the feed's lock is taken.
func (f *Feed) UnwrittenBytes() (int64, bool) {
	if !f.mu.TryLock() {
		return 0, false
	}
	defer f.mu.Unlock()
	return f.store.disk.unwritten, true
}

// CloneKeeps returns what the feed's open state clones keep; false if its
// lock is taken.
func (f *Feed) CloneKeeps() (int64, bool) {
	if !f.mu.TryLock() {
		return 0, false
	}
	defer f.mu.Unlock()
	_, kept := f.store.clones.OldestKeeps()
	return kept, true
}

// EndOldestClone ends the reader of the feed's oldest state clone for the
// hub's memory budget (see memory.Holder); false if its lock is
// taken or it has none.
func (f *Feed) EndOldestClone() bool {
	if !f.mu.TryLock() {
		return false
	}
	defer f.mu.Unlock()
	c, kept := f.store.clones.OldestKeeps()
	if c == nil {
		return false
	}
	var err error = &errs.LimitError{Resource: f.info.Resource, Limit: errs.LimitMemoryBudget, Max: int(f.deps.Memory.Held.Max())}
	c.Ended.Store(&err)
	f.store.clones.Close(c)
	f.log.Warn("ended a snapshot or initial events read so slowly that the objects changed since it began took the hub past its memory budget",
		"keptBytes", kept)
	return true
}

// SpillForMemory stops the feed writing to disk for the hub's memory
// budget; false if its lock is taken or it does not write.
func (f *Feed) SpillForMemory() bool {
	if !f.mu.TryLock() {
		return false
	}
	defer f.mu.Unlock()
	if f.store.disk.log == nil {
		return false
	}
	f.spillDiskLocked(errors.New("the hub is over its memory budget, and the changes waiting to be written are all it could evict"))
	return true
}

// Counters are the resource type's running totals, outliving the feed.
func (f *Feed) Counters() *Counters { return f.counters }

// Err is why the feed stopped, once Stopped is closed; nil before.
func (f *Feed) Err() error {
	select {
	case <-f.stopped:
		return f.err
	default:
		return nil
	}
}

// Events makes the feed's events.
func (f *Feed) Events() *Events { return &f.events }

// Info is the resource type the feed serves.
func (f *Feed) Info() upstream.ResourceInfo { return f.info }

// Log is the feed's logger, which names its resource type.
func (f *Feed) Log() *slog.Logger { return f.log }

// ListerWatcher lists and watches the resource type cluster-wide; a
// replay watches through it.
func (f *Feed) ListerWatcher() cache.ListerWatcher { return f.lw }

// Resource is the resource type as tokens name it.
func (f *Feed) Resource() string { return f.resource }

// Stopped is closed once the feed has stopped; Err says why.
func (f *Feed) Stopped() <-chan struct{} { return f.stopped }

// Synced is closed once the feed has synced.
func (f *Feed) Synced() <-chan struct{} { return f.ready.synced }
