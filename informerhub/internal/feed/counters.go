package feed

import (
	"context"
	"errors"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/watchlist"
)

// Counters are the running totals of one resource type. The hub
// keeps them for its whole life, so that they only grow, whatever the
// informer's restarts; see ResourceStats for what each counts.
type Counters struct {
	Starts, WatchRestarts, Received, Sent, FellBehind, SlowDisconnects, Recounts, ExpiredTokens, Relists, Replays, FilterErrors, ObjectErrors, EvictedForMemory, DiskSpills atomic.Uint64
	// The consistency checks, by outcome (CheckOutcome).
	ChecksConsistent, ChecksDiverged, ChecksCompacted, ChecksFailed atomic.Uint64
}

// countedListerWatcher is one informer's lister-watcher. It counts the
// watches the informer opens after its first: the restarts after the API
// server closed or broke one. And it tells watched whether each watch
// opened, which the reflector does not always tell its error handler (see
// Feed.watched). And it makes the informer relist when asked (relist).
type countedListerWatcher struct {
	lw          cache.ListerWatcherWithContext
	unsupported bool // the source cannot serve WatchList; see watchlist.DoesClientNotSupportWatchListSemantics
	opened      atomic.Bool
	restarts    *atomic.Uint64
	watched     func(err error)
	// current is the watch the informer reads, if any; relisting, that
	// the informer is to relist at its next watch.
	current   atomic.Pointer[watch.Interface]
	relisting atomic.Bool
}

// errRelist ends the informer's watch so that its reflector relists: it
// fails the next watch, and the reflector lists again after a watch that
// could not open.
var errRelist = errors.New("relisting: the consistency check found the cache differs from the API server")

// relist makes the informer relist: its watch ends, and the next one
// fails with errRelist.
func (c *countedListerWatcher) relist() {
	c.relisting.Store(true)
	if w := c.current.Load(); w != nil {
		(*w).Stop()
	}
}

func newCountedListerWatcher(lw cache.ListerWatcher, restarts *atomic.Uint64, watched func(err error)) *countedListerWatcher {
	return &countedListerWatcher{
		lw:          cache.ToListerWatcherWithContext(lw),
		unsupported: watchlist.DoesClientNotSupportWatchListSemantics(lw),
		restarts:    restarts,
		watched:     watched,
	}
}

func (c *countedListerWatcher) List(opts metav1.ListOptions) (runtime.Object, error) {
	return c.ListWithContext(context.Background(), opts)
}

func (c *countedListerWatcher) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	list, err := c.lw.ListWithContext(ctx, opts)
	if err == nil {
		c.relisting.Store(false) // the relist asked for, whoever began it
	}
	return list, err
}

func (c *countedListerWatcher) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return c.WatchWithContext(context.Background(), opts)
}

func (c *countedListerWatcher) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if opts.SendInitialEvents != nil && *opts.SendInitialEvents {
		c.relisting.Store(false) // a watch that lists is the relist asked for
	} else if c.relisting.Swap(false) {
		return nil, errRelist
	}
	if c.opened.Swap(true) {
		c.restarts.Add(1)
	}
	w, err := c.lw.WatchWithContext(ctx, opts)
	if ctx.Err() == nil {
		c.watched(err)
	}
	if err == nil {
		c.current.Store(&w)
		if c.relisting.Load() { // asked while it opened: current was not yet w
			w.Stop()
		}
	}
	return w, err
}

// IsWatchListSemanticsUnSupported passes on what the source says, which the
// reflector asks to decide whether to stream its initial list.
func (c *countedListerWatcher) IsWatchListSemanticsUnSupported() bool { return c.unsupported }
