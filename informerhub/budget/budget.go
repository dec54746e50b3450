package budget

import (
	"math"
	"sync/atomic"
)

// Bytes is a number of bytes that holders add to, from any goroutine. What
// it counts, its parent counts too.
type Bytes struct {
	used atomic.Int64
	// max bounds what TryAdd adds; math.MaxInt64 for a Bytes that only
	// counts.
	max    int64
	parent *Bytes
}

// New returns a Bytes that refuses to go past max, counting within parent
// (nil: within nothing).
func New(max int64, parent *Bytes) *Bytes {
	return &Bytes{max: max, parent: parent}
}

// Counter returns a Bytes that counts within parent (nil: within nothing)
// and refuses nothing of its own.
func Counter(parent *Bytes) *Bytes { return New(math.MaxInt64, parent) }

// Used is what the holders hold.
func (b *Bytes) Used() int64 { return b.used.Load() }

// Max is what TryAdd adds up to.
func (b *Bytes) Max() int64 { return b.max }

// Over reports whether the holders hold more than Max: Force may take a
// Bytes past it.
func (b *Bytes) Over() bool { return b.used.Load() > b.max }

// TryAdd adds n to b, and to its parents, if it fits in each.
func (b *Bytes) TryAdd(n int64) bool {
	if n <= 0 {
		b.Force(n)
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
	if b.parent != nil && !b.parent.TryAdd(n) {
		b.used.Add(-n)
		return false
	}
	return true
}

// Force adds n to b and its parents, whether it fits or not: for what the
// hub must hold, which makes it give up what it need not (the hub's memory
// budget evicts history).
func (b *Bytes) Force(n int64) {
	for c := b; c != nil; c = c.parent {
		c.used.Add(n)
	}
}

// Drain gives back everything b holds, of a holder that stopped.
func (b *Bytes) Drain() { b.Force(-b.used.Load()) }

// Share is one holder's part of a Bytes: what it added, given back at once
// by Release, after which it adds nothing. The zero Share belongs to no
// Bytes and refuses everything until Init. Its methods may be called from
// any goroutine.
type Share struct {
	budget *Bytes
	// forced shares add whether their budget has room or not.
	forced bool
	held   atomic.Int64
}

// released marks a share that has been released.
const released = math.MinInt64

// Init makes s a share of b; forced shares add whether b has room or not.
// Call it before s is shared.
func (s *Share) Init(b *Bytes, forced bool) { s.budget, s.forced = b, forced }

// Held is what the share holds now.
func (s *Share) Held() int64 { return max(s.held.Load(), 0) }

// Budget is the Bytes the share is a part of; nil before Init.
func (s *Share) Budget() *Bytes { return s.budget }

// Add adds n bytes (or takes -n back) and reports whether they fit; they
// never do once the share is released.
func (s *Share) Add(n int64) bool {
	if s.budget == nil {
		return false
	}
	if s.forced || n <= 0 {
		s.budget.Force(n)
	} else if !s.budget.TryAdd(n) {
		return false
	}
	for {
		held := s.held.Load()
		if held == released {
			// Released meanwhile: what Release gave back did not include n.
			s.budget.Force(-n)
			return false
		}
		if s.held.CompareAndSwap(held, held+n) {
			return true
		}
	}
}

// Release gives back everything the share holds, once.
func (s *Share) Release() {
	if held := s.held.Swap(released); held != released && s.budget != nil {
		s.budget.Force(-held)
	}
}
