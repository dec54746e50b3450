package integration

import (
	"cmp"
	"flag"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/informerhub/informerhub/informerhub"
)

// fullSize runs the scale tests at the size their issues name; make soak
// sets it. Without it they run at a size that takes seconds, with the same
// proportions.
var fullSize = flag.Bool("full-size", false, "run the scale tests at full size (make soak)")

// TestALargeRelistEndsNoSubscriber: while the hubs' API server is down, all
// the ConfigMaps of a namespace change (through another API server on the
// same etcd) and etcd is compacted; when it is back, each hub's informer
// lists again and the differences, one per object, land at once: five to
// ten times a subscriber's queue. One hub's history holds them; the
// other's is half the relist. On both, healthy subscribers fall behind,
// read the relist from the history at their pace and catch up: none is
// disconnected, and each stream equals the API server's watch (each
// changed object once, at its state after the relist). Full size: 5,000
// objects, 100 subscribers on the first hub, default queues.
func TestALargeRelistEndsNoSubscriber(t *testing.T) {
	objects, subscribers, queue := 1000, 20, 100
	if *fullSize {
		objects, subscribers, queue = 5000, 100, informerhub.DefaultQueueSize
	}
	ns := namespace(t)
	team := func(i, flip int) map[string]string { return map[string]string{"team": []string{"a", "b"}[(i/flip)%2]} }
	inParallel(t, objects, func(i int) error {
		_, err := kube.CoreV1().ConfigMaps(ns).Create(bgCtx(), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%04d", i), Labels: team(i, 1)},
			Data:       map[string]string{"v": "v0"},
		}, metav1.CreateOptions{})
		return err
	})
	ref := startReference(t, ns)
	upstream := etcdAPIServer(t)
	const holds, smaller = "history holds the relist", "relist larger than the history"
	hubs := map[string]*hub{
		holds:   startHubAt(t, upstream.Config, informerhub.Config{QueueSize: queue}),
		smaller: startHubAt(t, upstream.Config, informerhub.Config{QueueSize: queue, HistorySize: objects / 2}),
	}
	// Fewer where the history is smaller: enough to show it, as every
	// stream runs at once on the test machine.
	counts := map[string]int{holds: subscribers, smaller: subscribers / 5}
	subs := map[string][]*subscriber{}
	for name, h := range hubs {
		for i := range counts[name] {
			subs[name] = append(subs[name], subscribe(t, h.current, ns, []string{"", "team=a", "team notin (b)", "team in (a,b)"}[i%4]))
		}
	}
	w := &workload{t: t, ns: ns}
	m := w.marker()
	for _, ss := range subs {
		for _, s := range ss {
			s.waitFor(t, m)
		}
	}

	if err := upstream.Kill(); err != nil {
		t.Fatal(err)
	}
	var last atomic.Uint64 // the newest resourceVersion of the updates
	inParallel(t, objects, func(i int) error {
		// Half of them change team: they enter or leave the selective
		// subscribers' selections.
		cm, err := kube.CoreV1().ConfigMaps(ns).Update(bgCtx(), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%04d", i), Labels: team(i, 2)},
			Data:       map[string]string{"v": "v1"},
		}, metav1.UpdateOptions{})
		if err != nil {
			return err
		}
		rv, err := strconv.ParseUint(cm.ResourceVersion, 10, 64)
		for old := last.Load(); err == nil && rv > old && !last.CompareAndSwap(old, rv); old = last.Load() {
		}
		return err
	})
	// The reference has every update before etcd forgets them.
	if err := ref.WaitFor(ctxFor(t), strconv.FormatUint(last.Load(), 10)); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.Compact(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	if err := upstream.Start(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{holds, smaller} {
		t.Run(name, func(t *testing.T) {
			w.settle(subs[name])
			for _, s := range subs[name] {
				if n := s.resumed(); n != 0 {
					t.Errorf("subscriber %v had to reconnect %d times", s.sel, n)
				}
				s.check(t, ref, true)
			}
			st := statsOf(t, hubs[name])
			if st.Relists != 1 || st.FellBehind == 0 || st.SlowDisconnects != 0 {
				t.Errorf("%d relists, %d subscribers fell behind, %d disconnected; want 1 relist that put subscribers behind and disconnected none",
					st.Relists, st.FellBehind, st.SlowDisconnects)
			}
		})
	}
}

// inParallel calls fn(0) to fn(n-1) from a few goroutines, as clients
// changing a cluster at once do, and fails the test on the first error.
func inParallel(t *testing.T, n int, fn func(i int) error) {
	t.Helper()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex // guards first
		first error
	)
	next := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range next {
				if err := fn(i); err != nil {
					mu.Lock()
					first = cmp.Or(first, err)
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if first != nil {
		t.Fatal(first)
	}
}

// statsOf returns the hub's stats of ConfigMaps.
func statsOf(t *testing.T, h *hub) informerhub.ResourceStats {
	t.Helper()
	for _, st := range h.Stats() {
		if st.Resource == configMaps {
			return st
		}
	}
	t.Fatal("the hub has no stats of ConfigMaps")
	return informerhub.ResourceStats{}
}
