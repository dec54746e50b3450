package shard

import (
	"slices"
	"sort"
)

// Index finds, for an object, the entries whose selectors select it, with
// one hash per key and a binary search per key, however many entries there
// are: the ranges of all the selectors of a key cut the hash line into
// segments, each with the entries that select all of it. It is rebuilt
// after a change of its entries, at the next Lookup.
//
// It is not safe for concurrent use: its owner's lock guards it.
type Index[T comparable] struct {
	entries map[T]*Selector
	byKey   map[string]*segments[T] // built from entries; nil: to rebuild
}

// segments cuts the hash line at starts: the hashes from starts[i] to the
// next start are selected by the entries in sets[i].
type segments[T comparable] struct {
	starts []uint64
	sets   [][]T
}

// Add indexes v under s, replacing what v had.
func (x *Index[T]) Add(v T, s *Selector) {
	if x.entries == nil {
		x.entries = map[T]*Selector{}
	}
	x.entries[v] = s
	x.byKey = nil
}

// Remove forgets v.
func (x *Index[T]) Remove(v T) {
	if _, ok := x.entries[v]; ok {
		delete(x.entries, v)
		x.byKey = nil
	}
}

// Len is the number of entries.
func (x *Index[T]) Len() int { return len(x.entries) }

// Lookup calls fn with each entry that selects an object of that uid and
// namespace ("" for a cluster-scoped one), once each.
func (x *Index[T]) Lookup(uid, namespace string, fn func(T)) {
	if len(x.entries) == 0 {
		return
	}
	if x.byKey == nil {
		x.build()
	}
	for key, segs := range x.byKey {
		value := uid
		if key == KeyNamespace {
			value = namespace
		}
		for _, v := range segs.lookup(Hash(value)) {
			fn(v)
		}
	}
}

func (s *segments[T]) lookup(h uint64) []T {
	i := sort.Search(len(s.starts), func(i int) bool { return s.starts[i] > h }) - 1
	if i < 0 {
		return nil
	}
	return s.sets[i]
}

// build sweeps each key's ranges in order of their bounds, counting how
// many of an entry's ranges cover the hashes between two bounds (its
// ranges may overlap).
func (x *Index[T]) build() {
	type edge struct {
		at    uint64
		delta int
		v     T
	}
	edges := map[string][]edge{}
	for v, s := range x.entries {
		for _, r := range s.ranges {
			if r.Empty {
				continue
			}
			edges[s.key] = append(edges[s.key], edge{at: r.Start, delta: 1, v: v})
			if !r.EndIsMax {
				edges[s.key] = append(edges[s.key], edge{at: r.End, delta: -1, v: v})
			}
		}
	}
	x.byKey = map[string]*segments[T]{}
	for key, es := range edges {
		slices.SortFunc(es, func(a, b edge) int {
			switch {
			case a.at < b.at:
				return -1
			case a.at > b.at:
				return 1
			}
			return 0
		})
		segs := &segments[T]{}
		covering := map[T]int{}
		for i := 0; i < len(es); {
			at := es[i].at
			for ; i < len(es) && es[i].at == at; i++ {
				if covering[es[i].v] += es[i].delta; covering[es[i].v] == 0 {
					delete(covering, es[i].v)
				}
			}
			set := make([]T, 0, len(covering))
			for v := range covering {
				set = append(set, v)
			}
			segs.starts = append(segs.starts, at)
			segs.sets = append(segs.sets, set)
		}
		x.byKey[key] = segs
	}
}
