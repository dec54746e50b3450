package informerhub

import (
	"sync/atomic"
	"unsafe"
)

// member is a subscription as its feed's live dispatcher knows it: the
// queue the feed's handler fills without ever blocking, the group it is in
// while live, and where it fell behind when its queue was full. Its fields
// are guarded by its feed's mu, but for the queue, a channel, and behind,
// which the subscription's reader checks without the lock.
type member struct {
	lease *lease
	queue chan delivery // made when it first goes live
	// queueBytes is what the queue counts in the hub's memory until the
	// subscription is closed.
	queueBytes int64
	group      *subscriberGroup // while live (dispatch.go)
	// behind is set when the queue was full for a record: the member is no
	// longer live, and has everything up to behindAt once it has passed
	// what its queue holds.
	behind   atomic.Bool
	behindAt position
}

// QueueBytes is what a live subscriber's queue of size changes holds, in
// the hub's memory budget (Config.MemoryBudget); 0 takes the default size.
func QueueBytes(size int) int64 {
	if size <= 0 {
		size = DefaultQueueSize
	}
	return int64(size) * int64(unsafe.Sizeof(delivery{}))
}

// join makes the member one of the feed's live subscribers: the caller
// holds feed.mu and has passed every record up to the feed's position. A
// closed subscription gets a queue, to read what is left of it, but joins
// nothing.
func (m *member) join(f *feed) {
	if m.queue == nil {
		m.queue = make(chan delivery, f.hub.cfg.QueueSize)
		if !m.lease.closed {
			m.queueBytes = QueueBytes(cap(m.queue))
			f.hub.memory.queues.Force(m.queueBytes)
		}
	}
	m.behind.Store(false)
	if !m.lease.closed {
		f.live.add(m)
	}
}

// offer queues d without waiting, and reports whether there was room.
func (m *member) offer(d delivery) bool {
	select {
	case m.queue <- d:
		return true
	default:
		return false
	}
}

// fellBehind takes note that the member's queue was full for the record
// after at: the caller has removed it from the live subscribers, and it
// catches up from at once it has passed its queue. The caller holds
// feed.mu.
func (m *member) fellBehind(at position) {
	m.behindAt = at
	m.behind.Store(true)
}

// leave gives back what the member's queue counts, for a closed
// subscription: the caller has removed it from the live subscribers, and
// holds feed.mu.
func (m *member) leave(f *feed) {
	f.hub.memory.queues.Force(-m.queueBytes)
	m.queueBytes = 0
}
