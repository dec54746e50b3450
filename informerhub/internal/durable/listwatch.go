package durable

import (
	"context"
	"log/slog"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// ListerWatcher is a feed's lister-watcher when the hub keeps a disk
// history: its first LIST attaches the feed to its resource type's log
// and, when the disk holds the type, is the stored state at the stored
// resourceVersion (Feed.RestoreFrom), so that the informer watches on
// from there. log is the feed's, which says so.
func (d *History) ListerWatcher(lw cache.ListerWatcherWithContext, resource string, f Feed, log *slog.Logger) cache.ListerWatcher {
	return &listerWatcher{ListerWatcherWithContext: lw, history: d, resource: resource, feed: f, log: log}
}

type listerWatcher struct {
	cache.ListerWatcherWithContext
	history  *History
	resource string
	feed     Feed
	log      *slog.Logger
	attached atomic.Bool
}

func (w *listerWatcher) List(opts metav1.ListOptions) (runtime.Object, error) {
	return w.ListWithContext(context.Background(), opts)
}

func (w *listerWatcher) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	if w.attached.Load() {
		return w.ListerWatcherWithContext.ListWithContext(ctx, opts)
	}
	r, err := w.history.attach(ctx, w.resource, w.feed, w.log)
	if err != nil {
		return nil, err
	}
	w.attached.Store(true)
	if r == nil {
		return w.ListerWatcherWithContext.ListWithContext(ctx, opts)
	}
	w.feed.RestoreFrom(r)
	return r.List, nil
}

func (w *listerWatcher) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return w.WatchWithContext(context.Background(), opts)
}

// IsWatchListSemanticsUnSupported keeps the reflector on LIST and WATCH:
// its first LIST is the disk's.
func (w *listerWatcher) IsWatchListSemanticsUnSupported() bool { return true }
