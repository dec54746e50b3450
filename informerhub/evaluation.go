package informerhub

import (
	"slices"
	"sync/atomic"

	"github.com/google/cel-go/common/types/ref"

	"github.com/informerhub/informerhub/informerhub/celfilter"
	"github.com/informerhub/informerhub/informerhub/projection"
)

// evaluation is the scratch of the filter evaluations on the objects of
// one change (its new and previous state), or on one object of a scan: each
// object is decoded for CEL at most once, each filter evaluated on it at
// most once, whatever the number of groups that ask (the results the
// objects cache themselves are bounded, and fewer than the filters a
// resource type may have); and it collects the filters whose evaluation
// exceeded the cost limit. A nil *evaluation shares and collects nothing.
type evaluation struct {
	// decoded are the objects decoded for CEL, each as projected on the
	// paths some filters read (projection.Whole: whole).
	decoded []decodedObject
	results []evaluated
	// costly are the filters that exceeded their cost limit, each with the
	// object it exceeded it on, once each.
	costly []costlyEvaluation
	// reads, when set, is what the filters shared holds read of every
	// object, together (see share): each object of the change is decoded
	// once, for all of them.
	reads  *projection.Tree
	shared []uint64 // the ids of those filters
}

type decodedObject struct {
	obj   *object
	reads *projection.Tree
	val   ref.Val
}

type evaluated struct {
	obj   *object
	id    uint64
	match bool
}

// costlyEvaluation is a filter's evaluation that exceeded its cost limit.
type costlyEvaluation struct {
	filter *celfilter.Filter
	obj    *object
}

// matches reports whether flt selects o; errs, when not nil, counts the
// evaluations that fail. The evaluation shares decoded objects and results
// between the filters evaluated on one change (or one object of a scan),
// and collects the filters that exceeded their cost.
//
// Results are cached on the object, except those of evaluations that
// exceeded the cost limit: each evaluator of such a filter on such an
// object learns it (see feed.tripLocked).
func (ev *evaluation) matches(flt *celfilter.Filter, o *object, errs *atomic.Uint64) bool {
	if match, ok := o.filterResult(flt.ID()); ok {
		return match
	}
	if match, ok := ev.result(o, flt); ok {
		return match
	}
	match, costly := false, false
	val, err := ev.value(o, flt)
	if err == nil {
		match, costly, err = flt.Eval(val)
	}
	if err != nil && errs != nil {
		errs.Add(1)
	}
	ev.remember(o, flt, match, costly)
	if costly {
		return false
	}
	o.cacheFilterResult(flt.ID(), match)
	return match
}

// share makes the evaluation decode each object once for all the filters,
// as projected on what they read together.
func (ev *evaluation) share(filters []*celfilter.Filter) {
	ev.reads = &projection.Tree{}
	for _, f := range filters {
		if f.Reads() == nil {
			ev.reads = nil // one of them reads the whole object
		} else if ev.reads != nil {
			ev.reads.Merge(f.Reads())
		}
		ev.shared = append(ev.shared, f.ID())
	}
	if ev.reads == nil {
		ev.reads = projection.Whole
	}
}

// readsOf returns what to decode of objects for f: what the evaluation's
// shared filters read, if f is one of them, or else what f reads.
func (ev *evaluation) readsOf(f *celfilter.Filter) *projection.Tree {
	if ev != nil && ev.reads != nil && slices.Contains(ev.shared, f.ID()) {
		return ev.reads
	}
	if f.Reads() == nil {
		return projection.Whole
	}
	return f.Reads()
}

func (ev *evaluation) result(o *object, f *celfilter.Filter) (match, ok bool) {
	if ev == nil {
		return false, false
	}
	for _, r := range ev.results {
		if r.obj == o && r.id == f.ID() {
			return r.match, true
		}
	}
	return false, false
}

func (ev *evaluation) remember(o *object, f *celfilter.Filter, match, costly bool) {
	if ev == nil {
		return
	}
	ev.results = append(ev.results, evaluated{obj: o, id: f.ID(), match: match})
	if c := (costlyEvaluation{filter: f, obj: o}); costly && !slices.Contains(ev.costly, c) {
		ev.costly = append(ev.costly, c)
	}
}

// reset forgets the objects and results, for the next object of a scan;
// what was costly stays.
func (ev *evaluation) reset() {
	clear(ev.decoded)
	ev.decoded, ev.results = ev.decoded[:0], ev.results[:0]
}

// value returns the CEL value of o as f reads it, decoding it on first use.
func (ev *evaluation) value(o *object, f *celfilter.Filter) (ref.Val, error) {
	reads := ev.readsOf(f)
	if ev != nil {
		for _, d := range ev.decoded {
			if d.obj == o && d.reads == reads {
				return d.val, nil
			}
		}
	}
	val, err := f.Decode(o.jsonBytes(), reads)
	if err != nil {
		return nil, err
	}
	if ev != nil {
		ev.decoded = append(ev.decoded, decodedObject{obj: o, reads: reads, val: val})
	}
	return val, nil
}
