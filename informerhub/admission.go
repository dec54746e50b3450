package informerhub

import (
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/informerhub/informerhub/informerhub/projection"
)

// admission is what a feed's subscriptions ask of it beyond its changes,
// and the limits on it: the distinct filters and projections in use, each
// a cost per change, overall and per owner (Config.MaxFiltersPerResource,
// MaxProjectionsPerResource, MaxFiltersPerOwner, MaxProjectionsPerOwner);
// and the views subscribers share (view.go). It is guarded by its feed's
// mu.
type admission struct {
	resource schema.GroupVersionResource
	limits   admissionLimits

	// views are the interned views, by key; projections counts the views
	// of each distinct projection, and filters the subscriptions of each
	// distinct filter, by expression.
	views       map[string]*view
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

func newAdmission(resource schema.GroupVersionResource, cfg *Config) admission {
	return admission{
		resource: resource,
		limits: admissionLimits{
			filters: cfg.MaxFiltersPerResource, projections: cfg.MaxProjectionsPerResource,
			filtersPerOwner: cfg.MaxFiltersPerOwner, projectionsPerOwner: cfg.MaxProjectionsPerOwner,
		},
		views:       map[string]*view{},
		projections: map[string]int{},
		filters:     map[string]int{},
		owners:      map[string]*ownerUse{},
	}
}

// acquire admits a subscription of owner's with sel in the view that
// proj, includePrevious and enc make, and returns the view: it takes a
// share of the selector's filter and of the view, within the limits on
// distinct ones, overall and per owner. release gives them back.
func (a *admission) acquire(owner string, sel *selector, proj *projection.Projection, includePrevious bool, enc Encoding) (*view, error) {
	var projKey string
	if proj != nil {
		projKey = proj.Key()
	}
	if err := a.checkOwner(owner, sel, projKey); err != nil {
		return nil, err
	}
	if flt := sel.filter; flt != nil {
		if a.filters[flt.Expr()] == 0 && len(a.filters) >= a.limits.filters {
			return nil, &LimitError{Resource: a.resource, Limit: LimitFilters, Max: a.limits.filters}
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

// release gives back what an acquire took.
func (a *admission) release(owner string, sel *selector, v *view) {
	a.releaseFilter(sel)
	var projKey string
	if v.proj != nil {
		projKey = v.proj.Key()
	}
	a.countOwner(owner, sel, projKey, -1)
	a.releaseView(v)
}

func (a *admission) releaseFilter(sel *selector) {
	if flt := sel.filter; flt != nil {
		if a.filters[flt.Expr()]--; a.filters[flt.Expr()] <= 0 {
			delete(a.filters, flt.Expr())
		}
	}
}

// acquireView returns the view of that form, interning it, and counts one
// more subscription on it. A new projection beyond the limit is refused.
func (a *admission) acquireView(proj *projection.Projection, includePrevious bool, enc Encoding) (*view, error) {
	if proj == nil && !includePrevious && enc == 0 {
		return defaultView, nil
	}
	key := viewKey(proj, includePrevious, enc)
	v := a.views[key]
	if v == nil {
		if proj != nil && a.projections[proj.Key()] == 0 && len(a.projections) >= a.limits.projections {
			return nil, &LimitError{Resource: a.resource, Limit: LimitProjections, Max: a.limits.projections}
		}
		v = &view{key: key, proj: proj, includePrevious: includePrevious, encoding: enc}
		a.views[key] = v
	}
	if v.refs == 0 && proj != nil {
		a.projections[proj.Key()]++
	}
	v.refs++
	return v, nil
}

func (a *admission) releaseView(v *view) {
	if v == defaultView {
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
func (a *admission) checkOwner(owner string, sel *selector, projKey string) error {
	use := a.owners[owner]
	if owner == "" || use == nil {
		return nil
	}
	if flt := sel.filter; flt != nil && use.filters[flt.Expr()] == 0 && len(use.filters) >= a.limits.filtersPerOwner {
		return &LimitError{Resource: a.resource, Limit: LimitFiltersPerOwner, Max: a.limits.filtersPerOwner}
	}
	if projKey != "" && use.projections[projKey] == 0 && len(use.projections) >= a.limits.projectionsPerOwner {
		return &LimitError{Resource: a.resource, Limit: LimitProjectionsPerOwner, Max: a.limits.projectionsPerOwner}
	}
	return nil
}

// countOwner counts (delta 1) or uncounts (-1) a subscription of owner's
// holding sel's filter and a projection.
func (a *admission) countOwner(owner string, sel *selector, projKey string, delta int) {
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
