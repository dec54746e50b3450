package informerhub

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/informerhub/informerhub/informerhub/internal/feed"
	"github.com/informerhub/informerhub/informerhub/internal/selection"
)

// counter counts what one countKey selects, for every caller that shares
// it (see Hub.Count), from one subscription of the feed at a time. It runs
// two goroutines: a reader, which calls the subscription's Next and hands
// each event on; and run's, which applies each to its tally and publishes
// the tally as Counts, at most once per Config.CountInterval. The callers
// read the published Counts (latest) and wait on changed; none of them
// ever takes more than mu, nor makes the counter wait.
//
// A subscription that falls behind further than the history does not end
// the counter: it counts afresh, from a new subscription's initial events
// (the state then), and publishes those counts once it has them. Counts
// are of a state, not of a sequence of changes: nothing is lost by
// skipping to a later one, where a replay from the API server would cost
// it a watch to bring a counter that reads too slowly further behind.
type counter struct {
	key countKey
	// started is closed once the caller that took the counter first has
	// started it; startErr, set before, says why it could not.
	started  chan struct{}
	startErr error
	// done is closed when run has ended, and the reader with it; quit,
	// by the last caller's release.
	done, quit chan struct{}
	// failed ends, with err set before, when the counter can count no
	// more.
	failed feed.Ending
	err    error

	// Guarded by counts.mu.
	refs int
	sub  *Subscription // the current one, set once its goroutines run

	// mu guards what callers read.
	mu sync.Mutex
	// latest is the newest Counts published; nil until the initial events
	// have been counted.
	latest *Counts
	// changed is closed, and replaced, when latest changes; closed for
	// good when the counter fails.
	changed chan struct{}
}

func newCounter(key countKey) *counter {
	return &counter{key: key, started: make(chan struct{}), done: make(chan struct{}), quit: make(chan struct{}),
		changed: make(chan struct{})}
}

// countQueue bounds the events the reader hands on ahead of the counting.
// Subscription.Next has a queue of its own (Config.QueueSize) behind it.
const countQueue = 64

// start opens the counter's subscription, as the owner of req, and starts
// its goroutines; on failure it sets startErr and removes the counter from
// the hub's registry. Either way it closes started.
func (c *counter) start(ctx context.Context, h *Hub, req CountRequest, g *groupBy) {
	defer close(c.started)
	subscribe := func(ctx context.Context) (*Subscription, error) { return h.countSubscription(ctx, req, g) }
	sub, err := subscribe(ctx)
	if err == nil {
		if err = h.counts.run(c, sub, subscribe, g, h.cfg.CountInterval); err != nil {
			sub.Close()
		}
	}
	if err != nil {
		c.startErr = err
		h.counts.discard(c)
	}
}

// countSubscription opens a subscription that counts what req selects,
// grouped by g: with initial events, which make the first counts, and
// never replaying (see counter). Whole objects, not a projection of what
// the grouping reads: a projection would drop the changes that move no
// object between groups, but costs projecting every change's object and
// previous state, where reading a group value from the whole JSON costs
// less than that (BenchmarkCount). Its events go to no transport: nothing
// encodes them (encodingUnsent).
func (h *Hub) countSubscription(ctx context.Context, req CountRequest, g *groupBy) (*Subscription, error) {
	info, params, err := h.watchParams(ctx, WatchRequest{
		Selector:          req.Selector,
		SendInitialEvents: true,
		IncludePrevious:   g.previous,
		Owner:             req.Owner,
	})
	if err != nil {
		return nil, err
	}
	params.Encoding, params.NeverReplay = encodingUnsent, true
	return h.subscribe(ctx, info, params)
}

// Recounts of a counter that keeps falling behind (an overloaded hub, a
// tenant writing faster than the hub counts) wait: the first for none,
// and each after a count that kept up for less than maxRecountBackoff
// twice as long as the one before, from recountBackoff to
// maxRecountBackoff. Each costs a walk of the selection; callers keep the
// counts they have meanwhile.
const (
	recountBackoff    = time.Second
	maxRecountBackoff = 30 * time.Second
)

// nextRecountBackoff is how long a recount waits: after a count that kept
// up for keptUp once it was complete (its initial events counted), and,
// if recounted, a recount before it that waited backoff. A count's own
// walk does not count as keeping up: a slow walk that falls behind again
// backs off.
func nextRecountBackoff(backoff time.Duration, recounted bool, keptUp time.Duration) time.Duration {
	if !recounted || keptUp > maxRecountBackoff {
		return 0
	}
	return min(max(2*backoff, recountBackoff), maxRecountBackoff)
}

// run counts until the subscription ends: closed by the last caller's
// release, or failed. A subscription that fell behind the history is
// replaced by a fresh one from subscribe, counted afresh (see counter),
// after a backoff when it happens again and again; any other failure
// fails the callers left, if any.
func (c *counter) run(sub *Subscription, subscribe func(context.Context) (*Subscription, error), g *groupBy,
	interval time.Duration, cs *counts) {
	defer close(c.done)
	var (
		err       error
		backoff   time.Duration
		recounted bool
	)
	for {
		f := sub.st.Feed() // a recount's may be a newer feed of the type
		t := &tally{g: g, resource: f.Resource(), gvr: f.Info().Resource, maxGroups: cs.maxGroups}
		if g.path != nil {
			t.groups = map[string]uint64{}
		}
		err = c.countFrom(sub, t, interval)
		var tooSlow *TooSlowError
		if !errors.As(err, &tooSlow) {
			break
		}
		var keptUp time.Duration
		if !t.complete.IsZero() {
			keptUp = time.Since(t.complete)
		}
		backoff = nextRecountBackoff(backoff, recounted, keptUp)
		f.Log().Warn("a Count fell behind the changes further than the history; counting afresh from the cache",
			"selector", sub.st.Describe(), "after", backoff)
		if stopped := c.wait(backoff, f); stopped != nil {
			err = stopped // the last caller left, or the feed stopped
			break
		}
		recounted = true
		// The new subscription first: the failed one holds the counter's
		// admission (its filter) until then, which no other request can
		// take meanwhile. A last caller that leaves meanwhile cancels it.
		ctx, cancel := c.quitContext()
		next, subErr := subscribe(ctx)
		cancel()
		sub.Close()
		if subErr != nil {
			err = subErr
			break
		}
		if !cs.replace(c, next) {
			next.Close()
			return // the last caller left meanwhile
		}
		sub = next
	}
	sub.Close()
	// Out of the registry first: a caller that retries at once starts a
	// fresh counter.
	cs.discard(c)
	c.fail(err)
}

// quitContext returns a context that the last caller's leaving (c.quit)
// cancels, for what the counter waits on meanwhile. Cancel it when done.
func (c *counter) quitContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-c.quit:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// wait waits for d, and returns why the counter cannot go on, if it
// cannot: its last caller left, or its feed stopped.
func (c *counter) wait(d time.Duration, f *feed.Feed) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-c.quit:
		return ErrSubscriptionClosed
	case <-f.Stopped():
		return f.Err()
	}
}

// countFrom counts what sub delivers into t (see count) until sub fails,
// and returns why: ErrSubscriptionClosed when the last caller's release
// closed it. The caller closes sub.
func (c *counter) countFrom(sub *Subscription, t *tally, interval time.Duration) error {
	events := make(chan *Event, countQueue)
	var readErr error // set before events is closed
	go func() {
		defer close(events)
		for {
			ev, err := sub.Next(context.Background()) // returns once sub is closed
			if err != nil {
				readErr = err
				return
			}
			events <- ev
		}
	}()
	if err := c.count(events, t, interval); err != nil {
		sub.Close()
		for range events { // the reader ends
		}
		return err
	}
	return readErr
}

// count applies the events to t, and publishes it: once the initial events
// are over, then as it changes, at most once per interval (the changes in
// between together). It returns nil once events is closed, or why it
// cannot count on.
func (c *counter) count(events <-chan *Event, t *tally, interval time.Duration) error {
	timer := time.NewTimer(interval)
	timer.Stop()
	defer timer.Stop()
	var (
		due       <-chan time.Time // the pending publication, if any
		published time.Time
		last      *Counts
		initial   = true
	)
	publish := func() {
		if last != nil && t.same(last) {
			return // changed, then changed back
		}
		last = t.counts()
		c.publish(last)
		published = time.Now()
	}
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return nil
			}
			changed, err := t.apply(ev)
			switch {
			case err != nil:
				return err
			case initial:
				if ev.InitialEventsEnd {
					initial = false
					t.complete = time.Now()
					publish()
				}
			case !changed || due != nil:
			default:
				if wait := interval - time.Since(published); wait > 0 {
					timer.Reset(wait)
					due = timer.C
					continue
				}
				publish()
			}
		case <-due:
			due = nil
			publish()
		}
	}
}

// publish makes counts the latest, and wakes the callers waiting for it.
func (c *counter) publish(counts *Counts) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.latest = counts
	close(c.changed)
	c.changed = make(chan struct{})
}

// fail ends every caller's Next with err.
func (c *counter) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.err = err
	c.failed.Close()
	close(c.changed)
}

// current returns the latest counts, a channel closed when they change,
// and why the counter failed, if it did.
func (c *counter) current() (*Counts, <-chan struct{}, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.latest, c.changed, c.err
}

// tally is a counter's counts as it counts them; owned by its run.
type tally struct {
	g         *groupBy
	resource  string // for errors
	gvr       schema.GroupVersionResource
	maxGroups int               // Config.MaxCountGroups
	groups    map[string]uint64 // nil without groups
	total     uint64
	rv        uint64 // the newest resourceVersion of the events applied
	// complete is when the initial events were all counted: the counts
	// were complete from then on. Zero until then.
	complete time.Time
}

// apply counts an event, and reports whether the counts changed: an
// ADDED counts one more object in its group, a DELETED one less, a
// MODIFIED moves its object from its previous group to its new one.
func (t *tally) apply(ev *Event) (changed bool, err error) {
	// Every event (bookmarks too) is a point the counts are true at. The
	// ADDED of initial events and the changes a relist found carry their
	// object's own version, which may be older than the last: keep the
	// newest.
	if rv, err := strconv.ParseUint(ev.ResourceVersion, 10, 64); err == nil && rv > t.rv {
		t.rv = rv
	}
	switch ev.Type {
	case EventAdded:
		g, err := t.g.group(ev.Object)
		if err != nil {
			return false, t.objectError(err)
		}
		return true, t.add(g)
	case EventDeleted:
		g, err := t.g.group(ev.Object)
		if err != nil {
			return false, t.objectError(err)
		}
		return true, t.remove(g)
	case EventModified:
		if !t.g.previous {
			return false, nil // its group cannot change
		}
		from, err := t.g.group(ev.PreviousObject)
		if err != nil {
			return false, t.objectError(err)
		}
		to, err := t.g.group(ev.Object)
		if err != nil {
			return false, t.objectError(err)
		}
		if from == to {
			return false, nil
		}
		if err := t.remove(from); err != nil {
			return false, err
		}
		return true, t.add(to)
	}
	return false, nil
}

// add counts one object more in group: an error when that takes the
// groups past the hub's limits (see Config.MaxCountGroups).
func (t *tally) add(group string) error {
	if t.groups != nil {
		if len(group) > MaxCountGroupBytes {
			return &LimitError{Resource: t.gvr, Limit: LimitCountGroupBytes, Max: MaxCountGroupBytes}
		}
		if _, ok := t.groups[group]; !ok && len(t.groups) >= t.maxGroups {
			return &LimitError{Resource: t.gvr, Limit: LimitCountGroups, Max: t.maxGroups}
		}
		t.groups[group]++
	}
	t.total++
	return nil
}

// MaxCountGroupBytes bounds a Count's group value: label values have at
// most 63 bytes; a path's value is rarely longer than a name.
const MaxCountGroupBytes = 256

// remove counts one object less in group. Counting below zero would be a
// bug of the hub (a change to an object it never counted): it fails the
// counter rather than report wrong counts.
func (t *tally) remove(group string) error {
	n, ok := t.groups[group]
	if t.total == 0 || (t.groups != nil && !ok) {
		return fmt.Errorf("informerhub: counting %s: group %q would fall below zero", t.resource, selection.Truncate(group))
	}
	t.total--
	switch {
	case t.groups == nil:
	case n == 1:
		delete(t.groups, group)
	default:
		t.groups[group] = n - 1
	}
	return nil
}

func (t *tally) objectError(err error) error {
	return fmt.Errorf("informerhub: counting %s: reading an object's group: %w", t.resource, err)
}

// counts returns the tally as Counts.
func (t *tally) counts() *Counts {
	return &Counts{Groups: maps.Clone(t.groups), Total: t.total, ResourceVersion: strconv.FormatUint(t.rv, 10)}
}

// same reports whether the tally counts what c does.
func (t *tally) same(c *Counts) bool {
	return c.Total == t.total && maps.Equal(c.Groups, t.groups)
}
