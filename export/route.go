package export

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/runtime/schema"

	hubclient "github.com/informerhub/informerhub/clients/go"
)

// Sink publishes one route's changes, and keeps its resume point with
// them.
type Sink interface {
	// Resume returns the resume token written with the last change the
	// sink holds of the route; "" when it holds none.
	Resume(ctx context.Context) (string, error)
	// Publish publishes changes in order, each with its resume token, and
	// returns once the sink holds them all. After an error it may hold
	// any first part of them, never a later change without the earlier
	// ones: the route then asks Resume where to go on from. acknowledged
	// is how many the sink is known to hold.
	Publish(ctx context.Context, changes []Change) (acknowledged int, err error)
}

// Route exports what a selector selects to a sink.
type Route struct {
	Name     string
	Selector hubclient.Selector
	// Fields projects the objects (hubclient.WatchOptions.Fields).
	Fields []string
	Sink   Sink
	// MaxBatch is how many changes are published together at most; 0:
	// 256. It bounds the changes a route holds, but for a gap's listing:
	// a slow sink slows the watch, and the hub's history carries the
	// rest.
	MaxBatch int
	// Retry is the wait after a failed publish, doubled up to a minute;
	// 0: one second.
	Retry   time.Duration
	Log     *slog.Logger
	Metrics *Metrics // nil: none

	lag lag
}

// lag is how far a route's sink is behind what the route received.
type lag struct {
	mu sync.Mutex // guards the fields below
	// oldest is when the oldest change received and not acknowledged
	// arrived (zero: none), kept through failures, so that it grows
	// while the sink refuses; pending is how many there are.
	oldest  time.Time
	pending int
}

// publishing records that changes are to be published, the first of
// which arrived at first; more are waiting behind them.
func (l *lag) publishing(first time.Time, changes, more int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.oldest.IsZero() || first.Before(l.oldest) {
		l.oldest = first
	}
	l.pending = changes + more
}

// acknowledged records that the changes up to some were acknowledged; next
// is when the oldest change left arrived (zero: none is left).
func (l *lag) acknowledged(next time.Time, left int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.oldest, l.pending = next, left
}

// read returns the lag at now: seconds, and changes.
func (l *lag) read(now time.Time) (float64, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.oldest.IsZero() {
		return 0, l.pending
	}
	return now.Sub(l.oldest).Seconds(), l.pending
}

// Run exports until ctx ends, or an error no retry can fix (the hub
// refusing the selector, the caller's credentials or access; a sink that
// cannot be written as configured).
func (r *Route) Run(ctx context.Context, client *hubclient.Client) error {
	log := r.Log
	if log == nil {
		log = slog.Default()
	}
	log = log.With("route", r.Name)
	r.Metrics.follow(r.Name, &r.lag)
	wait := r.Retry
	if wait <= 0 {
		wait = time.Second
	}
	initial := wait
	for {
		progressed, err := r.export(ctx, client, log)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if permanent(err) {
			r.Metrics.stopped(r.Name)
			return err
		}
		if progressed {
			wait = initial // a new failure, not the same one again
		}
		r.Metrics.failed(r.Name)
		log.Warn("export interrupted; resuming from what the sink holds", "error", err, "after", wait)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return ctx.Err()
		}
		wait = min(2*wait, time.Minute)
	}
}

// received is an event of the watch, or its end, when it came, and the
// watch's position before it.
type received struct {
	e      hubclient.Event
	err    error
	at     time.Time
	before string
}

// export watches from the sink's resume point and publishes until an
// error; progressed reports whether the sink acknowledged any change.
func (r *Route) export(ctx context.Context, client *hubclient.Client, log *slog.Logger) (progressed bool, err error) {
	token, err := r.Sink.Resume(ctx)
	if err != nil {
		return false, err
	}
	log.Info("exporting", "resumeToken", token != "")
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := client.Watch(ctx, r.Selector, hubclient.WatchOptions{ResumeToken: token, SendInitialEvents: token == "", Fields: r.Fields})
	defer w.Close()
	maxBatch := r.MaxBatch
	if maxBatch <= 0 {
		maxBatch = 256
	}
	// The reader runs ahead of the sink by at most maxBatch events.
	events := make(chan received, maxBatch)
	go func() {
		defer close(events)
		for {
			before := w.ResumeToken()
			e, err := w.Next()
			select {
			case events <- received{e, err, time.Now(), before}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	publish := func(batch []Change, arrivals []time.Time) error {
		for len(batch) > 0 {
			n := min(len(batch), maxBatch)
			started := time.Now()
			r.lag.publishing(arrivals[0], len(batch), len(events))
			r.Metrics.published(r.Name, n)
			acked, err := r.Sink.Publish(ctx, batch[:n])
			r.Metrics.acknowledged(r.Name, batch[:acked], time.Now())
			progressed = progressed || acked > 0
			if err != nil {
				return err
			}
			batch, arrivals = batch[n:], arrivals[n:]
			switch {
			case len(batch) > 0:
				r.lag.acknowledged(arrivals[0], len(batch)+len(events))
			case len(events) > 0:
				r.lag.acknowledged(started, len(events)) // they came while these were published, at the latest
			default:
				r.lag.acknowledged(time.Time{}, 0)
			}
		}
		return nil
	}
	// listing collects a listing whose changes from the sink's are a gap:
	// a re-sync's, or, on a route that starts with no position, the
	// initial events, unless the sink is known to hold nothing (what
	// existed before its first start is no gap in what it holds).
	var listing *listingGap
	if token == "" {
		if listing, err = r.startingGap(ctx); err != nil {
			return false, err
		}
	}
	batch := make([]Change, 0, maxBatch)
	arrivals := make([]time.Time, 0, maxBatch)
	for {
		n, ok := <-events
		if !ok {
			return progressed, ctx.Err()
		}
		for {
			if n.err != nil {
				return progressed, n.err
			}
			e := n.e
			if e.Resync && listing == nil {
				listing = &listingGap{}
			}
			if listing != nil && !listing.started {
				listing.started, listing.before = true, n.before
			}
			switch {
			case listing != nil && e.Type != hubclient.Bookmark:
				listing.events = append(listing.events, e)
			case listing != nil && (e.Resync || e.InitialEventsEnd):
				// Consumers must hold all that came before the gap when
				// the route reads back what they hold.
				if err := publish(batch, arrivals); err != nil {
					return progressed, err
				}
				batch, arrivals = batch[:0], arrivals[:0]
				changes, err := r.gap(ctx, listing, e)
				if err != nil {
					return progressed, err
				}
				log.Warn("publishing a gap: the differences from a new listing, between a GAP_START and a GAP_END",
					"differences", len(changes)-2, "resourceVersion", e.ResourceVersion, "fromStart", token == "")
				batch = append(batch, changes...)
				for range changes {
					arrivals = append(arrivals, n.at)
				}
				listing = nil
			case listing != nil:
				// A bookmark within the listing: no change.
			default:
				c, isChange, err := changeOf(r.Selector.Resource, e)
				if err != nil {
					return progressed, err
				}
				if isChange {
					batch = append(batch, c)
					arrivals = append(arrivals, n.at)
				}
			}
			if len(batch) >= maxBatch || len(events) == 0 {
				break
			}
			n = <-events
		}
		if err := publish(batch, arrivals); err != nil {
			return progressed, err
		}
		batch, arrivals = batch[:0], arrivals[:0]
	}
}

// listingGap is a listing being collected whose changes will be published
// as a gap.
type listingGap struct {
	started  bool
	before   string            // the watch's position before it: its GAP_START's
	events   []hubclient.Event // its objects (or, of a re-sync of a watch that knew all, its differences)
	replaces bool              // events are every object, as ADDED
	// held is what the sink's consumers hold, if read before the listing
	// (startingGap): the route publishes nothing meanwhile.
	held map[ObjectKey]Held
}

// startingGap is the gap a route with no position starts with, or nil:
// unless its sink can read back what its consumers hold and they hold
// nothing, they may hold objects, from before a lost position, that are
// gone now.
func (r *Route) startingGap(ctx context.Context) (*listingGap, error) {
	holder, ok := r.Sink.(Holder)
	if !ok {
		return &listingGap{replaces: true}, nil
	}
	held, err := holder.Held(ctx)
	if err != nil || len(held) == 0 {
		return nil, err
	}
	return &listingGap{replaces: true, held: held}, nil
}

// gap makes the changes a listing calls for: a GAP_START at the position
// before it, the differences between what the sink's consumers hold and
// the listing, and a GAP_END at the bookmark that ended it (see
// GapStart). Every change of the gap is named by the GAP_END's position
// (Change.Gap): a gap published again after a failure is another gap, but
// for a listing at the same position.
func (r *Route) gap(ctx context.Context, l *listingGap, end hubclient.Event) ([]Change, error) {
	res := r.Selector.Resource
	start := Change{Type: GapStart, Resource: res, ResourceVersion: end.ResourceVersion, ResumeToken: l.before, Resync: true, Gap: end.ResumeToken}
	finish := Change{Type: GapEnd, Resource: res, ResourceVersion: end.ResourceVersion, ResumeToken: end.ResumeToken, Resync: true, Gap: end.ResumeToken}
	listed := make([]Change, 0, len(l.events))
	for _, e := range l.events {
		c, _, err := changeOf(res, e)
		if err != nil {
			return nil, err
		}
		// Until the gap ends, resuming lists again.
		c.ResumeToken, c.Resync, c.Gap = l.before, true, end.ResumeToken
		if c.Type == hubclient.Deleted {
			c.ResourceVersion = e.ResourceVersion // the listing's: when the object was found gone
		}
		listed = append(listed, c)
	}
	// A re-sync lists every object when its watch did not know what its
	// caller holds (it started from a position); it says so on every
	// event, its closing bookmark included, even when it lists nothing.
	replaces := l.replaces || end.ResyncReplaces
	if replaces {
		listed = listedState(listed)
	}
	holder, isHolder := r.Sink.(Holder)
	switch {
	case !replaces:
		// The watch knew what its caller holds (it started from nothing,
		// and everything it delivered was published): these are the
		// differences.
	case !isHolder:
		// What the consumers hold is unknown: every object, as ADDED.
		finish.Replaces = true
	default:
		held := l.held
		if held == nil {
			var err error
			if held, err = holder.Held(ctx); err != nil {
				return nil, err
			}
		}
		listed = differences(res, held, listed, end.ResourceVersion, l.before, end.ResumeToken)
	}
	return append(append([]Change{start}, listed...), finish), nil
}

// listedState is what a listing leaves, each object once, as ADDED. A
// listing is every object as ADDED, but one of initial events that the
// SDK's watch re-synced halfway goes on with its differences from the
// part listed: they are folded in, in order.
func listedState(listed []Change) []Change {
	at := make(map[ObjectKey]int, len(listed))
	var out []Change
	for _, c := range listed {
		key := ObjectKey{c.Namespace, c.Name}
		i, seen := at[key]
		switch {
		case c.Type == hubclient.Deleted:
			if seen {
				out[i].Type = "" // gone
			}
		case seen && out[i].Type != "":
			out[i] = c
		default:
			at[key] = len(out)
			out = append(out, c)
		}
	}
	kept := out[:0]
	for _, c := range out {
		if c.Type != "" {
			c.Type = hubclient.Added
			kept = append(kept, c)
		}
	}
	return kept
}

// differences turns a listing (every object, as ADDED) into the changes
// that take consumers holding held to it: DELETED for what they hold that
// is gone, ADDED for what they lack, MODIFIED for what has another
// version; in order of namespace and name, deletions first.
func differences(res schema.GroupVersionResource, held map[ObjectKey]Held, listed []Change, listedAt, token, gap string) []Change {
	var out []Change
	now := make(map[ObjectKey]Change, len(listed))
	for _, c := range listed {
		now[ObjectKey{c.Namespace, c.Name}] = c
	}
	keys := make([]ObjectKey, 0, len(held))
	for key := range held {
		keys = append(keys, key)
	}
	slices.SortFunc(keys, compareKeys)
	for _, key := range keys {
		h := held[key]
		if c, exists := now[key]; !exists || c.UID != h.UID {
			out = append(out, Change{Type: hubclient.Deleted, Resource: res, Namespace: key.Namespace, Name: key.Name,
				UID: h.UID, ResourceVersion: listedAt, Object: h.Identity, ResumeToken: token, Resync: true, Gap: gap})
		}
	}
	slices.SortFunc(listed, func(a, b Change) int {
		return compareKeys(ObjectKey{a.Namespace, a.Name}, ObjectKey{b.Namespace, b.Name})
	})
	for _, c := range listed {
		switch h, exists := held[ObjectKey{c.Namespace, c.Name}]; {
		case !exists || h.UID != c.UID:
			c.Type = hubclient.Added
		case h.ResourceVersion != c.ResourceVersion:
			c.Type = hubclient.Modified
		default:
			continue // held as it is
		}
		out = append(out, c)
	}
	return out
}

func compareKeys(a, b ObjectKey) int {
	if a.Namespace != b.Namespace {
		if a.Namespace < b.Namespace {
			return -1
		}
		return 1
	}
	switch {
	case a.Name < b.Name:
		return -1
	case a.Name > b.Name:
		return 1
	}
	return 0
}

// permanent reports whether a retry cannot fix err.
func permanent(err error) bool {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.NotFound, codes.PermissionDenied, codes.Unauthenticated, codes.Unimplemented:
		return true
	}
	return errors.Is(err, errPermanent)
}

// errPermanent marks a sink's error no retry can fix.
var errPermanent = errors.New("export: cannot be retried")
