package stream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/informerhub/informerhub/informerhub/budget"
	"github.com/informerhub/informerhub/informerhub/internal/errs"
	"github.com/informerhub/informerhub/informerhub/internal/feed"
	"github.com/informerhub/informerhub/informerhub/internal/selection"
	"github.com/informerhub/informerhub/informerhub/internal/state"
)

// replayWatch is a replay's upstream side: a watch of the API server with
// what it evaluates of the subscription's selector (an upstreamQuery),
// from a resourceVersion on, and the LIST of that selection at a version
// for a stateful replay. It holds one of the hub's replay slots for the
// replay's life (ReplayLimits).
type replayWatch struct {
	deps *Deps
	feed *feed.Feed
	// lw lists and watches the query's namespace; opts holds its label and
	// field selectors (ResourceVersion is set per call). Set by query.
	lw    cache.ListerWatcherWithContext
	opts  metav1.ListOptions
	owner string // whose share of the slots it takes first
	// ctx ends the upstream watch, and the replay: cancel is called when
	// the replay ends, and by the subscription's Close, from any goroutine.
	ctx    context.Context
	cancel context.CancelFunc

	// Owned by the goroutine reading the watch.
	w           watch.Interface
	cancelWatch context.CancelFunc // ends w's request
	unwatch     func() bool        // unregisters the Stop of w that ctx would call
	openedAt    time.Time
	shortRun    int // watches in a row that ended within a second of opening
	// slotHeld and ownerHeld are set once it holds one of the hub's slots,
	// and one of its owner's, until ctx ends.
	slotHeld, ownerHeld bool
}

const (
	// replayWatchTimeout bounds each upstream watch of a replay, in
	// seconds. The API server's watch cache sends a bookmark shortly
	// before a watch times out, and that bookmark is how a replay learns
	// it has passed a version where nothing it selects changed; the replay
	// then opens the next watch from there.
	replayWatchTimeout = 10
	// replayListPage is the page size of a stateful replay's LIST.
	replayListPage = 500
	// maxShortRuns is how many watches in a row may end within a second of
	// opening before the replay gives up: the API server is not serving
	// it.
	maxShortRuns = 5
)

// newReplayWatch returns a replay's upstream side; query sets what it asks
// for before it opens.
func newReplayWatch(deps *Deps, f *feed.Feed, owner string) *replayWatch {
	ctx, cancel := context.WithCancel(deps.Ctx)
	return &replayWatch{deps: deps, feed: f, owner: owner, ctx: ctx, cancel: cancel}
}

// query makes the next watch and LIST ask the API server for q.
func (u *replayWatch) query(q selection.UpstreamQuery) {
	timeout := int64(replayWatchTimeout)
	u.opts = metav1.ListOptions{AllowWatchBookmarks: true, TimeoutSeconds: &timeout,
		LabelSelector: q.LabelSelector, FieldSelector: q.FieldSelector}
	lw := u.feed.ListerWatcher()
	if q.Namespace != "" {
		lw = u.deps.Source.ListerWatcher(u.feed.Info(), q.Namespace)
	}
	u.lw = cache.ToListerWatcherWithContext(lw)
}

// open starts a watch from rv. Once the watch has accepted the version,
// prepare runs with the watch's context (a stateful replay lists its state
// there). Its request also ends with the caller's ctx, so a caller that
// goes away does not wait for a slow API server; the replay itself lives
// on for the next call.
func (u *replayWatch) open(ctx context.Context, rv uint64, prepare func(context.Context) error) error {
	if err := u.acquire(ctx); err != nil {
		return err
	}
	watchCtx, cancelWatch := context.WithCancel(u.ctx)
	stop := context.AfterFunc(ctx, cancelWatch)
	defer stop()
	failed := func(err error) error {
		cancelWatch()
		switch {
		case u.ctx.Err() != nil:
			return errs.ErrSubscriptionClosed
		case ctx.Err() != nil:
			return ctx.Err()
		}
		return err
	}
	opts := u.opts
	opts.ResourceVersion = strconv.FormatUint(rv, 10)
	w, err := u.lw.WatchWithContext(watchCtx, opts)
	if err != nil {
		return failed(u.apiError(err))
	}
	if err := prepare(watchCtx); err != nil {
		w.Stop()
		return failed(err)
	}
	u.w, u.cancelWatch, u.openedAt = w, cancelWatch, time.Now()
	// A watcher blocked handing over an event stops only when told to; a
	// Close from another goroutine ends u.ctx, and must reach it too.
	u.unwatch = context.AfterFunc(watchCtx, w.Stop)
	return nil
}

// watching reports whether a watch is open.
func (u *replayWatch) watching() bool { return u.w != nil }

// results is the open watch's events.
func (u *replayWatch) results() <-chan watch.Event { return u.w.ResultChan() }

// list lists the selection as it was at rv, a page at a time, and calls
// each with every object; it returns the first error each returns, as it
// is.
func (u *replayWatch) list(ctx context.Context, rv uint64, each func(runtime.Object) error) error {
	opts := metav1.ListOptions{
		LabelSelector:        u.opts.LabelSelector,
		FieldSelector:        u.opts.FieldSelector,
		ResourceVersion:      strconv.FormatUint(rv, 10),
		ResourceVersionMatch: metav1.ResourceVersionMatchExact,
		Limit:                replayListPage,
	}
	for {
		list, err := u.lw.ListWithContext(ctx, opts)
		if err != nil {
			return u.apiError(err)
		}
		var eachErr error
		if err := meta.EachListItem(list, func(obj runtime.Object) error {
			eachErr = each(obj)
			return eachErr
		}); err != nil {
			if eachErr != nil {
				return eachErr
			}
			return &errs.ResourceError{Resource: u.feed.Info().Resource, Err: err}
		}
		m, err := meta.ListAccessor(list)
		if err != nil {
			return u.apiError(err)
		}
		if m.GetContinue() == "" {
			return nil
		}
		// The continue token holds the version: the next page is of the
		// same point in time.
		opts.Continue, opts.ResourceVersion, opts.ResourceVersionMatch = m.GetContinue(), "", ""
	}
}

// closeWatch stops the current watch, which has ended or is no longer
// needed.
func (u *replayWatch) closeWatch() {
	if u.w != nil {
		u.unwatch()
		u.w.Stop()
		u.cancelWatch()
		u.w = nil
	}
}

// reopenDelay is how long to wait before the next watch when the last one
// ended: none after a watch that ran its course, a growing backoff after
// ones that ended at once, so a misbehaving API server is not hammered;
// false after maxShortRuns of those.
func (u *replayWatch) reopenDelay() (time.Duration, bool) {
	if time.Since(u.openedAt) >= time.Second {
		u.shortRun = 0
		return 0, true
	}
	u.shortRun++
	return 100 * time.Millisecond << u.shortRun, u.shortRun < maxShortRuns
}

// end ends the watch's context, which gives back its replay slot. It may be
// called from any goroutine, more than once.
func (u *replayWatch) end() { u.cancel() }

// acquire takes one of the hub's replay slots for the rest of the replay:
// it is given back when the replay's context ends, whoever ends it.
// Waiting for a slot keeps a crowd of clients failing over at once from
// opening as many watches on the API server.
func (u *replayWatch) acquire(ctx context.Context) error {
	limits := u.deps.Replays
	if u.slotHeld {
		return nil
	}
	// The owner's share first: one owner's replays wait for each other,
	// never take every slot from the rest.
	if u.owner != "" && !u.ownerHeld {
		share := limits.owners.get(u.owner)
		select {
		case share.slots <- struct{}{}:
		case <-ctx.Done():
			limits.owners.put(u.owner, share)
			return ctx.Err()
		case <-u.ctx.Done():
			limits.owners.put(u.owner, share)
			return errs.ErrSubscriptionClosed
		}
		u.holdOwner(share)
	}
	select {
	case limits.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-u.ctx.Done():
		return errs.ErrSubscriptionClosed
	}
	u.holdSlot()
	return nil
}

// tryAcquire is acquire without waiting: it takes the slots the replay
// still needs if they are free now, and reports whether it holds them all.
// An owner's slot it took is kept for acquire, which then waits for the
// hub's only.
func (u *replayWatch) tryAcquire() bool {
	limits := u.deps.Replays
	if u.slotHeld {
		return true
	}
	if u.owner != "" && !u.ownerHeld {
		share := limits.owners.get(u.owner)
		select {
		case share.slots <- struct{}{}:
		default:
			limits.owners.put(u.owner, share)
			return false
		}
		u.holdOwner(share)
	}
	select {
	case limits.slots <- struct{}{}:
	default:
		return false
	}
	u.holdSlot()
	return true
}

// holdOwner records the owner's slot taken in share, given back when the
// replay's context ends.
func (u *replayWatch) holdOwner(share *replayShare) {
	u.ownerHeld = true
	context.AfterFunc(u.ctx, func() {
		<-share.slots
		u.deps.Replays.owners.put(u.owner, share)
	})
}

// holdSlot records the hub's slot taken, given back when the replay's
// context ends.
func (u *replayWatch) holdSlot() {
	u.slotHeld = true
	context.AfterFunc(u.ctx, func() { <-u.deps.Replays.slots })
}

// apiError turns an upstream failure of a replay into the hub's errors.
func (u *replayWatch) apiError(err error) error {
	f := u.feed
	switch {
	case err == nil:
		return nil
	case apierrors.IsResourceExpired(err) || apierrors.IsGone(err):
		// The one answer that means the version is gone for good.
		return f.Expired(true)
	case apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge):
		return &errs.ResourceError{Resource: f.Info().Resource, Err: fmt.Errorf(
			"%w: the API server has not reached the token's resourceVersion yet; retry shortly", errs.ErrTokenAhead)}
	case apierrors.IsBadRequest(err) && refusesFieldSelector(err):
		// The API server refuses the field selector it was given (a field
		// the hub's table has and it does not serve): the replay asks for
		// less, and evaluates the rest itself. Any other 400 is the API
		// server's refusal to serve the replay.
		return &selectorRefusedError{err: err}
	}
	return &errs.ResourceError{Resource: f.Info().Resource, Err: fmt.Errorf("%w: replaying from the API server: %w", errs.ErrUnavailable, err)}
}

// refusesFieldSelector reports whether a 400 Bad Request refuses a field
// selector: the API server says "field label not supported: spec.color"
// (built-in types and CRDs) or "… is not a known field selector" (types
// with no field selectors of their own).
func refusesFieldSelector(err error) bool {
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "field label") || strings.Contains(msg, "field selector")
}

// selectorRefusedError is the API server's 400 Bad Request to a replay's
// watch or LIST that refuses the field selector it was given. The replay
// asks without it (replay.refused).
type selectorRefusedError struct{ err error }

func (e *selectorRefusedError) Error() string {
	return "the API server refuses the selector: " + e.err.Error()
}
func (e *selectorRefusedError) Unwrap() error { return e.err }

// checkNotAhead makes sure a token ahead of the feed is not ahead of the
// API server too: a token from another replica that was ahead is replayed
// until this feed catches up, but one no API server has reached yet is
// refused rather than watched for.
func (u *replayWatch) checkNotAhead(ctx context.Context, rv uint64) error {
	list, err := cache.ToListerWatcherWithContext(u.feed.ListerWatcher()).ListWithContext(ctx, metav1.ListOptions{Limit: 1})
	var refused *selectorRefusedError
	if err = u.apiError(err); errors.As(err, &refused) {
		// It asked for no selector: it cannot serve the replay.
		err = &errs.ResourceError{Resource: u.feed.Info().Resource, Err: fmt.Errorf("%w: replaying from the API server: %w", errs.ErrUnavailable, refused.err)}
	}
	if err != nil {
		return err
	}
	m, err := meta.ListAccessor(list)
	if err != nil {
		return u.apiError(err)
	}
	current, err := state.ParseResourceVersion(m.GetResourceVersion())
	if err != nil {
		return u.apiError(err)
	}
	if rv > current {
		return &errs.ResourceError{Resource: u.feed.Info().Resource, Err: fmt.Errorf(
			"%w: the token is at resourceVersion %d, the API server at %d", errs.ErrTokenAhead, rv, current)}
	}
	return nil
}

// ReplayLimits bounds the replays of every feed of a hub: the slots of
// those running at once (Config.MaxConcurrentReplays), each owner's share
// of them (Config.MaxReplaysPerOwner), and the state stateful ones hold
// (Config.MaxReplayStateBytes).
type ReplayLimits struct {
	slots  chan struct{} // a token per replay running
	owners *replayShares
	bytes  *budget.Bytes
}

// NewReplayLimits returns the limits of a hub's replays: at most
// maxReplays at once, perOwner of each owner, holding at most stateBytes
// of state.
func NewReplayLimits(maxReplays, perOwner int, stateBytes int64) *ReplayLimits {
	return &ReplayLimits{
		slots:  make(chan struct{}, maxReplays),
		owners: &replayShares{max: perOwner, byOwner: map[string]*replayShare{}},
		bytes:  budget.New(stateBytes, nil),
	}
}

// StateBytes is what stateful replays hold now.
func (l *ReplayLimits) StateBytes() int64 { return l.bytes.Used() }

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
