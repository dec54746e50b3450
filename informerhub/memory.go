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
// once, bounded by Config.MemoryBudget, and what it evicts to stay within
// it. Each kind counts within held, the total the budget bounds, except the
// state, which is the cluster's size and counted apart. What it gives up
// past the budget, and in which order, is docs/architecture.md's "Memory":
// shared events of other views are not kept (eventMaker.ofRecord), then
// history records go, the oldest change first (reclaim); queues and label
// indexes never do.
type memory struct {
	held *budget.Bytes // Max is Config.MemoryBudget
	// history counts records, their objects and events (history.go);
	// queues, subscribers' queues (member.go); indexes, label indexes
	// (index.go).
	history, queues, indexes *budget.Bytes
	// clones counts what the state clones that snapshots and initial
	// events read keep of the state since replaced (clone.go).
	clones *budget.Bytes
	// state counts the objects of every feed's state, outside the budget.
	state *budget.Bytes
	// evicted counts the records evicted to keep within the budget.
	evicted atomic.Uint64
	// overBudget counts the times reclaim found the hub over its budget
	// with nothing it could evict (MemoryStats.OverBudget).
	overBudget atomic.Uint64

	// feeds returns the running feeds, whose histories reclaim evicts from.
	feeds func() []*feed
	log   *slog.Logger
	// reclaiming is held by the one goroutine evicting for the budget at a
	// time (see reclaim); the rest leave it to that one.
	reclaiming sync.Mutex
	// warned is when warnOver last logged, in Unix nanoseconds.
	warned atomic.Int64
}

func newMemory(max int64, log *slog.Logger, feeds func() []*feed) *memory {
	m := &memory{held: budget.New(max, nil), feeds: feeds, log: log}
	m.history, m.queues, m.indexes = budget.Counter(m.held), budget.Counter(m.held), budget.Counter(m.held)
	m.clones = budget.Counter(m.held)
	m.state = budget.Counter(nil)
	return m
}

func (m *memory) over() bool { return m.held.Over() }

// reclaim evicts history records, the oldest change of any resource type
// first, until the hub holds no more than its memory budget, or nothing
// more can go. Feeds call it after a change and subscribers after building
// an event, holding no lock; one goroutine evicts at a time, and it never
// waits for a feed busy with its own work (see evictOldest).
func (m *memory) reclaim() {
	for m.over() && m.reclaiming.TryLock() {
		evicted := m.evictOldest() || m.spillUnwritten() || m.endOldestClone()
		m.reclaiming.Unlock()
		if !evicted {
			// What is left cannot go (queues, label indexes, each
			// history's newest change) or its feed is busy, and will
			// reclaim after its own work.
			m.overBudget.Add(1)
			m.warnOver()
			return
		}
		// A goroutine that found the budget exceeded while this one held
		// reclaiming left the work to it: look again.
	}
}

// warnOver logs, at most once a minute, that the hub is over its budget
// with nothing it can evict.
func (m *memory) warnOver() {
	now := time.Now().UnixNano()
	last := m.warned.Load()
	if now-last < int64(time.Minute) || !m.warned.CompareAndSwap(last, now) {
		return
	}
	m.log.Warn("the hub holds more than its memory budget and has nothing it may evict: queues, label indexes and each history's newest change stay; raise --memory-budget or lower --max-subscriptions or --queue-size",
		"heldBytes", m.held.Used(), "budgetBytes", m.held.Max(),
		"queueBytes", m.queues.Used(), "labelIndexBytes", m.indexes.Used(), "historyBytes", m.history.Used())
}

// spillUnwritten makes the feed whose changes waiting for the disk hold the
// most stop writing to disk (feed.spillDiskLocked), so that its history may
// evict them: a disk that fell behind must not take the hub past its
// budget. It skips feeds whose lock is taken, and reports whether it
// spilled one.
func (m *memory) spillUnwritten() bool {
	f := m.holdingMost((*feed).unwrittenBytes)
	return f != nil && f.spillForMemory()
}

// endOldestClone ends the reader of the oldest clone of the feed whose
// clones keep the most (a snapshot, or a subscription's initial events,
// read so slowly that the state changed under it by more than the hub may
// hold), so that its objects go: as a subscriber that falls behind, it
// resumes from its token, or takes the snapshot again. It reports whether
// it ended one.
func (m *memory) endOldestClone() bool {
	f := m.holdingMost((*feed).cloneKeeps)
	return f != nil && f.endOldestClone()
}

// holdingMost returns the feed for which held (false: its lock is taken)
// reports the most, if that is minSpillBytes (or a 64th of the budget, if
// less) at least: below that, what a writer that keeps up holds at any
// time, or a reader that keeps up keeps, giving it up would gain nothing.
func (m *memory) holdingMost(held func(*feed) (int64, bool)) *feed {
	var most *feed
	mostBytes := min(minSpillBytes, m.held.Max()/64) - 1
	for _, f := range m.feeds() {
		if n, ok := held(f); ok && n > mostBytes {
			most, mostBytes = f, n
		}
	}
	return most
}

// minSpillBytes is the least that a feed's changes waiting for the disk,
// or its clones, must hold for the memory budget to take them (see
// holdingMost).
const minSpillBytes = 1 << 20

// evictOldest evicts while the hub is over its budget, from the feed whose
// oldest record is the oldest, a run of records at a time: until its oldest
// is newer than the next feed's. It reads each feed's oldest record's time
// without its lock (store.oldestAt), and skips a feed whose lock is taken:
// a relist being recorded, say. It reports whether it evicted anything.
func (m *memory) evictOldest() bool {
	feeds := m.feeds()
	evicted, busy := false, map[*feed]bool{}
	for m.over() {
		var oldest *feed
		oldestAt, nextAt := int64(math.MaxInt64), int64(math.MaxInt64)
		for _, f := range feeds {
			at := f.store.oldestAt.Load()
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
		m.evicted.Add(uint64(n))
		evicted = evicted || n > 0
	}
	return evicted
}
