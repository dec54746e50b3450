package fanout

import "sync/atomic"

// Woken counts, of the subscriptions that share it (WatchRequest.Woken),
// those whose readers their feed has woken for deliveries and that have not
// yet handed the events to their transport. A transport that sends the
// events of many subscriptions over one connection shares one among them,
// and holds the connection's writes while it is above zero: the events of
// one change to all of them then leave in one write, not one each (package
// server/cork).
//
// A feed counts a subscription when it queues a delivery for a reader
// waiting in Next, before it wakes any of the change's readers; the
// subscription is uncounted when its transport says it has taken the event
// Next returned (Subscription.Handed: it has encoded it, and is about to
// write it), or else when its reader comes back to Next, or when it closes.
// A reader busy elsewhere (in a send blocked on a client that stopped
// reading, say) is never counted, so it holds nothing back. The transport
// only reads it (Load).
type Woken struct {
	atomic.Int64
	// OnZero, when set, is called when the count falls to zero: the
	// readers woken have all handed their events on. It runs in a reader's
	// goroutine (never under a feed's lock) and must not block. Set it
	// before the Woken is used.
	OnZero func()
}

// uncount takes one reader off the count.
func (w *Woken) uncount() {
	if w.Add(-1) == 0 && w.OnZero != nil {
		w.OnZero()
	}
}

// The states of a member's reader, for its Woken.
const (
	readerBusy     int32 = iota // not waiting in Next, and not counted
	readerWaiting               // waiting in Next, or about to
	readerSignaled              // a delivery came while it waited: counted
	readerTaken                 // woken by one, it took it: counted until Handed
	readerClosed                // the subscription closed
)
