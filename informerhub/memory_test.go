package informerhub_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	. "github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/informerhub/hubtest"
)

// TestMemoryBudgetEvictsTheOldestChangeFirst: past the hub's memory budget,
// the oldest change goes first whatever its resource type: a quiet type's
// old changes before a busy type's new ones, each history keeping its
// newest; and everything counted is given back when the hub closes.
func TestMemoryBudgetEvictsTheOldestChangeFirst(t *testing.T) {
	c := hubtest.NewCluster(t)
	const budget = 16 << 10
	h := New(Config{MemoryBudget: budget, QueueSize: 4, Logger: slog.New(slog.DiscardHandler)}, c, c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pods, err := h.Watch(ctx, WatchRequest{Selector: Selector{Resource: hubtest.Pods}})
	if err != nil {
		t.Fatal(err)
	}
	cms, err := h.Watch(ctx, WatchRequest{Selector: Selector{Resource: hubtest.ConfigMaps}})
	if err != nil {
		t.Fatal(err)
	}
	if got := h.Memory().Queues; got != 0 {
		t.Fatalf("two live subscribers' queues count %d bytes before anything was queued, want 0", got)
	}
	for i := range 5 {
		c.Source(hubtest.Pods).Add(hubtest.Pod("ns", fmt.Sprint(i), nil, "node", ""))
		if _, err := pods.Next(ctx); err != nil {
			t.Fatal(err)
		}
	}
	SettleMemory(h)
	if st := statsFor(t, h, hubtest.Pods); st.HistoryEvents != 5 || st.EvictedForMemory != 0 {
		t.Fatalf("pods: %d changes held, %d evicted for memory; want 5 and 0 within the budget", st.HistoryEvents, st.EvictedForMemory)
	}

	// ConfigMaps change until the budget takes one of theirs: by then the
	// older Pod changes have gone, all but the newest.
	for i := 0; statsFor(t, h, hubtest.ConfigMaps).EvictedForMemory == 0; i++ {
		if i == 100 {
			t.Fatal("100 ConfigMaps and no eviction: is the budget enforced?")
		}
		c.ConfigMaps().Add(hubtest.ConfigMap("ns", fmt.Sprint(i), nil, ""))
		if _, err := cms.Next(ctx); err != nil {
			t.Fatal(err)
		}
		SettleMemory(h)
		m := h.Memory()
		if held := m.History + m.Queues + m.LabelIndexes; held > budget {
			t.Fatalf("after %d ConfigMaps the hub holds %d bytes (%+v), over its budget of %d", i+1, held, m, budget)
		}
	}
	if st := statsFor(t, h, hubtest.Pods); st.HistoryEvents != 1 || st.EvictedForMemory != 4 {
		t.Fatalf("pods: %d changes held, %d evicted for memory; want their newest kept and the 4 older evicted first",
			st.HistoryEvents, st.EvictedForMemory)
	}
	if m := h.Memory(); m.EvictedForMemory < 5 || m.State == 0 {
		t.Fatalf("memory %+v: want at least 5 evictions and the state counted", m)
	}

	pods.Close()
	cms.Close()
	h.Close()
	if m := h.Memory(); m.History != 0 || m.Queues != 0 || m.LabelIndexes != 0 || m.State != 0 {
		t.Fatalf("a closed hub still counts %+v", m)
	}
}

// statsFor returns the hub's stats of one resource type.
func statsFor(t *testing.T, h *Hub, gvr schema.GroupVersionResource) ResourceStats {
	t.Helper()
	for _, st := range h.Stats() {
		if st.Resource == gvr {
			return st
		}
	}
	t.Fatalf("no stats of %v", gvr)
	return ResourceStats{}
}

// TestAHubOverItsBudgetWithNothingToEvictKeepsServing: a budget smaller
// than what cannot be evicted (a queue, each history's newest change) is
// exceeded for good; the hub evicts what it may and goes on delivering,
// rather than evicting forever.
func TestAHubOverItsBudgetWithNothingToEvictKeepsServing(t *testing.T) {
	c := hubtest.NewCluster(t)
	h := New(Config{MemoryBudget: 1, Logger: slog.New(slog.DiscardHandler)}, c, c)
	defer h.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cms, err := h.Watch(ctx, WatchRequest{Selector: Selector{Resource: hubtest.ConfigMaps}})
	if err != nil {
		t.Fatal(err)
	}
	defer cms.Close()
	for i := range 5 {
		c.ConfigMaps().Add(hubtest.ConfigMap("ns", fmt.Sprint(i), nil, ""))
		ev, err := cms.Next(ctx)
		if err != nil {
			t.Fatalf("change %d: %v", i, err)
		}
		if ev.Type != EventAdded {
			t.Fatalf("change %d: %v, want ADDED", i, ev.Type)
		}
	}
	SettleMemory(h)
	if st := statsFor(t, h, hubtest.ConfigMaps); st.HistoryEvents != 1 || st.EvictedForMemory != 4 {
		t.Fatalf("%d changes held, %d evicted for memory; want the newest held and the rest evicted", st.HistoryEvents, st.EvictedForMemory)
	}
	// What the alert on a budget too small reads: the hub says, each time
	// it looks, that it is over with nothing to evict.
	if m := h.Memory(); m.OverBudget == 0 {
		t.Fatalf("memory %+v: over its budget of 1 byte with nothing to evict, and OverBudget is 0", m)
	}
}
