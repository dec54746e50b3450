package informerhub

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"testing"

	"github.com/google/btree"

	"github.com/informerhub/informerhub/informerhub/internal/memory"
)

// TestHistoryCountsEachObjectItKeepsAliveOnce drives a history through
// random changes, relists and evictions, as a feed does, and checks after
// each step that what it counts is what it alone keeps alive:
// recordOverhead per record, and the size of each distinct object its
// records reference that the state no longer holds (previous states,
// deleted objects), once.
func TestHistoryCountsEachObjectItKeepsAliveOnce(t *testing.T) {
	mem := memory.New(1<<40, slog.New(slog.DiscardHandler), nil)
	h := newHistory(8, 6000, 1, 0, mem.History)
	state := map[string]*object{}
	rnd := rand.New(rand.NewPCG(1, 2))
	seq, rv := uint64(0), uint64(1)
	obj := func(name string) *object {
		rv++
		return &object{namespace: "ns", name: name, uid: name, rv: rv,
			json: fmt.Sprintf(`{"metadata":{"name":%q,"resourceVersion":"%d"},"data":%q}`, name, rv, make([]byte, rnd.IntN(400)))}
	}
	push := func(typ EventType, o, prev *object) {
		seq++
		h.push(&record{pos: position{seq: seq, rv: rv}, rv: rv, typ: typ, obj: o, prev: prev})
	}
	change := func() {
		name := fmt.Sprint(rnd.IntN(6))
		prev, exists := state[name]
		switch {
		case !exists:
			o := obj(name)
			state[name] = o
			push(EventAdded, o, nil)
		case rnd.IntN(3) == 0:
			// A watch's DELETED carries the final state, a new object.
			delete(state, name)
			push(EventDeleted, obj(name), prev)
		default:
			o := obj(name)
			state[name] = o
			push(EventModified, o, prev)
		}
	}
	relist := func() {
		h.beginRelist()
		defer h.endRelist()
		for name, prev := range state {
			if rnd.IntN(2) == 0 {
				// A relist's DELETED is the object's last known state.
				delete(state, name)
				push(EventDeleted, prev, prev)
			}
		}
	}
	for step := range 2000 {
		switch n := rnd.IntN(20); {
		case n == 0:
			relist()
		case n == 1 && h.len() > 1:
			h.evict() // as the hub's memory budget does
		default:
			change()
		}
		checkHistoryCount(t, step, &h, state)
	}
	if mem.History.Used() != h.bytes() {
		t.Fatalf("the hub's memory counts %d bytes of history, the history %d", mem.History.Used(), h.bytes())
	}
	h.release()
	if got := mem.History.Used(); got != 0 {
		t.Fatalf("a released history still counts %d bytes in the hub's memory", got)
	}
}

func checkHistoryCount(t *testing.T, step int, h *history, state map[string]*object) {
	t.Helper()
	want, relist := int64(0), int64(0)
	seen := map[*object]bool{}
	for _, o := range state {
		seen[o] = true // the state's to count
	}
	for seq := h.first; seq <= h.last; seq++ {
		r, _ := h.get(seq)
		want += recordOverhead
		for _, o := range [2]*object{r.obj, r.prev} {
			if o != nil && !seen[o] {
				seen[o] = true
				want += objectSize(o)
			}
		}
		if h.inRelist(seq) {
			relist += r.counted
		}
	}
	if h.recordBytes != want {
		t.Fatalf("step %d: the history counts %d bytes for %d records, they hold %d", step, h.recordBytes, h.len(), want)
	}
	if h.relistBytes != relist {
		t.Fatalf("step %d: the relist's records count %d bytes, want %d", step, h.relistBytes, relist)
	}
}

// TestLabelIndexCountsItsEntries: a label index counts an entry per indexed
// object and a tree per value, as objects come, change label and go.
func TestLabelIndexCountsItsEntries(t *testing.T) {
	mem := memory.New(1<<40, slog.New(slog.DiscardHandler), nil)
	x := newLabelIndex(mem.Indexes)
	state := btree.NewG(btreeDegree, objectLess)
	put := func(name, team string) *object {
		o := &object{namespace: "ns", name: name, labels: map[string]string{"team": team}}
		prev, _ := state.ReplaceOrInsert(o)
		x.update(prev, o)
		return o
	}
	put("a", "x")
	build := &indexBuild{pair: labelPair{"team", "x"}, freelist: x.freelist}
	build.run(state)
	x.install(build)
	put("b", "x")
	put("c", "y")
	put("a", "y") // moves from x to y
	if want := int64(3*labelIndexEntryBytes + 2*labelIndexValueBytes); x.bytes.Used() != want {
		t.Fatalf("index of 3 objects over 2 values counts %d bytes, want %d", x.bytes.Used(), want)
	}
	b, _ := state.Delete(&object{namespace: "ns", name: "b"})
	x.update(b, nil) // x has no object left
	if want := int64(2*labelIndexEntryBytes + labelIndexValueBytes); mem.Indexes.Used() != want {
		t.Fatalf("index of 2 objects over 1 value counts %d bytes in the hub's memory, want %d", mem.Indexes.Used(), want)
	}
	x.release()
	if got := mem.Held.Used(); got != 0 {
		t.Fatalf("a released index still counts %d bytes", got)
	}
}
