package stream

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/informerhub/informerhub/informerhub/budget"
	"github.com/informerhub/informerhub/informerhub/internal/errs"
	"github.com/informerhub/informerhub/informerhub/internal/event"
	"github.com/informerhub/informerhub/informerhub/internal/feed"
	"github.com/informerhub/informerhub/informerhub/internal/selection"
	"github.com/informerhub/informerhub/informerhub/internal/state"
	"github.com/informerhub/informerhub/informerhub/internal/token"
)

// replay is the phase of a subscription that resumes from a token the
// feed's history no longer (or not yet) covers: it bridges the token to
// that history. Its upstream watch (replayWatch) starts at the token's
// resourceVersion with the subscription's own selector, so the API server
// filters the changes with watch semantics (DELETED for an object that left
// the selector); the replay passes them on until the history holds
// everything after the version reached, then catches up from the history
// as any other subscription does.
//
// resourceVersions are etcd revisions, shared by every API server and every
// replica of the hub: that is what lets a fresh hub honour a token another
// one issued.
//
// The upstream watch asks the API server for what it evaluates of the
// selector, and the hub evaluates the rest (selection.Selector.UpstreamQuery says
// which is which). What the hub evaluates of a shard selector never
// changes its verdict on an object (uid and namespace are immutable), so
// the replay passes on only the upstream changes of the objects it
// selects. A filter, or a field selector the API server refused, can: an
// upstream MODIFIED may then be an object entering or leaving the
// selection. The API server can evaluate neither filters nor projections,
// and its watch carries no previous state. A subscription with any of
// these replays statefully: before its first watch, it lists the upstream selection as it
// was at the token's resourceVersion (a LIST with resourceVersionMatch
// Exact, which the API server serves until etcd compacts that version, and
// answers 410 Gone after), and keeps each object the subscription selects,
// with the state the subscriber last received of it (an object it does
// not select costs nothing: it has no entry). Each
// upstream change is then turned into what the subscriber would have
// received live (enter, leave, the previous state, no MODIFIED whose
// projection did not change), and nothing is guessed: a token whose state
// can no longer be listed is ErrTokenExpired.
type replay struct {
	s        *Stream
	upstream *replayWatch
	rv       uint64 // every selected change up to rv has been passed on
	// query is what the upstream watch asks the API server for, and what
	// the hub evaluates itself.
	query selection.UpstreamQuery
	// stateful is set for a subscription whose selection the API server
	// cannot follow alone (query.stateful), with a projection, or with
	// previous states (see above). state holds what such a replay knows of
	// each object the subscription selects (see replayEntry); nil for a
	// stateless one, and until its LIST. stateBytes is the state's share
	// of the hub's replay budget (Config.MaxReplayStateBytes), given back
	// when the replay ends.
	stateful   bool
	state      map[state.Key]replayEntry
	stateBytes budget.Share
	eval       selection.Evaluation // the scratch of the filter's evaluations
}

// replayEntry is what a stateful replay knows of an object of the upstream
// selection: whether the subscription's whole selector (its filter
// included) selects it, and if so the state the subscriber received last,
// in its view's projection.
type replayEntry struct {
	selected bool
	json     string
	// undecided is why the filter could not decide on the object, if it
	// could not (see verdict).
	undecided *selection.FilterError
}

// size is what an entry counts against the replay budget.
func (e replayEntry) size(k state.Key) int64 {
	return int64(len(e.json)+len(k.Namespace)+len(k.Name)) + 64
}

func newReplay(s *Stream, rv uint64) *replay {
	r := &replay{s: s, upstream: newReplayWatch(s.deps, s.lease.Feed(), s.lease.Terms().Owner), rv: rv}
	// Before the replay is shared (Close calls end): a stateless one holds
	// nothing, and may turn stateful (plan).
	r.stateBytes.Init(s.deps.Replays.bytes, false)
	r.plan(s.lease.Selector().UpstreamQuery(true))
	return r
}

// plan makes the replay ask the API server for q, statefully if it must.
// A replay that turns stateful lists its state when it next opens its
// watch; one that is stateful stays so.
func (r *replay) plan(q selection.UpstreamQuery) {
	r.query = q
	r.upstream.query(q)
	vw := r.s.lease.View()
	r.stateful = r.stateful || q.Stateful || vw.Projection() != nil || vw.IncludePrevious()
}

// refused handles the API server's refusal of the replay's selector (a
// selectorRefusedError): when it was given the field selector, the replay
// asks without it from then on, and reports true: the hub evaluates the
// field itself, as it does live. A refusal of anything less is the
// subscription's end (refusedSelector).
func (r *replay) refused(err error) bool {
	var refused *selectorRefusedError
	if !errors.As(err, &refused) || r.query.FieldSelector == "" {
		return false
	}
	r.s.lease.Feed().Log().Info("the API server refuses a field selector the hub serves; the replay evaluates it in the hub",
		"selector", r.s.Describe(), "error", err)
	r.plan(r.s.lease.Selector().UpstreamQuery(false))
	return true
}

// open starts the upstream watch from r.rv and, for a stateful replay that
// has none yet, lists its state once the watch has accepted the version: a
// version the API server no longer has costs it a refused watch, not a LIST
// of the whole selection. When the API server refuses the field selector,
// which the hub's table of fields says it serves (see upstreamQuery), the
// hub evaluates it instead, as it does live.
func (r *replay) open(ctx context.Context) error {
	prepare := func(ctx context.Context) error {
		if !r.stateful || r.state != nil {
			return nil
		}
		return r.listState(ctx)
	}
	err := r.upstream.open(ctx, r.rv, prepare)
	if r.refused(err) {
		err = r.upstream.open(ctx, r.rv, prepare)
	}
	return r.refusedSelector(err)
}

// refusedSelector turns the API server's refusal of a field selector that
// the replay no longer sends (it refuses what it served before) into what
// ends the subscription: the API server cannot serve the replay now.
func (r *replay) refusedSelector(err error) error {
	var refused *selectorRefusedError
	if !errors.As(err, &refused) {
		return err
	}
	return &errs.ResourceError{Resource: r.s.lease.Feed().Info().Resource, Err: fmt.Errorf("%w: replaying from the API server: %w", errs.ErrUnavailable, refused.err)}
}

// step returns the next change of the replay (or a bookmark); or, once the
// history holds everything after the version it reached, the catch-up that
// follows it. An error other than the caller's ctx ending ends the
// subscription.
func (r *replay) step(ctx context.Context) (*event.Event, phase, error) {
	ev, next, err := r.next(ctx)
	if err != nil && ctx.Err() == nil && !errors.Is(err, errs.ErrSubscriptionClosed) {
		r.s.lease.Fail(err)
		err = r.s.Err()
		r.stop()
	}
	return ev, next, err
}

func (r *replay) next(ctx context.Context) (*event.Event, phase, error) {
	s := r.s
	f := s.lease.Feed()
	for {
		next, advanced, err := r.poll()
		if err != nil {
			return nil, nil, err
		}
		if next != nil {
			r.stop()
			return nil, next, nil
		}
		if !r.upstream.watching() {
			if err := r.open(ctx); err != nil {
				return nil, nil, err
			}
		}
		select {
		case e, ok := <-r.upstream.results():
			if !ok {
				// The watch timed out or broke: continue from where it got.
				if err := r.reopen(ctx); err != nil {
					return nil, nil, err
				}
				continue
			}
			ev, next, err := r.replayed(e)
			if r.refused(err) {
				// On a watch reopened (the CRD changed since): ask again
				// without the field, from where the replay got.
				r.upstream.closeWatch()
				continue
			}
			if ev != nil || next != nil || err != nil {
				return ev, next, r.refusedSelector(err)
			}
		case <-s.wake:
			// As on a live stream: a quiet replay gets a bookmark, at the
			// version it has reached, every interval.
			if s.quiet.ticked() {
				return f.Events().Bookmark(state.Position{RV: r.rv}, false, s.lease.View().Encoding()), nil, nil
			}
		case <-advanced:
		case <-s.lease.Done():
			return nil, nil, s.Err()
		case <-f.Stopped():
			return nil, nil, f.Err()
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
}

// poll says, under the feed's lock, why the subscription can go no
// further, if it can't; else the catch-up that continues the replay, if the
// history now holds every selected change after the version it reached;
// else a channel closed when the feed's position next moves.
func (r *replay) poll() (next phase, advanced <-chan struct{}, err error) {
	at, ok, advanced, ended := r.s.lease.PollReplay(r.rv)
	switch {
	case ended != nil:
		return nil, nil, r.s.errOf(ended)
	case ok:
		return r.catchUpAt(at), nil, nil
	}
	return nil, advanced, nil
}

// join returns the catch-up that continues the replay if the history holds
// every selected change after rv; the caller stops the replay then.
func (r *replay) join(rv uint64) phase {
	if at, ok := r.s.lease.Rejoin(rv); ok {
		return r.catchUpAt(at)
	}
	return nil
}

// catchUpAt is the catch-up that continues the replay from at, the
// position in the feed's history after the version the replay reached.
func (r *replay) catchUpAt(at state.Position) phase {
	at.RV = r.rv
	return &catchUpPhase{s: r.s, at: at}
}

// reopen waits before the next watch when the last one ended (see
// replayWatch.reopenDelay), unless the subscription ends first.
func (r *replay) reopen(ctx context.Context) error {
	s, f := r.s, r.s.lease.Feed()
	r.upstream.closeWatch()
	delay, retry := r.upstream.reopenDelay()
	if !retry {
		return &errs.ResourceError{Resource: f.Info().Resource, Err: fmt.Errorf(
			"%w: the API server keeps ending the watches that replay from resourceVersion %d", errs.ErrUnavailable, r.rv)}
	}
	if delay == 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(delay)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-s.lease.Done():
		return s.Err()
	case <-f.Stopped():
		return f.Err()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// replayed handles one upstream event; it returns the Event to pass on, if
// any, or the catch-up that follows once the history continues it.
func (r *replay) replayed(e watch.Event) (*event.Event, phase, error) {
	f := r.s.lease.Feed()
	switch e.Type {
	case watch.Error:
		return nil, nil, r.upstream.apiError(apierrors.FromObject(e.Object))
	case watch.Bookmark:
		m, err := meta.Accessor(e.Object)
		if err != nil {
			return nil, nil, nil
		}
		if rv, err := state.ParseResourceVersion(m.GetResourceVersion()); err == nil && rv > r.rv {
			r.rv = rv // nothing selected changed up to rv
		}
		return nil, nil, nil
	case watch.Added, watch.Modified, watch.Deleted:
	default:
		return nil, nil, nil
	}
	o, err := state.NewObject(e.Object)
	if err != nil {
		return nil, nil, &errs.ResourceError{Resource: f.Info().Resource, Err: fmt.Errorf("%w: replaying from the API server: %w", errs.ErrUnavailable, err)}
	}
	if o.RV <= r.rv {
		return nil, nil, nil // not after the token (a watch reopened at its own last version)
	}
	// Nothing selected changed between r.rv and this change: if the history
	// continues from just before it, it holds this change too (or will).
	if next := r.join(o.RV - 1); next != nil {
		r.stop()
		return nil, next, nil
	}
	r.rv = o.RV
	// What the hub evaluates itself of a stateless replay's selector never
	// changes its verdict on an object: the changes of an object it does
	// not select are none of the subscriber's.
	if !r.stateful && r.query.Local != nil && !r.query.Local.MatchesBase(o) {
		return nil, nil, nil
	}
	ev := &event.Event{
		ResourceVersion: strconv.FormatUint(o.RV, 10),
		Object:          o.JSON,
		// A token of no feed instance: any hub places it by resourceVersion.
		ResumeToken: f.Events().Token(token.Token{Pos: state.Position{RV: o.RV}}),
		Encoding:    r.s.lease.View().Encoding(),
	}
	switch e.Type {
	case watch.Added:
		ev.Type = event.Added
	case watch.Modified:
		ev.Type = event.Modified
	default:
		ev.Type = event.Deleted
	}
	if r.stateful {
		send, err := r.statefully(ev, o)
		if !send || err != nil {
			return nil, nil, err // nothing for this subscriber, or no room for its state
		}
	}
	return f.Events().Encoded(ev), nil, nil
}

// statefully turns an upstream change into what the subscriber would have
// received live (see replay), and reports whether it receives anything. ev
// holds the upstream change; o is its object.
func (r *replay) statefully(ev *event.Event, o *state.Object) (bool, error) {
	vw, events := r.s.lease.View(), r.s.lease.Feed().Events()
	key := state.Key{Namespace: o.Namespace, Name: o.Name}
	prev, had := r.state[key]
	cur := replayEntry{}
	if ev.Type != event.Deleted {
		var err error
		if cur, err = r.entryOf(o); err != nil {
			return false, err
		}
	}
	// The state keeps the selected objects only: an object without an
	// entry is not selected.
	var grows int64
	if cur.selected {
		grows = cur.size(key)
	}
	if had {
		grows -= prev.size(key)
	}
	if !r.stateBytes.Add(grows) {
		return false, r.budgetError(grows)
	}
	if cur.selected {
		r.state[key] = cur
	} else {
		delete(r.state, key)
	}
	switch {
	case cur.selected && prev.selected:
		ev.Type, ev.Object = event.Modified, cur.json
		if vw.Projection() != nil {
			if vw.Projection().SameAsked(state.UnsafeBytes(prev.json), state.UnsafeBytes(cur.json)) {
				return false, nil
			}
		}
		if vw.IncludePrevious() {
			ev.PreviousObject = prev.json
		}
	case cur.selected:
		ev.Type, ev.Object = event.Added, cur.json
	case prev.selected && ev.Type == event.Deleted:
		last, err := events.Project(vw, o.JSON) // the API server's last state
		if err != nil {
			return false, event.Failure(events.Failed(ev, o, err))
		}
		ev.Object = last
	case prev.selected:
		// It stopped matching the filter: as live, its last matching state
		// at the version of the change.
		last, err := feed.AtVersion(prev.json, ev.ResourceVersion)
		if err != nil {
			return false, event.Failure(events.Failed(ev, o, err))
		}
		ev.Type, ev.Object = event.Deleted, last
	default:
		return false, nil
	}
	// Only an entry that is selected carries a reason (see verdict): those
	// of the states that made the event.
	if undecided := cmp.Or(cur.undecided, prev.undecided); undecided != nil {
		ev.FilterError = undecided.Reason
	}
	return true, nil
}

// listState fills r.state with the upstream selection as it was at r.rv.
// A LIST that fails gives back what it took of the budget.
func (r *replay) listState(ctx context.Context) error {
	f := r.s.lease.Feed()
	objects := map[state.Key]replayEntry{}
	held := r.stateBytes.Held()
	defer func() {
		if r.state == nil {
			r.stateBytes.Add(held - r.stateBytes.Held())
		}
	}()
	err := r.upstream.list(ctx, r.rv, func(obj runtime.Object) error {
		err := r.take(objects, obj)
		var limit *errs.LimitError
		var refused *errs.RequestError
		var unsendable *errs.ObjectError
		if err == nil || errors.As(err, &limit) || errors.As(err, &refused) || errors.As(err, &unsendable) {
			return err
		}
		return &errs.ResourceError{Resource: f.Info().Resource, Err: err}
	})
	if err != nil {
		return err
	}
	r.state = objects
	return nil
}

// take adds an object of the upstream selection to state, within the
// replay budget.
func (r *replay) take(objects map[state.Key]replayEntry, obj runtime.Object) error {
	o, err := state.NewObject(obj)
	if err != nil {
		return fmt.Errorf("%w: replaying from the API server: %w", errs.ErrUnavailable, err)
	}
	e, err := r.entryOf(o)
	if err != nil {
		return err
	}
	if !e.selected {
		return nil // no entry: not selected
	}
	k := state.Key{Namespace: o.Namespace, Name: o.Name}
	if !r.stateBytes.Add(e.size(k)) {
		return r.budgetError(e.size(k))
	}
	objects[k] = e
	return nil
}

// entryOf is what a stateful replay keeps of an object the upstream
// selection holds; an *ObjectError when it cannot project it.
func (r *replay) entryOf(o *state.Object) (replayEntry, error) {
	s := r.s
	r.eval.Reset()
	v := s.lease.Selector().Matches(o, &r.eval)
	if !v.Match {
		return replayEntry{}, nil
	}
	events := s.lease.Feed().Events()
	json, err := events.Project(s.lease.View(), o.JSON)
	if err != nil {
		return replayEntry{}, event.Failure(events.Failed(&event.Event{}, o, err))
	}
	return replayEntry{selected: true, json: json, undecided: v.Undecided}, nil
}

// budgetError refuses a stateful replay whose state, n bytes more than it
// holds, does not fit Config.MaxReplayStateBytes: for now, while other
// replays hold the rest (a LimitError: retry later), or ever (the token is
// expired for this hub: start over from a snapshot, which holds nothing).
func (r *replay) budgetError(n int64) error {
	f := r.s.lease.Feed()
	if r.stateBytes.Held()+n > r.stateBytes.Budget().Max() {
		return &errs.ExpiredError{Resource: f.Info().Resource, TooLarge: true}
	}
	return &errs.LimitError{Resource: f.Info().Resource, Limit: errs.LimitReplayState, Max: int(r.s.deps.Replays.bytes.Max())}
}

// end ends the replay's upstream watch, which gives back its replay slot,
// and gives back what its state held. It may be called from any
// goroutine, more than once: Close calls it.
func (r *replay) end() {
	r.upstream.end()
	r.stateBytes.Release()
}

// stop ends the replay and closes its watch, from the goroutine that reads
// it.
func (r *replay) stop() {
	r.end()
	r.upstream.closeWatch()
}
