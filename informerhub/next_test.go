package informerhub_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"

	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/informerhub/hubtest"
)

// TestNextGivesNothingOnceItsContextEnded: a caller that gave up (a stream
// ended by a recheck, or Drain) gets the context's error from Next, not
// what the subscription's queue still holds.
func TestNextGivesNothingOnceItsContextEnded(t *testing.T) {
	c := newFakeCluster(t)
	h := newHub(t, c, informerhub.Config{})
	s := watch(t, h, informerhub.WatchRequest{})
	var rv uint64
	for i := range 5 {
		cm := configMap("ns", fmt.Sprint("cm-", i), nil, "")
		c.cms().Add(cm)
		rv, _ = strconv.ParseUint(cm.ResourceVersion, 10, 64)
	}
	informerhub.WaitForResourceVersion(h, hubtest.ConfigMaps, rv)
	if n := informerhub.Pending(s); n != 5 {
		t.Fatalf("%d changes queued, want 5", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if ev, err := s.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next with an ended context: %v, %v; want context.Canceled", ev, err)
	}
}
