package selection

import (
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/google/cel-go/common/types/ref"

	"github.com/informerhub/informerhub/informerhub/celfilter"
	"github.com/informerhub/informerhub/informerhub/internal/state"
	"github.com/informerhub/informerhub/informerhub/projection"
)

// Evaluation is the scratch of the filter evaluations on the objects of
// one change (its new and previous state), or on one object of a scan: each
// object is decoded for CEL at most once, each filter evaluated on it at
// most once, whatever the number of groups that ask (the results the
// objects cache themselves are bounded, and fewer than the filters a
// resource type may have). A nil *evaluation shares nothing.
type Evaluation struct {
	// decoded are the objects decoded for CEL, each as projected on the
	// paths some filters read (projection.Whole: whole).
	decoded []decodedObject
	results []evaluated
	// byKey indexes results once they are many (past manyResults), so
	// that the groups of a change with many filters find theirs in O(1).
	byKey map[evaluatedKey]state.Verdict
	// reads, when set, is what the filters shared holds read of every
	// object, together (see share): each object of the change is decoded
	// once, for all of them.
	reads  *projection.Tree
	shared []uint64 // the ids of those filters
}

type decodedObject struct {
	obj   *state.Object
	reads *projection.Tree
	val   ref.Val
}

type evaluated struct {
	obj *state.Object
	id  uint64
	state.Verdict
}

// evaluatedKey is an object and a filter's ID.
type evaluatedKey struct {
	obj *state.Object
	id  uint64
}

// manyResults is the most results an evaluation looks up one by one.
const manyResults = 16

// FilterError is why a filter could not decide on an object. It is
// immutable, and shared by the object's events, and by the objects on
// which the filter fails the same way (celfilter.Filter.Failed).
type FilterError = celfilter.Failure

// maxFilterErrorLength bounds the reason an event carries, as CEL's
// messages may quote a long expression.
const maxFilterErrorLength = 256

// errFilterOverCost is why a filter that ran over its cost limit could not
// decide: the same for every object, so it is shared.
var errFilterOverCost = &FilterError{Reason: "the filter exceeded the hub's cost limit for one evaluation"}

func newFilterError(flt *celfilter.Filter, err error, costly bool) *FilterError {
	if costly {
		return errFilterOverCost
	}
	return flt.Failed(TruncateTo(fmt.Sprintf("the filter failed: %v", err), maxFilterErrorLength))
}

// Matches returns what flt decides on o; errs, when not nil, counts the
// evaluations that could not decide. The evaluation shares decoded objects
// and results between the filters evaluated on one change (or one object
// of a scan). Results are cached on the object, which never changes (the
// most recent maxCachedFilterResults): an object that costs a filter its
// limit costs it once while its result stays cached.
func (ev *Evaluation) Matches(flt *celfilter.Filter, o *state.Object, errs *atomic.Uint64) state.Verdict {
	if v, ok := o.CachedVerdict(flt.ID()); ok {
		return v
	}
	if v, ok := ev.result(o, flt); ok {
		return v
	}
	var v state.Verdict
	val, err := ev.value(o, flt)
	costly := false
	if err == nil {
		v.Match, costly, err = flt.Eval(val)
	}
	if err != nil {
		v = state.Verdict{Match: true, Undecided: newFilterError(flt, err, costly)}
		if errs != nil {
			errs.Add(1)
		}
	}
	ev.remember(o, flt, v)
	o.CacheVerdict(flt.ID(), v)
	return v
}

// Share makes the evaluation decode each object once for all the filters,
// as projected on what they read together.
func (ev *Evaluation) Share(filters []*celfilter.Filter) {
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
func (ev *Evaluation) readsOf(f *celfilter.Filter) *projection.Tree {
	if ev != nil && ev.reads != nil && slices.Contains(ev.shared, f.ID()) {
		return ev.reads
	}
	if f.Reads() == nil {
		return projection.Whole
	}
	return f.Reads()
}

func (ev *Evaluation) result(o *state.Object, f *celfilter.Filter) (state.Verdict, bool) {
	if ev == nil {
		return state.Verdict{}, false
	}
	if ev.byKey != nil {
		v, ok := ev.byKey[evaluatedKey{o, f.ID()}]
		return v, ok
	}
	for _, r := range ev.results {
		if r.obj == o && r.id == f.ID() {
			return r.Verdict, true
		}
	}
	return state.Verdict{}, false
}

func (ev *Evaluation) remember(o *state.Object, f *celfilter.Filter, v state.Verdict) {
	if ev == nil {
		return
	}
	ev.results = append(ev.results, evaluated{obj: o, id: f.ID(), Verdict: v})
	switch {
	case ev.byKey != nil:
		ev.byKey[evaluatedKey{o, f.ID()}] = v
	case len(ev.results) > manyResults:
		ev.byKey = make(map[evaluatedKey]state.Verdict, 2*len(ev.results))
		for _, r := range ev.results {
			ev.byKey[evaluatedKey{r.obj, r.id}] = r.Verdict
		}
	}
}

// Reset forgets the objects and results, for the next object of a scan.
func (ev *Evaluation) Reset() {
	clear(ev.decoded)
	ev.decoded, ev.results, ev.byKey = ev.decoded[:0], ev.results[:0], nil
}

// value returns the CEL value of o as f reads it, decoding it on first use.
func (ev *Evaluation) value(o *state.Object, f *celfilter.Filter) (ref.Val, error) {
	reads := ev.readsOf(f)
	if ev != nil {
		for _, d := range ev.decoded {
			if d.obj == o && d.reads == reads {
				return d.val, nil
			}
		}
	}
	val, err := f.Decode(o.JSONBytes(), reads)
	if err != nil {
		return nil, err
	}
	if ev != nil {
		ev.decoded = append(ev.decoded, decodedObject{obj: o, reads: reads, val: val})
	}
	return val, nil
}

// Fork returns an evaluation of its own for another goroutine, sharing
// ev's filters' reads and what ev shares.
func (ev *Evaluation) Fork() *Evaluation { return &Evaluation{reads: ev.reads, shared: ev.shared} }
