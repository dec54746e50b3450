package informerhub

import (
	"math"
	"sync"
	"sync/atomic"
)

// memory is the hub's account of what it holds for all resource types at
// once, bounded by Config.MemoryBudget. Each kind counts within held, the
// total the budget bounds, except the state, which is the cluster's size
// and counted apart.
//
// What fills the budget is held as long as it is needed, in this order of
// going first:
//
//  1. the events of other views than the default one (projections,
//     previous states, other encodings), kept for sharing: kept only while
//     they fit, else each subscriber builds its own (see feed.event);
//  2. history records, the oldest change first, whatever its resource
//     type (see Hub.reclaim): the resume window shrinks alike for every
//     type, to as long ago as the budget reaches, and each keeps at least
//     its newest change; a relist's batch too, so that subscribers still
//     reading it end with ErrSubscriberTooSlow;
//  3. never: subscribers' queues (at most Config.QueueSize changes each,
//     bounded in number by the transport's stream limits) and label
//     indexes (at most maxLabelIndexKeys per resource type), which the
//     hub's work needs; they leave the history less room.
type memory struct {
	held bytesBudget // max is Config.MemoryBudget
	// history counts records, their objects and events (history.go);
	// queues, subscribers' queues (Subscription.goLive); indexes, label
	// indexes (index.go).
	history, queues, indexes *bytesBudget
	// state counts the objects of every feed's state, outside the budget.
	state *bytesBudget
	// evicted counts the records evicted to keep within the budget.
	evicted atomic.Uint64

	// reclaiming is held by the one goroutine evicting for the budget at a
	// time (see Hub.reclaim); the rest leave it to that one.
	reclaiming sync.Mutex
}

func newMemory(budget int64) *memory {
	m := &memory{held: bytesBudget{max: budget}}
	m.history, m.queues, m.indexes = counter(&m.held), counter(&m.held), counter(&m.held)
	m.state = &bytesBudget{max: math.MaxInt64}
	return m
}

func (m *memory) over() bool { return m.held.used.Load() > m.held.max }

// reclaim evicts history records, the oldest change of any resource type
// first, until the hub holds no more than its memory budget or every
// history holds only its newest change. Feeds call it after a change,
// outside their lock; only one goroutine evicts at a time.
func (h *Hub) reclaim() {
	m := h.memory
	for m.over() && m.reclaiming.TryLock() {
		h.evictOldest()
		m.reclaiming.Unlock()
		// A feed that found the budget exceeded while this goroutine held
		// reclaiming left the work to it: look again.
	}
}

// evictOldest evicts while the hub is over its budget, from the feed whose
// oldest record is the oldest, a run of records at a time: until its oldest
// is newer than the next feed's. It takes one feed's lock at a time.
func (h *Hub) evictOldest() {
	h.mu.Lock()
	feeds := make([]*feed, 0, len(h.feeds))
	for _, f := range h.feeds {
		feeds = append(feeds, f)
	}
	h.mu.Unlock()
	for h.memory.over() {
		var oldest *feed
		oldestAt, nextAt := int64(math.MaxInt64), int64(math.MaxInt64)
		for _, f := range feeds {
			at, ok := f.oldestEvictable()
			switch {
			case !ok:
			case at < oldestAt:
				oldest, oldestAt, nextAt = f, at, oldestAt
			case at < nextAt:
				nextAt = at
			}
		}
		if oldest == nil {
			return // every history is down to its newest change
		}
		oldest.evictForMemory(nextAt)
	}
}

// oldestEvictable reports when the feed's oldest record arrived, if it has
// one besides its newest.
func (f *feed) oldestEvictable() (int64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil || !f.isSynced || f.history.len() < 2 {
		return 0, false
	}
	r, _ := f.history.get(f.history.first)
	return r.received, true
}

// evictForMemory evicts the feed's oldest records while the hub is over its
// budget, up to the first that arrived after until, keeping the newest.
func (f *feed) evictForMemory(until int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil || !f.isSynced {
		return
	}
	n := 0
	for f.hub.memory.over() && f.history.len() > 1 {
		if r, _ := f.history.get(f.history.first); n > 0 && r.received > until {
			break
		}
		f.history.evict()
		n++
	}
	f.counters.evictedForMemory.Add(uint64(n))
	f.hub.memory.evicted.Add(uint64(n))
}
