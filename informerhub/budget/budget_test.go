package budget_test

import (
	"sync"
	"testing"

	"github.com/informerhub/informerhub/informerhub/budget"
)

func TestTryAddFitsEveryParentOrNothing(t *testing.T) {
	parent := budget.New(100, nil)
	child := budget.New(80, parent)
	sibling := budget.Counter(parent)
	if !sibling.TryAdd(30) {
		t.Fatal("30 of 100 refused")
	}
	if child.TryAdd(80) {
		t.Fatal("80 more fit in the child, but not in its parent, which holds 30 of 100")
	}
	if child.Used() != 0 || parent.Used() != 30 {
		t.Fatalf("a refused add left child %d, parent %d; want 0, 30", child.Used(), parent.Used())
	}
	if !child.TryAdd(70) || parent.Used() != 100 || parent.Over() {
		t.Fatalf("70 more: child %d, parent %d (over %v)", child.Used(), parent.Used(), parent.Over())
	}
	child.Force(10)
	if !parent.Over() || child.Used() != 80 {
		t.Fatalf("Force: child %d, parent %d, over %v; want 80, 110, over", child.Used(), parent.Used(), parent.Over())
	}
	child.Drain()
	if child.Used() != 0 || parent.Used() != 30 {
		t.Fatalf("Drain: child %d, parent %d; want 0, 30", child.Used(), parent.Used())
	}
}

func TestAShareGivesBackWhatItHoldsOnce(t *testing.T) {
	b := budget.New(100, nil)
	var s budget.Share
	if s.Add(1) {
		t.Fatal("a share of no budget took bytes")
	}
	s.Init(b, false)
	if !s.Add(60) || s.Add(60) || s.Held() != 60 || b.Used() != 60 {
		t.Fatalf("held %d, budget %d; want 60, 60 with the second 60 refused", s.Held(), b.Used())
	}
	s.Release()
	s.Release()
	if b.Used() != 0 || s.Held() != 0 || s.Add(1) {
		t.Fatalf("after Release: budget %d, held %d; a released share must take nothing", b.Used(), s.Held())
	}
}

func TestAForcedShareTakesWhatDoesNotFit(t *testing.T) {
	b := budget.New(10, nil)
	var s budget.Share
	s.Init(b, true)
	if !s.Add(20) || b.Used() != 20 || !b.Over() {
		t.Fatalf("forced: budget %d; want 20, over", b.Used())
	}
	s.Release()
	if b.Used() != 0 {
		t.Fatalf("budget %d after Release; want 0", b.Used())
	}
}

// Adds racing a Release never leave bytes counted that no share holds.
func TestSharesRacingReleaseLeaveNothingBehind(t *testing.T) {
	for range 100 {
		b := budget.Counter(nil)
		var s budget.Share
		s.Init(b, false)
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for range 100 {
					s.Add(3)
				}
			})
		}
		wg.Go(s.Release)
		wg.Wait()
		s.Release()
		if b.Used() != 0 {
			t.Fatalf("budget %d after every share was released; want 0", b.Used())
		}
	}
}
