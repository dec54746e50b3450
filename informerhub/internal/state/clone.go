package state

import (
	"sync/atomic"

	"github.com/informerhub/informerhub/informerhub/budget"
)

// Clone is a clone of a feed's state that a snapshot or a
// subscription's initial events read without the feed's lock
// (the feed's store.cloneFor). A clone is O(1) to take, and copies nothing: it keeps
// the objects the state replaced or deleted since, which nothing else
// counts once their records leave the history. So the feed counts them for
// its open clones (Clones), within the hub's memory budget; past it,
// with nothing else to evict, the reader of the oldest clone is ended
// (memory.Account.Reclaim), as a subscriber that fell behind is.
type Clone struct {
	// churnAt is the feed's churn when the clone was taken: it keeps what
	// the state replaced or deleted since.
	churnAt int64
	// ended, when set, is why the clone's reader must stop.
	Ended atomic.Pointer[error]
}

// Err is why the clone's reader must stop, or nil.
func (c *Clone) Err() error {
	if c == nil {
		return nil
	}
	if err := c.Ended.Load(); err != nil {
		return *err
	}
	return nil
}

// Clones are a feed's open clones, and what they keep. Guarded by the
// feed's mu. Each change of the state costs it O(1), however many clones
// are open: what the open clones keep is all the state replaced or
// deleted since the oldest was taken (churn - open[0].churnAt), counted as
// it happens.
type Clones struct {
	// churn is what the objects the state replaced or deleted count, ever.
	churn int64
	// open are the open clones, oldest first.
	open []*Clone
	// Kept counts what the open clones keep, in memory.clones.
	Kept *budget.Bytes
	// released is set once the feed stopped: its memory is given back,
	// whatever clones are still read.
	released bool
}

// Replaced counts objects of n bytes (ObjectSize) that the state replaced
// or deleted.
func (cs *Clones) Replaced(n int64) {
	cs.churn += n
	if len(cs.open) > 0 && !cs.released {
		cs.Kept.Force(n)
	}
}

// Take opens a clone taken now.
func (cs *Clones) Take() *Clone {
	c := &Clone{churnAt: cs.churn}
	cs.open = append(cs.open, c)
	return c
}

// Close closes c; once only.
func (cs *Clones) Close(c *Clone) {
	for i, o := range cs.open {
		if o != c {
			continue
		}
		cs.open = append(cs.open[:i], cs.open[i+1:]...)
		if i == 0 && !cs.released {
			next := cs.churn
			if len(cs.open) > 0 {
				next = cs.open[0].churnAt
			}
			cs.Kept.Force(-(next - c.churnAt))
		}
		return
	}
}

// OldestKeeps returns the oldest open clone, and what the open clones
// keep, all since it was taken; nil when none is open.
func (cs *Clones) OldestKeeps() (*Clone, int64) {
	if len(cs.open) == 0 || cs.released {
		return nil, 0
	}
	return cs.open[0], cs.churn - cs.open[0].churnAt
}

// Release gives back what the clones keep, for a feed that stopped.
func (cs *Clones) Release() {
	if c, kept := cs.OldestKeeps(); c != nil {
		cs.Kept.Force(-kept)
	}
	cs.released = true
}
