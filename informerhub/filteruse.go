package informerhub

import (
	"crypto/sha256"
	"fmt"
	"time"

	"k8s.io/client-go/tools/cache"
)

// How a feed uses filters (filter.go): which distinct ones its
// subscriptions hold, within Config.MaxFiltersPerResource; their
// evaluation on each change, before the feed's lock; and the ones it
// refuses because an evaluation exceeded its cost.
//
// Evaluation before the lock. Dispatch runs under feed.mu, which every
// subscription takes to catch up, go live or read a bookmark's position. The
// informer's handler therefore decodes each change's objects and evaluates
// the filters in use on them before it takes the lock (feed.prepare); under
// the lock, dispatch reads the results from the change's evaluation. Only
// the filters a subscription adds in between, and a relist's changes, are
// evaluated under the lock.
//
// Costly filters. The runtime cost limit (Config.MaxFilterCost) is checked
// between the steps of an evaluation, so a single call of a function on a
// large string (a regular expression over a megabyte) runs to its end
// before the limit stops it. A filter that exceeds its limit on an object
// of a resource type is therefore not merely false there: its subscriptions
// on that resource type end with a *RequestError on selector.filter, and
// the feed refuses it for costlyFilterTTL. Each distinct expression can cost
// the feed at most one such evaluation per state of an object.

// filterUse is a distinct filter a feed's subscriptions hold.
type filterUse struct {
	filter *filter
	refs   int
}

// costlyFilterTTL is how long a feed refuses a filter that exceeded its
// cost, and maxCostlyFilters how many such filters it remembers.
const (
	costlyFilterTTL  = 10 * time.Minute
	maxCostlyFilters = 1024
)

// costlyFilterErrorLocked is why a filter is refused on the feed, or nil.
// The caller holds f.mu.
func (f *feed) costlyFilterErrorLocked(flt *filter) error {
	until, ok := f.costlyFilters[sha256.Sum256([]byte(flt.expr))]
	if !ok || time.Now().After(until) {
		return nil
	}
	return &RequestError{Field: FieldFilter, Err: ErrInvalidRequest, Reason: fmt.Sprintf(
		"the filter exceeded its cost limit (%d) on an object of %s, where the hub refuses it until %s: select fewer objects first (namespace, labels, fields), or test cheaper fields",
		f.hub.cfg.MaxFilterCost, f.resource, until.UTC().Format(time.RFC3339))}
}

// tripLocked refuses filters that exceeded their cost, and ends the live
// subscriptions that hold them; the others end at their next step
// (Subscription.endedLocked). The caller holds f.mu.
func (f *feed) tripLocked(costly []*filter) {
	now := time.Now()
	for digest, until := range f.costlyFilters {
		if now.After(until) {
			delete(f.costlyFilters, digest)
		}
	}
	for _, flt := range costly {
		digest := sha256.Sum256([]byte(flt.expr))
		if _, known := f.costlyFilters[digest]; !known && len(f.costlyFilters) >= maxCostlyFilters {
			for other := range f.costlyFilters { // forget one, any, to remember this one
				delete(f.costlyFilters, other)
				break
			}
		}
		f.costlyFilters[digest] = now.Add(costlyFilterTTL)
		err := f.costlyFilterErrorLocked(flt)
		ended := 0
		for _, g := range f.live.groups {
			if g.sel.filter == nil || g.sel.filter.expr != flt.expr {
				continue
			}
			for s := range g.subs {
				f.live.remove(s)
				s.failLocked(err)
				ended++
			}
		}
		f.log.Warn("a filter exceeded its cost limit; refusing it", "filter", truncate(flt.expr), "maxCost", f.hub.cfg.MaxFilterCost, "subscriptionsEnded", ended)
	}
}

// prepared is what the informer's handler makes of a delta before the
// feed's lock: its object, and the evaluation of the filters in use on it
// and on the state it replaces.
type prepared struct {
	obj  *object
	eval *evaluation
}

// prepare evaluates the filters in use on the objects of deltas, before the
// feed's lock (see above). It returns nothing to reuse when no filter is in
// use, and for what it cannot prepare (applyLocked reports its errors).
func (f *feed) prepare(deltas cache.Deltas) []prepared {
	out := make([]prepared, len(deltas))
	prevs := make([]*object, len(deltas))
	filters := f.preparedLocked(deltas, out, prevs)
	if len(filters) == 0 {
		return out
	}
	for i, p := range out {
		if p.obj == nil {
			continue
		}
		ev := &evaluation{}
		ev.share(filters) // one decode of each object for all filters
		for _, flt := range filters {
			if deltas[i].Type != cache.Deleted {
				flt.matches(p.obj, ev, &f.counters.filterErrors)
			}
			if prevs[i] != nil {
				flt.matches(prevs[i], ev, &f.counters.filterErrors)
			}
		}
		out[i].eval = ev
	}
	return out
}

// preparedLocked returns the filters in use, and fills in the objects of
// deltas and the states they replace, under the feed's lock (released
// however it returns: process recovers from panics by stopping the feed,
// which takes the lock).
func (f *feed) preparedLocked(deltas cache.Deltas, out []prepared, prevs []*object) []*filter {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.filters) == 0 || !f.isSynced || f.err != nil {
		return nil
	}
	filters := make([]*filter, 0, len(f.filters))
	for _, use := range f.filters {
		filters = append(filters, use.filter)
	}
	// The state each delta replaces: the state's, or an earlier delta's of
	// the same object.
	pending := map[objectKey]*object{}
	for i, d := range deltas {
		switch d.Type {
		case cache.Added, cache.Updated, cache.Replaced, cache.Deleted:
		default:
			continue
		}
		o, err := newObject(d.Object)
		if err != nil {
			continue
		}
		key := objectKey{o.namespace, o.name}
		prev, ok := pending[key]
		if !ok {
			prev, _ = f.state.Get(o)
		}
		out[i].obj, prevs[i] = o, prev
		if d.Type == cache.Deleted {
			pending[key] = nil
		} else {
			pending[key] = o
		}
	}
	return filters
}
