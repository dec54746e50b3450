package state

import (
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/informerhub/informerhub/informerhub/budget"
	"github.com/informerhub/informerhub/informerhub/celfilter"
	"github.com/informerhub/informerhub/informerhub/internal/event"
)

// Variant is how one subscriber sees a record; see the core's selection.Selector.Variant.
type Variant uint8

const (
	VariantNone  Variant = iota
	VariantOwn           // the record's own type and object
	VariantEnter         // ADDED: a modified object that started to match
	VariantLeave         // DELETED: a modified object that stopped matching, in its previous state
)

// Record is one change in a feed's history. Records are immutable once
// appended, except for their lazily built events.
type Record struct {
	Pos Position // the position right after this record
	// RV is the resourceVersion of the change, which orders records for
	// resuming by resourceVersion: the event's own, or for a change found by
	// a relist, the list's.
	RV   uint64
	Type event.Type // EventAdded, EventModified or EventDeleted
	// Received is when the hub took the change (Unix nanoseconds), for
	// the age of the history window (Hub.Stats).
	Received int64
	// FromRelist is set on the differences a relist found: the changes
	// in between are unknown (Event.FromRelist).
	FromRelist bool
	Object     *Object // the new state; for EventDeleted, the final state
	Previous   *Object // the state before; nil for EventAdded

	// Events holds the Event of each variant (index variant-1) in the
	// default view (whole objects, no previous state, encoding 0), built by
	// the first subscriber that needs it and shared with the rest.
	Events [3]EventSlot
	// ViewEvents holds the Events of other views the same way (see
	// feed.Events.OfRecord): an immutable slice, replaced whole to add one, so that
	// subscribers find theirs without a lock.
	ViewEvents atomic.Pointer[[]viewEvent]
	// Marked is the first event of the record marked for subscribers whose
	// filter could not decide on its object (see feed.Events.MarkedOf).
	Marked atomic.Pointer[MarkedEvent]
	// Views is the record's share of the history's viewBytes, for the
	// events kept in viewEvents and marked, and built its share of the history's
	// events, for those of events, while the record is in the history.
	Views, Built budget.Share
	// Counted is what the record counts of the history's recordBytes: its
	// own size and the objects that left the state with it (see
	// History.count). Set before the record is published.
	Counted int64
}

// EventSlot is an Event built once. A nil ev after once means the record
// has nothing to send in the slot's view: a MODIFIED none of whose projected
// fields changed. kept says whether ev is kept for every subscriber (always
// in the default view; in others while the history's budget has room).
type EventSlot struct {
	Once  sync.Once
	Event *event.Event
	Kept  bool
}

// MarkedEvent is the event of a record in a variant and view (by key, as
// viewEvent) as sent to the subscribers of a filter that could not decide
// on its object (undecided), built once in slot.
type MarkedEvent struct {
	ViewKey   string
	Variant   Variant
	Undecided *celfilter.Failure
	Slot      EventSlot
}

type viewEvent struct {
	viewKey string
	variant Variant
	slot    *EventSlot
}

// ViewSlotSize approximates what one view's slot costs a record: its
// entry in viewEvents, the slot, and the copy of the slice adding it makes.
const ViewSlotSize = 96

// ViewSlot returns the record's slot of a variant in a view, adding it on
// first use; nil when the record's share of the history's view budget has
// no room for one more (each slot counts there, so that callers asking for
// ever new views cannot grow every record without bound): the caller then
// builds the event for itself.
func (r *Record) ViewSlot(viewKey string, v Variant) *EventSlot {
	for {
		current := r.ViewEvents.Load()
		if current != nil {
			for _, e := range *current {
				// By key: a view is interned while in use, and a
				// subscriber of the same form after it was released gets
				// a new one.
				if e.viewKey == viewKey && e.variant == v {
					return e.slot
				}
			}
		}
		if !r.Views.Add(ViewSlotSize) {
			return nil
		}
		var next []viewEvent
		if current != nil {
			next = append(make([]viewEvent, 0, len(*current)+1), *current...)
		}
		slot := &EventSlot{}
		next = append(next, viewEvent{viewKey: viewKey, variant: v, slot: slot})
		if r.ViewEvents.CompareAndSwap(current, &next) {
			return slot
		}
		r.Views.Add(-ViewSlotSize)
	}
}

// Shared returns the slot's event, which build makes once and the slot
// keeps for every subscriber while r's share of the history's view budget
// has room for it; past that, each subscriber builds its own.
func (slot *EventSlot) Shared(r *Record, build func() *event.Event) *event.Event {
	var built *event.Event
	fresh := false
	slot.Once.Do(func() {
		built, fresh = build(), true
		if built == nil || r.Views.Add(EventSize(built, r)) {
			slot.Event, slot.Kept = built, true
		}
	})
	switch {
	case fresh:
		return built
	case slot.Kept:
		return slot.Event
	}
	return build()
}

// EventSize approximates what an event holds besides its record's objects,
// which its strings share when it is not projected: its own strings, its
// encoding, and the rest.
func EventSize(ev *event.Event, r *Record) int64 {
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
func (r *Record) shares(s string) bool {
	if s == "" {
		return true
	}
	same := func(o *Object) bool {
		return o != nil && len(o.JSON) == len(s) && unsafe.StringData(o.JSON) == unsafe.StringData(s)
	}
	return same(r.Object) || same(r.Previous)
}

// Delivery is a record queued for a live subscriber, with how it sees it.
// Its Variant may carry UndecidedFlag: the subscriber's filter could not
// decide on a state of the record, and the subscriber looks up why (the
// verdict is cached on the object). A flag rather than a field keeps every
// queue's slots at two words.
type Delivery struct {
	Record  *Record
	Variant Variant
}

// UndecidedFlag marks a delivery's variant; see delivery.
const UndecidedFlag Variant = 1 << 7
