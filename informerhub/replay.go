package informerhub

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/informerhub/informerhub/informerhub/budget"
)

// replay bridges a resume token the feed's history no longer (or not yet)
// covers to that history. Its upstream watch starts at the token's
// resourceVersion with the subscription's own selector, so the API server
// filters the changes with watch semantics (DELETED for an object that left
// the selector); the subscription passes them on until the history holds
// everything after the version reached, then catches up from the history
// as any other subscription does.
//
// resourceVersions are etcd revisions, shared by every API server and every
// replica of the hub: that is what lets a fresh hub honour a token another
// one issued.
//
// The API server can evaluate neither filters nor projections, and its watch
// carries no previous state. A subscription that has any of them replays
// statefully: before its first watch, it lists the upstream selection as it
// was at the token's resourceVersion (a LIST with resourceVersionMatch
// Exact, which the API server serves until etcd compacts that version, and
// answers 410 Gone after), and keeps, for each object, whether the filter
// selected it and the state the subscriber last received of it. Each
// upstream change is then turned into what the subscriber would have
// received live (enter, leave, the previous state, no MODIFIED whose
// projection did not change), and nothing is guessed: a token whose state
// can no longer be listed is ErrTokenExpired.
type replay struct {
	lw   cache.ListerWatcher
	opts metav1.ListOptions // the selector; ResourceVersion is set per watch
	// stateful is set for a subscription with a filter, a projection or
	// previous states (see above). state is what such a replay knows of
	// each object of the upstream selection (see replayEntry); nil for a
	// stateless one, and until its LIST.
	stateful bool
	state    map[objectKey]replayEntry
	// stateBytes is the state's share of the hub's replay budget
	// (Config.MaxReplayStateBytes), given back when the replay ends.
	stateBytes budget.Share

	// ctx ends the upstream watch; cancel is called when the replay ends and
	// by the subscription's Close, from any goroutine.
	ctx    context.Context
	cancel context.CancelFunc

	// Owned by the goroutine calling Next.
	w           watch.Interface
	cancelWatch context.CancelFunc // ends w's request
	unwatch     func() bool        // unregisters the Stop of w that ctx would call
	rv          uint64             // every selected change up to rv has been passed on
	openedAt    time.Time
	shortRun    int  // watches in a row that ended within a second of opening
	slotHeld    bool // one of the hub's replay slots, until ctx ends
	// owner is the subscription's (WatchRequest.Owner), whose share of the
	// slots (Config.MaxReplaysPerOwner) the replay takes first; ownerHeld
	// is set once it holds one, until ctx ends.
	owner     string
	ownerHeld bool
}

// replayWatchTimeout bounds each upstream watch of a replay. The API server's
// watch cache sends a bookmark shortly before a watch times out, and that
// bookmark is how a replay learns it has passed a version where nothing it
// selects changed; the replay then opens the next watch from there.
var replayWatchTimeout = int64(10)

// replayable reports whether the hub can replay from tok when its history
// cannot place it: the token must be at a resourceVersion the client holds
// everything up to. Tokens inside a relist batch (offset) or inside initial
// events are positions of one feed instance only.
func replayable(tok *token) bool {
	return tok.pos.offset == 0 && !tok.initial && tok.pos.rv > 0
}

// objectKey names an object of a resource type.
type objectKey struct{ namespace, name string }

// replayEntry is what a stateful replay knows of an object of the upstream
// selection: whether the subscription's whole selector (its filter
// included) selects it, and if so the state the subscriber received last,
// in its view's projection.
type replayEntry struct {
	selected bool
	json     string
}

func (f *feed) newReplay(sel *selector, vw *view, rv uint64, owner string) *replay {
	opts := metav1.ListOptions{AllowWatchBookmarks: true, TimeoutSeconds: &replayWatchTimeout}
	if sel.labels != nil {
		opts.LabelSelector = sel.labels.String()
	}
	// The feed's watch is cluster-wide; a namespace is a field of every
	// object, so one path serves every selector.
	var terms []fields.Selector
	if sel.fields != nil {
		terms = append(terms, sel.fields)
	}
	if sel.namespace != "" {
		terms = append(terms, fields.OneTermEqualSelector("metadata.namespace", sel.namespace))
	}
	if len(terms) > 0 {
		opts.FieldSelector = fields.AndSelectors(terms...).String()
	}
	ctx, cancel := context.WithCancel(f.hub.ctx)
	r := &replay{lw: f.lw, opts: opts, ctx: ctx, cancel: cancel, rv: rv, owner: owner}
	if r.stateful = sel.filter != nil || vw.proj != nil || vw.includePrevious; r.stateful {
		r.stateBytes.Init(f.hub.replayBytes, false)
	}
	return r
}

// size is what an entry counts against the replay budget.
func (e replayEntry) size(k objectKey) int64 {
	return int64(len(e.json)+len(k.namespace)+len(k.name)) + 64
}

// budgetError refuses a stateful replay whose state, n bytes more than it
// holds, does not fit Config.MaxReplayStateBytes: for now, while other
// replays hold the rest (a LimitError: retry later), or ever (the token is
// expired for this hub: start over from a snapshot, which holds nothing).
func (r *replay) budgetError(f *feed, n int64) error {
	if r.stateBytes.Held()+n > r.stateBytes.Budget().Max() {
		return &ExpiredError{Resource: f.info.Resource, TooLarge: true}
	}
	return &LimitError{Resource: f.info.Resource, Limit: LimitReplayState, Max: int(f.hub.cfg.MaxReplayStateBytes)}
}

// open starts an upstream watch from r.rv. Its request also ends with the
// caller's ctx, so a caller that goes away does not wait for a slow API
// server; the replay itself lives on for the next call.
func (r *replay) open(ctx context.Context, s *Subscription) error {
	f := s.feed
	if err := r.acquire(ctx, f.hub); err != nil {
		return err
	}
	watchCtx, cancelWatch := context.WithCancel(r.ctx)
	stop := context.AfterFunc(ctx, cancelWatch)
	defer stop()
	failed := func(err error) error {
		cancelWatch()
		switch {
		case r.ctx.Err() != nil:
			return ErrSubscriptionClosed
		case ctx.Err() != nil:
			return ctx.Err()
		}
		return err
	}
	opts := r.opts
	opts.ResourceVersion = strconv.FormatUint(r.rv, 10)
	w, err := cache.ToListerWatcherWithContext(r.lw).WatchWithContext(watchCtx, opts)
	if err != nil {
		return failed(f.replayError(err))
	}
	// The state is listed once the watch has accepted the version: a
	// version the API server no longer has costs it a refused watch, not
	// a LIST of the whole selection.
	if r.stateful && r.state == nil {
		if err := r.listState(watchCtx, s); err != nil {
			w.Stop()
			return failed(err)
		}
	}
	r.w, r.cancelWatch, r.openedAt = w, cancelWatch, time.Now()
	// A watcher blocked handing over an event stops only when told to; a
	// Close from another goroutine ends r.ctx, and must reach it too.
	r.unwatch = context.AfterFunc(watchCtx, w.Stop)
	return nil
}

// replayListPage is the page size of a stateful replay's LIST.
var replayListPage = int64(500)

// listState fills r.state with the upstream selection as it was at r.rv.
func (r *replay) listState(ctx context.Context, s *Subscription) error {
	f := s.feed
	opts := metav1.ListOptions{
		LabelSelector:        r.opts.LabelSelector,
		FieldSelector:        r.opts.FieldSelector,
		ResourceVersion:      strconv.FormatUint(r.rv, 10),
		ResourceVersionMatch: metav1.ResourceVersionMatchExact,
		Limit:                replayListPage,
	}
	lw := cache.ToListerWatcherWithContext(r.lw)
	state := map[objectKey]replayEntry{}
	for {
		list, err := lw.ListWithContext(ctx, opts)
		if err != nil {
			return f.replayError(err)
		}
		err = meta.EachListItem(list, func(obj runtime.Object) error {
			o, err := newObject(obj)
			if err != nil {
				return fmt.Errorf("%w: replaying from the API server: %w", ErrUnavailable, err)
			}
			e, err := s.replayEntryOf(o)
			if err != nil {
				return err
			}
			k := objectKey{o.namespace, o.name}
			if !r.stateBytes.Add(e.size(k)) {
				return r.budgetError(f, e.size(k))
			}
			state[k] = e
			return nil
		})
		var limit *LimitError
		var refused *RequestError
		switch {
		case errors.As(err, &limit), errors.As(err, &refused):
			return err
		case err != nil:
			return &ResourceError{Resource: f.info.Resource, Err: err}
		}
		m, err := meta.ListAccessor(list)
		if err != nil {
			return f.replayError(err)
		}
		if m.GetContinue() == "" {
			break
		}
		// The continue token holds the version: the next page is of the
		// same point in time.
		opts.Continue, opts.ResourceVersion, opts.ResourceVersionMatch = m.GetContinue(), "", ""
	}
	r.state = state
	return nil
}

// replayEntryOf is what a stateful replay keeps of an object the upstream
// selection holds; an error when its filter exceeded its cost on it.
func (s *Subscription) replayEntryOf(o *object) (replayEntry, error) {
	s.eval.reset()
	selected := s.sel.matches(o, &s.eval)
	if len(s.eval.costly) > 0 {
		return replayEntry{}, s.endCostly(&s.eval)
	}
	if !selected {
		return replayEntry{}, nil
	}
	return replayEntry{selected: true, json: s.feed.project(s.view, o.json)}, nil
}

// closeWatch stops the current watch, which has ended or is no longer needed.
func (r *replay) closeWatch() {
	if r.w != nil {
		r.unwatch()
		r.w.Stop()
		r.cancelWatch()
		r.w = nil
	}
}

// acquire takes one of the hub's replay slots (Config.MaxConcurrentReplays)
// for the rest of the replay: it is given back when the replay's context
// ends, whoever ends it. Waiting for a slot keeps a crowd of clients
// failing over at once from opening as many watches on the API server.
func (r *replay) acquire(ctx context.Context, h *Hub) error {
	if r.slotHeld {
		return nil
	}
	// The owner's share first: one owner's replays wait for each other,
	// never take every slot from the rest.
	if r.owner != "" && !r.ownerHeld {
		share := h.replayOwners.get(r.owner)
		select {
		case share.slots <- struct{}{}:
		case <-ctx.Done():
			h.replayOwners.put(r.owner, share)
			return ctx.Err()
		case <-r.ctx.Done():
			h.replayOwners.put(r.owner, share)
			return ErrSubscriptionClosed
		}
		r.ownerHeld = true
		context.AfterFunc(r.ctx, func() {
			<-share.slots
			h.replayOwners.put(r.owner, share)
		})
	}
	select {
	case h.replaySlots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-r.ctx.Done():
		return ErrSubscriptionClosed
	}
	r.slotHeld = true
	context.AfterFunc(r.ctx, func() { <-h.replaySlots })
	return nil
}

// replayShares bounds the replays each owner runs at once
// (Config.MaxReplaysPerOwner).
type replayShares struct {
	max int
	mu  sync.Mutex // guards byOwner
	// byOwner holds the shares in use, each dropped when no replay of its
	// owner holds or waits for it.
	byOwner map[string]*replayShare
}

type replayShare struct {
	slots chan struct{} // a token per replay of the owner running
	refs  int           // replays holding or waiting for a slot; guarded by replayShares.mu
}

func (rs *replayShares) get(owner string) *replayShare {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	share := rs.byOwner[owner]
	if share == nil {
		share = &replayShare{slots: make(chan struct{}, rs.max)}
		rs.byOwner[owner] = share
	}
	share.refs++
	return share
}

func (rs *replayShares) put(owner string, share *replayShare) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if share.refs--; share.refs == 0 {
		delete(rs.byOwner, owner)
	}
}

// maxShortRuns is how many watches in a row may end within a second of
// opening before the replay gives up: the API server is not serving it.
const maxShortRuns = 5

// reopenDelay is how long to wait before the next watch when the last one
// ended: none after a watch that ran its course, a growing backoff after
// ones that ended at once, so a misbehaving API server is not hammered;
// false after maxShortRuns of those.
func (r *replay) reopenDelay() (time.Duration, bool) {
	if time.Since(r.openedAt) >= time.Second {
		r.shortRun = 0
		return 0, true
	}
	r.shortRun++
	return 100 * time.Millisecond << r.shortRun, r.shortRun < maxShortRuns
}

func (r *replay) stop() {
	r.end()
	r.closeWatch()
}

// end ends the replay's context, which gives back its replay slot, and
// gives back what its state held. It may be called from any goroutine, more
// than once.
func (r *replay) end() {
	r.cancel()
	r.stateBytes.Release()
}

// replayError turns an upstream failure of a replay into the hub's errors.
func (f *feed) replayError(err error) error {
	switch {
	case apierrors.IsResourceExpired(err) || apierrors.IsGone(err):
		// The one answer that means the version is gone for good.
		return f.expired(true)
	case apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge):
		return &ResourceError{Resource: f.info.Resource, Err: fmt.Errorf(
			"%w: the API server has not reached the token's resourceVersion yet; retry shortly", ErrTokenAhead)}
	case apierrors.IsBadRequest(err):
		// The API server refuses the selector it was given, as it was
		// when the stream started (a custom resource's selectable field
		// removed since): retrying cannot help.
		return &RequestError{Field: FieldFieldSelector, Err: ErrInvalidRequest,
			Reason: "the API server refuses the stream's selector now, replaying it: " + err.Error()}
	}
	return &ResourceError{Resource: f.info.Resource, Err: fmt.Errorf("%w: replaying from the API server: %w", ErrUnavailable, err)}
}

// joinableLocked returns the seq of the history after which the records
// continue a subscriber that holds every selected change up to rv, or
// false when the history cannot: rv is older than the history, newer than
// the feed's position, or inside the versions a relist jumped across.
func (f *feed) joinableLocked(rv uint64) (uint64, bool) {
	if rv < f.history.floorRV || rv > f.pos.rv {
		return 0, false
	}
	if f.insideRelistLocked(rv) {
		return 0, false
	}
	return f.history.lastAtOrBefore(rv), true
}

// checkNotAhead makes sure a token ahead of the feed is not ahead of the
// API server too: a token from another replica that was ahead is replayed
// until this feed catches up, but one no API server has reached yet is
// refused rather than watched for.
func (f *feed) checkNotAhead(ctx context.Context, rv uint64) error {
	list, err := cache.ToListerWatcherWithContext(f.lw).ListWithContext(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return f.replayError(err)
	}
	m, err := meta.ListAccessor(list)
	if err != nil {
		return f.replayError(err)
	}
	current, err := parseResourceVersion(m.GetResourceVersion())
	if err != nil {
		return f.replayError(err)
	}
	if rv > current {
		return &ResourceError{Resource: f.info.Resource, Err: fmt.Errorf(
			"%w: the token is at resourceVersion %d, the API server at %d", ErrTokenAhead, rv, current)}
	}
	return nil
}

// advancedLocked returns a channel closed the next time the feed's position
// moves, for a replay waiting for the feed to reach its version.
func (f *feed) advancedLocked() <-chan struct{} {
	if f.advanced == nil {
		f.advanced = make(chan struct{})
	}
	return f.advanced
}

// notifyAdvancedLocked wakes the replays waiting for the position to move.
func (f *feed) notifyAdvancedLocked() {
	if f.advanced != nil {
		close(f.advanced)
		f.advanced = nil
	}
}

// nextReplay returns the next change of the replay (or a bookmark), or nil
// once the subscription has joined the history (its phase is then
// catch-up). An error other than the caller's ctx ending ends the
// subscription.
func (s *Subscription) nextReplay(ctx context.Context) (*Event, error) {
	ev, err := s.stepReplay(ctx)
	if err != nil && ctx.Err() == nil && !errors.Is(err, ErrSubscriptionClosed) {
		f := s.feed
		f.mu.Lock()
		if s.failure == nil {
			s.failLocked(err)
		}
		err = s.Err()
		f.mu.Unlock()
		s.replay.stop()
	}
	return ev, err
}

func (s *Subscription) stepReplay(ctx context.Context) (*Event, error) {
	f, r := s.feed, s.replay
	for {
		f.mu.Lock()
		if err := s.endedLocked(); err != nil {
			f.mu.Unlock()
			return nil, err
		}
		if seq, ok := f.joinableLocked(r.rv); ok {
			s.joinLocked(seq)
			f.mu.Unlock()
			r.stop()
			return nil, nil
		}
		advanced := f.advancedLocked()
		f.mu.Unlock()

		if r.w == nil {
			if err := r.open(ctx, s); err != nil {
				return nil, err
			}
		}
		select {
		case e, ok := <-r.w.ResultChan():
			if !ok {
				// The watch timed out or broke: continue from where it got.
				r.closeWatch()
				delay, retry := r.reopenDelay()
				if !retry {
					return nil, &ResourceError{Resource: f.info.Resource, Err: fmt.Errorf(
						"%w: the API server keeps ending the watches that replay from resourceVersion %d", ErrUnavailable, r.rv)}
				}
				if err := s.waitToReopen(ctx, delay); err != nil {
					return nil, err
				}
				continue
			}
			ev, err := s.replayed(e)
			if ev != nil || err != nil || s.replay == nil {
				return ev, err // an event, an error, or joined the history
			}
		case <-s.bookmarks.C:
			// As on a live stream: a quiet replay gets a bookmark, at the
			// version it has reached, every interval.
			if s.quietTicks++; s.quietTicks >= 2 {
				return s.sent(s.bookmark(position{rv: r.rv}, false)), nil
			}
		case <-advanced:
		case <-s.failed:
			return nil, s.Err()
		case <-f.stopped:
			return nil, f.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// waitToReopen waits d, unless the subscription ends first.
func (s *Subscription) waitToReopen(ctx context.Context, d time.Duration) error {
	if d == 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-s.failed:
		return s.Err()
	case <-s.feed.stopped:
		return s.feed.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// replayed handles one upstream event; it returns the Event to pass on, if
// any.
func (s *Subscription) replayed(e watch.Event) (*Event, error) {
	f, r := s.feed, s.replay
	switch e.Type {
	case watch.Error:
		return nil, f.replayError(apierrors.FromObject(e.Object))
	case watch.Bookmark:
		m, err := meta.Accessor(e.Object)
		if err != nil {
			return nil, nil
		}
		if rv, err := parseResourceVersion(m.GetResourceVersion()); err == nil && rv > r.rv {
			r.rv = rv // nothing selected changed up to rv
		}
		return nil, nil
	case watch.Added, watch.Modified, watch.Deleted:
	default:
		return nil, nil
	}
	o, err := newObject(e.Object)
	if err != nil {
		return nil, &ResourceError{Resource: f.info.Resource, Err: fmt.Errorf("%w: replaying from the API server: %w", ErrUnavailable, err)}
	}
	if o.rv <= r.rv {
		return nil, nil // not after the token (a watch reopened at its own last version)
	}
	// Nothing selected changed between r.rv and this change: if the history
	// continues from just before it, it holds this change too (or will).
	f.mu.Lock()
	if seq, ok := f.joinableLocked(o.rv - 1); ok {
		s.joinLocked(seq)
		f.mu.Unlock()
		r.stop()
		return nil, nil
	}
	f.mu.Unlock()
	r.rv = o.rv
	ev := &Event{
		ResourceVersion: strconv.FormatUint(o.rv, 10),
		Object:          o.json,
		// A token of no feed instance: any hub places it by resourceVersion.
		ResumeToken: f.token(token{pos: position{rv: o.rv}}),
		Encoding:    s.view.encoding,
	}
	switch e.Type {
	case watch.Added:
		ev.Type = EventAdded
	case watch.Modified:
		ev.Type = EventModified
	default:
		ev.Type = EventDeleted
	}
	if r.stateful {
		send, err := s.replayedStateful(ev, o)
		if !send || err != nil {
			return nil, err // nothing for this subscriber, or no room for its state
		}
	}
	f.hub.encode(ev)
	return s.sent(ev), nil
}

// replayedStateful turns an upstream change into what the subscriber
// would have received live (see replay), and reports whether it receives
// anything. ev holds the upstream change; o is its object.
func (s *Subscription) replayedStateful(ev *Event, o *object) (bool, error) {
	r := s.replay
	key := objectKey{o.namespace, o.name}
	prev, had := r.state[key]
	cur := replayEntry{}
	if ev.Type != EventDeleted {
		var err error
		if cur, err = s.replayEntryOf(o); err != nil {
			return false, err
		}
	}
	grows := cur.size(key)
	if ev.Type == EventDeleted {
		grows = 0
	}
	if had {
		grows -= prev.size(key)
	}
	if !r.stateBytes.Add(grows) {
		return false, r.budgetError(s.feed, grows)
	}
	if ev.Type != EventDeleted {
		r.state[key] = cur
	} else {
		delete(r.state, key)
	}
	switch {
	case cur.selected && prev.selected:
		ev.Type, ev.Object = EventModified, cur.json
		if s.view.proj != nil {
			if s.view.proj.SameAsked(unsafeBytes(prev.json), unsafeBytes(cur.json)) {
				return false, nil
			}
		}
		if s.view.includePrevious {
			ev.PreviousObject = prev.json
		}
	case cur.selected:
		ev.Type, ev.Object = EventAdded, cur.json
	case prev.selected && ev.Type == EventDeleted:
		ev.Object = s.feed.project(s.view, o.json) // the API server's last state
	case prev.selected:
		// It stopped matching the filter: as live, its last matching state
		// at the version of the change.
		ev.Type, ev.Object = EventDeleted, atVersion(prev.json, ev.ResourceVersion)
	default:
		return false, nil
	}
	return true, nil
}

// startReplayLocked moves the subscription to a replay from rv; its watch
// opens on the next call of Next, unless subscribe opens it first. The
// caller holds feed.mu.
func (s *Subscription) startReplayLocked(rv uint64) {
	s.feed.counters.replays.Add(1)
	s.replay = s.feed.newReplay(s.sel, s.view, rv, s.owner)
	s.cancelReplay = s.replay.end
	if s.closed {
		s.cancelReplay()
	}
	s.phase = phaseReplay
}

// joinLocked ends the replay: the subscription continues from the history
// after seq. The caller holds feed.mu, and stops the replay's watch once it
// has released it.
func (s *Subscription) joinLocked(seq uint64) {
	s.at = position{epoch: s.feed.epoch, seq: seq, rv: s.replay.rv}
	s.replay, s.cancelReplay = nil, nil
	s.phase = phaseCatchUp
}
