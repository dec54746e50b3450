package informerhub

import (
	"math"
	"sync/atomic"
)

// Byte budgets count what the hub holds beyond the objects of its state:
// the history's records and events (history.go), subscribers' queues
// (subscription.go), label indexes (index.go), all within the hub's memory
// budget (memory.go); and the state of stateful replays (replay.go).

// bytesBudget is a number of bytes that holders add to, from any goroutine.
// A budget may count within a parent (a resource type's history within the
// hub's memory): what it counts, its parent counts too.
type bytesBudget struct {
	used atomic.Int64
	// max bounds what tryAdd adds; math.MaxInt64 for a budget that only
	// counts.
	max    int64
	parent *bytesBudget
}

// counter returns a budget that counts within parent and refuses nothing
// of its own.
func counter(parent *bytesBudget) *bytesBudget {
	return &bytesBudget{max: math.MaxInt64, parent: parent}
}

// tryAdd adds n to the budget, and to its parents, if it fits in each.
func (b *bytesBudget) tryAdd(n int64) bool {
	if n <= 0 {
		b.force(n)
		return true
	}
	for {
		used := b.used.Load()
		if used+n > b.max {
			return false
		}
		if b.used.CompareAndSwap(used, used+n) {
			break
		}
	}
	if b.parent != nil && !b.parent.tryAdd(n) {
		b.used.Add(-n)
		return false
	}
	return true
}

// force adds n to the budget and its parents, whether it fits or not: for
// what the hub must hold, which makes it evict what it need not (see
// Hub.reclaim).
func (b *bytesBudget) force(n int64) {
	for c := b; c != nil; c = c.parent {
		c.used.Add(n)
	}
}

// budgetShare is one holder's part of a bytesBudget: what it added, given
// back at once by release, after which it adds nothing. Its methods may be
// called from any goroutine.
type budgetShare struct {
	budget *bytesBudget
	// forced shares add whether their budget has room or not.
	forced bool
	held   atomic.Int64
}

// releasedShare marks a share that has been released.
const releasedShare = math.MinInt64

// add adds n bytes (or takes -n back) and reports whether they fit; they
// never do once the share is released.
func (s *budgetShare) add(n int64) bool {
	if s.budget == nil {
		return false
	}
	if s.forced || n <= 0 {
		s.budget.force(n)
	} else if !s.budget.tryAdd(n) {
		return false
	}
	for {
		held := s.held.Load()
		if held == releasedShare {
			// Released meanwhile: what release gave back did not include n.
			s.budget.force(-n)
			return false
		}
		if s.held.CompareAndSwap(held, held+n) {
			return true
		}
	}
}

// release gives back everything the share holds, once.
func (s *budgetShare) release() {
	if held := s.held.Swap(releasedShare); held != releasedShare && s.budget != nil {
		s.budget.force(-held)
	}
}
