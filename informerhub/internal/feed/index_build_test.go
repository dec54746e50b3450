package feed

import (
	"fmt"
	"log/slog"
	"slices"
	"testing"

	"github.com/google/btree"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/informerhub/informerhub/informerhub/internal/event"
	"github.com/informerhub/informerhub/informerhub/internal/memory"
	"github.com/informerhub/informerhub/informerhub/internal/selection"
	"github.com/informerhub/informerhub/informerhub/internal/state"
	"github.com/informerhub/informerhub/informerhub/upstream"
)

// indexStore is a synced store of labelIndexMinObjects+100 objects, a
// third with team=a, a third team=b, a third without the label, changed
// as a feed's handler changes it.
type indexStore struct {
	st *store
	rv uint64
}

func newIndexStore(t *testing.T, historySize int) *indexStore {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	deps := Deps{HistorySize: historySize, HistoryBytes: 1 << 30, Memory: memory.New(1<<40, log, nil)}
	x := &indexStore{st: newStore(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, 1, &deps, log)}
	var objs []*state.Object
	for i := range LabelIndexMinObjects + 100 {
		objs = append(objs, x.object(fmt.Sprint("o", i), []string{"a", "b", ""}[i%3]))
	}
	x.st.sync(stateOf(objs), x.rv)
	return x
}

// object returns the next state of an object, with the label team=team
// ("": without it).
func (x *indexStore) object(name, team string) *state.Object {
	x.rv++
	o := &state.Object{Namespace: "ns", Name: name, UID: name, RV: x.rv}
	if team != "" {
		o.Labels = labels.Set{"team": team}
	}
	return o
}

// put adds or modifies an object, as a watch's change does.
func (x *indexStore) put(name, team string) {
	o := x.object(name, team)
	prev, existed := x.st.put(o)
	x.st.record(&state.Record{Type: typeOf(existed), Object: o, Previous: prev, RV: o.RV}, 0)
}

// delete deletes an object, as a watch's change does: its final state,
// which the event carries, has the label final.
func (x *indexStore) delete(name, final string) {
	o := x.object(name, final)
	prev, _ := x.st.delete(o)
	x.st.record(&state.Record{Type: event.Deleted, Object: o, Previous: prev, RV: o.RV}, 0)
}

func (x *indexStore) cloneFor(t *testing.T, labelSelector string) (*btree.BTreeG[*state.Object], *selection.LabelPair, *IndexBuild) {
	t.Helper()
	cm := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	sel, err := selection.Parse(selection.Spec{Resource: cm, LabelSelector: labelSelector}, upstream.ResourceInfo{Resource: cm, Namespaced: true},
		&selection.Limits{MaxSelectorLength: 4096, MaxSelectorTerms: 64}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return x.st.cloneFor(sel)
}

// names returns the names of tree's objects that carry team=team, in order.
func names(tree *btree.BTreeG[*state.Object], team string) []string {
	var out []string
	tree.Ascend(func(o *state.Object) bool {
		if team == "" || o.Labels["team"] == team {
			out = append(out, o.Name)
		}
		return true
	})
	return out
}

// checkTeamIndex checks that the index of team holds exactly the state's
// objects with each value, and counts what it holds.
func checkTeamIndex(t *testing.T, st *store) {
	t.Helper()
	values, ok := st.index.keys["team"]
	if !ok {
		t.Fatal("team is not indexed")
	}
	entries := 0
	for _, team := range []string{"a", "b", "c"} {
		var got []string
		if tree := values[team]; tree != nil {
			got = names(tree, "")
			entries += len(got)
		}
		if want := names(st.state, team); !slices.Equal(got, want) {
			t.Fatalf("team=%s: the index holds %d objects, the state %d (or others)", team, len(got), len(want))
		}
	}
	if want := int64(entries*labelIndexEntryBytes + len(values)*labelIndexValueBytes); st.index.bytes.Used() != want {
		t.Fatalf("the index counts %d bytes, want %d", st.index.bytes.Used(), want)
	}
}

// TestAnIndexBuiltWithoutTheLockFollowsTheChangesMadeMeanwhile: the
// request that asks first for team=a gets a clone of the state and the
// build of team's index; requests meanwhile scan. Built from the clone,
// the index gives the request the objects of its clone with team=a, and
// once installed it holds the state's, changes made meanwhile included.
func TestAnIndexBuiltWithoutTheLockFollowsTheChangesMadeMeanwhile(t *testing.T) {
	x := newIndexStore(t, 100)
	tree, eq, b := x.cloneFor(t, "team=a")
	if eq != nil || b == nil {
		t.Fatalf("first request of team=a: equality %v, build %v; want the state, and a build", eq, b)
	}
	if _, eq, other := x.cloneFor(t, "team=b"); eq != nil || other != nil {
		t.Fatalf("a request of team=b while team is being indexed: equality %v, build %v; want the state and none", eq, other)
	}
	want := names(tree, "a")

	x.put("new-a", "a")   // added with the label
	x.put("new-none", "") // added without
	x.put("o0", "b")      // a to b
	x.put("o1", "c")      // b to a new value
	x.put("o3", "a")      // keeps its value
	x.put("o2", "a")      // gains the label
	x.delete("o6", "b")   // deleted, a in the state, b in its final state
	x.delete("o5", "")    // deleted, unlabeled

	narrowed := b.run(tree)
	if got := names(narrowed, ""); !slices.Equal(got, want) {
		t.Fatalf("the request's tree holds %d objects, its clone %d with team=a", len(got), len(want))
	}
	if !x.st.installIndex(b) {
		t.Fatal("the index was not installed")
	}
	checkTeamIndex(t, x.st)
	if _, eq, b := x.cloneFor(t, "team=b"); eq == nil || *eq != (selection.LabelPair{Key: "team", Value: "b"}) || b != nil {
		t.Fatalf("a request of team=b once team is indexed: equality %v, build %v; want team=b's tree", eq, b)
	}
	x.put("o9", "c")
	checkTeamIndex(t, x.st)
}

// TestAnIndexBuildIsGivenUpWhenItCannotFollow: a build whose changes
// meanwhile the history no longer holds all, or of a feed that stopped,
// is not installed, counts nothing, and the next request builds again.
func TestAnIndexBuildIsGivenUpWhenItCannotFollow(t *testing.T) {
	t.Run("history moved past it", func(t *testing.T) {
		x := newIndexStore(t, 4)
		tree, _, b := x.cloneFor(t, "team=a")
		for i := range 10 {
			x.put(fmt.Sprint("o", i), "b")
		}
		b.run(tree)
		if x.st.installIndex(b) {
			t.Fatal("installed an index missing changes")
		}
		if _, ok := x.st.index.keys["team"]; ok || x.st.index.bytes.Used() != 0 {
			t.Fatalf("team indexed %v, the index counts %d bytes; want neither", ok, x.st.index.bytes.Used())
		}
		if _, _, again := x.cloneFor(t, "team=a"); again == nil {
			t.Fatal("the next request of team=a builds nothing")
		}
	})
	t.Run("stopped", func(t *testing.T) {
		x := newIndexStore(t, 100)
		tree, _, b := x.cloneFor(t, "team=a")
		b.run(tree)
		x.st.release()
		if x.st.installIndex(b) || x.st.index.bytes.Used() != 0 {
			t.Fatalf("installed in a stopped feed's store, counting %d bytes", x.st.index.bytes.Used())
		}
	})
}

// TestLabelIndexCountsItsEntries: a label index counts an entry per indexed
// object and a tree per value, as objects come, change label and go.
func TestLabelIndexCountsItsEntries(t *testing.T) {
	mem := memory.New(1<<40, slog.New(slog.DiscardHandler), nil)
	x := newLabelIndex(mem.Indexes)
	objects := btree.NewG(btreeDegree, state.ObjectLess)
	put := func(name, team string) *state.Object {
		o := &state.Object{Namespace: "ns", Name: name, Labels: map[string]string{"team": team}}
		prev, _ := objects.ReplaceOrInsert(o)
		x.update(prev, o)
		return o
	}
	put("a", "x")
	build := &IndexBuild{pair: selection.LabelPair{Key: "team", Value: "x"}, freelist: x.freelist}
	build.run(objects)
	x.install(build)
	put("b", "x")
	put("c", "y")
	put("a", "y") // moves from x to y
	if want := int64(3*labelIndexEntryBytes + 2*labelIndexValueBytes); x.bytes.Used() != want {
		t.Fatalf("index of 3 objects over 2 values counts %d bytes, want %d", x.bytes.Used(), want)
	}
	b, _ := objects.Delete(&state.Object{Namespace: "ns", Name: "b"})
	x.update(b, nil) // x has no object left
	if want := int64(2*labelIndexEntryBytes + labelIndexValueBytes); mem.Indexes.Used() != want {
		t.Fatalf("index of 2 objects over 1 value counts %d bytes in the hub's memory, want %d", mem.Indexes.Used(), want)
	}
	x.release()
	if got := mem.Held.Used(); got != 0 {
		t.Fatalf("a released index still counts %d bytes", got)
	}
}
