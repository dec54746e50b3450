package informerhub

import (
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/informerhub/informerhub/informerhub/budget"
)

// memory is the hub's account of what it holds for all resource types at
// once, bounded by Config.MemoryBudget. Each kind counts within held, the
// total the budget bounds, except the state, which is the cluster's size
// and counted apart. What it gives up past the budget, and in which order,
// is docs/architecture.md's "Memory": shared events of other views are not
// kept (feed.event), then history records go, the oldest change first
// (Hub.reclaim); queues and label indexes never do.
type memory struct {
	held *budget.Bytes // Max is Config.MemoryBudget
	// history counts records, their objects and events (history.go);
	// queues, subscribers' queues (Subscription.goLive); indexes, label
	// indexes (index.go).
	history, queues, indexes *budget.Bytes
	// state counts the objects of every feed's state, outside the budget.
	state *budget.Bytes
	// evicted counts the records evicted to keep within the budget.
	evicted atomic.Uint64

	// reclaiming is held by the one goroutine evicting for the budget at a
	// time (see Hub.reclaim); the rest leave it to that one.
	reclaiming sync.Mutex
	// warned is when warnOver last logged, in Unix nanoseconds.
	warned atomic.Int64
}

func newMemory(max int64) *memory {
	m := &memory{held: budget.New(max, nil)}
	m.history, m.queues, m.indexes = budget.Counter(m.held), budget.Counter(m.held), budget.Counter(m.held)
	m.state = budget.Counter(nil)
	return m
}

func (m *memory) over() bool { return m.held.Over() }

// reclaim evicts history records, the oldest change of any resource type
// first, until the hub holds no more than its memory budget, or nothing
// more can go. Feeds call it after a change and subscribers after building
// an event, holding no lock; one goroutine evicts at a time, and it never
// waits for a feed busy with its own work (see evictOldest).
func (h *Hub) reclaim() {
	m := h.memory
	for m.over() && m.reclaiming.TryLock() {
		evicted := h.evictOldest()
		m.reclaiming.Unlock()
		if !evicted {
			// What is left cannot go (queues, label indexes, each
			// history's newest change) or its feed is busy, and will
			// reclaim after its own work.
			m.warnOver(h.log)
			return
		}
		// A goroutine that found the budget exceeded while this one held
		// reclaiming left the work to it: look again.
	}
}

// warnOver logs, at most once a minute, that the hub is over its budget
// with nothing it can evict.
func (m *memory) warnOver(log *slog.Logger) {
	now := time.Now().UnixNano()
	last := m.warned.Load()
	if now-last < int64(time.Minute) || !m.warned.CompareAndSwap(last, now) {
		return
	}
	log.Warn("the hub holds more than its memory budget and has nothing it may evict: queues, label indexes and each history's newest change stay; raise --memory-budget or lower --max-subscriptions or --queue-size",
		"heldBytes", m.held.Used(), "budgetBytes", m.held.Max(),
		"queueBytes", m.queues.Used(), "labelIndexBytes", m.indexes.Used(), "historyBytes", m.history.Used())
}

// evictOldest evicts while the hub is over its budget, from the feed whose
// oldest record is the oldest, a run of records at a time: until its oldest
// is newer than the next feed's. It reads each feed's oldest record's time
// without its lock (feed.oldestAt), and skips a feed whose lock is taken:
// a relist, an index being built. It reports whether it evicted anything.
func (h *Hub) evictOldest() bool {
	h.mu.Lock()
	feeds := make([]*feed, 0, len(h.feeds))
	for _, f := range h.feeds {
		feeds = append(feeds, f)
	}
	h.mu.Unlock()
	evicted, busy := false, map[*feed]bool{}
	for h.memory.over() {
		var oldest *feed
		oldestAt, nextAt := int64(math.MaxInt64), int64(math.MaxInt64)
		for _, f := range feeds {
			at := f.oldestAt.Load()
			switch {
			case at == 0 || busy[f]:
			case at < oldestAt:
				oldest, oldestAt, nextAt = f, at, oldestAt
			case at < nextAt:
				nextAt = at
			}
		}
		if oldest == nil {
			return evicted
		}
		n, ok := oldest.evictForMemory(nextAt)
		if !ok {
			busy[oldest] = true
		}
		evicted = evicted || n > 0
	}
	return evicted
}

// noteOldestLocked publishes when the feed's oldest record that memory
// eviction may take arrived (feed.oldestAt): zero when it holds only its
// newest, or has stopped. The caller holds f.mu.
func (f *feed) noteOldestLocked() {
	var at int64
	if f.err == nil && f.isSynced && f.history.len() > 1 && f.history.first <= f.history.persisted {
		r, _ := f.history.get(f.history.first)
		at = max(r.received, 1)
	}
	f.oldestAt.Store(at)
}

// evictForMemory evicts the feed's oldest records while the hub is over its
// budget, up to the first that arrived after until, keeping the newest. It
// evicts nothing, and reports false, if the feed's lock is taken.
func (f *feed) evictForMemory(until int64) (evicted int, ok bool) {
	if !f.mu.TryLock() {
		return 0, false
	}
	defer f.mu.Unlock()
	if f.err != nil || !f.isSynced {
		f.noteOldestLocked()
		return 0, true
	}
	for f.hub.memory.over() && f.history.len() > 1 && f.history.first <= f.history.persisted {
		if r, _ := f.history.get(f.history.first); evicted > 0 && r.received > until {
			break
		}
		f.history.evict()
		evicted++
	}
	f.noteOldestLocked()
	f.counters.evictedForMemory.Add(uint64(evicted))
	f.hub.memory.evicted.Add(uint64(evicted))
	return evicted, true
}
