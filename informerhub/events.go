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
	"github.com/informerhub/informerhub/informerhub/internal/selection"
	"github.com/informerhub/informerhub/informerhub/internal/state"
	"github.com/informerhub/informerhub/informerhub/internal/token"
	"github.com/informerhub/informerhub/informerhub/upstream"
)

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
func (m *eventMaker) token(t token.Token) string {
	t.Resource = m.resource
	return t.Encode()
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
func (m *eventMaker) ofRecord(r *state.Record, v state.Variant, vw *selection.View) *Event {
	if vw == selection.DefaultView {
		slot := &r.Events[v-1]
		counted := false
		slot.Once.Do(func() {
			slot.Event = m.build(r, v, vw)
			counted = slot.Event != nil && r.Built.Add(state.EventSize(slot.Event, r))
		})
		if counted {
			// Outside once: the subscribers waiting for this event do not
			// wait for the eviction too.
			m.memory.Reclaim()
		}
		return slot.Event
	}
	slot := r.ViewSlot(vw.Key(), v)
	if slot == nil {
		return m.build(r, v, vw)
	}
	return slot.Shared(r, func() *Event { return m.build(r, v, vw) })
}

// build makes the Event of a record for one variant in one view, or
// returns nil for a MODIFIED whose projection is the same before and after:
// the subscriber asked only for fields that did not change.
func (m *eventMaker) build(r *state.Record, v state.Variant, vw *selection.View) *Event {
	ev := &Event{ResumeToken: m.token(token.Token{Pos: r.Pos}), Encoding: vw.Encoding(), FromRelist: r.FromRelist}
	var err error
	switch v {
	case state.VariantOwn:
		ev.Type = r.Type
		ev.ResourceVersion = strconv.FormatUint(r.Object.RV, 10)
		if r.Type == EventDeleted {
			ev.ResourceVersion = strconv.FormatUint(r.RV, 10)
		}
		if r.Type == EventModified && vw.Projection() != nil {
			// Projected once each, the two states tell whether the change
			// is one of the paths asked for, and give the event its
			// objects.
			obj, errObj := m.project(vw, r.Object.JSON)
			prevObj, errPrev := m.project(vw, r.Previous.JSON)
			if err = cmp.Or(errObj, errPrev); err != nil {
				return m.failed(ev, r.Object, err)
			}
			if vw.Projection().SameAsked(state.UnsafeBytes(obj), state.UnsafeBytes(prevObj)) {
				return nil
			}
			ev.Object = obj
			if vw.IncludePrevious() {
				ev.PreviousObject = prevObj
			}
			return m.encoded(ev)
		}
		if ev.Object, err = m.project(vw, r.Object.JSON); err != nil {
			return m.failed(ev, r.Object, err)
		}
		if r.Type == EventModified && vw.IncludePrevious() {
			ev.PreviousObject = r.Previous.JSON // not projected: vw.proj is nil
		}
	case state.VariantEnter:
		ev.Type = EventAdded
		ev.ResourceVersion = strconv.FormatUint(r.Object.RV, 10)
		if ev.Object, err = m.project(vw, r.Object.JSON); err != nil {
			return m.failed(ev, r.Object, err)
		}
	case state.VariantLeave:
		// Like the Kubernetes watch cache: the last state that matched,
		// at the resourceVersion of the change that made it stop.
		ev.Type = EventDeleted
		ev.ResourceVersion = strconv.FormatUint(r.Object.RV, 10)
		last, err := m.project(vw, r.Previous.JSON)
		if err == nil {
			last, err = atVersion(last, ev.ResourceVersion)
		}
		if err != nil {
			return m.failed(ev, r.Previous, err)
		}
		ev.Object = last
	}
	return m.encoded(ev)
}

// failed makes ev the event that could not be made of o: Next ends its
// subscriber with err. Counted and logged once per event built, however
// many subscribers it ends.
func (m *eventMaker) failed(ev *Event, o *state.Object, err error) *Event {
	event.Fail(ev, &ObjectError{Resource: m.gvr, Namespace: o.Namespace, Name: o.Name, Err: err})
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
func (m *eventMaker) initial(o *state.Object, tok token.Token, vw *selection.View, undecided *selection.FilterError) *Event {
	tok.AfterNamespace, tok.AfterName = o.Namespace, o.Name
	ev := &Event{
		Type:            EventAdded,
		ResourceVersion: strconv.FormatUint(o.RV, 10),
		ResumeToken:     m.token(tok),
		Encoding:        vw.Encoding(),
	}
	var err error
	if ev.Object, err = m.project(vw, o.JSON); err != nil {
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
func (m *eventMaker) marked(ev *Event, undecided *selection.FilterError) *Event {
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
func (m *eventMaker) markedOf(r *state.Record, v state.Variant, vw *selection.View, ev *Event, undecided *selection.FilterError) *Event {
	if undecided == nil {
		return ev
	}
	entry := r.Marked.Load()
	if entry == nil {
		// The entry counts in the view budget as a view's slot does.
		if !r.Views.Add(state.ViewSlotSize) {
			return m.marked(ev, undecided)
		}
		if !r.Marked.CompareAndSwap(nil, &state.MarkedEvent{ViewKey: vw.Key(), Variant: v, Undecided: undecided}) {
			r.Views.Add(-state.ViewSlotSize) // another subscriber's is there
		}
		entry = r.Marked.Load()
	}
	// By the reason's text: a verdict evaluated again (fallen out of the
	// object's cache) is another *selection.FilterError saying the same.
	if entry.ViewKey != vw.Key() || entry.Variant != v || entry.Undecided.Reason != undecided.Reason {
		return m.marked(ev, undecided)
	}
	return entry.Slot.Shared(r, func() *Event { return m.marked(ev, undecided) })
}

// bookmark is a bookmark at pos.
func (m *eventMaker) bookmark(pos state.Position, initialEventsEnd bool, enc Encoding) *Event {
	return m.encoded(&Event{
		Type:             EventBookmark,
		ResourceVersion:  strconv.FormatUint(pos.RV, 10),
		ResumeToken:      m.token(token.Token{Pos: pos}),
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
func (m *eventMaker) project(vw *selection.View, obj string) (string, error) {
	if vw.Projection() == nil || obj == "" {
		return obj, nil
	}
	projected, err := vw.Projection().Apply(state.UnsafeBytes(obj))
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
