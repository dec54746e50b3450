package informerhub

import (
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/informerhub/informerhub/informerhub/budget"
)

// variant is how one subscriber sees a record; see selector.variant.
type variant uint8

const (
	variantNone  variant = iota
	variantOwn           // the record's own type and object
	variantEnter         // ADDED: a modified object that started to match
	variantLeave         // DELETED: a modified object that stopped matching, in its previous state
)

// record is one change in a feed's history. Records are immutable once
// appended, except for their lazily built events.
type record struct {
	pos position // the position right after this record
	// rv is the resourceVersion of the change, which orders records for
	// resuming by resourceVersion: the event's own, or for a change found by
	// a relist, the list's.
	rv  uint64
	typ EventType // EventAdded, EventModified or EventDeleted
	// received is when the hub took the change (Unix nanoseconds), for
	// the age of the history window (Hub.Stats).
	received int64
	// fromRelist is set on the differences a relist found: the changes
	// in between are unknown (Event.FromRelist).
	fromRelist bool
	obj        *object // the new state; for EventDeleted, the final state
	prev       *object // the state before; nil for EventAdded

	// events holds the Event of each variant (index variant-1) in the
	// default view (whole objects, no previous state, encoding 0), built by
	// the first subscriber that needs it and shared with the rest.
	events [3]eventSlot
	// viewEvents holds the Events of other views the same way (see
	// eventMaker.ofRecord): an immutable slice, replaced whole to add one, so that
	// subscribers find theirs without a lock.
	viewEvents atomic.Pointer[[]viewEvent]
	// marked is the first event of the record marked for subscribers whose
	// filter could not decide on its object (see eventMaker.markedOf).
	marked atomic.Pointer[markedEvent]
	// views is the record's share of the history's viewBytes, for the
	// events kept in viewEvents and marked, and built its share of the history's
	// events, for those of events, while the record is in the history.
	views, built budget.Share
	// counted is what the record counts of the history's recordBytes: its
	// own size and the objects that left the state with it (see
	// history.count). Set before the record is published.
	counted int64
}

// eventSlot is an Event built once. A nil ev after once means the record
// has nothing to send in the slot's view: a MODIFIED none of whose projected
// fields changed. kept says whether ev is kept for every subscriber (always
// in the default view; in others while the history's budget has room).
type eventSlot struct {
	once sync.Once
	ev   *Event
	kept bool
}

// markedEvent is the event of a record in a variant and view (by key, as
// viewEvent) as sent to the subscribers of a filter that could not decide
// on its object (undecided), built once in slot.
type markedEvent struct {
	viewKey   string
	variant   variant
	undecided *filterError
	slot      eventSlot
}

type viewEvent struct {
	viewKey string
	variant variant
	slot    *eventSlot
}

// viewSlotSize approximates what one view's slot costs a record: its
// entry in viewEvents, the slot, and the copy of the slice adding it makes.
const viewSlotSize = 96

// viewSlot returns the record's slot of a variant in a view, adding it on
// first use; nil when the record's share of the history's view budget has
// no room for one more (each slot counts there, so that callers asking for
// ever new views cannot grow every record without bound): the caller then
// builds the event for itself.
func (r *record) viewSlot(vw *view, v variant) *eventSlot {
	for {
		current := r.viewEvents.Load()
		if current != nil {
			for _, e := range *current {
				// By key: a view is interned while in use, and a
				// subscriber of the same form after it was released gets
				// a new one.
				if e.viewKey == vw.key && e.variant == v {
					return e.slot
				}
			}
		}
		if !r.views.Add(viewSlotSize) {
			return nil
		}
		var next []viewEvent
		if current != nil {
			next = append(make([]viewEvent, 0, len(*current)+1), *current...)
		}
		slot := &eventSlot{}
		next = append(next, viewEvent{viewKey: vw.key, variant: v, slot: slot})
		if r.viewEvents.CompareAndSwap(current, &next) {
			return slot
		}
		r.views.Add(-viewSlotSize)
	}
}

// eventSize approximates what an event holds besides its record's objects,
// which its strings share when it is not projected: its own strings, its
// encoding, and the rest.
func eventSize(ev *Event, r *record) int64 {
	n := len(ev.ResumeToken) + len(ev.ResourceVersion) + eventOverhead
	for _, obj := range [2]string{ev.Object, ev.PreviousObject} {
		if !r.shares(obj) {
			n += len(obj)
		}
	}
	if enc := ev.Encoded(); enc != nil {
		n += enc.Len()
	}
	return int64(n)
}

// eventOverhead is what an Event costs besides its strings and encoding.
const eventOverhead = 160

// shares reports whether s is the JSON of one of the record's objects, not
// a copy: an event holding it adds nothing to the record.
func (r *record) shares(s string) bool {
	if s == "" {
		return true
	}
	same := func(o *object) bool {
		return o != nil && len(o.json) == len(s) && unsafe.StringData(o.json) == unsafe.StringData(s)
	}
	return same(r.obj) || same(r.prev)
}

// delivery is a record queued for a live subscriber, with how it sees it.
// Its variant may carry undecidedFlag: the subscriber's filter could not
// decide on a state of the record, and the subscriber looks up why (the
// verdict is cached on the object). A flag rather than a field keeps every
// queue's slots at two words.
type delivery struct {
	rec     *record
	variant variant
}

// undecidedFlag marks a delivery's variant; see delivery.
const undecidedFlag variant = 1 << 7
