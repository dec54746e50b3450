package informerhub

import (
	"strconv"
	"unsafe"

	"github.com/informerhub/informerhub/informerhub/projection"
	"github.com/informerhub/informerhub/informerhub/upstream"
)

// A view is the form in which a subscriber receives objects: whole or
// projected (projection.go), with or without the previous state on
// MODIFIED, in one of the transport's encodings. Views are interned per
// feed, so that subscribers that ask for the same form share one view, and
// each record's event in that view is built once for all of them
// (feed.event).
type view struct {
	key             string
	proj            *projection.Projection // nil: whole objects
	includePrevious bool
	encoding        Encoding
	refs            int // subscriptions using the view; guarded by feed.mu
}

// defaultView is the form of every subscriber that asks for nothing else.
// It is not interned: records keep its events apart, without a lock.
var defaultView = &view{}

func viewKey(proj *projection.Projection, includePrevious bool, enc Encoding) string {
	key := strconv.Itoa(int(enc))
	if includePrevious {
		key += "p"
	}
	if proj != nil {
		key += "\n" + proj.Key()
	}
	return key
}

// acquireViewLocked returns the feed's view of that form, interning it,
// and counts one more subscription on it. A new projection beyond
// Config.MaxProjectionsPerResource is refused. The caller holds f.mu, and
// pairs it with releaseViewLocked.
func (f *feed) acquireViewLocked(proj *projection.Projection, includePrevious bool, enc Encoding) (*view, error) {
	if proj == nil && !includePrevious && enc == 0 {
		return defaultView, nil
	}
	key := viewKey(proj, includePrevious, enc)
	v := f.views[key]
	if v == nil {
		if proj != nil && f.projections[proj.Key()] == 0 && len(f.projections) >= f.hub.cfg.MaxProjectionsPerResource {
			return nil, &LimitError{Resource: f.info.Resource, Limit: LimitProjections, Max: f.hub.cfg.MaxProjectionsPerResource}
		}
		v = &view{key: key, proj: proj, includePrevious: includePrevious, encoding: enc}
		f.views[key] = v
	}
	if v.refs == 0 && proj != nil {
		f.projections[proj.Key()]++
	}
	v.refs++
	return v, nil
}

func (f *feed) releaseViewLocked(v *view) {
	if v == defaultView {
		return
	}
	if v.refs--; v.refs > 0 {
		return
	}
	delete(f.views, v.key)
	if v.proj != nil {
		if f.projections[v.proj.Key()]--; f.projections[v.proj.Key()] == 0 {
			delete(f.projections, v.proj.Key())
		}
	}
}

// event returns the shared Event of a record for one variant in one view,
// building it on first use; nil when the record has nothing for that view
// (see buildEvent).
//
// The events of other views than the default one count against a budget of
// as many bytes as the history's records may hold (history.viewBytes) while
// their record is in it, and are kept only while they fit: past that, each
// subscriber of the view builds its own, which costs it CPU but nobody
// memory.
func (f *feed) event(r *record, v variant, vw *view) *Event {
	if vw == defaultView {
		slot := &r.events[v-1]
		counted := false
		slot.once.Do(func() {
			slot.ev = f.buildEvent(r, v, vw)
			counted = slot.ev != nil && r.built.Add(eventSize(slot.ev, r))
		})
		if counted {
			// Outside once: the subscribers waiting for this event do not
			// wait for the eviction too.
			f.hub.reclaim()
		}
		return slot.ev
	}
	slot := r.viewSlot(vw, v)
	var built *Event
	fresh := false
	slot.once.Do(func() {
		built, fresh = f.buildEvent(r, v, vw), true
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
	return f.buildEvent(r, v, vw)
}

// viewSlot returns the record's slot of a variant in a view, adding it on
// first use.
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
		var next []viewEvent
		if current != nil {
			next = append(make([]viewEvent, 0, len(*current)+1), *current...)
		}
		slot := &eventSlot{}
		next = append(next, viewEvent{viewKey: vw.key, variant: v, slot: slot})
		if r.viewEvents.CompareAndSwap(current, &next) {
			return slot
		}
	}
}

// eventSize approximates what an event holds besides its record's objects,
// which its strings share when it is not projected: its own strings, its
// encoding (measured when it has a Len method, as grpc's mem.BufferSlice
// does), and the rest.
func eventSize(ev *Event, r *record) int64 {
	n := len(ev.ResumeToken) + len(ev.ResourceVersion) + eventOverhead
	for _, obj := range [2]string{ev.Object, ev.PreviousObject} {
		if !r.shares(obj) {
			n += len(obj)
		}
	}
	if enc, ok := ev.encoded.(interface{ Len() int }); ok {
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

// buildEvent makes the Event of a record for one variant in one view, or
// returns nil for a MODIFIED whose projection is the same before and after:
// the subscriber asked only for fields that did not change.
func (f *feed) buildEvent(r *record, v variant, vw *view) *Event {
	ev := &Event{ResumeToken: f.token(token{pos: r.pos}), Encoding: vw.encoding, FromRelist: r.fromRelist}
	var prev string
	switch v {
	case variantOwn:
		ev.Type, ev.Object = r.typ, r.obj.json
		ev.ResourceVersion = strconv.FormatUint(r.obj.rv, 10)
		if r.typ == EventDeleted {
			ev.ResourceVersion = strconv.FormatUint(r.rv, 10)
		}
		if r.typ == EventModified && vw.proj != nil {
			// Projected once each, the two states tell whether the change
			// is one of the paths asked for, and give the event its
			// objects.
			obj, prevObj := f.project(vw, r.obj.json), f.project(vw, r.prev.json)
			if vw.proj.SameAsked(unsafeBytes(obj), unsafeBytes(prevObj)) {
				return nil
			}
			ev.Object = obj
			if vw.includePrevious {
				ev.PreviousObject = prevObj
			}
			f.hub.encode(ev)
			return ev
		}
		if r.typ == EventModified && vw.includePrevious {
			prev = r.prev.json
		}
	case variantEnter:
		ev.Type, ev.Object = EventAdded, r.obj.json
		ev.ResourceVersion = strconv.FormatUint(r.obj.rv, 10)
	case variantLeave:
		// Like the Kubernetes watch cache: the last state that matched,
		// at the resourceVersion of the change that made it stop.
		ev.Type = EventDeleted
		ev.ResourceVersion = strconv.FormatUint(r.obj.rv, 10)
		ev.Object = atVersion(f.project(vw, r.prev.json), ev.ResourceVersion)
		f.hub.encode(ev)
		return ev
	}
	ev.Object = f.project(vw, ev.Object)
	ev.PreviousObject = f.project(vw, prev)
	f.hub.encode(ev)
	return ev
}

// atVersion returns an object's JSON with its metadata.resourceVersion set
// to rv, for the DELETED of an object that left a selection.
func atVersion(obj, rv string) string {
	patched, err := upstream.RewriteMetadata([]byte(obj), func(m map[string]any) { m["resourceVersion"] = rv })
	if err != nil {
		return obj
	}
	return string(patched)
}

// project applies a view's projection to an object's JSON.
func (f *feed) project(vw *view, obj string) string {
	if vw.proj == nil || obj == "" {
		return obj
	}
	projected, err := vw.proj.Apply(unsafeBytes(obj))
	if err != nil {
		// The API server's JSON always scans; if it ever does not, the
		// subscriber gets the whole object rather than nothing.
		f.log.Error("cannot project an object; sending it whole", "error", err)
		return obj
	}
	return string(projected)
}
