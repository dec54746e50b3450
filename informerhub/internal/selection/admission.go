package selection

import (
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/informerhub/informerhub/informerhub/internal/errs"
	"github.com/informerhub/informerhub/informerhub/internal/event"
	"github.com/informerhub/informerhub/informerhub/projection"
)

// Admission is what a feed's subscriptions ask of it beyond its changes,
// and the limits on it: the distinct filters and projections in use, each
// a cost per change, overall and per owner (Config.MaxFiltersPerResource,
// MaxProjectionsPerResource, MaxFiltersPerOwner, MaxProjectionsPerOwner);
// and the views subscribers share (View). It is guarded by its feed's
// mu.
type Admission struct {
	resource schema.GroupVersionResource
	limits   admissionLimits

	// views are the interned views, by key; projections counts the views
	// of each distinct projection, and filters the subscriptions of each
	// distinct filter, by expression.
	views       map[string]*View
	projections map[string]int
	filters     map[string]int
	// owners are what each owner's subscriptions hold (see acquire).
	owners map[string]*ownerUse
}

// admissionLimits are the Config limits an admission applies.
type admissionLimits struct {
	filters, projections, filtersPerOwner, projectionsPerOwner int
}

// ownerUse is the distinct filters and projections one owner's
// subscriptions of a feed hold, with how many hold each.
type ownerUse struct {
	filters, projections map[string]int
}

func NewAdmission(resource schema.GroupVersionResource, cfg *Limits) Admission {
	return Admission{
		resource: resource,
		limits: admissionLimits{
			filters: cfg.MaxFiltersPerResource, projections: cfg.MaxProjectionsPerResource,
			filtersPerOwner: cfg.MaxFiltersPerOwner, projectionsPerOwner: cfg.MaxProjectionsPerOwner,
		},
		views:       map[string]*View{},
		projections: map[string]int{},
		filters:     map[string]int{},
		owners:      map[string]*ownerUse{},
	}
}

// Acquire admits a subscription of owner's with sel in the view that
// proj, includePrevious and enc make, and returns the view: it takes a
// share of the selector's filter and of the view, within the limits on
// distinct ones, overall and per owner. release gives them back.
func (a *Admission) Acquire(owner string, sel *Selector, proj *projection.Projection, includePrevious bool, enc event.Encoding) (*View, error) {
	var projKey string
	if proj != nil {
		projKey = proj.Key()
	}
	if err := a.checkOwner(owner, sel, projKey); err != nil {
		return nil, err
	}
	if flt := sel.filter; flt != nil {
		if a.filters[flt.Expr()] == 0 && len(a.filters) >= a.limits.filters {
			return nil, &errs.LimitError{Resource: a.resource, Limit: errs.LimitFilters, Max: a.limits.filters}
		}
		a.filters[flt.Expr()]++
	}
	v, err := a.acquireView(proj, includePrevious, enc)
	if err != nil {
		a.releaseFilter(sel)
		return nil, err
	}
	a.countOwner(owner, sel, projKey, 1)
	return v, nil
}

// Release gives back what an acquire took.
func (a *Admission) Release(owner string, sel *Selector, v *View) {
	a.releaseFilter(sel)
	var projKey string
	if v.proj != nil {
		projKey = v.proj.Key()
	}
	a.countOwner(owner, sel, projKey, -1)
	a.releaseView(v)
}

func (a *Admission) releaseFilter(sel *Selector) {
	if flt := sel.filter; flt != nil {
		if a.filters[flt.Expr()]--; a.filters[flt.Expr()] <= 0 {
			delete(a.filters, flt.Expr())
		}
	}
}

// acquireView returns the view of that form, interning it, and counts one
// more subscription on it. A new projection beyond the limit is refused.
func (a *Admission) acquireView(proj *projection.Projection, includePrevious bool, enc event.Encoding) (*View, error) {
	if proj == nil && !includePrevious && enc == 0 {
		return DefaultView, nil
	}
	key := viewKey(proj, includePrevious, enc)
	v := a.views[key]
	if v == nil {
		if proj != nil && a.projections[proj.Key()] == 0 && len(a.projections) >= a.limits.projections {
			return nil, &errs.LimitError{Resource: a.resource, Limit: errs.LimitProjections, Max: a.limits.projections}
		}
		v = &View{key: key, proj: proj, includePrevious: includePrevious, encoding: enc}
		a.views[key] = v
	}
	if v.refs == 0 && proj != nil {
		a.projections[proj.Key()]++
	}
	v.refs++
	return v, nil
}

func (a *Admission) releaseView(v *View) {
	if v == DefaultView {
		return
	}
	if v.refs--; v.refs > 0 {
		return
	}
	delete(a.views, v.key)
	if v.proj != nil {
		if a.projections[v.proj.Key()]--; a.projections[v.proj.Key()] == 0 {
			delete(a.projections, v.proj.Key())
		}
	}
}

// checkOwner refuses a subscription that would take its owner past the
// limits of distinct filters or projections per owner, so that no one
// client takes every slot of the resource type.
func (a *Admission) checkOwner(owner string, sel *Selector, projKey string) error {
	use := a.owners[owner]
	if owner == "" || use == nil {
		return nil
	}
	if flt := sel.filter; flt != nil && use.filters[flt.Expr()] == 0 && len(use.filters) >= a.limits.filtersPerOwner {
		return &errs.LimitError{Resource: a.resource, Limit: errs.LimitFiltersPerOwner, Max: a.limits.filtersPerOwner}
	}
	if projKey != "" && use.projections[projKey] == 0 && len(use.projections) >= a.limits.projectionsPerOwner {
		return &errs.LimitError{Resource: a.resource, Limit: errs.LimitProjectionsPerOwner, Max: a.limits.projectionsPerOwner}
	}
	return nil
}

// countOwner counts (delta 1) or uncounts (-1) a subscription of owner's
// holding sel's filter and a projection.
func (a *Admission) countOwner(owner string, sel *Selector, projKey string, delta int) {
	flt := sel.filter
	if owner == "" || flt == nil && projKey == "" {
		return
	}
	use := a.owners[owner]
	if use == nil {
		use = &ownerUse{filters: map[string]int{}, projections: map[string]int{}}
		a.owners[owner] = use
	}
	count := func(m map[string]int, key string) {
		if m[key] += delta; m[key] <= 0 {
			delete(m, key)
		}
	}
	if flt != nil {
		count(use.filters, flt.Expr())
	}
	if projKey != "" {
		count(use.projections, projKey)
	}
	if len(use.filters) == 0 && len(use.projections) == 0 {
		delete(a.owners, owner)
	}
}

// FilterCount and ProjectionCount are the distinct filters and projections
// the resource type's subscribers use.
func (a *Admission) FilterCount() int     { return len(a.filters) }
func (a *Admission) ProjectionCount() int { return len(a.projections) }
