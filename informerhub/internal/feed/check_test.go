package feed

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/google/btree"
	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/informerhub/informerhub/informerhub/digest"
	"github.com/informerhub/informerhub/informerhub/internal/state"
	"github.com/informerhub/informerhub/informerhub/upstream"
)

// pagedList answers LISTs from objs, two objects a page, as an API server
// does at one resourceVersion; failAt, when set, fails the page it names
// (0 the first) with err.
type pagedList struct {
	rv     string // the resourceVersion it answers at; "": as asked
	objs   []*upstream.Object
	failAt int
	err    error
	pages  []metav1.ListOptions
}

func (p *pagedList) list(_ context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	page := len(p.pages)
	p.pages = append(p.pages, opts)
	if p.err != nil && page == p.failAt {
		return nil, p.err
	}
	start := 0
	if opts.Continue != "" {
		start, _ = strconv.Atoi(opts.Continue)
	}
	end := min(start+int(opts.Limit), len(p.objs))
	list := &upstream.ObjectList{Items: p.objs[start:end]}
	list.ResourceVersion = p.rv
	if p.rv == "" && opts.Continue == "" {
		list.ResourceVersion = opts.ResourceVersion // as asked
	} else if p.rv == "" {
		list.ResourceVersion = p.pages[0].ResourceVersion
	}
	if end < len(p.objs) {
		list.Continue = strconv.Itoa(end)
	}
	return list, nil
}

func (p *pagedList) lw() cache.ListerWatcher {
	return &cache.ListWatch{ListWithContextFunc: p.list}
}

func apiObject(ns, name, uid, rv string) *upstream.Object {
	return &upstream.Object{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid), ResourceVersion: rv}}
}

func hubState(objs ...*state.Object) *btree.BTreeG[*state.Object] {
	t := btree.NewG(32, state.ObjectLess)
	for _, o := range objs {
		t.ReplaceOrInsert(o)
	}
	return t
}

func TestACheckListsExactlyAtThePositionPageByPage(t *testing.T) {
	p := &pagedList{objs: []*upstream.Object{apiObject("a", "x", "u1", "5"), apiObject("a", "y", "u2", "6"), apiObject("b", "x", "u3", "7")}}
	var got digest.Set
	if err := listExact(t.Context(), p.lw(), 7, 2, nil, func(ns, name, uid, rv string) { got.Add(digest.Of(ns, name, uid, rv)) }); err != nil {
		t.Fatal(err)
	}
	perNS, err := digestTree(t.Context(), hubState(
		&state.Object{Namespace: "a", Name: "x", UID: "u1", RV: 5},
		&state.Object{Namespace: "a", Name: "y", UID: "u2", RV: 6},
		&state.Object{Namespace: "b", Name: "x", UID: "u3", RV: 7}), nil)
	want := perNS.total()
	if err != nil || !got.Equal(want) || len(perNS) != 2 || perNS["a"].Count() != 2 {
		t.Errorf("the API server's digest %v (%d objects), the state's %v (%d), %v; want equal", got, got.Count(), want, want.Count(), err)
	}
	// The first page at exactly 7; the next by their continue tokens alone,
	// as the API server requires.
	wantPages := []metav1.ListOptions{
		{ResourceVersion: "7", ResourceVersionMatch: metav1.ResourceVersionMatchExact, Limit: 2},
		{Continue: "2", Limit: 2},
	}
	if diff := cmp.Diff(wantPages, p.pages); diff != "" {
		t.Errorf("LIST options (-want +got):\n%s", diff)
	}
}

func TestACompactedPositionIsNotADivergence(t *testing.T) {
	expired := apierrors.NewResourceExpired("too old resource version: 7 (9)")
	for _, failAt := range []int{0, 1} { // the first page, or a continue token
		p := &pagedList{objs: []*upstream.Object{apiObject("a", "x", "u1", "5"), apiObject("a", "y", "u2", "6"), apiObject("b", "x", "u3", "7")},
			failAt: failAt, err: expired}
		err := listExact(t.Context(), p.lw(), 7, 2, nil, func(string, string, string, string) {})
		if got := listOutcome(err); got != CheckCompacted {
			t.Errorf("410 at page %d: %v (%v), want compacted", failAt, got, err)
		}
	}
	// An API server that answers at another version (an aggregated API
	// that ignores resourceVersionMatch) proves nothing: a failure, not a
	// divergence.
	p := &pagedList{rv: "9", objs: []*upstream.Object{apiObject("a", "x", "u1", "9")}}
	if err := listExact(t.Context(), p.lw(), 7, 2, nil, func(string, string, string, string) {}); !errors.Is(err, errNotExact) || listOutcome(err) != CheckFailed {
		t.Errorf("a LIST at 9 for 7: %v, want errNotExact, failed", err)
	}
	if got := listOutcome(apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "", errors.New("no"))); got != CheckFailed {
		t.Errorf("403: %v, want failed", got)
	}
}

func TestADivergedCheckNamesTheFirstObjectsThatDiffer(t *testing.T) {
	hub := hubState(
		&state.Object{Namespace: "a", Name: "same", UID: "u1", RV: 5},
		&state.Object{Namespace: "a", Name: "stale", UID: "u2", RV: 6},   // the API server has it at 8
		&state.Object{Namespace: "a", Name: "deleted", UID: "u3", RV: 4}, // the API server no longer has it
		&state.Object{Namespace: "b", Name: "recreated", UID: "old", RV: 3},
	)
	p := &pagedList{objs: []*upstream.Object{
		apiObject("a", "same", "u1", "5"), apiObject("a", "stale", "u2", "8"),
		apiObject("b", "recreated", "new", "7"), apiObject("c", "added", "u9", "9"),
	}}
	named, n, err := differencesAt(t.Context(), p.lw(), 9, 2, hub, nil, map[string]bool{"a": true, "b": true, "c": true})
	if err != nil {
		t.Fatal(err)
	}
	want := []Difference{
		{Namespace: "a", Name: "stale", HubUID: "u2", HubRV: "6", APIServerUID: "u2", APIRV: "8"},
		{Namespace: "b", Name: "recreated", HubUID: "old", HubRV: "3", APIServerUID: "new", APIRV: "7"},
		{Namespace: "c", Name: "added", APIServerUID: "u9", APIRV: "9"},
		{Namespace: "a", Name: "deleted", HubUID: "u3", HubRV: "4"},
	}
	if diff := cmp.Diff(want, named); diff != "" || n != 4 {
		t.Errorf("%d differences (-want +got):\n%s", n, diff)
	}

	// At most maxNamedDifferences are named; all are counted.
	var many []*upstream.Object
	for i := range 2 * maxNamedDifferences {
		many = append(many, apiObject("a", strconv.Itoa(i), "u", "1"))
	}
	named, n, err = differencesAt(t.Context(), (&pagedList{objs: many}).lw(), 9, 3, hubState(), nil, map[string]bool{"a": true})
	if err != nil || len(named) != maxNamedDifferences || n != 2*maxNamedDifferences {
		t.Errorf("named %d of %d (%v), want %d of %d", len(named), n, err, maxNamedDifferences, 2*maxNamedDifferences)
	}
}

// TestOnlyTheNamespacesThatDifferAreCompared: a divergence is named from
// the namespaces whose digests differ; the others are not held in a map,
// and an object that differs there is not named.
func TestOnlyTheNamespacesThatDifferAreCompared(t *testing.T) {
	hub := hubState(
		&state.Object{Namespace: "a", Name: "x", UID: "u1", RV: 5},
		&state.Object{Namespace: "b", Name: "x", UID: "u2", RV: 6},
	)
	p := &pagedList{objs: []*upstream.Object{apiObject("a", "x", "u1", "8"), apiObject("b", "x", "u2", "9")}}
	named, n, err := differencesAt(t.Context(), p.lw(), 9, 2, hub, nil, map[string]bool{"b": true})
	want := []Difference{{Namespace: "b", Name: "x", HubUID: "u2", HubRV: "6", APIServerUID: "u2", APIRV: "9"}}
	if diff := cmp.Diff(want, named); err != nil || diff != "" || n != 1 {
		t.Errorf("%d differences, %v (-want +got):\n%s", n, err, diff)
	}
}

// TestARelistIsAskedOnce: relist ends the informer's watch and fails the
// next, unless the informer listed meanwhile (a LIST, or a watch that
// lists): then the relist asked for has happened, and the next watch
// opens. A failed watch of a relist is no restart.
func TestARelistIsAskedOnce(t *testing.T) {
	var restarts atomic.Uint64
	lw := newCountedListerWatcher(&cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			return &upstream.ObjectList{}, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) { return watch.NewFake(), nil },
	}, &restarts, func(error) {})
	open := func(initial bool) (watch.Interface, error) {
		opts := metav1.ListOptions{}
		if initial {
			opts.SendInitialEvents = ptr.To(true)
		}
		return lw.WatchWithContext(t.Context(), opts)
	}
	w, err := open(false)
	if err != nil {
		t.Fatal(err)
	}
	lw.relist()
	if _, ok := <-w.ResultChan(); ok {
		t.Fatal("the watch went on after relist")
	}
	if _, err := open(false); !errors.Is(err, errRelist) {
		t.Fatalf("the next watch: %v, want errRelist", err)
	}
	if _, err := open(false); err != nil {
		t.Fatalf("the watch after the failed one: %v; the relist was asked once", err)
	}
	if restarts.Load() != 1 {
		t.Errorf("%d restarts, want 1: a watch failed for a relist is none", restarts.Load())
	}

	// Listed meanwhile: by a LIST, or by a watch that lists.
	lw.relist()
	if _, err := lw.ListWithContext(t.Context(), metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := open(false); err != nil {
		t.Fatalf("a watch after the LIST: %v, want it open", err)
	}
	lw.relist()
	if _, err := open(true); err != nil {
		t.Fatalf("a watch that lists: %v, want it open", err)
	}
	if _, err := open(false); err != nil {
		t.Fatalf("a watch after a watch that listed: %v, want it open", err)
	}
}
