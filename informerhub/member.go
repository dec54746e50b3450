package informerhub

import (
	"sync/atomic"

	"github.com/informerhub/informerhub/informerhub/internal/state"
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
	// woken, when set, counts the member while its reader was woken for
	// deliveries it has not taken (see Woken); reader is the reader's
	// state for it (readerBusy, ...), which both sides change atomically.
	woken  *Woken
	reader atomic.Int32
	// behind is set when the queue was full for a record: the member is no
	// longer live, and has everything up to behindAt once it has passed
	// what its queue holds.
	behind   atomic.Bool
	behindAt state.Position
}

// join makes the member one of the feed's live subscribers: the caller
// holds feed.mu and has passed every record up to the feed's position. A
// closed subscription gets a queue, to read what is left of it, but joins
// nothing.
func (m *member) join(f *feed) {
	if m.queue == nil {
		m.queue, m.limit = newDeliveryQueue(f.hub.memory.Queues, m.lease.wake), f.hub.cfg.QueueSize
	}
	m.behind.Store(false)
	if !m.lease.closed {
		f.live.add(m)
	}
}

// offer queues d without waiting, and returns how many deliveries wait
// with it: 0 when there was no room. A reader waiting for its first is
// counted as woken; the caller wakes it (wake) once it has queued the
// change for every member.
func (m *member) offer(d state.Delivery) int {
	n := m.queue.push(d, m.limit)
	// Counted before the state says so: a reader that a stale wake-up let
	// take this delivery at once uncounts it only after.
	if n == 1 && m.woken != nil && m.reader.Load() == readerWaiting {
		m.woken.Add(1)
		if !m.reader.CompareAndSwap(readerWaiting, readerSignaled) {
			m.woken.uncount()
		}
	}
	return n
}

// wake wakes the member's reader for what offer queued.
func (m *member) wake() { poke(m.queue.ready) }

// waiting marks the reader as waiting for a delivery, before it waits;
// it uncounts the reader, should it still be counted from before (its
// transport did not say Handed).
func (m *member) waiting() {
	if m.woken == nil {
		return
	}
	if prev := m.reader.Swap(readerWaiting); prev == readerSignaled || prev == readerTaken {
		m.woken.uncount()
	}
}

// awake marks the reader as busy once it has woken (or given up waiting):
// if a delivery woke it, it stays counted until it has handed the event on
// (handed).
func (m *member) awake() {
	if m.woken != nil && !m.reader.CompareAndSwap(readerSignaled, readerTaken) {
		m.reader.CompareAndSwap(readerWaiting, readerBusy)
	}
}

// handed uncounts the reader, if it was counted: it has handed the event it
// took to its transport.
func (m *member) handed() {
	if m.woken == nil {
		return
	}
	if m.reader.CompareAndSwap(readerTaken, readerBusy) || m.reader.CompareAndSwap(readerSignaled, readerBusy) {
		m.woken.uncount()
	}
}

// fellBehind takes note that the member's queue was full for the record
// after at: the caller has removed it from the live subscribers, and it
// catches up from at once it has passed its queue. The caller holds
// feed.mu.
func (m *member) fellBehind(at state.Position) {
	m.behindAt = at
	m.behind.Store(true)
}

// leave gives back what the member's queue counts, for a closed
// subscription: the caller has removed it from the live subscribers, and
// holds feed.mu. It reports whether the reader was counted as woken: the
// caller uncounts it (woken.uncount) once it has let go of the lock, which
// the transport's OnZero is not called under.
func (m *member) leave() (counted bool) {
	if m.queue != nil {
		m.queue.release()
	}
	if m.woken == nil {
		return false
	}
	prev := m.reader.Swap(readerClosed)
	return prev == readerSignaled || prev == readerTaken
}
