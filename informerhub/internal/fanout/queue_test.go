package fanout

import (
	"testing"

	"github.com/informerhub/informerhub/informerhub/budget"
	"github.com/informerhub/informerhub/informerhub/internal/state"
)

// TestADeliveryQueueHoldsWhatWaits: a queue holds memory for the
// deliveries waiting, counted in its budget, not for its bound: it grows
// as they wait, up to the bound, keeps their order, refuses one more at the
// bound, and gives its room back once its reader has taken them.
func TestADeliveryQueueHoldsWhatWaits(t *testing.T) {
	bytes := budget.Counter(nil)
	q := newDeliveryQueue(bytes, make(chan struct{}, 1))
	if bytes.Used() != 0 {
		t.Fatalf("a new queue counts %d bytes, want 0", bytes.Used())
	}
	const limit = 100
	recs := make([]*state.Record, limit)
	for i := range recs {
		recs[i] = &state.Record{}
		if n := q.push(state.Delivery{Record: recs[i]}, limit); n != i+1 {
			t.Fatalf("push %d: %d waiting, want %d", i, n, i+1)
		}
	}
	if n := q.push(state.Delivery{Record: &state.Record{}}, limit); n != 0 {
		t.Fatalf("a push past the bound: %d waiting, want it refused", n)
	}
	if got, want := bytes.Used(), int64(limit)*deliverySize; got != want {
		t.Fatalf("a full queue of %d counts %d bytes, want %d", limit, got, want)
	}
	// Taken half, then pushed again: the ring wraps and keeps the order.
	for i := range limit / 2 {
		if d, ok := q.pop(); !ok || d.Record != recs[i] {
			t.Fatalf("pop %d: not the %dth delivery", i, i)
		}
	}
	for i := range limit / 2 {
		recs = append(recs, &state.Record{})
		q.push(state.Delivery{Record: recs[limit+i]}, limit)
	}
	for i := limit / 2; i < len(recs); i++ {
		if d, ok := q.pop(); !ok || d.Record != recs[i] {
			t.Fatalf("pop after wrapping: not the %dth delivery", i)
		}
	}
	if _, ok := q.pop(); ok {
		t.Fatal("an empty queue gave a delivery")
	}
	if got, want := bytes.Used(), int64(minRingSize)*deliverySize; got != want {
		t.Fatalf("an emptied queue counts %d bytes, want %d (its smallest ring)", got, want)
	}
	q.release()
	if bytes.Used() != 0 {
		t.Fatalf("a released queue counts %d bytes, want 0", bytes.Used())
	}
}

// TestWokenCountsReadersWokenAndNotYetHandedOn: a member is counted when
// a delivery comes for a reader waiting for one, once however many come
// before it wakes, and uncounted once it has handed the event on, or comes
// back to wait, or its subscription closes; a reader busy elsewhere (a
// send blocked on its client) is never counted, so it holds no
// connection's writes back.
func TestWokenCountsReadersWokenAndNotYetHandedOn(t *testing.T) {
	var woken Woken
	zeros := 0
	woken.OnZero = func() { zeros++ }
	newMember := func() *Member {
		m := &Member{woken: &woken, limit: 10}
		m.queue = newDeliveryQueue(budget.Counter(nil), make(chan struct{}, 1))
		return m
	}
	a, b, c := newMember(), newMember(), newMember()
	a.Reader().Waiting()
	b.Reader().Waiting()
	c.Reader().Waiting()
	a.offer(state.Delivery{})
	a.offer(state.Delivery{}) // before a wakes: still one reader woken
	b.offer(state.Delivery{})
	c.offer(state.Delivery{})
	if n := woken.Load(); n != 3 {
		t.Fatalf("three waiting readers given deliveries: %d woken, want 3", n)
	}
	a.Reader().Awake()
	if n := woken.Load(); n != 3 {
		t.Fatalf("one awake, its event not handed on yet: %d woken, want 3", n)
	}
	a.Reader().Handed()
	a.Reader().Handed() // once
	if n := woken.Load(); n != 2 {
		t.Fatalf("one handed its event on: %d woken, want 2", n)
	}
	a.offer(state.Delivery{}) // a is busy (sending): not counted
	if n := woken.Load(); n != 2 {
		t.Fatalf("a delivery for a busy reader: %d woken, want 2", n)
	}
	b.Reader().Awake()
	b.Reader().Waiting() // back to wait without handing anything on (nothing to send)
	if n := woken.Load(); n != 1 {
		t.Fatalf("one back to wait: %d woken, want 1", n)
	}
	if c.Leave() { // closed before it woke
		c.woken.uncount()
	}
	c.Reader().Awake()
	c.Reader().Handed()
	if n := woken.Load(); n != 0 || zeros != 1 {
		t.Fatalf("the last closed: %d woken, OnZero called %d times; want 0, once", n, zeros)
	}
}
