package fanout

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/informerhub/informerhub/informerhub/celfilter"
	"github.com/informerhub/informerhub/informerhub/fieldset"
	"github.com/informerhub/informerhub/informerhub/internal/selection"
	"github.com/informerhub/informerhub/informerhub/internal/state"
	"github.com/informerhub/informerhub/informerhub/shard"
)

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

// Group is the live subscribers of one selector.
type Group struct {
	sel  *selection.Selector
	subs map[*Member]struct{}
	// trigger is what the group is indexed by; indexed is false for groups
	// visited by every change.
	trigger selection.Trigger
	indexed bool
	// visited is the walk of candidates that last visited the group, so
	// that a change reaching it through several triggers matches it once.
	visited uint64
	// made numbers the group among those its dispatcher made (see
	// dispatcher.made).
	made uint64
	// of is, in a planner's copy of the groups (see planDeliveries), the
	// live group the copy stands for; nil in the dispatcher's own.
	of *Group
}

// Dispatcher holds a feed's live subscribers (members). It belongs to its
// feed and is guarded by the feed's mu.
type Dispatcher struct {
	groups    map[string]*Group // by selector key
	triggered map[selection.Trigger]map[*Group]struct{}
	// sharded are the groups without a trigger whose shard selector
	// indexes them instead: a change visits those its object's hash
	// falls in.
	sharded   shard.Index[*Group]
	unindexed map[*Group]struct{}
	// fields are the fields some group is indexed by, with the number of
	// such groups: a change looks up its object's value of each.
	fields map[string]*fieldTrigger
	// labelGroups counts the groups indexed by a label: without any, a
	// change does not look up its object's labels.
	labelGroups int
	subscribers int
	// made counts the groups made: a relist's deliveries planned before
	// the feed's lock concern the groups made until then (see
	// deliverBatch).
	made uint64
	// peak is the fullest a subscriber's queue was right after a change
	// was queued to it, in the window of queuePeakWindow from peakFrom
	// (Unix nanoseconds); prevPeak, in the window before. See queuePeak.
	peak, prevPeak int
	peakFrom       int64
	// stamp numbers the walks of candidates, to visit each group once.
	stamp uint64
	// visits counts the groups matched against changes, for tests and
	// benchmarks of the index.
	visits uint64
	// toWake is the members whose readers the changes applied under the
	// lock are to wake, once every delivery is queued and the lock let go
	// of (takeWakes, then wake): readers that start sending only then find
	// every reader of their connection counted (see Woken).
	toWake []*Member
}

type fieldTrigger struct {
	spec   *fieldset.Spec
	groups int
}

func NewDispatcher() Dispatcher {
	return Dispatcher{
		groups:    map[string]*Group{},
		triggered: map[selection.Trigger]map[*Group]struct{}{},
		unindexed: map[*Group]struct{}{},
		fields:    map[string]*fieldTrigger{},
	}
}

// add makes m a live subscriber.
func (d *Dispatcher) add(m *Member) {
	sel := m.sel
	g := d.groups[sel.Key()]
	if g == nil {
		d.made++
		g = &Group{sel: sel, subs: map[*Member]struct{}{}, made: d.made}
		g.trigger, g.indexed = sel.Trigger()
		d.groups[sel.Key()] = g
		d.index(g)
	}
	g.subs[m] = struct{}{}
	m.group = g
	d.subscribers++
}

// Remove takes m out of the live subscribers, if it is one.
func (d *Dispatcher) Remove(m *Member) {
	g := m.group
	if g == nil {
		return
	}
	m.group = nil
	delete(g.subs, m)
	d.subscribers--
	if len(g.subs) == 0 {
		delete(d.groups, g.sel.Key())
		d.unindex(g)
	}
}

func (d *Dispatcher) index(g *Group) {
	if !g.indexed {
		if g.sel.Shard() != nil {
			d.sharded.Add(g, g.sel.Shard())
			return
		}
		d.unindexed[g] = struct{}{}
		return
	}
	set := d.triggered[g.trigger]
	if set == nil {
		set = map[*Group]struct{}{}
		d.triggered[g.trigger] = set
	}
	set[g] = struct{}{}
	switch g.trigger.Kind {
	case selection.TriggerField:
		ft := d.fields[g.trigger.Key]
		if ft == nil {
			ft = &fieldTrigger{spec: g.sel.FieldSet().Spec(g.trigger.Key)}
			d.fields[g.trigger.Key] = ft
		}
		ft.groups++
	case selection.TriggerLabel:
		d.labelGroups++
	}
}

func (d *Dispatcher) unindex(g *Group) {
	if !g.indexed {
		if g.sel.Shard() != nil {
			d.sharded.Remove(g)
			return
		}
		delete(d.unindexed, g)
		return
	}
	set := d.triggered[g.trigger]
	delete(set, g)
	if len(set) == 0 {
		delete(d.triggered, g.trigger)
	}
	switch g.trigger.Kind {
	case selection.TriggerField:
		if ft := d.fields[g.trigger.Key]; ft != nil {
			if ft.groups--; ft.groups == 0 {
				delete(d.fields, g.trigger.Key)
			}
		}
	case selection.TriggerLabel:
		d.labelGroups--
	}
}

// SubscriberCount, GroupCount and VisitCount count the live subscribers,
// their groups, and the groups matched against changes so far.
func (d *Dispatcher) SubscriberCount() int { return d.subscribers }
func (d *Dispatcher) GroupCount() int      { return len(d.groups) }
func (d *Dispatcher) VisitCount() uint64   { return d.visits }

// CountVisits counts n groups matched against changes before the feed's
// lock (planDeliveries).
func (d *Dispatcher) CountVisits(n uint64) { d.visits += n }

// each calls fn with every live subscriber; fn may remove the one it is
// given.
func (d *Dispatcher) each(fn func(m *Member)) {
	for _, g := range d.groups {
		for m := range g.subs {
			fn(m)
		}
	}
}

// End removes every live subscriber and fails it with err, for a feed that
// stopped.
func (d *Dispatcher) End(err error) {
	d.each(func(m *Member) {
		d.Remove(m)
		m.sub.Fail(err)
	})
}

// FailAll fails every live subscriber with err and changes nothing else:
// for a feed whose state may be broken (see feed.Feed.stopAfterPanic).
func (d *Dispatcher) FailAll(err error) {
	d.each(func(m *Member) { m.sub.Fail(err) })
}

// Deliver queues r for every live subscriber that selects it, matching
// each group it may concern once: every group it may enter, stay in or
// leave. It never waits: a subscriber whose queue is full falls behind (it
// leaves the live subscribers and reads on from the history, from before,
// the position before r), and is counted in fellBehind. ev holds what
// filters evaluated of r before the feed's lock.
func (d *Dispatcher) Deliver(r *state.Record, ev *selection.Evaluation, before state.Position, fellBehind *atomic.Uint64) {
	if d.subscribers == 0 {
		return
	}
	d.candidates(r.Object, r.Previous, func(g *Group) {
		d.visits++
		if v := g.variantOf(r, ev); v != state.VariantNone {
			d.offer(g, r, v, before, fellBehind)
		}
	})
}

// TakeWakes takes the members whose readers are to be woken: the caller
// holds the feed's lock, and wakes them once it has let go of it.
func (d *Dispatcher) TakeWakes() *Wakes {
	if len(d.toWake) == 0 {
		return nil
	}
	w := wakesPool.Get().(*Wakes)
	w.members, d.toWake = d.toWake, w.members[:0]
	return w
}

// Wakes is a change's members to wake, between takeWakes and wake; from
// wakesPool, so that the slices are reused from change to change.
type Wakes struct{ members []*Member }

var wakesPool = sync.Pool{New: func() any { return new(Wakes) }}

// Wake wakes the readers of the members, those of a connection one after
// the other (by their Woken): each connection's readers then run together,
// and its writes wait for them a short while, rather than for the whole
// change's readers. A closed member's wake-up is harmless. A nil *wakes
// wakes nobody.
func (w *Wakes) Wake() {
	if w == nil {
		return
	}
	slices.SortStableFunc(w.members, func(a, b *Member) int {
		return cmp.Compare(uintptr(unsafe.Pointer(a.woken)), uintptr(unsafe.Pointer(b.woken)))
	})
	for i, m := range w.members {
		m.wake()
		w.members[i] = nil
	}
	w.members = w.members[:0]
	wakesPool.Put(w)
}

// variantOf is how the group's subscribers see r (state.VariantNone: not at
// all), flagged when the filter could not decide (see verdict).
func (g *Group) variantOf(r *state.Record, ev *selection.Evaluation) state.Variant {
	v, undecided := g.sel.Variant(r, ev)
	if v != state.VariantNone && undecided != nil {
		v |= state.UndecidedFlag
	}
	return v
}

// offer queues r, as v, for every subscriber of g; see deliver.
func (d *Dispatcher) offer(g *Group, r *state.Record, v state.Variant, before state.Position, fellBehind *atomic.Uint64) {
	for m := range g.subs {
		if !d.offerTo(m, state.Delivery{Record: r, Variant: v}) {
			d.Remove(m)
			m.fellBehind(before)
			fellBehind.Add(1)
		}
	}
}

// offerTo queues dl for m without waiting, and reports whether there was
// room, keeping the queues' peak; a member whose reader it may have to
// wake goes to toWake.
func (d *Dispatcher) offerTo(m *Member, dl state.Delivery) bool {
	n := m.offer(dl)
	if n == 1 {
		d.toWake = append(d.toWake, m)
	}
	d.peak = max(d.peak, n)
	return n > 0
}

// queuePeakWindow is the window of a queue peak (see queuePeak).
const queuePeakWindow = 30 * time.Second

// TurnPeak starts the window of the queues' peak that now falls in, on a
// grid of queuePeakWindow: peaks older than the previous window are gone.
// The feed calls it before each change is queued, and when it reports the
// peak.
func (d *Dispatcher) TurnPeak(now int64) {
	w := int64(queuePeakWindow)
	switch elapsed := now - d.peakFrom; {
	case elapsed < w: // (or the clock went back)
	case elapsed < 2*w:
		d.prevPeak, d.peak, d.peakFrom = d.peak, 0, d.peakFrom+w
	default:
		d.prevPeak, d.peak, d.peakFrom = 0, 0, now-elapsed%w
	}
}

// QueuePeak returns the most changes a live subscriber's queue held right
// after the feed queued one, over the current window and the one before:
// over at least the last queuePeakWindow, and at most twice that. A
// change is queued under the feed's lock, so the peak is kept as it is,
// and reporting it walks no subscriber.
func (d *Dispatcher) QueuePeak(now int64) int {
	d.TurnPeak(now)
	return max(d.peak, d.prevPeak)
}

// GroupPlan is the records of a relist's batch that a group selects, and
// how: its deliveries, planned before the feed's lock (see planDeliveries).
type GroupPlan struct {
	group      *Group
	deliveries []plannedDelivery
}

// plannedDelivery is the i-th record of a batch, and how a group sees it.
type plannedDelivery struct {
	i       int32
	variant state.Variant
}

// DeliverBatch is deliver for the records of a relist's batch, recorded
// from the position start on, whose deliveries to the groups made up to
// some point were planned before the feed's lock, from a copy of them
// (planDeliveries). It queues for each subscriber of a planned group (one
// that joined it since included) its group's records one after the other,
// rather than each record to every subscriber in turn, so that a
// subscriber's reader wakes for a run of records rather than for each;
// groups made since, newer, are matched under the lock, as deliver would
// (evaluating their filters). A planned group removed since has no
// subscribers left. A subscriber whose queue is full falls behind from the
// position before the record that did not fit.
func (d *Dispatcher) DeliverBatch(batch []*state.Record, start state.Position, plans []GroupPlan, newer []*Group, fellBehind *atomic.Uint64) {
	offer := func(g *Group, deliveries []plannedDelivery) {
		for m := range g.subs {
			for _, p := range deliveries {
				if d.offerTo(m, state.Delivery{Record: batch[p.i], Variant: p.variant}) {
					continue
				}
				before := start
				if p.i > 0 {
					before = batch[p.i-1].Pos
				}
				d.Remove(m)
				m.fellBehind(before)
				fellBehind.Add(1)
				break
			}
		}
	}
	for _, p := range plans {
		offer(p.group, p.deliveries)
	}
	for _, g := range newer {
		var deliveries []plannedDelivery
		for i, r := range batch {
			d.visits++
			// The objects cache what their filters decide.
			if v := g.variantOf(r, nil); v != state.VariantNone {
				deliveries = append(deliveries, plannedDelivery{i: int32(i), variant: v})
			}
		}
		offer(g, deliveries)
	}
}

// Groups returns the live groups, and the number of groups made so
// far, for PlanDeliveries; the caller holds the feed's lock. The groups'
// selectors and triggers never change: a planner reads them without it.
func (d *Dispatcher) Groups() ([]*Group, uint64) {
	groups := make([]*Group, 0, len(d.groups))
	for _, g := range d.groups {
		groups = append(groups, g)
	}
	return groups, d.made
}

// MadeSince returns the live groups made after the first made; the
// caller holds the feed's lock.
func (d *Dispatcher) MadeSince(made uint64) []*Group {
	if d.made == made {
		return nil
	}
	var newer []*Group
	for _, g := range d.groups {
		if g.made > made {
			newer = append(newer, g)
		}
	}
	return newer
}

// PlanDeliveries plans, before the feed's lock, the deliveries of a
// relist's batch to groups, the live groups when the relist began: for
// each group, the records it selects and how, as deliver would find them,
// in a copy of the groups indexed by their triggers. The filters of the
// groups a record may concern are evaluated on it, its objects decoded
// once for all of them. visits counts the groups the records were matched
// against.
func PlanDeliveries(groups []*Group, batch []*state.Record) (plans []GroupPlan, visits uint64) {
	planner := NewDispatcher()
	var filters []*celfilter.Filter
	for _, g := range groups {
		c := &Group{sel: g.sel, trigger: g.trigger, indexed: g.indexed, of: g}
		planner.groups[g.sel.Key()] = c
		planner.index(c)
		if f := g.sel.Filter(); f != nil && !slices.Contains(filters, f) {
			filters = append(filters, f)
		}
	}
	var shared selection.Evaluation
	if len(filters) > 0 {
		shared.Share(filters)
	}
	planOf := map[*Group]int{} // by the copy, the index of the group's plan
	for i, r := range batch {
		ev := shared.Fork()
		planner.candidates(r.Object, r.Previous, func(g *Group) {
			planner.visits++
			v := g.variantOf(r, ev)
			if v == state.VariantNone {
				return
			}
			k, ok := planOf[g]
			if !ok {
				k = len(plans)
				planOf[g] = k
				plans = append(plans, GroupPlan{group: g.of})
			}
			plans[k].deliveries = append(plans[k].deliveries, plannedDelivery{i: int32(i), variant: v})
		})
	}
	return plans, planner.visits
}

// FilterOn is a filter to evaluate on an object.
type FilterOn struct {
	Filter *celfilter.Filter
	Object *state.Object
}

// FiltersFor returns the filters dispatch will evaluate on obj and prev,
// the new and previous state of a change (nil for none): those of the
// groups either may concern whose namespace, label and field selectors
// select them, once each (see feed.Feed.prepare).
func (d *Dispatcher) FiltersFor(obj, prev *state.Object) []FilterOn {
	var plan []FilterOn
	states := [2]*state.Object{obj, prev}
	d.candidates(obj, prev, func(g *Group) {
		if g.sel.Filter() == nil {
			return
		}
		for _, x := range states {
			if x != nil && g.sel.MatchesBase(x) {
				if e := (FilterOn{g.sel.Filter(), x}); !slices.Contains(plan, e) {
					plan = append(plan, e)
				}
			}
		}
	})
	return plan
}

// candidates calls fn with each group whose selector may select obj or
// prev, once: the unindexed groups, and those of the triggers either
// satisfies. fn may remove subscribers of the group it is given.
func (d *Dispatcher) candidates(obj, prev *state.Object, fn func(g *Group)) {
	d.stamp++
	visitOne := func(g *Group) {
		if g.visited != d.stamp {
			g.visited = d.stamp
			fn(g)
		}
	}
	visit := func(set map[*Group]struct{}) {
		for g := range set {
			visitOne(g)
		}
	}
	visit(d.unindexed)
	if len(d.triggered) == 0 && d.sharded.Len() == 0 {
		return
	}
	for i, o := range [2]*state.Object{obj, prev} {
		if o == nil || i == 1 && o == obj {
			continue
		}
		if d.sharded.Len() > 0 {
			d.sharded.Lookup(o.UID, o.Namespace, visitOne)
		}
		if len(d.triggered) == 0 {
			continue
		}
		visit(d.triggered[selection.Trigger{Kind: selection.TriggerName, Value: o.Name}])
		visit(d.triggered[selection.Trigger{Kind: selection.TriggerNamespace, Value: o.Namespace}])
		for key, ft := range d.fields {
			visit(d.triggered[selection.Trigger{Kind: selection.TriggerField, Key: key, Value: o.Field(ft.spec)}])
		}
		if d.labelGroups > 0 {
			for k, v := range o.Labels {
				visit(d.triggered[selection.Trigger{Kind: selection.TriggerLabel, Key: k, Value: v}])
			}
		}
	}
}
