package feed

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/informerhub/informerhub/informerhub/internal/errs"
	"github.com/informerhub/informerhub/informerhub/internal/memory"
	"github.com/informerhub/informerhub/informerhub/upstream"
)

// Feeds is the hub's feeds, one running per resource type, as
// controller-runtime's informer map keeps informers: a feed starts with its
// first user, and stops once its last has been gone for Config.IdleTimeout,
// unless taken again. A feed that stopped on its own (its upstream failed
// for too long) is replaced by the next take. The running totals of each
// resource type (Counters) outlive its feeds.
type Feeds struct {
	// start starts a feed.
	start       func(info upstream.ResourceInfo, counters *Counters) *Feed
	idleTimeout time.Duration

	mu      sync.Mutex // guards the fields below, and every entry's fields
	entries map[schema.GroupVersionResource]*Entry
	closed  bool
	// counters holds the running totals of each resource type that has had
	// a feed.
	counters map[schema.GroupVersionResource]*Counters
}

// Entry is a feed and those who hold it: subscriptions, snapshots, and
// the retainer of Config.Retain (retain.go). Its fields are guarded by
// feeds.mu.
type Entry struct {
	feed *Feed
	refs int
	// retained is the retainer's share of refs (0 or 1).
	retained int
	// idleTimer stops the feed once it has been idle for the idle timeout;
	// idleGen numbers the times it was released and taken again, so that a
	// timer that fires late does not stop a feed taken since.
	idleGen   uint64
	idleTimer idleTimer
}

// idleTimer is the subset of *time.Timer the feeds use, so tests can see it.
type idleTimer interface{ Stop() bool }

func NewFeeds(idleTimeout time.Duration, start func(upstream.ResourceInfo, *Counters) *Feed) *Feeds {
	return &Feeds{
		start:       start,
		idleTimeout: idleTimeout,
		entries:     map[schema.GroupVersionResource]*Entry{},
		counters:    map[schema.GroupVersionResource]*Counters{},
	}
}

// Acquire returns the entry of a resource type's feed, starting a feed if
// it has none running, once the feed has synced. Every successful acquire
// is paired with a release.
func (fs *Feeds) Acquire(ctx context.Context, info upstream.ResourceInfo) (*Entry, error) {
	e, err := fs.Take(info)
	if err != nil {
		return nil, err
	}
	if err := e.feed.waitSynced(ctx); err != nil {
		fs.Release(e)
		return nil, err
	}
	return e, nil
}

// Take is acquire without waiting for the feed to sync.
func (fs *Feeds) Take(info upstream.ResourceInfo) (*Entry, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.closed {
		return nil, errs.ErrClosed
	}
	e := fs.entries[info.Resource]
	if e == nil || e.feed.IsStopped() {
		counters := fs.countersLocked(info.Resource)
		counters.Starts.Add(1)
		e = &Entry{feed: fs.start(info, counters)}
		fs.entries[info.Resource] = e
	}
	e.refs++
	e.idleGen++ // a pending idle stop no longer applies
	if e.idleTimer != nil {
		e.idleTimer.Stop()
		e.idleTimer = nil
	}
	return e, nil
}

// Release undoes one acquire or take. The last release starts the idle
// timer, after which the feed stops unless taken again.
func (fs *Feeds) Release(e *Entry) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	e.refs--
	if e.refs > 0 || fs.entries[e.feed.info.Resource] != e {
		return
	}
	e.idleGen++
	gen := e.idleGen
	e.idleTimer = time.AfterFunc(fs.idleTimeout, func() { fs.stopIfIdle(e, gen) })
}

func (fs *Feeds) stopIfIdle(e *Entry, gen uint64) {
	fs.mu.Lock()
	if e.refs > 0 || e.idleGen != gen || fs.entries[e.feed.info.Resource] != e {
		fs.mu.Unlock()
		return
	}
	delete(fs.entries, e.feed.info.Resource)
	e.idleTimer = nil
	fs.mu.Unlock()
	e.feed.Stop(errIdle)
	<-e.feed.done
}

// Retain counts the retainer in (delta 1) or out (-1) of an entry it has
// taken.
func (fs *Feeds) Retain(e *Entry, delta int) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	e.retained += delta
}

// Close refuses every later take, and returns the feeds to stop; false
// when it was closed already.
func (fs *Feeds) Close() ([]*Feed, bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.closed {
		return nil, false
	}
	fs.closed = true
	out := make([]*Feed, 0, len(fs.entries))
	for _, e := range fs.entries {
		if e.idleTimer != nil {
			e.idleTimer.Stop()
		}
		out = append(out, e.feed)
	}
	fs.entries = map[schema.GroupVersionResource]*Entry{}
	return out, true
}

// Running returns the feeds of the entries, in no particular order.
func (fs *Feeds) Running() []*Feed {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	out := make([]*Feed, 0, len(fs.entries))
	for _, e := range fs.entries {
		out = append(out, e.feed)
	}
	return out
}

// Holders is running, for the memory budget, which evicts from them.
func (fs *Feeds) Holders() []memory.Holder {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	out := make([]memory.Holder, 0, len(fs.entries))
	for _, e := range fs.entries {
		out = append(out, e.feed)
	}
	return out
}

// Activity is what the entries say of a resource type whose feed runs.
type Activity struct {
	Feed        *Feed
	Subscribers int // refs but the retainer's
	Retained    bool
}

// Activities returns the activity of each resource type, zero for those
// whose feed does not run, from one moment.
func (fs *Feeds) Activities(infos []upstream.ResourceInfo) []Activity {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	out := make([]Activity, len(infos))
	for i, info := range infos {
		out[i] = fs.activeLocked(info.Resource)
	}
	return out
}

// activeLocked is the activity of a resource type, zero when its feed does
// not run.
func (fs *Feeds) activeLocked(gvr schema.GroupVersionResource) Activity {
	e := fs.entries[gvr]
	if e == nil || e.feed.IsStopped() {
		return Activity{}
	}
	return Activity{Feed: e.feed, Subscribers: e.refs - e.retained, Retained: e.retained > 0}
}

// CountersFor returns the running totals of a resource type.
func (fs *Feeds) CountersFor(gvr schema.GroupVersionResource) *Counters {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.countersLocked(gvr)
}

func (fs *Feeds) countersLocked(gvr schema.GroupVersionResource) *Counters {
	c := fs.counters[gvr]
	if c == nil {
		c = &Counters{}
		fs.counters[gvr] = c
	}
	return c
}

// Totals returns the running totals of every resource type that has had a
// feed, with the activity of those whose feed runs.
func (fs *Feeds) Totals() map[schema.GroupVersionResource]Total {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	out := make(map[schema.GroupVersionResource]Total, len(fs.counters))
	for gvr, c := range fs.counters {
		out[gvr] = Total{Counters: c, Activity: fs.activeLocked(gvr)}
	}
	return out
}

type Total struct {
	Counters *Counters
	Activity Activity // zero when no feed runs
}

// errIdle is why an idle feed stopped; no subscriber ever sees it.
var errIdle = &idleError{}

type idleError struct{}

func (*idleError) Error() string { return "no subscribers for the idle timeout" }
func (*idleError) Unwrap() error { return errs.ErrClosed }

// Feed is the entry's feed.
func (e *Entry) Feed() *Feed { return e.feed }
