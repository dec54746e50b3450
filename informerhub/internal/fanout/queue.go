package fanout

import (
	"sync"
	"unsafe"

	"github.com/informerhub/informerhub/informerhub/budget"
	"github.com/informerhub/informerhub/informerhub/internal/state"
)

// deliveryQueue is a live subscriber's queue: what its feed queued for it
// and its reader has not taken yet, in order, at most Config.QueueSize.
// It holds memory for what waits, not for its bound: a ring that grows
// (doubling) as deliveries wait and is given up once its reader has taken
// them all, so that an idle subscriber holds minRingSize deliveries at
// most, and 100,000 of them do not hold a thousand changes' room each.
// What the rings hold counts in the hub's memory budget (bytes).
//
// The feed pushes under its lock and never waits; the reader pops without
// it. mu is a leaf: nothing else is locked while it is held.
type deliveryQueue struct {
	mu    sync.Mutex       // guards ring, head and n
	ring  []state.Delivery // len(ring) is its capacity; nil before the first push
	head  int              // the oldest delivery's index in ring
	n     int              // deliveries waiting
	bytes *budget.Bytes
	// ready is poked (by the member, once its feed has queued a change
	// for every subscriber) when a push made the queue non-empty: the
	// reader waits on it when the queue is empty. A token may be stale
	// (the reader took the delivery first): the reader looks again.
	ready chan struct{}
}

// minRingSize is the ring a queue keeps while its deliveries are taken as
// they come: one change at a time never grows it, nor gives it up.
const minRingSize = 4

// deliverySize is what one delivery takes in a ring.
const deliverySize = int64(unsafe.Sizeof(state.Delivery{}))

func newDeliveryQueue(bytes *budget.Bytes, ready chan struct{}) *deliveryQueue {
	return &deliveryQueue{bytes: bytes, ready: ready}
}

// push queues d unless limit deliveries wait already, and returns how many
// wait with it (0 when it did not fit). When it returns 1, the reader may
// be waiting: poke ready.
func (q *deliveryQueue) push(d state.Delivery, limit int) int {
	q.mu.Lock()
	if q.n >= limit {
		q.mu.Unlock()
		return 0
	}
	if q.n == len(q.ring) {
		q.growLocked(limit)
	}
	q.ring[(q.head+q.n)%len(q.ring)] = d
	q.n++
	n := q.n
	q.mu.Unlock()
	return n
}

// growLocked doubles the ring, to limit at most. The caller holds mu.
func (q *deliveryQueue) growLocked(limit int) {
	size := min(max(2*len(q.ring), minRingSize), limit)
	ring := make([]state.Delivery, size)
	for i := range q.n {
		ring[i] = q.ring[(q.head+i)%len(q.ring)]
	}
	q.bytes.Force(int64(size-len(q.ring)) * deliverySize)
	q.ring, q.head = ring, 0
}

// pop takes the oldest delivery, if one waits. Once the queue is empty, a
// ring that had grown is given up.
func (q *deliveryQueue) pop() (state.Delivery, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n == 0 {
		return state.Delivery{}, false
	}
	d := q.ring[q.head]
	q.ring[q.head] = state.Delivery{} // the record may go once the history lets it
	q.head = (q.head + 1) % len(q.ring)
	if q.n--; q.n == 0 {
		q.head = 0
		if len(q.ring) > minRingSize {
			q.bytes.Force(int64(minRingSize-len(q.ring)) * deliverySize)
			q.ring = make([]state.Delivery, minRingSize)
		}
	}
	return d, true
}

// len returns how many deliveries wait.
func (q *deliveryQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n
}

// release gives back what the ring counts, once its subscription has
// closed: nothing is pushed after.
func (q *deliveryQueue) release() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.bytes.Force(-int64(len(q.ring)) * deliverySize)
	q.ring, q.head, q.n = nil, 0, 0
}

// QueueBytes is the most a live subscriber's queue of size changes holds
// in the hub's memory budget, when full. An idle subscriber's holds
// minRingSize deliveries at most.
func QueueBytes(size int) int64 { return int64(size) * deliverySize }
