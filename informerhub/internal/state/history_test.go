package state

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"testing"

	"github.com/informerhub/informerhub/informerhub/internal/event"
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
	h := NewHistory(8, 6000, 1, 0, mem.History)
	objects := map[string]*Object{}
	rnd := rand.New(rand.NewPCG(1, 2))
	seq, rv := uint64(0), uint64(1)
	obj := func(name string) *Object {
		rv++
		return &Object{Namespace: "ns", Name: name, UID: name, RV: rv,
			JSON: fmt.Sprintf(`{"metadata":{"name":%q,"resourceVersion":"%d"},"data":%q}`, name, rv, make([]byte, rnd.IntN(400)))}
	}
	push := func(typ event.Type, o, prev *Object) {
		seq++
		h.Push(&Record{Pos: Position{Seq: seq, RV: rv}, RV: rv, Type: typ, Object: o, Previous: prev})
	}
	change := func() {
		name := fmt.Sprint(rnd.IntN(6))
		prev, exists := objects[name]
		switch {
		case !exists:
			o := obj(name)
			objects[name] = o
			push(event.Added, o, nil)
		case rnd.IntN(3) == 0:
			// A watch's DELETED carries the final state, a new object.
			delete(objects, name)
			push(event.Deleted, obj(name), prev)
		default:
			o := obj(name)
			objects[name] = o
			push(event.Modified, o, prev)
		}
	}
	relist := func() {
		h.BeginRelist()
		defer h.EndRelist()
		for name, prev := range objects {
			if rnd.IntN(2) == 0 {
				// A relist's DELETED is the object's last known
				delete(objects, name)
				push(event.Deleted, prev, prev)
			}
		}
	}
	for step := range 2000 {
		switch n := rnd.IntN(20); {
		case n == 0:
			relist()
		case n == 1 && h.Len() > 1:
			h.Evict() // as the hub's memory budget does
		default:
			change()
		}
		checkHistoryCount(t, step, &h, objects)
	}
	if mem.History.Used() != h.Bytes() {
		t.Fatalf("the hub's memory counts %d bytes of history, the history %d", mem.History.Used(), h.Bytes())
	}
	h.Release()
	if got := mem.History.Used(); got != 0 {
		t.Fatalf("a released history still counts %d bytes in the hub's memory", got)
	}
}

func checkHistoryCount(t *testing.T, step int, h *History, objects map[string]*Object) {
	t.Helper()
	want, relist := int64(0), int64(0)
	seen := map[*Object]bool{}
	for _, o := range objects {
		seen[o] = true // the state's to count
	}
	for seq := h.First; seq <= h.Last; seq++ {
		r, _ := h.Get(seq)
		want += RecordOverhead
		for _, o := range [2]*Object{r.Object, r.Previous} {
			if o != nil && !seen[o] {
				seen[o] = true
				want += ObjectSize(o)
			}
		}
		if h.InRelist(seq) {
			relist += r.Counted
		}
	}
	if h.RecordBytes != want {
		t.Fatalf("step %d: the history counts %d bytes for %d records, they hold %d", step, h.RecordBytes, h.Len(), want)
	}
	if h.RelistBytes != relist {
		t.Fatalf("step %d: the relist's records count %d bytes, want %d", step, h.RelistBytes, relist)
	}
}
