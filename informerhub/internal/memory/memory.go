package memory

import (
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/informerhub/informerhub/informerhub/budget"
)

// A Holder is what the account evicts from: one resource type's feed. Its
// methods take the holder's own lock, and give up (false) rather than wait
// for it: a feed busy with its own work (recording a relist, say) reclaims
// once it is done.
type Holder interface {
	// OldestAt is when the holder's oldest history record that may be
	// evicted arrived, in Unix nanoseconds; 0 if none may. It is read
	// without the holder's lock.
	OldestAt() int64
	// EvictForMemory evicts the oldest history records while the account
	// is over its budget, up to the first that arrived after until, and
	// returns how many it evicted.
	EvictForMemory(until int64) (evicted int, ok bool)
	// UnwrittenBytes is what the holder's changes waiting for the disk
	// hold.
	UnwrittenBytes() (int64, bool)
	// SpillForMemory makes the holder stop writing to the disk, so that
	// its history may evict what waits for it.
	SpillForMemory() bool
	// CloneKeeps is what the holder's open state clones keep of states
	// since replaced.
	CloneKeeps() (int64, bool)
	// EndOldestClone ends the reader of the holder's oldest state clone.
	EndOldestClone() bool
}

// Account is the hub's account of what it holds for all resource types at
// once. Each kind counts within Held, the total the budget bounds, except
// the state, which is the cluster's size and counted apart. What it gives
// up past the budget, and in which order, is docs/architecture.md's
// "Memory": shared events of other views are not kept (the caller checks
// Over), then history records go, the oldest change first (Reclaim);
// queues and label indexes never do.
type Account struct {
	// Held is what the budget bounds; its Max is the budget.
	Held *budget.Bytes
	// History counts history records, their objects and events; Queues,
	// subscribers' queues; Indexes, label indexes; Clones, what the state
	// clones that snapshots and initial events read keep of states since
	// replaced. All count within Held.
	History, Queues, Indexes, Clones *budget.Bytes
	// State counts the objects of every feed's state, outside the budget.
	State *budget.Bytes

	// evicted counts the records evicted to keep within the budget.
	evicted atomic.Uint64
	// overBudget counts the times Reclaim found the account over its
	// budget with nothing it could evict.
	overBudget atomic.Uint64

	// holders returns the running feeds, which Reclaim evicts from.
	holders func() []Holder
	log     *slog.Logger
	// reclaiming is held by the one goroutine evicting for the budget at a
	// time (see Reclaim); the rest leave it to that one.
	reclaiming sync.Mutex
	// warned is when warnOver last logged, in Unix nanoseconds.
	warned atomic.Int64
}

// New returns an account of a budget of max bytes, which evicts from the
// holders that holders returns (nil: none).
func New(max int64, log *slog.Logger, holders func() []Holder) *Account {
	if holders == nil {
		holders = func() []Holder { return nil }
	}
	a := &Account{Held: budget.New(max, nil), holders: holders, log: log}
	a.History, a.Queues, a.Indexes = budget.Counter(a.Held), budget.Counter(a.Held), budget.Counter(a.Held)
	a.Clones = budget.Counter(a.Held)
	a.State = budget.Counter(nil)
	return a
}

// Over reports whether the account holds more than its budget.
func (a *Account) Over() bool { return a.Held.Over() }

// Evicted counts the history records evicted to keep within the budget.
func (a *Account) Evicted() uint64 { return a.evicted.Load() }

// OverBudget counts the times Reclaim found the account over its budget
// with nothing it could evict.
func (a *Account) OverBudget() uint64 { return a.overBudget.Load() }

// Reclaim evicts until the account holds no more than its budget, or
// nothing more can go: history records, the oldest change of any resource
// type first; then what a disk that fell behind has not written; then the
// oldest state clone. Feeds call it after a change and subscribers after
// building an event, holding no lock; one goroutine evicts at a time, and
// it never waits for a holder busy with its own work.
func (a *Account) Reclaim() {
	for a.Over() && a.reclaiming.TryLock() {
		evicted := a.evictOldest() || a.spillUnwritten() || a.endOldestClone()
		a.reclaiming.Unlock()
		if !evicted {
			// What is left cannot go (queues, label indexes, each
			// history's newest change) or its holder is busy, and will
			// reclaim after its own work.
			a.overBudget.Add(1)
			a.warnOver()
			return
		}
		// A goroutine that found the budget exceeded while this one held
		// reclaiming left the work to it: look again.
	}
}

// Settle waits for an eviction under way, and evicts the history records
// the budget still requires from holders that are not busy: afterwards
// the account is within its budget, or every history is down to what it
// may not evict.
func (a *Account) Settle() {
	a.reclaiming.Lock()
	defer a.reclaiming.Unlock()
	a.evictOldest()
}

// warnOver logs, at most once a minute, that the account is over its
// budget with nothing it can evict.
func (a *Account) warnOver() {
	now := time.Now().UnixNano()
	last := a.warned.Load()
	if now-last < int64(time.Minute) || !a.warned.CompareAndSwap(last, now) {
		return
	}
	a.log.Warn("the hub holds more than its memory budget and has nothing it may evict: queues, label indexes and each history's newest change stay; raise --memory-budget or lower --max-subscriptions or --queue-size",
		"heldBytes", a.Held.Used(), "budgetBytes", a.Held.Max(),
		"queueBytes", a.Queues.Used(), "labelIndexBytes", a.Indexes.Used(), "historyBytes", a.History.Used())
}

// spillUnwritten makes the holder whose changes waiting for the disk hold
// the most stop writing to disk, so that its history may evict them: a
// disk that fell behind must not take the hub past its budget. It skips
// busy holders, and reports whether it spilled one.
func (a *Account) spillUnwritten() bool {
	h := a.holdingMost(Holder.UnwrittenBytes)
	return h != nil && h.SpillForMemory()
}

// endOldestClone ends the reader of the oldest clone of the holder whose
// clones keep the most (a snapshot, or a subscription's initial events,
// read so slowly that the state changed under it by more than the hub may
// hold), so that its objects go: as a subscriber that falls behind, it
// resumes from its token, or takes the snapshot again. It reports whether
// it ended one.
func (a *Account) endOldestClone() bool {
	h := a.holdingMost(Holder.CloneKeeps)
	return h != nil && h.EndOldestClone()
}

// holdingMost returns the holder for which held (false: it is busy)
// reports the most, if that is minSpillBytes (or a 64th of the budget, if
// less) at least: below that, what a writer that keeps up holds at any
// time, or a reader that keeps up keeps, giving it up would gain nothing.
func (a *Account) holdingMost(held func(Holder) (int64, bool)) Holder {
	var most Holder
	mostBytes := min(minSpillBytes, a.Held.Max()/64) - 1
	for _, h := range a.holders() {
		if n, ok := held(h); ok && n > mostBytes {
			most, mostBytes = h, n
		}
	}
	return most
}

// minSpillBytes is the least that a holder's changes waiting for the
// disk, or its clones, must hold for the budget to take them (see
// holdingMost).
const minSpillBytes = 1 << 20

// evictOldest evicts while the account is over its budget, from the holder
// whose oldest record is the oldest, a run of records at a time: until its
// oldest is newer than the next holder's. It reads each holder's OldestAt
// without its lock, and skips a busy holder. It reports whether it evicted
// anything.
func (a *Account) evictOldest() bool {
	holders := a.holders()
	evicted, busy := false, map[Holder]bool{}
	for a.Over() {
		var oldest Holder
		oldestAt, nextAt := int64(math.MaxInt64), int64(math.MaxInt64)
		for _, h := range holders {
			at := h.OldestAt()
			switch {
			case at == 0 || busy[h]:
			case at < oldestAt:
				oldest, oldestAt, nextAt = h, at, oldestAt
			case at < nextAt:
				nextAt = at
			}
		}
		if oldest == nil {
			return evicted
		}
		n, ok := oldest.EvictForMemory(nextAt)
		if !ok {
			busy[oldest] = true
		}
		a.evicted.Add(uint64(n))
		evicted = evicted || n > 0
	}
	return evicted
}
