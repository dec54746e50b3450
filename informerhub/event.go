package informerhub

import (
	"cmp"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/informerhub/informerhub/informerhub/internal/event"
	"github.com/informerhub/informerhub/informerhub/internal/memory"
	"github.com/informerhub/informerhub/informerhub/upstream"
)

// The events a subscription returns are defined in package
// internal/event, beneath the records that share them (a record builds
// each of its events once, for every subscriber of the same form); these
// are their names here.

// EventType says what an Event reports.
type EventType = event.Type

const (
	EventAdded    = event.Added
	EventModified = event.Modified
	EventDeleted  = event.Deleted
	EventBookmark = event.Bookmark
)

// Event is one response of a subscription; see event.Event. Events of
// changes are shared by every subscriber that receives them in the same
// form (projection, previous state, encoding): never modify one.
type Event = event.Event

// Encoded is what a transport's Config.EncodeEvent makes of an event; see
// event.Encoded.
type Encoded = event.Encoded

// Encoding is a form a transport sends events in; see event.Encoding.
type Encoding = event.Encoding

// MaxEncodings bounds the encodings a transport may use.
const MaxEncodings = event.MaxEncodings

// encodingUnsent is the encoding of the hub's own subscriptions, whose
// events go to no transport (a Count's counter): nothing encodes them.
const encodingUnsent = event.Unsent

// eventMaker makes a feed's events: those of its records, once per variant
// and view, shared by every subscriber of that view (see view); and those
// that are no record's, each subscription's own: initial events, bookmarks,
// a replay's changes. It is immutable.
type eventMaker struct {
	resource string // the resource type as tokens name it
	gvr      schema.GroupVersionResource
	encode   func(*Event) Encoded // Config.EncodeEvent; nil: none
	memory   *memory.Account      // what events of records count in
	failures *atomic.Uint64       // counts the events that could not be made
	log      *slog.Logger
}

// token encodes a token of the feed's resource type.
func (m *eventMaker) token(t token) string {
	t.resource = m.resource
	return t.encode()
}

// ofRecord returns the shared Event of a record for one variant in one
// view, building it on first use; nil when the record has nothing for that
// view (see build).
//
// The events of other views than the default one, and each view's slot on
// the record (record.viewSlot), count against a budget of as many bytes as
// the history's records may hold (history.viewBytes) while their record is
// in it, and are kept only while they fit: past that, each subscriber of
// the view builds its own, which costs it CPU but nobody memory.
func (m *eventMaker) ofRecord(r *record, v variant, vw *view) *Event {
	if vw == defaultView {
		slot := &r.events[v-1]
		counted := false
		slot.once.Do(func() {
			slot.ev = m.build(r, v, vw)
			counted = slot.ev != nil && r.built.Add(eventSize(slot.ev, r))
		})
		if counted {
			// Outside once: the subscribers waiting for this event do not
			// wait for the eviction too.
			m.memory.Reclaim()
		}
		return slot.ev
	}
	slot := r.viewSlot(vw, v)
	if slot == nil {
		return m.build(r, v, vw)
	}
	return slot.shared(r, func() *Event { return m.build(r, v, vw) })
}

// shared returns the slot's event, which build makes once and the slot
// keeps for every subscriber while r's share of the history's view budget
// has room for it; past that, each subscriber builds its own.
func (slot *eventSlot) shared(r *record, build func() *Event) *Event {
	var built *Event
	fresh := false
	slot.once.Do(func() {
		built, fresh = build(), true
		if built == nil || r.views.Add(eventSize(built, r)) {
			slot.ev, slot.kept = built, true
		}
	})
	switch {
	case fresh:
		return built
	case slot.kept:
		return slot.ev
	}
	return build()
}

// build makes the Event of a record for one variant in one view, or
// returns nil for a MODIFIED whose projection is the same before and after:
// the subscriber asked only for fields that did not change.
func (m *eventMaker) build(r *record, v variant, vw *view) *Event {
	ev := &Event{ResumeToken: m.token(token{pos: r.pos}), Encoding: vw.encoding, FromRelist: r.fromRelist}
	var err error
	switch v {
	case variantOwn:
		ev.Type = r.typ
		ev.ResourceVersion = strconv.FormatUint(r.obj.rv, 10)
		if r.typ == EventDeleted {
			ev.ResourceVersion = strconv.FormatUint(r.rv, 10)
		}
		if r.typ == EventModified && vw.proj != nil {
			// Projected once each, the two states tell whether the change
			// is one of the paths asked for, and give the event its
			// objects.
			obj, errObj := m.project(vw, r.obj.json)
			prevObj, errPrev := m.project(vw, r.prev.json)
			if err = cmp.Or(errObj, errPrev); err != nil {
				return m.failed(ev, r.obj, err)
			}
			if vw.proj.SameAsked(unsafeBytes(obj), unsafeBytes(prevObj)) {
				return nil
			}
			ev.Object = obj
			if vw.includePrevious {
				ev.PreviousObject = prevObj
			}
			return m.encoded(ev)
		}
		if ev.Object, err = m.project(vw, r.obj.json); err != nil {
			return m.failed(ev, r.obj, err)
		}
		if r.typ == EventModified && vw.includePrevious {
			ev.PreviousObject = r.prev.json // not projected: vw.proj is nil
		}
	case variantEnter:
		ev.Type = EventAdded
		ev.ResourceVersion = strconv.FormatUint(r.obj.rv, 10)
		if ev.Object, err = m.project(vw, r.obj.json); err != nil {
			return m.failed(ev, r.obj, err)
		}
	case variantLeave:
		// Like the Kubernetes watch cache: the last state that matched,
		// at the resourceVersion of the change that made it stop.
		ev.Type = EventDeleted
		ev.ResourceVersion = strconv.FormatUint(r.obj.rv, 10)
		last, err := m.project(vw, r.prev.json)
		if err == nil {
			last, err = atVersion(last, ev.ResourceVersion)
		}
		if err != nil {
			return m.failed(ev, r.prev, err)
		}
		ev.Object = last
	}
	return m.encoded(ev)
}

// failed makes ev the event that could not be made of o: Next ends its
// subscriber with err. Counted and logged once per event built, however
// many subscribers it ends.
func (m *eventMaker) failed(ev *Event, o *object, err error) *Event {
	event.Fail(ev, &ObjectError{Resource: m.gvr, Namespace: o.namespace, Name: o.name, Err: err})
	ev.Object, ev.PreviousObject = "", ""
	if m.failures != nil {
		m.failures.Add(1)
	}
	m.log.Error("cannot make an event of an object; ending the calls that ask for it", "error", event.Failure(ev))
	return ev
}

// initial is the ADDED of an object of a subscription's initial events:
// tok is where they started, and how far they got is o. undecided, when
// set, is why the filter could not decide on o.
func (m *eventMaker) initial(o *object, tok token, vw *view, undecided *filterError) *Event {
	tok.afterNamespace, tok.afterName = o.namespace, o.name
	ev := &Event{
		Type:            EventAdded,
		ResourceVersion: strconv.FormatUint(o.rv, 10),
		ResumeToken:     m.token(tok),
		Encoding:        vw.encoding,
	}
	var err error
	if ev.Object, err = m.project(vw, o.json); err != nil {
		return m.failed(ev, o, err)
	}
	if undecided != nil {
		ev.FilterError = undecided.Reason
	}
	return m.encoded(ev)
}

// marked returns ev as sent to a subscriber whose filter could not decide
// on its object (undecided): a copy that says why, encoded apart. Without
// undecided, ev itself.
func (m *eventMaker) marked(ev *Event, undecided *filterError) *Event {
	if undecided == nil {
		return ev
	}
	cp := *ev
	cp.FilterError = undecided.Reason
	return m.encoded(&cp)
}

// markedOf is marked for ev, the event of r in variant v and view vw: the
// first marked event made of r is built once and kept on r (within the
// history's view budget, as events of other views are), so that the
// subscribers of a filter that cannot decide on r's object share it,
// encoded once per change. Other marked events of r (another form, or a
// filter that fails with another reason on the same change) are each
// subscriber's, as all were before: one per record keeps what a record
// holds fixed.
func (m *eventMaker) markedOf(r *record, v variant, vw *view, ev *Event, undecided *filterError) *Event {
	if undecided == nil {
		return ev
	}
	entry := r.marked.Load()
	if entry == nil {
		// The entry counts in the view budget as a view's slot does.
		if !r.views.Add(viewSlotSize) {
			return m.marked(ev, undecided)
		}
		if !r.marked.CompareAndSwap(nil, &markedEvent{viewKey: vw.key, variant: v, undecided: undecided}) {
			r.views.Add(-viewSlotSize) // another subscriber's is there
		}
		entry = r.marked.Load()
	}
	// By the reason's text: a verdict evaluated again (fallen out of the
	// object's cache) is another *filterError saying the same.
	if entry.viewKey != vw.key || entry.variant != v || entry.undecided.Reason != undecided.Reason {
		return m.marked(ev, undecided)
	}
	return entry.slot.shared(r, func() *Event { return m.marked(ev, undecided) })
}

// bookmark is a bookmark at pos.
func (m *eventMaker) bookmark(pos position, initialEventsEnd bool, enc Encoding) *Event {
	return m.encoded(&Event{
		Type:             EventBookmark,
		ResourceVersion:  strconv.FormatUint(pos.rv, 10),
		ResumeToken:      m.token(token{pos: pos}),
		InitialEventsEnd: initialEventsEnd,
		Encoding:         enc,
	})
}

// encoded encodes ev for its transport (Config.EncodeEvent), and returns
// it.
func (m *eventMaker) encoded(ev *Event) *Event {
	if m.encode != nil && ev.Encoding != encodingUnsent {
		event.SetEncoded(ev, m.encode(ev))
	}
	return ev
}

// project applies a view's projection to an object's JSON.
func (m *eventMaker) project(vw *view, obj string) (string, error) {
	if vw.proj == nil || obj == "" {
		return obj, nil
	}
	projected, err := vw.proj.Apply(unsafeBytes(obj))
	if err != nil {
		return "", fmt.Errorf("projecting it: %w", err)
	}
	return string(projected), nil
}

// atVersion returns an object's JSON with its metadata.resourceVersion set
// to rv, for the DELETED of an object that left a selection.
func atVersion(obj, rv string) (string, error) {
	patched, err := upstream.RewriteMetadata([]byte(obj), func(m map[string]any) { m["resourceVersion"] = rv })
	if err != nil {
		return "", fmt.Errorf("setting its resourceVersion: %w", err)
	}
	return string(patched), nil
}
