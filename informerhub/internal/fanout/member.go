package fanout

import (
	"sync/atomic"

	"github.com/informerhub/informerhub/informerhub/budget"
	"github.com/informerhub/informerhub/informerhub/internal/selection"
	"github.com/informerhub/informerhub/informerhub/internal/state"
)

// Member is a subscription as its feed's live dispatcher knows it: the
// queue the feed's handler fills without ever blocking, the group it is in
// while live, and where it fell behind when its queue was full. Its fields
// are guarded by its feed's mu, but for the queue, which has its own lock,
// and behind, which the subscription's reader checks without the lock.
type Member struct {
	sel *selection.Selector // its subscription's, for its group
	sub Subscriber
	// ready is its reader's wake-up, which the queue pokes.
	ready chan struct{}
	queue *deliveryQueue // made when it first goes live
	// limit is Config.QueueSize: the deliveries the queue may hold.
	limit int
	group *Group // while live (dispatch.go)
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

// Subscriber is a member's subscription, as the dispatcher ends it.
type Subscriber interface {
	// Fail ends the subscription with err, unless it has ended. The
	// caller holds the feed's lock.
	Fail(err error)
}

// Init makes m the member of a subscription of sel, which sub fails, and
// whose reader waits on ready; woken, when set, is its connection's.
func (m *Member) Init(sel *selection.Selector, sub Subscriber, ready chan struct{}, woken *Woken) {
	m.sel, m.sub, m.ready, m.woken = sel, sub, ready, woken
}

// Join makes the member one of d's live subscribers, with a queue of at
// most limit deliveries counted in queues: the caller holds the feed's
// lock and has passed every record up to the feed's position. A closed
// subscription gets a queue, to read what is left of it, but joins
// nothing.
func (m *Member) Join(d *Dispatcher, queues *budget.Bytes, limit int, closed bool) {
	if m.queue == nil {
		m.queue, m.limit = newDeliveryQueue(queues, m.ready), limit
	}
	m.behind.Store(false)
	if !closed {
		d.add(m)
	}
}

// Reader is a member's reader's side, what its subscription does without
// the feed's lock: take its deliveries, and say where its reader is for its
// connection's Woken. A type apart from Member, whose other methods the
// feed calls under its lock, so that a reader cannot reach them.
type Reader struct{ m *Member }

// Reader returns the member's reader's side.
func (m *Member) Reader() Reader { return Reader{m} }

// Pop takes the oldest delivery queued for the member, if one waits.
func (r Reader) Pop() (state.Delivery, bool) { return r.m.queue.pop() }

// Pending counts the deliveries queued for the member.
func (r Reader) Pending() int { return r.m.queue.len() }

// IsBehind reports whether the member's queue was full for a record: it
// is no longer live, and catches up from fellBehindAt once it has passed
// what its queue holds.
func (r Reader) IsBehind() bool { return r.m.behind.Load() }

// FellBehindAt is where the member fell behind. The caller holds the
// feed's lock.
func (m *Member) FellBehindAt() state.Position { return m.behindAt }

// UncountWoken takes the member's reader off its Woken, after leave
// reported it counted, once the caller has let go of the feed's lock.
func (m *Member) UncountWoken() { m.woken.uncount() }

// offer queues d without waiting, and returns how many deliveries wait
// with it: 0 when there was no room. A reader waiting for its first is
// counted as woken; the caller wakes it (wake) once it has queued the
// change for every member.
func (m *Member) offer(d state.Delivery) int {
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
func (m *Member) wake() { signal(m.queue.ready) }

// Wake wakes the member's reader, as a delivery does: its subscription
// failed.
func (m *Member) Wake() { signal(m.ready) }

// signal wakes whoever waits on ch, if nobody has yet.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Waiting marks the reader as waiting for a delivery, before it waits;
// it uncounts the reader, should it still be counted from before (its
// transport did not say Handed).
func (r Reader) Waiting() {
	if r.m.woken == nil {
		return
	}
	if prev := r.m.reader.Swap(readerWaiting); prev == readerSignaled || prev == readerTaken {
		r.m.woken.uncount()
	}
}

// Awake marks the reader as busy once it has woken (or given up waiting):
// if a delivery woke it, it stays counted until it has handed the event on
// (handed).
func (r Reader) Awake() {
	if r.m.woken != nil && !r.m.reader.CompareAndSwap(readerSignaled, readerTaken) {
		r.m.reader.CompareAndSwap(readerWaiting, readerBusy)
	}
}

// Handed uncounts the reader, if it was counted: it has handed the event it
// took to its transport.
func (r Reader) Handed() {
	if r.m.woken == nil {
		return
	}
	if r.m.reader.CompareAndSwap(readerTaken, readerBusy) || r.m.reader.CompareAndSwap(readerSignaled, readerBusy) {
		r.m.woken.uncount()
	}
}

// fellBehind takes note that the member's queue was full for the record
// after at: the caller has removed it from the live subscribers, and it
// catches up from at once it has passed its queue. The caller holds
// feed.mu.
func (m *Member) fellBehind(at state.Position) {
	m.behindAt = at
	m.behind.Store(true)
}

// Leave gives back what the member's queue counts, for a closed
// subscription: the caller has removed it from the live subscribers, and
// holds feed.mu. It reports whether the reader was counted as woken: the
// caller uncounts it (woken.uncount) once it has let go of the lock, which
// the transport's OnZero is not called under.
func (m *Member) Leave() (counted bool) {
	if m.queue != nil {
		m.queue.release()
	}
	if m.woken == nil {
		return false
	}
	prev := m.reader.Swap(readerClosed)
	return prev == readerSignaled || prev == readerTaken
}
