package hubtest_test

import (
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/informerhub/informerhub/informerhub/hubtest"
)

// TestAWatchOpenedAsForbidIsCalledIsRefusedOrEnded: a watch being opened
// as Forbid is called is either refused with 403 or open before Forbid
// returns, so that the ResetWatch after it ends it. Tests that forbid, then
// reset, rely on it: a watch that passed the check before Forbid and opened
// on the broadcaster ResetWatch made would never end, and the informer
// would never fail. Each round races one watch with Forbid; every
// interleaving must end the same way.
func TestAWatchOpenedAsForbidIsCalledIsRefusedOrEnded(t *testing.T) {
	c := hubtest.NewCluster(t)
	c.ConfigMaps().Add(hubtest.ConfigMap("ns", "a", nil, ""))
	info, err := c.Resolve(t.Context(), hubtest.ConfigMaps)
	if err != nil {
		t.Fatal(err)
	}
	lw := c.ListerWatcher(info, "")
	type opened struct {
		w   watch.Interface
		err error
	}
	for range 200 {
		c.Forbid(hubtest.ConfigMaps, false)
		started, done := make(chan struct{}), make(chan opened, 1)
		go func() {
			close(started)
			w, err := lw.Watch(metav1.ListOptions{ResourceVersion: "1"})
			done <- opened{w, err}
		}()
		<-started // to race Forbid with the watch, not with the goroutine's start
		c.Forbid(hubtest.ConfigMaps, true)
		c.ConfigMaps().ResetWatch()
		got := <-done
		if got.err != nil {
			if !apierrors.IsForbidden(got.err) {
				t.Fatalf("the watch failed with %v, want 403 Forbidden", got.err)
			}
			continue
		}
		select {
		case e, ok := <-got.w.ResultChan():
			if ok {
				t.Fatalf("the watch delivered %v, want it ended", e)
			}
		default:
			got.w.Stop()
			t.Fatal("a watch allowed before Forbid is still open after the ResetWatch that followed it")
		}
	}
}
