package feed

import (
	"github.com/google/btree"

	"github.com/informerhub/informerhub/informerhub/budget"
	"github.com/informerhub/informerhub/informerhub/internal/selection"
	"github.com/informerhub/informerhub/informerhub/internal/state"
)

// A feed indexes label keys on demand, like the watch cache's indexers but
// chosen by the requests: the first snapshot or initial events whose label
// selector requires k=v, on a state of at least labelIndexMinObjects, builds
// an index of k, without the feed's lock, from the clone of the state it
// reads anyway (IndexBuild). The index then follows every change for the
// feed's lifetime, and snapshots and initial events that require k=v read
// only the objects with that label instead of the whole state.
const (
	// LabelIndexMinObjects is the state size from which an index is worth
	// building: smaller states are scanned.
	LabelIndexMinObjects = 1024
	// MaxLabelIndexKeys bounds the keys indexed per feed, so that selectors
	// cannot grow the hub's memory without bound: each index holds a
	// pointer per labeled object and a small tree per value. Once full,
	// selectors on other keys scan; no index is ever dropped.
	MaxLabelIndexKeys = 16
	// labelIndexDegree is the degree of the index trees: lower than the
	// state's, as most of them hold a few objects.
	labelIndexDegree = 8
)

// labelIndex maps, for each indexed label key, each value to the objects of
// the state that carry it, ordered like the state. Trees are never empty. It
// belongs to its store, under its feed's lock; clones of its trees are read
// without it.
type labelIndex struct {
	keys map[string]map[string]*btree.BTreeG[*state.Object]
	// building are the keys being indexed without the lock: requests
	// that need one meanwhile scan, and it counts against
	// maxLabelIndexKeys.
	building map[string]bool
	// freelist is shared by every tree: a tree's own would cost more than
	// most trees hold.
	freelist *btree.FreeListG[*state.Object]
	// bytes counts the index within the hub's memory (memory.indexes).
	bytes *budget.Bytes
}

// What an index costs, approximately: an entry per labeled object, and a
// tree and a map slot per value (its string is the objects' label's).
const (
	labelIndexEntryBytes = 16
	labelIndexValueBytes = 160
)

// newLabelIndex returns an empty index that counts its bytes within mem
// (nil: within nothing).
func newLabelIndex(mem *budget.Bytes) labelIndex {
	return labelIndex{
		keys:     map[string]map[string]*btree.BTreeG[*state.Object]{},
		building: map[string]bool{},
		freelist: btree.NewFreeListG[*state.Object](btree.DefaultFreeListSize),
		bytes:    budget.Counter(mem),
	}
}

// release gives back what the index counts in the hub's memory, for a feed
// that stopped.
func (x *labelIndex) release() { x.bytes.Drain() }

// update moves an object's entries from its previous state prev to its new
// one cur; either may be nil (an object added or deleted).
func (x *labelIndex) update(prev, cur *state.Object) {
	for key, values := range x.keys {
		x.updateKey(key, values, prev, cur)
	}
}

// updateKey is update for one key, whose trees are values.
func (x *labelIndex) updateKey(key string, values map[string]*btree.BTreeG[*state.Object], prev, cur *state.Object) {
	var prevValue, curValue string
	prevOK := prev != nil
	if prevOK {
		prevValue, prevOK = prev.Labels[key]
	}
	curOK := cur != nil
	if curOK {
		curValue, curOK = cur.Labels[key]
	}
	if prevOK && (!curOK || prevValue != curValue) {
		x.remove(values, prevValue, prev)
	}
	if curOK {
		// Also replaces prev when the value did not change.
		x.insert(values, curValue, cur)
	}
}

// insert adds o to the tree of value, or replaces the state of o it holds.
func (x *labelIndex) insert(values map[string]*btree.BTreeG[*state.Object], value string, o *state.Object) {
	t := values[value]
	if t == nil {
		t = btree.NewWithFreeListG(labelIndexDegree, state.ObjectLess, x.freelist)
		values[value] = t
		x.bytes.Force(labelIndexValueBytes)
	}
	if _, replaced := t.ReplaceOrInsert(o); !replaced {
		x.bytes.Force(labelIndexEntryBytes)
	}
}

func (x *labelIndex) remove(values map[string]*btree.BTreeG[*state.Object], value string, o *state.Object) {
	t := values[value]
	if t == nil {
		return
	}
	if _, found := t.Delete(o); found {
		x.bytes.Force(-labelIndexEntryBytes)
	}
	if t.Len() == 0 {
		delete(values, value) // so that values no object carries any more cost nothing
		x.bytes.Force(-labelIndexValueBytes)
	}
}

// treeFor returns a clone of the tree of sel's most selective indexed
// equality, and the equality; or a clone of state and nil when it has none
// (see the feed's store.cloneFor). When sel's first equality is worth indexing (a
// large state, a key neither indexed nor being indexed, room for one more)
// it also returns the build of its key, for the caller to run from the
// clone of state without the feed's lock (IndexBuild).
func (x *labelIndex) treeFor(sel *selection.Selector, objects *btree.BTreeG[*state.Object]) (tree *btree.BTreeG[*state.Object], eq *selection.LabelPair, b *IndexBuild) {
	pairs := selection.Equalities(sel.Labels())
	best, bestLen := -1, 0
	for i, p := range pairs {
		values, ok := x.keys[p.Key]
		if !ok {
			continue
		}
		n := 0
		if t := values[p.Value]; t != nil {
			n = t.Len()
		}
		if best < 0 || n < bestLen {
			best, bestLen = i, n
		}
	}
	if best < 0 {
		if len(pairs) > 0 && objects.Len() >= LabelIndexMinObjects && len(x.keys)+len(x.building) < MaxLabelIndexKeys &&
			!x.building[pairs[0].Key] {
			// The first equality is as good a guess as any: selectivity is
			// unknown until its key is indexed.
			x.building[pairs[0].Key] = true
			b = &IndexBuild{pair: pairs[0], freelist: x.freelist}
		}
		return objects.Clone(), nil, b
	}
	p := &pairs[best]
	if t := x.keys[p.Key][p.Value]; t != nil {
		return t.Clone(), p, nil
	}
	// No object carries the label: nothing matches.
	return btree.NewWithFreeListG(labelIndexDegree, state.ObjectLess, x.freelist), p, nil
}

// IndexBuild indexes a label key without the feed's lock. The request
// whose equality (pair) is worth indexing gets, under the lock, a clone of
// the state at seq and the build (the feed's store.cloneFor); it builds the key's
// trees from the clone without the lock (run), reads its own value's
// tree, which is as of its clone, and installs the trees for every later
// request under the lock again (store.installIndex), which follows the
// changes recorded meanwhile. The lock is held for them only: not for
// the O(n log n) of the build.
type IndexBuild struct {
	pair     selection.LabelPair
	seq      uint64
	freelist *btree.FreeListG[*state.Object]
	// values are the key's trees, of entries objects in all.
	values  map[string]*btree.BTreeG[*state.Object]
	entries int
}

// run indexes the build's key over state, a clone nobody else writes, and
// returns the tree of the build's equality, a clone the caller owns.
func (b *IndexBuild) run(objects *btree.BTreeG[*state.Object]) *btree.BTreeG[*state.Object] {
	b.values = map[string]*btree.BTreeG[*state.Object]{}
	objects.Ascend(func(o *state.Object) bool {
		v, ok := o.Labels[b.pair.Key]
		if !ok {
			return true
		}
		t := b.values[v]
		if t == nil {
			t = btree.NewWithFreeListG(labelIndexDegree, state.ObjectLess, b.freelist)
			b.values[v] = t
		}
		t.ReplaceOrInsert(o)
		b.entries++
		return true
	})
	if t := b.values[b.pair.Value]; t != nil {
		return t.Clone()
	}
	return btree.NewWithFreeListG(labelIndexDegree, state.ObjectLess, b.freelist)
}

// install makes b's key, run, an indexed one, as of the state b ran on.
func (x *labelIndex) install(b *IndexBuild) {
	delete(x.building, b.pair.Key)
	x.keys[b.pair.Key] = b.values
	x.bytes.Force(int64(b.entries)*labelIndexEntryBytes + int64(len(b.values))*labelIndexValueBytes)
}

// BuildIndex runs b, an index cloneFor asked to build, for a request that
// reads tree, a clone of the state, and returns the tree and equality the
// request reads instead: the tree of its equality in the new index. It
// installs the index under the feed's lock.
func (f *Feed) BuildIndex(b *IndexBuild, tree *btree.BTreeG[*state.Object]) (*btree.BTreeG[*state.Object], *selection.LabelPair) {
	objects := tree.Len()
	narrowed := b.run(tree)
	values := len(b.values) // the feed's once installed
	f.mu.Lock()
	installed := f.store.installIndex(b)
	f.mu.Unlock()
	if installed {
		f.log.Info("indexed a label key", "key", b.pair.Key, "values", values, "objects", objects)
	}
	return narrowed, &b.pair
}
