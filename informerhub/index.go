package informerhub

import (
	"github.com/google/btree"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	"github.com/informerhub/informerhub/informerhub/budget"
)

// A feed indexes label keys on demand, like the watch cache's indexers but
// chosen by the requests: the first snapshot or initial events whose label
// selector requires k=v, on a state of at least labelIndexMinObjects, builds
// an index of k. The index then follows every change for the feed's
// lifetime, and snapshots and initial events that require k=v read only the
// objects with that label instead of the whole state.
const (
	// labelIndexMinObjects is the state size from which an index is worth
	// building: smaller states are scanned.
	labelIndexMinObjects = 1024
	// maxLabelIndexKeys bounds the keys indexed per feed, so that selectors
	// cannot grow the hub's memory without bound: each index holds a
	// pointer per labeled object and a small tree per value. Once full,
	// selectors on other keys scan; no index is ever dropped.
	maxLabelIndexKeys = 16
	// labelIndexDegree is the degree of the index trees: lower than the
	// state's, as most of them hold a few objects.
	labelIndexDegree = 8
)

// labelIndex maps, for each indexed label key, each value to the objects of
// the state that carry it, ordered like the state. Trees are never empty. It
// belongs to its store, under its feed's lock; clones of its trees are read
// without it.
type labelIndex struct {
	keys map[string]map[string]*btree.BTreeG[*object]
	// freelist is shared by every tree: a tree's own would cost more than
	// most trees hold.
	freelist *btree.FreeListG[*object]
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
		keys:     map[string]map[string]*btree.BTreeG[*object]{},
		freelist: btree.NewFreeListG[*object](btree.DefaultFreeListSize),
		bytes:    budget.Counter(mem),
	}
}

// release gives back what the index counts in the hub's memory, for a feed
// that stopped.
func (x *labelIndex) release() { x.bytes.Drain() }

// labelPair is an equality requirement of a label selector: the key has
// exactly the value.
type labelPair struct{ key, value string }

// carriedBy reports whether o has the label.
func (p labelPair) carriedBy(o *object) bool {
	v, ok := o.labels[p.key]
	return ok && v == p.value
}

// equalities returns the requirements of s that an index can serve: k=v,
// k==v and k in (v). Every object s selects carries each of them.
func equalities(s labels.Selector) []labelPair {
	if s == nil {
		return nil
	}
	reqs, selectable := s.Requirements()
	if !selectable {
		return nil
	}
	var pairs []labelPair
	for i := range reqs {
		r := &reqs[i]
		switch r.Operator() {
		case selection.Equals, selection.DoubleEquals, selection.In:
			if values := r.ValuesUnsorted(); len(values) == 1 {
				pairs = append(pairs, labelPair{key: r.Key(), value: values[0]})
			}
		}
	}
	return pairs
}

// update moves an object's entries from its previous state prev to its new
// one cur; either may be nil (an object added or deleted).
func (x *labelIndex) update(prev, cur *object) {
	for key, values := range x.keys {
		var prevValue, curValue string
		prevOK := prev != nil
		if prevOK {
			prevValue, prevOK = prev.labels[key]
		}
		curOK := cur != nil
		if curOK {
			curValue, curOK = cur.labels[key]
		}
		if prevOK && (!curOK || prevValue != curValue) {
			x.remove(values, prevValue, prev)
		}
		if curOK {
			// Also replaces prev when the value did not change.
			x.insert(values, curValue, cur)
		}
	}
}

// insert adds o to the tree of value, or replaces the state of o it holds.
func (x *labelIndex) insert(values map[string]*btree.BTreeG[*object], value string, o *object) {
	t := values[value]
	if t == nil {
		t = btree.NewWithFreeListG(labelIndexDegree, objectLess, x.freelist)
		values[value] = t
		x.bytes.Force(labelIndexValueBytes)
	}
	if _, replaced := t.ReplaceOrInsert(o); !replaced {
		x.bytes.Force(labelIndexEntryBytes)
	}
}

func (x *labelIndex) remove(values map[string]*btree.BTreeG[*object], value string, o *object) {
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

// build indexes key over state.
func (x *labelIndex) build(key string, state *btree.BTreeG[*object]) {
	values := map[string]*btree.BTreeG[*object]{}
	state.Ascend(func(o *object) bool {
		if v, ok := o.labels[key]; ok {
			x.insert(values, v, o)
		}
		return true
	})
	x.keys[key] = values
}

// treeFor returns a clone of the tree of sel's most selective indexed
// equality, and the equality; or a clone of state and nil when it has none
// (see store.cloneFor). built says it indexed the equality's key for this,
// which it does the first time a large state is asked for it.
func (x *labelIndex) treeFor(sel *selector, state *btree.BTreeG[*object]) (tree *btree.BTreeG[*object], eq *labelPair, built bool) {
	pairs := equalities(sel.labels)
	best, bestLen := -1, 0
	for i, p := range pairs {
		values, ok := x.keys[p.key]
		if !ok {
			continue
		}
		n := 0
		if t := values[p.value]; t != nil {
			n = t.Len()
		}
		if best < 0 || n < bestLen {
			best, bestLen = i, n
		}
	}
	if best < 0 && len(pairs) > 0 && state.Len() >= labelIndexMinObjects && len(x.keys) < maxLabelIndexKeys {
		// The first equality is as good a guess as any: selectivity is
		// unknown until its key is indexed.
		best, built = 0, true
		x.build(pairs[0].key, state)
	}
	if best < 0 {
		return state.Clone(), nil, false
	}
	p := &pairs[best]
	if t := x.keys[p.key][p.value]; t != nil {
		return t.Clone(), p, built
	}
	// No object carries the label: nothing matches.
	return btree.NewWithFreeListG(labelIndexDegree, objectLess, x.freelist), p, built
}
