package informerhub

import (
	"math"
	"sort"

	"github.com/informerhub/informerhub/informerhub/budget"
)

// history is a ring of a feed's most recent records, bounded by count and by
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
type history struct {
	ring []*record // grows while a relist's records need room; never shrinks
	// size is the most records held besides the newest relist's.
	size int
	// first and last are the seqs of the oldest and newest record held;
	// the history is empty when last < first.
	first, last uint64
	// floorRV is the rv of the newest record evicted (at first, that of the
	// initial list): every record with a larger rv is held.
	floorRV uint64
	// floorAt is when the record of floorRV (or the initial list) arrived,
	// in Unix nanoseconds: the age of the oldest point the history resumes.
	floorAt int64
	// recordBytes is the size of the records held and of the objects only
	// they hold (see count); with the events built for them in the default
	// view (events), it is what maxBytes bounds: the oldest records are
	// evicted while they exceed it, keeping at least the newest.
	// (evictable compares recordBytes alone: the events subscribers build
	// while reading a relist must not push the relist out.)
	recordBytes, maxBytes int64
	// records counts recordBytes within the hub's memory (memory.history).
	records *budget.Bytes
	events  *budget.Bytes
	// relistFirst and relistLast are the seqs of the newest relist's
	// records (relistLast < relistFirst: none yet), relistBytes what those
	// still held count of recordBytes, and relisting is set while a
	// relist's records are being pushed.
	relistFirst, relistLast uint64
	relistBytes             int64
	relisting               bool
	// viewBytes is the size of the events kept for the records' views
	// other than the default one, bounded by as much again as the records
	// (see eventMaker.ofRecord) and by the hub's memory budget. They never
	// evict records: what one subscriber asks for never shortens the window
	// others resume from.
	viewBytes *budget.Bytes
	// persisted is the newest record written to disk (internal/durable): no
	// newer one is evicted, so every record is in memory or on disk.
	// math.MaxUint64 without a disk history.
	persisted uint64
}

// bytes is what the history holds: its records, their objects and events.
func (h *history) bytes() int64 {
	return h.recordBytes + h.events.Used() + h.viewBytes.Used()
}

// newHistory returns an empty history that counts its bytes within mem, the
// hub's memory.history (nil: within nothing).
func newHistory(size int, maxBytes int64, baseRV uint64, baseAt int64, mem *budget.Bytes) history {
	return history{ring: make([]*record, size+1), size: size, first: 1, last: 0, floorRV: baseRV, floorAt: baseAt,
		maxBytes: maxBytes, relistFirst: 1, records: budget.Counter(mem), events: budget.Counter(mem),
		viewBytes: budget.New(maxBytes, mem), persisted: math.MaxUint64}
}

// startAfter makes the empty history's first record seq+1: the seqs of a
// feed that continues a disk history continue its records'.
func (h *history) startAfter(seq uint64) {
	h.first, h.last, h.relistFirst = seq+1, seq, seq+1
}

// newestAt is when the newest record arrived, or floorAt when there is none.
func (h *history) newestAt() int64 {
	if r, ok := h.get(h.last); ok {
		return r.received
	}
	return h.floorAt
}

func (h *history) len() int { return int(h.last + 1 - h.first) }

// recordOverhead is what a record costs besides its objects and events: the
// record, its slots and its token's position.
const recordOverhead = 256

// count sets what a new record counts and returns it: recordOverhead, and
// the objects that left the state with it (the previous state of a change
// or deletion, and a deletion's final state). Until then the state holds
// them, and counts them; from then the newest record that refers to one is
// the one that leaves the history last, so evicting a record frees what it
// counts (unless a subscriber's queue still holds it).
func (h *history) count(r *record) int64 {
	n := int64(recordOverhead)
	if r.prev != nil {
		n += objectSize(r.prev)
	}
	if r.typ == EventDeleted && r.obj != r.prev {
		n += objectSize(r.obj)
	}
	r.counted = n
	return n
}

func (h *history) inRelist(seq uint64) bool { return seq >= h.relistFirst && seq <= h.relistLast }

// beginRelist makes the records pushed until endRelist the newest relist's,
// held whole (see history).
func (h *history) beginRelist() {
	h.relistFirst, h.relistLast, h.relistBytes, h.relisting = h.last+1, h.last, 0, true
}

func (h *history) endRelist() { h.relisting = false }

func (h *history) push(r *record) {
	if h.len() == len(h.ring) {
		h.grow()
	}
	h.last = r.pos.seq
	h.ring[r.pos.seq%uint64(len(h.ring))] = r
	r.views.Init(h.viewBytes, false)
	r.built.Init(h.events, true)
	size := h.count(r)
	h.recordBytes += size
	h.records.Force(size)
	if h.relisting {
		h.relistLast, h.relistBytes = r.pos.seq, h.relistBytes+size
	}
	h.trim()
}

// trim evicts the oldest records while the history is past its bounds.
func (h *history) trim() {
	for h.len() > 1 && (h.len() > h.size || h.boundedBytes() > h.maxBytes) && h.evictable() {
		h.evict()
	}
}

// boundedBytes is what maxBytes bounds: the records, their objects and
// their events in the default view.
func (h *history) boundedBytes() int64 { return h.recordBytes + h.events.Used() }

// evictable reports whether the oldest record may go to make room: it is not
// the newest relist's, or the records after that relist alone fill the
// bounds.
func (h *history) evictable() bool {
	if h.first > h.persisted {
		return false // not on disk yet
	}
	if !h.inRelist(h.first) {
		return true
	}
	return int(h.last-h.relistLast) > h.size || h.recordBytes-h.relistBytes > h.maxBytes
}

// grow doubles the ring, keeping each record at its seq's place.
func (h *history) grow() {
	ring := make([]*record, 2*len(h.ring))
	for seq := h.first; seq <= h.last; seq++ {
		ring[seq%uint64(len(ring))] = h.ring[seq%uint64(len(h.ring))]
	}
	h.ring = ring
}

// evict drops the oldest record.
func (h *history) evict() {
	i := h.first % uint64(len(h.ring))
	evicted := h.ring[i]
	if h.inRelist(h.first) {
		h.relistBytes -= evicted.counted
	}
	h.ring[i] = nil
	h.first++
	h.recordBytes -= evicted.counted
	h.records.Force(-evicted.counted)
	evicted.views.Release()
	evicted.built.Release()
	h.floorRV, h.floorAt = evicted.rv, evicted.received
}

// release gives back everything the history counts in the hub's memory, for
// a feed that stopped: its records stay readable, but count no more.
func (h *history) release() {
	for seq := h.first; seq <= h.last; seq++ {
		r := h.ring[seq%uint64(len(h.ring))]
		r.views.Release()
		r.built.Release()
	}
	h.records.Force(-h.recordBytes)
	h.recordBytes, h.relistBytes = 0, 0
}

// after appends to dst the records following seq, at most max of them. It
// reports false when some of them have been evicted.
func (h *history) after(seq uint64, max int, dst []*record) ([]*record, bool) {
	if seq+1 < h.first {
		return dst, false
	}
	for s := seq + 1; s <= h.last && max > 0; s++ {
		dst = append(dst, h.ring[s%uint64(len(h.ring))])
		max--
	}
	return dst, true
}

// get returns the record of seq, if the history holds it.
func (h *history) get(seq uint64) (*record, bool) {
	if seq < h.first || seq > h.last {
		return nil, false
	}
	return h.ring[seq%uint64(len(h.ring))], true
}

// lastAtOrBefore returns the seq of the newest record whose rv is at most
// rv, or first-1 when there is none. The caller checks rv >= floorRV.
func (h *history) lastAtOrBefore(rv uint64) uint64 {
	n := sort.Search(h.len(), func(i int) bool {
		return h.ring[(h.first+uint64(i))%uint64(len(h.ring))].rv > rv
	})
	return h.first + uint64(n) - 1
}
