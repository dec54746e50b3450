package state

import (
	"math"
	"sort"

	"github.com/informerhub/informerhub/informerhub/budget"
	"github.com/informerhub/informerhub/informerhub/internal/event"
)

// History is a ring of a feed's most recent records, bounded by count and by
// bytes. Record seq numbers are consecutive, so a record is found by its seq
// in O(1) and by its resourceVersion in O(log n).
//
// Besides what its bounds allow, it holds the newest relist's records whole
// (see beginRelist): a relist's differences arrive at once, and subscribers
// that were live when it began read them from here at their own pace (see
// Subscription), so its records go only once newer records alone fill the
// bounds. They are mostly the objects of the current state, which is held
// anyway; what they add is the previous states of the objects that changed.
//
// Its bytes count within the hub's memory budget, which may evict its oldest
// records sooner (see memory).
type History struct {
	ring []*Record // grows while a relist's records need room; never shrinks
	// size is the most records held besides the newest relist's.
	size int
	// First and last are the seqs of the oldest and newest record held;
	// the history is empty when last < first.
	First, Last uint64
	// FloorRV is the rv of the newest record evicted (at first, that of the
	// initial list): every record with a larger rv is held.
	FloorRV uint64
	// FloorAt is when the record of floorRV (or the initial list) arrived,
	// in Unix nanoseconds: the age of the oldest point the history resumes.
	FloorAt int64
	// RecordBytes is the size of the records held and of the objects only
	// they hold (see count); with the events built for them in the default
	// view (events), it is what maxBytes bounds: the oldest records are
	// evicted while they exceed it, keeping at least the newest.
	// (evictable compares recordBytes alone: the events subscribers build
	// while reading a relist must not push the relist out.)
	RecordBytes, maxBytes int64
	// records counts recordBytes within the hub's memory (memory.history).
	records *budget.Bytes
	events  *budget.Bytes
	// relistFirst and relistLast are the seqs of the newest relist's
	// records (relistLast < relistFirst: none yet), relistBytes what those
	// still held count of recordBytes, and relisting is set while a
	// relist's records are being pushed.
	relistFirst, relistLast uint64
	RelistBytes             int64
	relisting               bool
	// viewBytes is the size of the events kept for the records' views
	// other than the default one, bounded by as much again as the records
	// (see feed.Events.OfRecord) and by the hub's memory budget. They never
	// evict records: what one subscriber asks for never shortens the window
	// others resume from.
	viewBytes *budget.Bytes
	// Persisted is the newest record written to disk (internal/durable): no
	// newer one is evicted, so every record is in memory or on disk.
	// math.MaxUint64 without a disk history.
	Persisted uint64
}

// Bytes is what the history holds: its records, their objects and events.
func (h *History) Bytes() int64 {
	return h.RecordBytes + h.events.Used() + h.viewBytes.Used()
}

// NewHistory returns an empty history that counts its bytes within mem, the
// hub's memory.history (nil: within nothing).
func NewHistory(size int, maxBytes int64, baseRV uint64, baseAt int64, mem *budget.Bytes) History {
	return History{ring: make([]*Record, size+1), size: size, First: 1, Last: 0, FloorRV: baseRV, FloorAt: baseAt,
		maxBytes: maxBytes, relistFirst: 1, records: budget.Counter(mem), events: budget.Counter(mem),
		viewBytes: budget.New(maxBytes, mem), Persisted: math.MaxUint64}
}

// StartAfter makes the empty history's first record seq+1: the seqs of a
// feed that continues a disk history continue its records'.
func (h *History) StartAfter(seq uint64) {
	h.First, h.Last, h.relistFirst = seq+1, seq, seq+1
}

// NewestAt is when the newest record arrived, or floorAt when there is none.
func (h *History) NewestAt() int64 {
	if r, ok := h.Get(h.Last); ok {
		return r.Received
	}
	return h.FloorAt
}

func (h *History) Len() int { return int(h.Last + 1 - h.First) }

// RecordOverhead is what a record costs besides its objects and events: the
// record, its slots and its token's position.
const RecordOverhead = 256

// count sets what a new record counts and returns it: recordOverhead, and
// the objects that left the state with it (the previous state of a change
// or deletion, and a deletion's final state). Until then the state holds
// them, and counts them; from then the newest record that refers to one is
// the one that leaves the history last, so evicting a record frees what it
// counts (unless a subscriber's queue still holds it).
func (h *History) count(r *Record) int64 {
	n := int64(RecordOverhead)
	if r.Previous != nil {
		n += ObjectSize(r.Previous)
	}
	if r.Type == event.Deleted && r.Object != r.Previous {
		n += ObjectSize(r.Object)
	}
	r.Counted = n
	return n
}

func (h *History) InRelist(seq uint64) bool { return seq >= h.relistFirst && seq <= h.relistLast }

// BeginRelist makes the records pushed until endRelist the newest relist's,
// held whole (see history).
func (h *History) BeginRelist() {
	h.relistFirst, h.relistLast, h.RelistBytes, h.relisting = h.Last+1, h.Last, 0, true
}

func (h *History) EndRelist() { h.relisting = false }

func (h *History) Push(r *Record) {
	if h.Len() == len(h.ring) {
		h.grow()
	}
	h.Last = r.Pos.Seq
	h.ring[r.Pos.Seq%uint64(len(h.ring))] = r
	r.Views.Init(h.viewBytes, false)
	r.Built.Init(h.events, true)
	size := h.count(r)
	h.RecordBytes += size
	h.records.Force(size)
	if h.relisting {
		h.relistLast, h.RelistBytes = r.Pos.Seq, h.RelistBytes+size
	}
	h.Trim()
}

// Trim evicts the oldest records while the history is past its bounds.
func (h *History) Trim() {
	for h.Len() > 1 && (h.Len() > h.size || h.boundedBytes() > h.maxBytes) && h.evictable() {
		h.Evict()
	}
}

// boundedBytes is what maxBytes bounds: the records, their objects and
// their events in the default view.
func (h *History) boundedBytes() int64 { return h.RecordBytes + h.events.Used() }

// evictable reports whether the oldest record may go to make room: it is not
// the newest relist's, or the records after that relist alone fill the
// bounds.
func (h *History) evictable() bool {
	if h.First > h.Persisted {
		return false // not on disk yet
	}
	if !h.InRelist(h.First) {
		return true
	}
	return int(h.Last-h.relistLast) > h.size || h.RecordBytes-h.RelistBytes > h.maxBytes
}

// grow doubles the ring, keeping each record at its seq's place.
func (h *History) grow() {
	ring := make([]*Record, 2*len(h.ring))
	for seq := h.First; seq <= h.Last; seq++ {
		ring[seq%uint64(len(ring))] = h.ring[seq%uint64(len(h.ring))]
	}
	h.ring = ring
}

// Evict drops the oldest record.
func (h *History) Evict() {
	i := h.First % uint64(len(h.ring))
	evicted := h.ring[i]
	if h.InRelist(h.First) {
		h.RelistBytes -= evicted.Counted
	}
	h.ring[i] = nil
	h.First++
	h.RecordBytes -= evicted.Counted
	h.records.Force(-evicted.Counted)
	evicted.Views.Release()
	evicted.Built.Release()
	h.FloorRV, h.FloorAt = evicted.RV, evicted.Received
}

// Release gives back everything the history counts in the hub's memory, for
// a feed that stopped: its records stay readable, but count no more.
func (h *History) Release() {
	for seq := h.First; seq <= h.Last; seq++ {
		r := h.ring[seq%uint64(len(h.ring))]
		r.Views.Release()
		r.Built.Release()
	}
	h.records.Force(-h.RecordBytes)
	h.RecordBytes, h.RelistBytes = 0, 0
}

// After appends to dst the records following seq, at most max of them. It
// reports false when some of them have been evicted.
func (h *History) After(seq uint64, max int, dst []*Record) ([]*Record, bool) {
	if seq+1 < h.First {
		return dst, false
	}
	for s := seq + 1; s <= h.Last && max > 0; s++ {
		dst = append(dst, h.ring[s%uint64(len(h.ring))])
		max--
	}
	return dst, true
}

// Get returns the record of seq, if the history holds it.
func (h *History) Get(seq uint64) (*Record, bool) {
	if seq < h.First || seq > h.Last {
		return nil, false
	}
	return h.ring[seq%uint64(len(h.ring))], true
}

// LastAtOrBefore returns the seq of the newest record whose rv is at most
// rv, or first-1 when there is none. The caller checks rv >= floorRV.
func (h *History) LastAtOrBefore(rv uint64) uint64 {
	n := sort.Search(h.Len(), func(i int) bool {
		return h.ring[(h.First+uint64(i))%uint64(len(h.ring))].RV > rv
	})
	return h.First + uint64(n) - 1
}
