package informerhub

import (
	"crypto/sha256"
	"fmt"
	"slices"
	"time"

	"k8s.io/client-go/tools/cache"

	"github.com/informerhub/informerhub/informerhub/celfilter"
)

// How a feed uses filters (filter.go): which distinct ones its
// subscriptions hold, within Config.MaxFiltersPerResource; their
// evaluation on each change, before the feed's lock; and the selectors it
// refuses because their filter's evaluation exceeded its cost.
//
// Evaluation before the lock. Dispatch runs under feed.mu, which every
// subscription takes to catch up, go live or read a bookmark's position. The
// informer's handler therefore decodes each change's objects and evaluates
// the filters on them before it takes the lock (feed.prepare); under the
// lock, dispatch reads the results from the change's evaluation. As
// dispatch would, it evaluates a filter on an object only for the live
// groups the object may concern (by their triggers) whose namespace, label
// and field selectors select it: a filter costs only the objects its
// subscribers would otherwise receive. Only the groups that go live in
// between, and a relist's changes, have their filters evaluated under the
// lock.
//
// Costly filters. The runtime cost limit (Config.MaxFilterCost) is checked
// between the steps of an evaluation, and before each call of a regular
// expression (see regexOptimizations). A filter that exceeds its limit on an
// object is therefore not merely false there: it would cost as much on
// every change of that object. The subscriptions whose selector selects the
// object but for the filter end with a *RequestError on selector.filter,
// and the feed refuses their selectors for costlyFilterTTL; subscribers of
// the same filter with selectors that do not select the object are not
// concerned. Each distinct selector can cost the feed at most one such
// evaluation per state of an object.

// filterUse is a distinct filter a feed's subscriptions hold.
type filterUse struct {
	filter *celfilter.Filter
	refs   int
}

// costlyFilterTTL is how long a feed refuses a selector whose filter
// exceeded its cost, and maxRefusedSelectors how many such selectors it
// remembers.
const (
	costlyFilterTTL     = 10 * time.Minute
	maxRefusedSelectors = 1024
)

// refusedErrorLocked is why a selector is refused on the feed, or nil. The
// caller holds f.mu.
func (f *feed) refusedErrorLocked(sel *selector) error {
	if sel.filter == nil {
		return nil
	}
	until, ok := f.refused[sha256.Sum256([]byte(sel.key))]
	if !ok || time.Now().After(until) {
		return nil
	}
	return &RequestError{Field: FieldFilter, Err: ErrInvalidRequest, Reason: fmt.Sprintf(
		"the filter exceeded its cost limit (%d) on an object of %s that the rest of the selector selects; the hub refuses this selector until %s: select fewer objects first (namespace, labels, fields), or test cheaper fields",
		f.hub.cfg.MaxFilterCost, f.resource, until.UTC().Format(time.RFC3339))}
}

// tripLocked handles evaluations that exceeded their cost: for each, it
// refuses the selectors that hold its filter and select its object but for
// the filter, and ends their live subscriptions; their others end at their
// next step (Subscription.endedLocked). own, when not nil, is the selector
// of the subscription or snapshot that made the evaluations. The caller
// holds f.mu.
func (f *feed) tripLocked(costly []costlyEvaluation, own *selector) {
	now := time.Now()
	for digest, until := range f.refused {
		if now.After(until) {
			delete(f.refused, digest)
		}
	}
	refuse := func(sel *selector) {
		digest := sha256.Sum256([]byte(sel.key))
		if _, known := f.refused[digest]; !known && len(f.refused) >= maxRefusedSelectors {
			for other := range f.refused { // forget one, any, to remember this one
				delete(f.refused, other)
				break
			}
		}
		f.refused[digest] = now.Add(costlyFilterTTL)
	}
	for _, c := range costly {
		if own != nil && own.filter != nil && own.filter.Expr() == c.filter.Expr() {
			refuse(own)
		}
		ended := 0
		f.live.candidates(c.obj, nil, func(g *subscriberGroup) {
			if g.sel.filter == nil || g.sel.filter.Expr() != c.filter.Expr() || !g.sel.matchesBase(c.obj) {
				return
			}
			refuse(g.sel)
			err := f.refusedErrorLocked(g.sel)
			for s := range g.subs {
				f.live.remove(s)
				s.failLocked(err)
				ended++
			}
		})
		f.log.Warn("a filter exceeded its cost limit; refusing the selectors that select the object with it",
			"filter", truncate(c.filter.Expr()), "object", c.obj.namespace+"/"+c.obj.name, "maxCost", f.hub.cfg.MaxFilterCost, "subscriptionsEnded", ended)
	}
}

// prepared is what the informer's handler makes of a delta before the
// feed's lock: its object, and the evaluation of the filters in use on it
// and on the state it replaces.
type prepared struct {
	obj  *object
	eval *evaluation
}

// prepare evaluates filters on the objects of deltas before the feed's
// lock, where dispatch will (see above). It returns nothing to reuse when no
// filter is in use, and for what it cannot prepare (applyLocked reports its
// errors).
func (f *feed) prepare(deltas cache.Deltas) []prepared {
	out := make([]prepared, len(deltas))
	plans := f.planLocked(deltas, out)
	for i, plan := range plans {
		if len(plan) == 0 {
			continue
		}
		ev := &evaluation{}
		filters := make([]*celfilter.Filter, 0, len(plan))
		for _, e := range plan {
			if !slices.Contains(filters, e.filter) {
				filters = append(filters, e.filter)
			}
		}
		ev.share(filters) // one decode of each object for all filters
		for _, e := range plan {
			ev.matches(e.filter, e.obj, &f.counters.filterErrors)
		}
		out[i].eval = ev
	}
	return out
}

// filterOn is a filter to evaluate on an object.
type filterOn struct {
	filter *celfilter.Filter
	obj    *object
}

// planLocked fills in the objects of deltas, and returns for each the
// filters dispatch will evaluate on its object and on the state it
// replaces; under the feed's lock (released however it returns: process
// recovers from panics by stopping the feed, which takes the lock).
func (f *feed) planLocked(deltas cache.Deltas, out []prepared) [][]filterOn {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.filters) == 0 || !f.isSynced || f.err != nil {
		return nil
	}
	plans := make([][]filterOn, len(deltas))
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
		out[i].obj = o
		// Dispatch tests a deletion's previous state only.
		states := [2]*object{o, prev}
		if d.Type == cache.Deleted {
			states[0] = nil
			pending[key] = nil
		} else {
			pending[key] = o
		}
		f.live.candidates(states[0], states[1], func(g *subscriberGroup) {
			if g.sel.filter == nil {
				return
			}
			for _, x := range states {
				if x != nil && g.sel.matchesBase(x) {
					if e := (filterOn{g.sel.filter, x}); !slices.Contains(plans[i], e) {
						plans[i] = append(plans[i], e)
					}
				}
			}
		})
	}
	return plans
}
