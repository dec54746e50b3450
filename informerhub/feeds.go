package informerhub

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/informerhub/informerhub/informerhub/internal/memory"
	"github.com/informerhub/informerhub/informerhub/upstream"
)

// feeds is the hub's feeds, one running per resource type, as
// controller-runtime's informer map keeps informers: a feed starts with its
// first user, and stops once its last has been gone for Config.IdleTimeout,
// unless taken again. A feed that stopped on its own (its upstream failed
// for too long) is replaced by the next take. The running totals of each
// resource type (resourceCounters) outlive its feeds.
type feeds struct {
	// start starts a feed.
	start       func(info upstream.ResourceInfo, counters *resourceCounters) *feed
	idleTimeout time.Duration

	mu      sync.Mutex // guards the fields below, and every entry's fields
	entries map[schema.GroupVersionResource]*feedEntry
	closed  bool
	// counters holds the running totals of each resource type that has had
	// a feed.
	counters map[schema.GroupVersionResource]*resourceCounters
}

// feedEntry is a feed and those who hold it: subscriptions, snapshots, and
// the retainer of Config.Retain (retain.go). Its fields are guarded by
// feeds.mu.
type feedEntry struct {
	feed *feed
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

func newFeeds(idleTimeout time.Duration, start func(upstream.ResourceInfo, *resourceCounters) *feed) *feeds {
	return &feeds{
		start:       start,
		idleTimeout: idleTimeout,
		entries:     map[schema.GroupVersionResource]*feedEntry{},
		counters:    map[schema.GroupVersionResource]*resourceCounters{},
	}
}

// acquire returns the entry of a resource type's feed, starting a feed if
// it has none running, once the feed has synced. Every successful acquire
// is paired with a release.
func (fs *feeds) acquire(ctx context.Context, info upstream.ResourceInfo) (*feedEntry, error) {
	e, err := fs.take(info)
	if err != nil {
		return nil, err
	}
	if err := e.feed.waitSynced(ctx); err != nil {
		fs.release(e)
		return nil, err
	}
	return e, nil
}

// take is acquire without waiting for the feed to sync.
func (fs *feeds) take(info upstream.ResourceInfo) (*feedEntry, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.closed {
		return nil, ErrClosed
	}
	e := fs.entries[info.Resource]
	if e == nil || e.feed.IsStopped() {
		counters := fs.countersLocked(info.Resource)
		counters.starts.Add(1)
		e = &feedEntry{feed: fs.start(info, counters)}
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

// release undoes one acquire or take. The last release starts the idle
// timer, after which the feed stops unless taken again.
func (fs *feeds) release(e *feedEntry) {
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

func (fs *feeds) stopIfIdle(e *feedEntry, gen uint64) {
	fs.mu.Lock()
	if e.refs > 0 || e.idleGen != gen || fs.entries[e.feed.info.Resource] != e {
		fs.mu.Unlock()
		return
	}
	delete(fs.entries, e.feed.info.Resource)
	e.idleTimer = nil
	fs.mu.Unlock()
	e.feed.stop(errIdle)
	<-e.feed.done
}

// retain counts the retainer in (delta 1) or out (-1) of an entry it has
// taken.
func (fs *feeds) retain(e *feedEntry, delta int) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	e.retained += delta
}

// close refuses every later take, and returns the feeds to stop; false
// when it was closed already.
func (fs *feeds) close() ([]*feed, bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.closed {
		return nil, false
	}
	fs.closed = true
	out := make([]*feed, 0, len(fs.entries))
	for _, e := range fs.entries {
		if e.idleTimer != nil {
			e.idleTimer.Stop()
		}
		out = append(out, e.feed)
	}
	fs.entries = map[schema.GroupVersionResource]*feedEntry{}
	return out, true
}

// running returns the feeds of the entries, in no particular order.
func (fs *feeds) running() []*feed {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	out := make([]*feed, 0, len(fs.entries))
	for _, e := range fs.entries {
		out = append(out, e.feed)
	}
	return out
}

// holders is running, for the memory budget, which evicts from them.
func (fs *feeds) holders() []memory.Holder {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	out := make([]memory.Holder, 0, len(fs.entries))
	for _, e := range fs.entries {
		out = append(out, e.feed)
	}
	return out
}

// activity is what the entries say of a resource type whose feed runs.
type activity struct {
	feed        *feed
	subscribers int // refs but the retainer's
	retained    bool
}

// activities returns the activity of each resource type, zero for those
// whose feed does not run, from one moment.
func (fs *feeds) activities(infos []upstream.ResourceInfo) []activity {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	out := make([]activity, len(infos))
	for i, info := range infos {
		out[i] = fs.activeLocked(info.Resource)
	}
	return out
}

// activeLocked is the activity of a resource type, zero when its feed does
// not run.
func (fs *feeds) activeLocked(gvr schema.GroupVersionResource) activity {
	e := fs.entries[gvr]
	if e == nil || e.feed.IsStopped() {
		return activity{}
	}
	return activity{feed: e.feed, subscribers: e.refs - e.retained, retained: e.retained > 0}
}

// countersFor returns the running totals of a resource type.
func (fs *feeds) countersFor(gvr schema.GroupVersionResource) *resourceCounters {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.countersLocked(gvr)
}

func (fs *feeds) countersLocked(gvr schema.GroupVersionResource) *resourceCounters {
	c := fs.counters[gvr]
	if c == nil {
		c = &resourceCounters{}
		fs.counters[gvr] = c
	}
	return c
}

// totals returns the running totals of every resource type that has had a
// feed, with the activity of those whose feed runs.
func (fs *feeds) totals() map[schema.GroupVersionResource]totals {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	out := make(map[schema.GroupVersionResource]totals, len(fs.counters))
	for gvr, c := range fs.counters {
		out[gvr] = totals{counters: c, activity: fs.activeLocked(gvr)}
	}
	return out
}

type totals struct {
	counters *resourceCounters
	activity activity // zero when no feed runs
}

// errIdle is why an idle feed stopped; no subscriber ever sees it.
var errIdle = &idleError{}

type idleError struct{}

func (*idleError) Error() string { return "no subscribers for the idle timeout" }
func (*idleError) Unwrap() error { return ErrClosed }
