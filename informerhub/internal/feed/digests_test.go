package feed

import (
	"fmt"
	"log/slog"
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/informerhub/informerhub/informerhub/digest"
	"github.com/informerhub/informerhub/informerhub/internal/event"
	"github.com/informerhub/informerhub/informerhub/internal/memory"
	"github.com/informerhub/informerhub/informerhub/internal/state"
)

// assertDigestsOfState checks that the digests a store kept up are those
// of its state, in all and in each namespace, and that it keeps none for
// a namespace without objects.
func assertDigestsOfState(t *testing.T, st *store, when string) {
	t.Helper()
	want := namespaceDigests{}
	var all digest.Set
	st.state.Ascend(func(o *state.Object) bool {
		h := digest.OfRV(o.Namespace, o.Name, o.UID, o.RV)
		want.add(o.Namespace, h)
		all.Add(h)
		return true
	})
	if !st.digests.all.Equal(all) {
		t.Errorf("%s: the kept digest of all is %v of %d, the state's %v of %d", when, st.digests.all, st.digests.all.Count(), all, all.Count())
	}
	if !maps.EqualFunc(st.digests.byNamespace, want, func(a, b *digest.Set) bool { return a.Equal(*b) }) {
		t.Errorf("%s: the kept digests per namespace differ from the state's: %d namespaces kept, %d in the state", when, len(st.digests.byNamespace), len(want))
	}
	for ns := range want {
		if got := st.digests.of(ns); !got.Equal(*want[ns]) {
			t.Errorf("%s: of(%q) = %v, want %v", when, ns, got, want[ns])
		}
	}
}

// TestTheStoreKeepsTheDigestsOfItsState changes a store as watches and
// relists do, and compares its digests with the state's after each step.
func TestTheStoreKeepsTheDigestsOfItsState(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	deps := Deps{HistorySize: 100, HistoryBytes: 1 << 30, Memory: memory.New(1<<40, log, nil)}
	st := newStore(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, 1, &deps, log)
	rv := uint64(0)
	generation := 0 // of the uids
	object := func(ns, name string) *state.Object {
		rv++
		o, err := state.NewObject(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			UID: types.UID(fmt.Sprint(ns, "/", name, "/", generation)), ResourceVersion: fmt.Sprint(rv)}})
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	var listed []*state.Object
	for i := range 30 {
		listed = append(listed, object(fmt.Sprint("ns-", i%3), fmt.Sprint("cm-", i)))
	}
	// Read back from disk: an object without the hash NewObject computes.
	listed = append(listed, &state.Object{Namespace: "from-disk", Name: "cm", UID: "u", RV: 1})
	st.sync(stateOf(listed), rv)
	assertDigestsOfState(t, st, "after the first list")

	st.put(object("ns-0", "cm-0"))   // modified
	st.put(object("ns-9", "cm-new")) // added, in a new namespace
	st.delete(object("ns-1", "cm-1"))
	st.delete(object("from-disk", "cm")) // the namespace's last
	st.delete(object("ns-1", "absent"))
	assertDigestsOfState(t, st, "after a watch's changes")

	// A relist as prepared without the lock, then applied at once.
	var relisted []*state.Object
	st.state.Ascend(func(o *state.Object) bool {
		switch {
		case o.Namespace == "ns-2": // deleted, all of the namespace
		case o.Name == "cm-3": // deleted and created again
			generation++
			relisted = append(relisted, object(o.Namespace, o.Name))
			generation--
		case o.Name == "cm-4":
			relisted = append(relisted, object(o.Namespace, o.Name))
		default:
			relisted = append(relisted, o)
		}
		return true
	})
	relisted = append(relisted, object("ns-7", "cm-relisted"))
	changes := differences(st.state, relisted)
	if kinds := countTypes(changes); kinds[event.Added] != 2 || kinds[event.Deleted] != 11 || kinds[event.Modified] != 1 {
		t.Fatalf("the relist's changes are %v: not the added, deleted and modified objects the test made", kinds)
	}
	st.applyAll(changes, applied(st.state, changes))
	assertDigestsOfState(t, st, "after a relist applied at once")

	// And one applied change by change, under the lock.
	relisted = relisted[:len(relisted)-2]
	for _, r := range differences(st.state, relisted) {
		if r.Type == event.Deleted && r.Object == nil {
			t.Fatal("a relist's deletion without its object")
		}
		st.apply(r)
	}
	assertDigestsOfState(t, st, "after a relist applied change by change")
}

func countTypes(records []*state.Record) map[event.Type]int {
	n := map[event.Type]int{}
	for _, r := range records {
		n[r.Type]++
	}
	return n
}

// TestACheckRepairsKeptDigestsThatAreNotTheStates: from the state's
// digests at a position (the check digests a clone) and the history's
// records since, repairDigests makes the kept digests the state's again;
// when the history no longer holds those records, it leaves them.
func TestACheckRepairsKeptDigestsThatAreNotTheStates(t *testing.T) {
	for _, historySize := range []int{100, 2} {
		x := newIndexStore(t, historySize)
		f := &Feed{store: x.st}
		seq, at := x.st.pos.Seq, digestsOf(x.st.state)
		x.put("o1", "a")                                             // modified
		x.put("new", "b")                                            // added
		x.delete("o2", "")                                           // deleted
		x.st.digests = stateDigests{byNamespace: namespaceDigests{}} // a bug's
		repaired := f.repairDigests(at, seq)
		if historySize == 2 {
			if repaired {
				t.Error("repaired from a history that no longer holds the changes since the digested position")
			}
			continue
		}
		if !repaired {
			t.Fatal("not repaired, with the changes in the history")
		}
		assertDigestsOfState(t, x.st, "after the repair")
	}
}

// TestAPlannedRelistKeepsTheDigestsOfWhatTheTreeDid: a list that holds an
// object twice (no API server sends one) changes the state as the tree
// does, and the digests follow the tree, not the records.
func TestAPlannedRelistKeepsTheDigestsOfWhatTheTreeDid(t *testing.T) {
	x := newIndexStore(t, 100)
	var listed []*state.Object
	x.st.state.Ascend(func(o *state.Object) bool {
		listed = append(listed, o)
		return true
	})
	listed = append(listed, x.object("twice", "a"), x.object("twice", "b"))
	changes := differences(x.st.state, listed)
	x.st.applyAll(changes, applied(x.st.state, changes))
	assertDigestsOfState(t, x.st, "after a relist listing an object twice")
}
