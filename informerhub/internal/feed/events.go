package feed

import (
	"cmp"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/informerhub/informerhub/informerhub/internal/errs"
	"github.com/informerhub/informerhub/informerhub/internal/event"
	"github.com/informerhub/informerhub/informerhub/internal/memory"
	"github.com/informerhub/informerhub/informerhub/internal/selection"
	"github.com/informerhub/informerhub/informerhub/internal/state"
	"github.com/informerhub/informerhub/informerhub/internal/token"
	"github.com/informerhub/informerhub/informerhub/upstream"
)

// Events makes a feed's events: those of its records, once per variant
// and view, shared by every subscriber of that view (see view); and those
// that are no record's, each subscription's own: initial events, bookmarks,
// a replay's changes. It is immutable.
type Events struct {
	resource string // the resource type as tokens name it
	gvr      schema.GroupVersionResource
	encode   func(*event.Event) event.Encoded // Config.EncodeEvent; nil: none
	memory   *memory.Account                  // what events of records count in
	failures *atomic.Uint64                   // counts the events that could not be made
	log      *slog.Logger
}

// Token encodes a token of the feed's resource type.
func (m *Events) Token(t token.Token) string {
	t.Resource = m.resource
	return t.Encode()
}

// OfRecord returns the shared Event of a record for one variant in one
// view, building it on first use; nil when the record has nothing for that
// view (see build).
//
// The events of other views than the default one, and each view's slot on
// the record (record.viewSlot), count against a budget of as many bytes as
// the history's records may hold (history.viewBytes) while their record is
// in it, and are kept only while they fit: past that, each subscriber of
// the view builds its own, which costs it CPU but nobody memory.
func (m *Events) OfRecord(r *state.Record, v state.Variant, vw *selection.View) *event.Event {
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
	return slot.Shared(r, func() *event.Event { return m.build(r, v, vw) })
}

// build makes the Event of a record for one variant in one view, or
// returns nil for a MODIFIED whose projection is the same before and after:
// the subscriber asked only for fields that did not change.
func (m *Events) build(r *state.Record, v state.Variant, vw *selection.View) *event.Event {
	ev := &event.Event{ResumeToken: m.Token(token.Token{Pos: r.Pos}), Encoding: vw.Encoding(), FromRelist: r.FromRelist}
	var err error
	switch v {
	case state.VariantOwn:
		ev.Type = r.Type
		ev.ResourceVersion = strconv.FormatUint(r.Object.RV, 10)
		if r.Type == event.Deleted {
			ev.ResourceVersion = strconv.FormatUint(r.RV, 10)
		}
		if r.Type == event.Modified && vw.Projection() != nil {
			// Projected once each, the two states tell whether the change
			// is one of the paths asked for, and give the event its
			// objects.
			obj, errObj := m.Project(vw, r.Object.JSON)
			prevObj, errPrev := m.Project(vw, r.Previous.JSON)
			if err = cmp.Or(errObj, errPrev); err != nil {
				return m.Failed(ev, r.Object, err)
			}
			if vw.Projection().SameAsked(state.UnsafeBytes(obj), state.UnsafeBytes(prevObj)) {
				return nil
			}
			ev.Object = obj
			if vw.IncludePrevious() {
				ev.PreviousObject = prevObj
			}
			return m.Encoded(ev)
		}
		if ev.Object, err = m.Project(vw, r.Object.JSON); err != nil {
			return m.Failed(ev, r.Object, err)
		}
		if r.Type == event.Modified && vw.IncludePrevious() {
			ev.PreviousObject = r.Previous.JSON // not projected: vw.proj is nil
		}
	case state.VariantEnter:
		ev.Type = event.Added
		ev.ResourceVersion = strconv.FormatUint(r.Object.RV, 10)
		if ev.Object, err = m.Project(vw, r.Object.JSON); err != nil {
			return m.Failed(ev, r.Object, err)
		}
	case state.VariantLeave:
		// Like the Kubernetes watch cache: the last state that matched,
		// at the resourceVersion of the change that made it stop.
		ev.Type = event.Deleted
		ev.ResourceVersion = strconv.FormatUint(r.Object.RV, 10)
		last, err := m.Project(vw, r.Previous.JSON)
		if err == nil {
			last, err = AtVersion(last, ev.ResourceVersion)
		}
		if err != nil {
			return m.Failed(ev, r.Previous, err)
		}
		ev.Object = last
	}
	return m.Encoded(ev)
}

// Failed makes ev the event that could not be made of o: Next ends its
// subscriber with err. Counted and logged once per event built, however
// many subscribers it ends.
func (m *Events) Failed(ev *event.Event, o *state.Object, err error) *event.Event {
	event.Fail(ev, &errs.ObjectError{Resource: m.gvr, Namespace: o.Namespace, Name: o.Name, Err: err})
	ev.Object, ev.PreviousObject = "", ""
	if m.failures != nil {
		m.failures.Add(1)
	}
	m.log.Error("cannot make an event of an object; ending the calls that ask for it", "error", event.Failure(ev))
	return ev
}

// Initial is the ADDED of an object of a subscription's initial events:
// tok is where they started, and how far they got is o. undecided, when
// set, is why the filter could not decide on o.
func (m *Events) Initial(o *state.Object, tok token.Token, vw *selection.View, undecided *selection.FilterError) *event.Event {
	tok.AfterNamespace, tok.AfterName = o.Namespace, o.Name
	ev := &event.Event{
		Type:            event.Added,
		ResourceVersion: strconv.FormatUint(o.RV, 10),
		ResumeToken:     m.Token(tok),
		Encoding:        vw.Encoding(),
	}
	var err error
	if ev.Object, err = m.Project(vw, o.JSON); err != nil {
		return m.Failed(ev, o, err)
	}
	if undecided != nil {
		ev.FilterError = undecided.Reason
	}
	return m.Encoded(ev)
}

// marked returns ev as sent to a subscriber whose filter could not decide
// on its object (undecided): a copy that says why, encoded apart. Without
// undecided, ev itself.
func (m *Events) marked(ev *event.Event, undecided *selection.FilterError) *event.Event {
	if undecided == nil {
		return ev
	}
	cp := *ev
	cp.FilterError = undecided.Reason
	return m.Encoded(&cp)
}

// MarkedOf is marked for ev, the event of r in variant v and view vw: the
// first marked event made of r is built once and kept on r (within the
// history's view budget, as events of other views are), so that the
// subscribers of a filter that cannot decide on r's object share it,
// encoded once per change. Other marked events of r (another form, or a
// filter that fails with another reason on the same change) are each
// subscriber's, as all were before: one per record keeps what a record
// holds fixed.
func (m *Events) MarkedOf(r *state.Record, v state.Variant, vw *selection.View, ev *event.Event, undecided *selection.FilterError) *event.Event {
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
	return entry.Slot.Shared(r, func() *event.Event { return m.marked(ev, undecided) })
}

// Bookmark is a bookmark at pos.
func (m *Events) Bookmark(pos state.Position, initialEventsEnd bool, enc event.Encoding) *event.Event {
	return m.Encoded(&event.Event{
		Type:             event.Bookmark,
		ResourceVersion:  strconv.FormatUint(pos.RV, 10),
		ResumeToken:      m.Token(token.Token{Pos: pos}),
		InitialEventsEnd: initialEventsEnd,
		Encoding:         enc,
	})
}

// Encoded encodes ev for its transport (Config.EncodeEvent), and returns
// it.
func (m *Events) Encoded(ev *event.Event) *event.Event {
	if m.encode != nil && ev.Encoding != event.Unsent {
		event.SetEncoded(ev, m.encode(ev))
	}
	return ev
}

// Project applies a view's projection to an object's JSON.
func (m *Events) Project(vw *selection.View, obj string) (string, error) {
	if vw.Projection() == nil || obj == "" {
		return obj, nil
	}
	projected, err := vw.Projection().Apply(state.UnsafeBytes(obj))
	if err != nil {
		return "", fmt.Errorf("projecting it: %w", err)
	}
	return string(projected), nil
}

// AtVersion returns an object's JSON with its metadata.resourceVersion set
// to rv, for the DELETED of an object that left a selection.
func AtVersion(obj, rv string) (string, error) {
	patched, err := upstream.RewriteMetadata([]byte(obj), func(m map[string]any) { m["resourceVersion"] = rv })
	if err != nil {
		return "", fmt.Errorf("setting its resourceVersion: %w", err)
	}
	return string(patched), nil
}
