package informerhub

import (
	"testing"

	"github.com/informerhub/informerhub/informerhub/budget"
)

// TestADeliveryQueueHoldsWhatWaits: a queue holds memory for the
// deliveries waiting, counted in its budget, not for its bound: it grows
// as they wait, up to the bound, keeps their order, refuses one more at the
// bound, and gives its room back once its reader has taken them.
func TestADeliveryQueueHoldsWhatWaits(t *testing.T) {
	bytes := budget.Counter(nil)
	wake := make(chan struct{}, 1)
	q := newDeliveryQueue(bytes, wake)
	if bytes.Used() != 0 {
		t.Fatalf("a new queue counts %d bytes, want 0", bytes.Used())
	}
	const limit = 100
	recs := make([]*record, limit)
	for i := range recs {
		recs[i] = &record{}
		if n := q.push(delivery{rec: recs[i]}, limit); n != i+1 {
			t.Fatalf("push %d: %d waiting, want %d", i, n, i+1)
		}
		if i == 0 {
			select {
			case <-wake:
			default:
				t.Fatal("the first delivery woke no reader")
			}
		}
	}
	if n := q.push(delivery{rec: &record{}}, limit); n != 0 {
		t.Fatalf("a push past the bound: %d waiting, want it refused", n)
	}
	if got, want := bytes.Used(), int64(limit)*deliverySize; got != want {
		t.Fatalf("a full queue of %d counts %d bytes, want %d", limit, got, want)
	}
	select {
	case <-wake:
		t.Fatal("deliveries after the first woke the reader again")
	default:
	}
	// Taken half, then pushed again: the ring wraps and keeps the order.
	for i := range limit / 2 {
		if d, ok := q.pop(); !ok || d.rec != recs[i] {
			t.Fatalf("pop %d: not the %dth delivery", i, i)
		}
	}
	for i := range limit / 2 {
		recs = append(recs, &record{})
		q.push(delivery{rec: recs[limit+i]}, limit)
	}
	for i := limit / 2; i < len(recs); i++ {
		if d, ok := q.pop(); !ok || d.rec != recs[i] {
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
