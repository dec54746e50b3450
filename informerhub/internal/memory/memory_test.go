package memory

import (
	"log/slog"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// holder is a feed as the account sees it: records of 100 bytes each,
// counted in History, the newest of which it never evicts.
type holder struct {
	name      string
	a         *Account
	at        []int64 // the records' arrival times, oldest first
	busy      bool
	unwritten int64
	spilled   bool
	clones    int64
	ended     bool
	evictions *[]string // what was evicted, in order, across holders
}

const recordBytes = 100

func (h *holder) add(at int64) {
	h.at = append(h.at, at)
	h.a.History.Force(recordBytes)
}

func (h *holder) OldestAt() int64 {
	if len(h.at) < 2 {
		return 0
	}
	return h.at[0]
}

func (h *holder) EvictForMemory(until int64) (int, bool) {
	if h.busy {
		return 0, false
	}
	n := 0
	for h.a.Over() && len(h.at) > 1 && h.at[0] <= until {
		*h.evictions = append(*h.evictions, h.name)
		h.at = h.at[1:]
		h.a.History.Force(-recordBytes)
		n++
	}
	return n, true
}

func (h *holder) UnwrittenBytes() (int64, bool) { return h.unwritten, !h.busy }

func (h *holder) SpillForMemory() bool {
	if h.busy || h.unwritten == 0 {
		return false
	}
	h.spilled = true
	h.a.History.Force(-h.unwritten)
	h.unwritten = 0
	return true
}

func (h *holder) CloneKeeps() (int64, bool) { return h.clones, !h.busy }

func (h *holder) EndOldestClone() bool {
	if h.busy || h.clones == 0 {
		return false
	}
	h.ended = true
	h.a.Clones.Force(-h.clones)
	h.clones = 0
	return true
}

func newAccount(t *testing.T, max int64, names ...string) (*Account, []*holder, *[]string) {
	t.Helper()
	var holders []*holder
	evictions := &[]string{}
	a := New(max, slog.New(slog.DiscardHandler), func() []Holder {
		out := make([]Holder, len(holders))
		for i, h := range holders {
			out[i] = h
		}
		return out
	})
	for _, name := range names {
		holders = append(holders, &holder{name: name, a: a, evictions: evictions})
	}
	return a, holders, evictions
}

// TestReclaimEvictsTheOldestChangeOfAnyHolderFirst: records go in the
// order they arrived, whichever holder has them, until the account is
// within its budget; each holder keeps its newest.
func TestReclaimEvictsTheOldestChangeOfAnyHolderFirst(t *testing.T) {
	a, hs, evictions := newAccount(t, 5*recordBytes, "pods", "configmaps")
	pods, cms := hs[0], hs[1]
	for _, at := range []int64{1, 2, 5, 8} {
		pods.add(at)
	}
	for _, at := range []int64{3, 4, 6} {
		cms.add(at)
	}
	a.Reclaim()
	if diff := cmp.Diff([]string{"pods", "pods"}, *evictions); diff != "" {
		t.Errorf("evicted (-want +got):\n%s", diff)
	}
	if a.Over() || a.Evicted() != 2 || a.OverBudget() != 0 {
		t.Errorf("over %v, evicted %d, over budget %d times: want within the budget after 2 evictions", a.Over(), a.Evicted(), a.OverBudget())
	}
	// Over by three: the oldest are configmaps' 3 and 4, then pods' 5.
	for _, at := range []int64{9, 10, 11} {
		cms.add(at)
	}
	a.Reclaim()
	if diff := cmp.Diff([]string{"pods", "pods", "configmaps", "configmaps", "pods"}, *evictions); diff != "" {
		t.Errorf("evicted (-want +got):\n%s", diff)
	}
}

// TestReclaimSkipsABusyHolder: a holder whose lock is taken is not waited
// for; the others give what they can.
func TestReclaimSkipsABusyHolder(t *testing.T) {
	a, hs, evictions := newAccount(t, 3*recordBytes, "pods", "configmaps")
	pods, cms := hs[0], hs[1]
	pods.busy = true
	for _, at := range []int64{1, 2, 3} {
		pods.add(at)
	}
	for _, at := range []int64{4, 5} {
		cms.add(at)
	}
	a.Reclaim()
	if diff := cmp.Diff([]string{"configmaps"}, *evictions); diff != "" {
		t.Errorf("evicted (-want +got):\n%s", diff)
	}
	if !a.Over() || a.OverBudget() != 1 {
		t.Errorf("over %v, over budget %d times: want over, counted once, the rest left to the busy holder", a.Over(), a.OverBudget())
	}
	pods.busy = false
	a.Settle()
	if a.Over() || !slices.Equal(pods.at, []int64{2, 3}) {
		t.Errorf("after Settle: over %v, pods hold %v: want within the budget, pods' oldest evicted", a.Over(), pods.at)
	}
}

// TestReclaimSpillsThenEndsClones: with no record it may evict, the
// account stops the holder whose unwritten changes hold the most from
// writing to disk; with none, it ends the oldest clone of the holder whose
// clones keep the most; what holds less than minSpillBytes is left alone.
func TestReclaimSpillsThenEndsClones(t *testing.T) {
	const max = 1 << 30
	a, hs, _ := newAccount(t, max, "pods", "configmaps", "secrets")
	pods, cms, secrets := hs[0], hs[1], hs[2]
	pods.unwritten, cms.unwritten, secrets.clones = 2<<20, 3<<20, 4<<20
	// Over by configmaps' unwritten changes.
	a.History.Force(max - secrets.clones + cms.unwritten)
	a.Clones.Force(secrets.clones)
	a.Reclaim()
	if pods.spilled || !cms.spilled || secrets.ended {
		t.Fatalf("spilled pods %v, configmaps %v; ended secrets' clone %v: want configmaps spilled, the most unwritten, and no more",
			pods.spilled, cms.spilled, secrets.ended)
	}
	a.History.Force(1)
	a.Reclaim()
	if !pods.spilled || secrets.ended {
		t.Fatalf("spilled pods %v; ended secrets' clone %v: want pods spilled, and no more", pods.spilled, secrets.ended)
	}
	a.History.Force(2 << 20) // what pods' spill freed
	a.Reclaim()
	if !secrets.ended || a.Over() {
		t.Fatalf("ended secrets' clone %v, over %v: with nothing unwritten, want the clone ended", secrets.ended, a.Over())
	}
	// Over by a clone that keeps less than minSpillBytes: nothing goes.
	cms.clones = 1 << 10
	a.Clones.Force(4<<20 + cms.clones) // what secrets' clone freed, and more
	a.Reclaim()
	if cms.ended || a.OverBudget() != 1 {
		t.Errorf("ended configmaps' small clone %v, over budget %d times: want it kept, and counted once", cms.ended, a.OverBudget())
	}
}
