package fanout

import (
	"errors"
	"sync/atomic"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/informerhub/informerhub/informerhub/budget"
	"github.com/informerhub/informerhub/informerhub/internal/event"
	"github.com/informerhub/informerhub/informerhub/internal/selection"
	"github.com/informerhub/informerhub/informerhub/internal/state"
	"github.com/informerhub/informerhub/informerhub/upstream"
)

// failures is a subscription as its member's dispatcher fails it.
type failures struct{ err error }

func (f *failures) Fail(err error) {
	if f.err == nil {
		f.err = err
	}
}

var configMaps = upstream.ResourceInfo{Resource: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Namespaced: true}

func parse(t *testing.T, spec selection.Spec) *selection.Selector {
	t.Helper()
	spec.Resource = configMaps.Resource
	sel, err := selection.Parse(spec, configMaps, &selection.Limits{MaxSelectorLength: 4096, MaxSelectorTerms: 64}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return sel
}

// join makes a live member of d for sel, with a queue of limit.
func join(d *Dispatcher, sel *selection.Selector, limit int) (*Member, *failures) {
	m, f := &Member{}, &failures{}
	m.Init(sel, f, make(chan struct{}, 1), nil)
	m.Join(d, budget.Counter(nil), limit, false)
	return m, f
}

func record(seq uint64, name string, labels map[string]string, prev *state.Object) *state.Record {
	o := &state.Object{Namespace: "ns", Name: name, UID: name, RV: seq, Labels: labels, JSON: "{}"}
	typ := event.Added
	if prev != nil {
		typ = event.Modified
	}
	return &state.Record{Pos: state.Position{Seq: seq, RV: seq}, RV: seq, Type: typ, Object: o, Previous: prev}
}

// TestADispatcherVisitsTheGroupsAChangeConcerns: subscribers of one
// selector share a group, a change visits only the groups whose trigger its
// object (or its previous state) satisfies and the unindexed ones, and each
// member gets the record in the variant its selector sees it.
func TestADispatcherVisitsTheGroupsAChangeConcerns(t *testing.T) {
	d := new(Dispatcher)
	*d = NewDispatcher()
	byName, _ := join(d, parse(t, selection.Spec{FieldSelector: "metadata.name=a"}), 10)
	sameName, _ := join(d, parse(t, selection.Spec{FieldSelector: "metadata.name=a"}), 10)
	other, _ := join(d, parse(t, selection.Spec{FieldSelector: "metadata.name=b"}), 10)
	web, _ := join(d, parse(t, selection.Spec{LabelSelector: "app=web"}), 10)
	all, _ := join(d, parse(t, selection.Spec{}), 10)
	if d.GroupCount() != 4 || d.SubscriberCount() != 5 {
		t.Fatalf("%d groups of %d subscribers, want 4 of 5", d.GroupCount(), d.SubscriberCount())
	}
	var fellBehind atomic.Uint64
	r := record(1, "a", map[string]string{"app": "db"}, nil)
	d.Deliver(r, nil, state.Position{}, &fellBehind)
	if v := d.VisitCount(); v != 2 { // name=a, and the unindexed group
		t.Errorf("the change visited %d groups, want 2", v)
	}
	for name, m := range map[string]*Member{"name=a": byName, "name=a again": sameName, "all": all} {
		if dl, ok := m.Reader().Pop(); !ok || dl.Record != r || dl.Variant != state.VariantOwn {
			t.Errorf("%s: got %+v, %v; want the record as it is", name, dl, ok)
		}
	}
	for name, m := range map[string]*Member{"name=b": other, "app=web": web} {
		if n := m.Reader().Pending(); n != 0 {
			t.Errorf("%s: %d deliveries, want none", name, n)
		}
	}
	// a leaves app=db for app=web: it enters that selector, as ADDED.
	r2 := record(2, "a", map[string]string{"app": "web"}, r.Object)
	d.Deliver(r2, nil, r.Pos, &fellBehind)
	if dl, ok := web.Reader().Pop(); !ok || dl.Record != r2 || dl.Variant != state.VariantEnter {
		t.Errorf("app=web: got %+v, %v; want the record entering", dl, ok)
	}
}

// TestAFullQueueFallsBehindRatherThanWaits: a member whose queue is full
// leaves the live subscribers at the position before the record that did
// not fit; End fails the others.
func TestAFullQueueFallsBehindRatherThanWaits(t *testing.T) {
	d := new(Dispatcher)
	*d = NewDispatcher()
	slow, slowFails := join(d, parse(t, selection.Spec{}), 1)
	fast, fastFails := join(d, parse(t, selection.Spec{}), 10)
	var fellBehind atomic.Uint64
	r1, r2 := record(1, "a", nil, nil), record(2, "b", nil, nil)
	d.Deliver(r1, nil, state.Position{}, &fellBehind)
	d.Deliver(r2, nil, r1.Pos, &fellBehind)
	if !slow.Reader().IsBehind() || slow.FellBehindAt() != r1.Pos || fellBehind.Load() != 1 {
		t.Fatalf("slow: behind %v at %+v (%d fell behind); want behind at %+v", slow.Reader().IsBehind(), slow.FellBehindAt(), fellBehind.Load(), r1.Pos)
	}
	if fast.Reader().IsBehind() || fast.Reader().Pending() != 2 || d.SubscriberCount() != 1 {
		t.Fatalf("fast: behind %v with %d pending, %d live; want 2 pending, 1 live", fast.Reader().IsBehind(), fast.Reader().Pending(), d.SubscriberCount())
	}
	stopped := errors.New("stopped")
	d.End(stopped)
	if fastFails.err != stopped || slowFails.err != nil || d.SubscriberCount() != 0 {
		t.Fatalf("End failed the live one with %v, the one behind with %v; %d left", fastFails.err, slowFails.err, d.SubscriberCount())
	}
}
