package informerhub

import (
	"sync/atomic"

	"github.com/informerhub/informerhub/informerhub/budget"
)

// stateClone is a clone of a feed's state that a snapshot or a
// subscription's initial events read without the feed's lock
// (store.cloneFor). A clone is O(1) to take, and copies nothing: it keeps
// the objects the state replaced or deleted since, which nothing else
// counts once their records leave the history. So the feed counts them for
// its open clones (stateClones), within the hub's memory budget; past it,
// with nothing else to evict, the reader of the oldest clone is ended
// (memory.Account.Reclaim), as a subscriber that fell behind is.
type stateClone struct {
	// churnAt is the feed's churn when the clone was taken: it keeps what
	// the state replaced or deleted since.
	churnAt int64
	// ended, when set, is why the clone's reader must stop.
	ended atomic.Pointer[error]
}

// err is why the clone's reader must stop, or nil.
func (c *stateClone) err() error {
	if c == nil {
		return nil
	}
	if err := c.ended.Load(); err != nil {
		return *err
	}
	return nil
}

// stateClones are a feed's open clones, and what they keep. Guarded by the
// feed's mu. Each change of the state costs it O(1), however many clones
// are open: what the open clones keep is all the state replaced or
// deleted since the oldest was taken (churn - open[0].churnAt), counted as
// it happens.
type stateClones struct {
	// churn is what the objects the state replaced or deleted count, ever.
	churn int64
	// open are the open clones, oldest first.
	open []*stateClone
	// kept counts what the open clones keep, in memory.clones.
	kept *budget.Bytes
	// released is set once the feed stopped: its memory is given back,
	// whatever clones are still read.
	released bool
}

// replaced counts objects of n bytes (objectSize) that the state replaced
// or deleted.
func (cs *stateClones) replaced(n int64) {
	cs.churn += n
	if len(cs.open) > 0 && !cs.released {
		cs.kept.Force(n)
	}
}

// take opens a clone taken now.
func (cs *stateClones) take() *stateClone {
	c := &stateClone{churnAt: cs.churn}
	cs.open = append(cs.open, c)
	return c
}

// close closes c; once only.
func (cs *stateClones) close(c *stateClone) {
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
			cs.kept.Force(-(next - c.churnAt))
		}
		return
	}
}

// oldestKeeps returns the oldest open clone, and what the open clones
// keep, all since it was taken; nil when none is open.
func (cs *stateClones) oldestKeeps() (*stateClone, int64) {
	if len(cs.open) == 0 || cs.released {
		return nil, 0
	}
	return cs.open[0], cs.churn - cs.open[0].churnAt
}

// release gives back what the clones keep, for a feed that stopped.
func (cs *stateClones) release() {
	if c, kept := cs.oldestKeeps(); c != nil {
		cs.kept.Force(-kept)
	}
	cs.released = true
}
