package informerhub

import "github.com/informerhub/informerhub/informerhub/fieldset"

// A feed hands each change to its live subscribers through a dispatcher,
// which makes the work under the feed's lock grow with the subscribers a
// change may concern, not with all of them. It borrows two ideas of the
// kube-apiserver's watch cache:
//
//   - Subscribers are grouped by selector: subscribers whose selectors are
//     equal (same namespace, label and field selectors, and filter) form one
//     group, and a change is matched against each group once, however many
//     subscribers it holds.
//   - Groups are indexed by a trigger (the watch cache's indexed triggers):
//     an equality that every object the selector selects satisfies, such as
//     metadata.name=web-1, spec.nodeName=node-7, app=web or a namespace. A
//     change visits only the groups whose trigger its object (or its
//     previous state, for objects that leave a selector) satisfies, found by
//     a map lookup per trigger kind; only groups with no equality at all
//     are visited for every change.
//
// So 5,000 node agents, each watching the pods of its own node, cost a
// pod's change one lookup and one group, not 5,000 selector evaluations.

// triggerKind says which equality a group is indexed by.
type triggerKind uint8

const (
	triggerName      triggerKind = iota + 1 // metadata.name
	triggerField                            // another field of a field selector
	triggerLabel                            // a label
	triggerNamespace                        // the namespace, or metadata.namespace
)

// trigger is an equality an object satisfies: its name, its namespace, a
// field's value or a label's.
type trigger struct {
	kind  triggerKind
	key   string // the field or label key; "" for names and namespaces
	value string
}

// subscriberGroup is the live subscribers of one selector.
type subscriberGroup struct {
	sel  *selector
	subs map[*Subscription]struct{}
	// trigger is what the group is indexed by; indexed is false for groups
	// visited by every change.
	trigger trigger
	indexed bool
	// visited is the walk of candidates that last visited the group, so
	// that a change reaching it through several triggers matches it once.
	visited uint64
}

// dispatcher holds a feed's live subscribers. It belongs to its feed and is
// guarded by the feed's mu.
type dispatcher struct {
	groups    map[string]*subscriberGroup // by selector key
	triggered map[trigger]map[*subscriberGroup]struct{}
	unindexed map[*subscriberGroup]struct{}
	// fields are the fields some group is indexed by, with the number of
	// such groups: a change looks up its object's value of each.
	fields map[string]*fieldTrigger
	// labelGroups counts the groups indexed by a label: without any, a
	// change does not look up its object's labels.
	labelGroups int
	subscribers int
	// stamp numbers the walks of candidates, to visit each group once.
	stamp uint64
	// visits counts the groups matched against changes, for tests and
	// benchmarks of the index.
	visits uint64
}

type fieldTrigger struct {
	spec   *fieldset.Spec
	groups int
}

func newDispatcher() dispatcher {
	return dispatcher{
		groups:    map[string]*subscriberGroup{},
		triggered: map[trigger]map[*subscriberGroup]struct{}{},
		unindexed: map[*subscriberGroup]struct{}{},
		fields:    map[string]*fieldTrigger{},
	}
}

// add makes s a live subscriber.
func (d *dispatcher) add(s *Subscription) {
	g := d.groups[s.sel.key]
	if g == nil {
		g = &subscriberGroup{sel: s.sel, subs: map[*Subscription]struct{}{}}
		g.trigger, g.indexed = s.sel.trigger()
		d.groups[s.sel.key] = g
		d.index(g)
	}
	g.subs[s] = struct{}{}
	s.group = g
	d.subscribers++
}

// remove takes s out of the live subscribers, if it is one.
func (d *dispatcher) remove(s *Subscription) {
	g := s.group
	if g == nil {
		return
	}
	s.group = nil
	delete(g.subs, s)
	d.subscribers--
	if len(g.subs) == 0 {
		delete(d.groups, g.sel.key)
		d.unindex(g)
	}
}

func (d *dispatcher) index(g *subscriberGroup) {
	if !g.indexed {
		d.unindexed[g] = struct{}{}
		return
	}
	set := d.triggered[g.trigger]
	if set == nil {
		set = map[*subscriberGroup]struct{}{}
		d.triggered[g.trigger] = set
	}
	set[g] = struct{}{}
	switch g.trigger.kind {
	case triggerField:
		ft := d.fields[g.trigger.key]
		if ft == nil {
			ft = &fieldTrigger{spec: g.sel.fieldSet.Spec(g.trigger.key)}
			d.fields[g.trigger.key] = ft
		}
		ft.groups++
	case triggerLabel:
		d.labelGroups++
	}
}

func (d *dispatcher) unindex(g *subscriberGroup) {
	if !g.indexed {
		delete(d.unindexed, g)
		return
	}
	set := d.triggered[g.trigger]
	delete(set, g)
	if len(set) == 0 {
		delete(d.triggered, g.trigger)
	}
	switch g.trigger.kind {
	case triggerField:
		if ft := d.fields[g.trigger.key]; ft != nil {
			if ft.groups--; ft.groups == 0 {
				delete(d.fields, g.trigger.key)
			}
		}
	case triggerLabel:
		d.labelGroups--
	}
}

// each calls fn with every live subscriber; fn may remove the one it is
// given.
func (d *dispatcher) each(fn func(s *Subscription)) {
	for _, g := range d.groups {
		for s := range g.subs {
			fn(s)
		}
	}
}

// dispatch calls deliver with each group a record may concern, once:
// every group it may enter, stay in or leave. deliver may remove
// subscribers of the group it is given.
func (d *dispatcher) dispatch(r *record, deliver func(g *subscriberGroup)) {
	if d.subscribers == 0 {
		return
	}
	d.candidates(r.obj, r.prev, func(g *subscriberGroup) {
		d.visits++
		deliver(g)
	})
}

// candidates calls fn with each group whose selector may select obj or
// prev, once: the unindexed groups, and those of the triggers either
// satisfies. fn may remove subscribers of the group it is given.
func (d *dispatcher) candidates(obj, prev *object, fn func(g *subscriberGroup)) {
	d.stamp++
	visit := func(set map[*subscriberGroup]struct{}) {
		for g := range set {
			if g.visited != d.stamp {
				g.visited = d.stamp
				fn(g)
			}
		}
	}
	visit(d.unindexed)
	if len(d.triggered) == 0 {
		return
	}
	for i, o := range [2]*object{obj, prev} {
		if o == nil || i == 1 && o == obj {
			continue
		}
		visit(d.triggered[trigger{kind: triggerName, value: o.name}])
		visit(d.triggered[trigger{kind: triggerNamespace, value: o.namespace}])
		for key, ft := range d.fields {
			visit(d.triggered[trigger{kind: triggerField, key: key, value: o.field(ft.spec)}])
		}
		if d.labelGroups > 0 {
			for k, v := range o.labels {
				visit(d.triggered[trigger{kind: triggerLabel, key: k, value: v}])
			}
		}
	}
}
