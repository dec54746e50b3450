package informerhub_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/informerhub/hubtest"
	"github.com/informerhub/informerhub/informerhub/upstream"
)

// These tests run in a synctest bubble: time is fake and advances only when
// every goroutine of the test (the hub's informers included) is blocked.

func TestQuietStreamsGetFreshBookmarks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newFakeCluster(t)
		h := newHub(t, c, informerhub.Config{BookmarkInterval: time.Second})
		quietSel := informerhub.Selector{Resource: configMaps, Namespace: "quiet"}
		quiet := watch(t, h, informerhub.WatchRequest{Selector: quietSel})
		busy := watch(t, h, informerhub.WatchRequest{})

		c.cms().Add(configMap("busy", "a", nil, "")) // not selected by quiet
		if e := toEv(t, next(t, busy)); e.Key != "busy/a" {
			t.Fatalf("busy got %v", e)
		}
		// The stream is never silent for longer than the interval, and
		// bookmarks come no more often than every half interval.
		start := time.Now()
		bookmark := next(t, quiet)
		if bookmark.Type != informerhub.EventBookmark || bookmark.InitialEventsEnd {
			t.Fatalf("quiet stream got %+v, want a bookmark", bookmark)
		}
		for i := range 5 {
			if silence := time.Since(start); silence > time.Second || silence < time.Second/2 {
				t.Fatalf("bookmark %d came after %v of silence, want between 0.5s and the 1s interval", i, silence)
			}
			start = time.Now()
			if i < 4 {
				next(t, quiet)
			}
		}
		if bookmark.ResourceVersion != "1" {
			t.Errorf("bookmark is at resourceVersion %s, want 1 (past the change it did not select)", bookmark.ResourceVersion)
		}

		// The bookmark's token is past busy/a: resuming from it with a
		// selector that matches busy/a does not replay it.
		all := watch(t, h, informerhub.WatchRequest{ResumeToken: bookmark.ResumeToken})
		c.cms().Add(configMap("busy", "marker", nil, ""))
		if got := collect(t, all, "busy/marker"); len(got) != 0 {
			t.Fatalf("resuming from the bookmark replayed %v", got)
		}

		// A stream that keeps receiving events gets no bookmarks.
		if e := toEv(t, next(t, busy)); e.Key != "busy/marker" {
			t.Fatalf("busy got %v, want busy/marker", e)
		}
		for i := range 4 {
			time.Sleep(400 * time.Millisecond)
			c.cms().Add(configMap("busy", fmt.Sprint(i), nil, ""))
			if e := next(t, busy); e.Type == informerhub.EventBookmark {
				t.Fatalf("a stream that received an event %v ago got a bookmark", 400*time.Millisecond)
			}
		}
	})
}

// TestIdleInformerStopsAndTokensAreLocatedByResourceVersion checks the idle
// timer, and that a token of a stopped informer is placed by its
// resourceVersion on the next one: accepted when nothing changed in between
// (the fake numbers versions per resource; on a real cluster etcd's
// cluster-wide revisions make that rare), expired when something did.
func TestIdleInformerStopsAndTokensAreLocatedByResourceVersion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newFakeCluster(t)
		c.cms().Add(configMap("ns", "a", nil, "v1"))
		h := newHub(t, c, informerhub.Config{IdleTimeout: time.Minute})
		active := func() bool {
			t.Helper()
			synctest.Wait()
			rs, err := h.Resources(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			return rs[0].InformerActive
		}

		s := watch(t, h, informerhub.WatchRequest{})
		c.cms().Modify(configMap("ns", "a", nil, "v2"))
		next(t, s)
		token := s.ResumeToken()
		s.Close()

		time.Sleep(59 * time.Second)
		if !active() {
			t.Fatal("informer stopped before its idle timeout")
		}
		s = watch(t, h, informerhub.WatchRequest{}) // comes back: the timer restarts
		s.Close()
		time.Sleep(59 * time.Second)
		if !active() {
			t.Fatal("informer stopped although a subscriber came back")
		}
		time.Sleep(2 * time.Second)
		if active() {
			t.Fatal("informer still runs after its idle timeout")
		}

		// A token of the stopped informer resumes on a new one by
		// resourceVersion: nothing changed in between, so nothing is lost.
		s = watch(t, h, informerhub.WatchRequest{ResumeToken: token})
		if n := c.informersStarted(configMaps); n != 2 {
			t.Fatalf("%d informers started, want 2", n)
		}
		c.cms().Modify(configMap("ns", "a", nil, "v3"))
		c.cms().Add(configMap("z", "marker", nil, ""))
		want := []ev{{Type: "MODIFIED", Key: "ns/a", Data: "v3", RV: "3"}}
		if diff := cmp.Diff(want, collect(t, s, "z/marker")); diff != "" {
			t.Fatalf("events after resuming on a new informer (-want +got):\n%s", diff)
		}
		token = s.ResumeToken()
		s.Close()

		// Changes made while no informer runs are in no history: the hub
		// replays them from the API server rather than skip them.
		time.Sleep(2 * time.Minute)
		if active() {
			t.Fatal("informer still runs after its idle timeout")
		}
		c.cms().Modify(configMap("ns", "a", nil, "v4"))
		s = watch(t, h, informerhub.WatchRequest{ResumeToken: token})
		c.cms().Add(configMap("z", "marker2", nil, ""))
		want = []ev{{Type: "MODIFIED", Key: "ns/a", Data: "v4", RV: "5"}}
		if diff := cmp.Diff(want, collect(t, s, "z/marker2")); diff != "" {
			t.Fatalf("events after resuming from before unseen changes (-want +got):\n%s", diff)
		}
		s.Close()

		// Unless the API server no longer has them either.
		c.Compact(configMaps)
		_, err := h.Watch(context.Background(), informerhub.WatchRequest{Selector: informerhub.Selector{Resource: configMaps}, ResumeToken: token})
		var expired *informerhub.ExpiredError
		if !errors.As(err, &expired) || !expired.Upstream {
			t.Fatalf("Watch with a token the API server compacted: %v, want an ExpiredError from upstream", err)
		}
	})
}

// TestCloseWaitsForTheInformersOfFeedsItLetGo: a feed that failed is
// replaced by a new one at the next Watch. Close must wait for the failed
// feed's informer as for the others, or it leaves it running.
func TestCloseWaitsForTheInformersOfFeedsItLetGo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newFakeCluster(t)
		c.cms().Add(configMap("ns", "a", nil, "v1"))
		src := &stopStalls{Cluster: c.Cluster, release: make(chan struct{})}
		h := informerhub.New(informerhub.Config{Logger: slog.New(slog.DiscardHandler)}, c.Cluster, src)

		s := watch(t, h, informerhub.WatchRequest{})
		if err := informerhub.PanicInProcess(h, configMaps); err == nil {
			t.Fatal("the handler did not fail")
		}
		s.Close()
		watch(t, h, informerhub.WatchRequest{}).Close() // a second feed
		if n := c.informersStarted(configMaps); n != 2 {
			t.Fatalf("%d informers started, want 2", n)
		}

		closed := make(chan struct{})
		go func() {
			h.Close()
			close(closed)
		}()
		synctest.Wait() // the failed feed's informer is stopping its watch
		select {
		case <-closed:
			t.Fatal("Close returned while the failed feed's informer still ran")
		default:
		}
		close(src.release)
		<-closed
	})
}

// stopStalls is a source whose first watch's Stop blocks until release.
type stopStalls struct {
	*hubtest.Cluster
	release chan struct{}
	once    sync.Once
}

func (s *stopStalls) ListerWatcher(info upstream.ResourceInfo, namespace string) cache.ListerWatcher {
	return &stallingListerWatcher{ListerWatcher: s.Cluster.ListerWatcher(info, namespace), source: s}
}

type stallingListerWatcher struct {
	cache.ListerWatcher
	source *stopStalls
}

func (*stallingListerWatcher) IsWatchListSemanticsUnSupported() bool { return true }

func (lw *stallingListerWatcher) Watch(opts metav1.ListOptions) (kwatch.Interface, error) {
	w, err := lw.ListerWatcher.Watch(opts)
	if err != nil {
		return nil, err
	}
	stalled := w
	lw.source.once.Do(func() { stalled = &stallingWatch{Interface: w, release: lw.source.release} })
	return stalled, nil
}

type stallingWatch struct {
	kwatch.Interface
	release chan struct{}
}

func (w *stallingWatch) Stop() {
	<-w.release
	w.Interface.Stop()
}

// TestQueuePeakIsKeptForAWindow: Stats reports the fullest a live
// subscriber's queue was, not what it holds at that instant, so that a
// burst between two scrapes shows: for at least 30 seconds after it, and
// not after a minute.
func TestQueuePeakIsKeptForAWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newFakeCluster(t)
		h := newHub(t, c, informerhub.Config{QueueSize: 8, BookmarkInterval: time.Hour, IdleTimeout: time.Hour})
		s := watch(t, h, informerhub.WatchRequest{})
		peak := func() int {
			t.Helper()
			stats := h.Stats()
			if len(stats) != 1 {
				t.Fatalf("stats of %d resource types, want 1", len(stats))
			}
			return stats[0].QueuePeak
		}
		if p := peak(); p != 0 {
			t.Fatalf("queue peak %d before any change, want 0", p)
		}
		for i := range 5 {
			c.cms().Add(configMap("ns", fmt.Sprint(i), nil, ""))
		}
		synctest.Wait() // the hub has queued them
		burst := time.Now()
		if n := informerhub.Pending(s); n != 5 {
			t.Fatalf("%d changes queued, want 5", n)
		}
		for range 5 {
			nextChange(t, s)
		}
		if p := peak(); p != 5 {
			t.Fatalf("queue peak %d once the queue is read, want 5", p)
		}
		time.Sleep(time.Until(burst.Add(30 * time.Second)))
		if p := peak(); p != 5 {
			t.Fatalf("queue peak %d 30s after the burst, want 5", p)
		}
		c.cms().Add(configMap("ns", "later", nil, ""))
		synctest.Wait() // queued while nobody reads: the queue holds it
		nextChange(t, s)
		time.Sleep(time.Until(burst.Add(time.Minute)))
		if p := peak(); p != 1 {
			t.Fatalf("queue peak %d a minute after the burst, want 1: the later change's", p)
		}
	})
}
