package informerhub

import (
	"math"
	"sync/atomic"
)

// Byte budgets bound what the hub holds for its subscribers beyond its
// state: the events kept for views (history.go) and the state of stateful
// replays (replay.go).

// bytesBudget is a number of bytes that holders add to up to a maximum,
// from any goroutine.
type bytesBudget struct {
	used atomic.Int64
	max  int64
}

// tryAdd adds n to the budget if it fits.
func (b *bytesBudget) tryAdd(n int64) bool {
	for {
		used := b.used.Load()
		if used+n > b.max {
			return false
		}
		if b.used.CompareAndSwap(used, used+n) {
			return true
		}
	}
}

// budgetShare is one holder's part of a bytesBudget: what it added, given
// back at once by release, after which it adds nothing. Its methods may be
// called from any goroutine.
type budgetShare struct {
	budget *bytesBudget
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
	if n > 0 && !s.budget.tryAdd(n) {
		return false
	}
	if n <= 0 {
		s.budget.used.Add(n)
	}
	for {
		held := s.held.Load()
		if held == releasedShare {
			// Released meanwhile: what release gave back did not include n.
			s.budget.used.Add(-n)
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
		s.budget.used.Add(-held)
	}
}
