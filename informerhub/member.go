package informerhub

import (
	"sync/atomic"
)

// member is a subscription as its feed's live dispatcher knows it: the
// queue the feed's handler fills without ever blocking, the group it is in
// while live, and where it fell behind when its queue was full. Its fields
// are guarded by its feed's mu, but for the queue, which has its own lock,
// and behind, which the subscription's reader checks without the lock.
type member struct {
	lease *lease
	queue *deliveryQueue // made when it first goes live
	// limit is Config.QueueSize: the deliveries the queue may hold.
	limit int
	group *subscriberGroup // while live (dispatch.go)
	// behind is set when the queue was full for a record: the member is no
	// longer live, and has everything up to behindAt once it has passed
	// what its queue holds.
	behind   atomic.Bool
	behindAt position
}

// join makes the member one of the feed's live subscribers: the caller
// holds feed.mu and has passed every record up to the feed's position. A
// closed subscription gets a queue, to read what is left of it, but joins
// nothing.
func (m *member) join(f *feed) {
	if m.queue == nil {
		m.queue, m.limit = newDeliveryQueue(f.hub.memory.queues, m.lease.wake), f.hub.cfg.QueueSize
	}
	m.behind.Store(false)
	if !m.lease.closed {
		f.live.add(m)
	}
}

// offer queues d without waiting, and returns how many deliveries wait
// with it: 0 when there was no room.
func (m *member) offer(d delivery) int { return m.queue.push(d, m.limit) }

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
func (m *member) leave() {
	if m.queue != nil {
		m.queue.release()
	}
}
