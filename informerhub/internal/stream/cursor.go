package stream

import (
	"github.com/google/btree"

	"github.com/informerhub/informerhub/informerhub/internal/selection"
	"github.com/informerhub/informerhub/informerhub/internal/state"
)

// Cursor walks the matching objects of a state clone in order, scanning
// a bounded batch at a time, reading the clone without locks: for a
// snapshot's pages and a subscription's initial events. The clone may be of
// a label index tree (see the feed's store.cloneFor), which holds fewer
// objects in the same order, every one of them carrying its label: the
// cursor does not test that label again.
type Cursor struct {
	tree *btree.BTreeG[*state.Object]
	sel  *selection.Selector
	// match is sel given the label of the tree (Selector.Given); nil when
	// that label was all sel asked besides its namespace: every object of
	// the namespace matches, and the cursor reads none of their labels.
	match   *selection.Selector
	buf     []Selected
	bufNext int
	// from is where the next batch starts; fromExclusive skips from itself.
	from          *state.Object
	fromExclusive bool
	done          bool
	examined      int // objects tested against sel, for tests
	// eval is the scratch of the filter's evaluations.
	eval selection.Evaluation
}

// Selected is an object a cursor selected, and why the filter could not
// decide on it if it could not (see verdict).
type Selected struct {
	obj       *state.Object
	Undecided *selection.FilterError
}

// CursorBatch is what a cursor's Fill returns at most, in matching objects,
// unless asked for more; it scans at most 16 × CursorBatch objects
// whatever it is asked for, so that its caller checks for cancellation
// between batches of a large state.
const CursorBatch = 128

// NewCursor returns a cursor of the objects sel selects in tree, a clone of
// the state or, when eq is not nil, of the index tree of the label eq (see
// the feed's store.cloneFor).
func NewCursor(tree *btree.BTreeG[*state.Object], sel *selection.Selector, eq *selection.LabelPair) *Cursor {
	match := sel
	if eq != nil {
		match = sel.Given(*eq)
	}
	if match.SelectsWholeNamespaces() {
		match = nil
	}
	return &Cursor{tree: tree, sel: sel, match: match, from: &state.Object{Namespace: sel.Namespace()}}
}

// skipThrough makes the cursor continue after o.
func (c *Cursor) skipThrough(o *state.Object) {
	if c.sel.Namespace() != "" && o.Namespace != c.sel.Namespace() {
		if o.Namespace > c.sel.Namespace() {
			c.done = true
		}
		return
	}
	c.from, c.fromExclusive = o, true
}

// step returns the next matching object, scanning at most one batch of
// the state for it: it returns none and done=false when that batch
// matched nothing, so that a caller checks for cancellation between
// batches of a large state.
func (c *Cursor) step() (o Selected, done bool) {
	if c.Peek() == nil {
		if c.Finished() {
			return Selected{}, true
		}
		c.Fill(CursorBatch)
		if c.Peek() == nil {
			return Selected{}, c.Finished()
		}
	}
	return c.Take(), false
}

// Peek returns the next matching object of those scanned, without taking
// it; nil when the cursor must scan (fill) to find one, or is finished.
func (c *Cursor) Peek() *state.Object {
	if c.bufNext >= len(c.buf) {
		return nil
	}
	return c.buf[c.bufNext].obj
}

// Take takes the object peek returns.
func (c *Cursor) Take() Selected {
	o := c.buf[c.bufNext]
	c.buf[c.bufNext] = Selected{}
	c.bufNext++
	return o
}

// Finished reports whether the cursor has returned every matching object.
func (c *Cursor) Finished() bool { return c.done && c.bufNext >= len(c.buf) }

// Fill scans the next batch of the state, of at most max(want,
// CursorBatch) matching objects and 16 × CursorBatch objects in all. A
// batch starts where the last one ended, found again in the tree: a
// caller that takes them by the page asks for a page's worth (want), so
// that a selective index tree costs one search per page, not one per
// CursorBatch.
func (c *Cursor) Fill(want int) {
	want = max(want, CursorBatch)
	c.buf, c.bufNext = c.buf[:0], 0
	if n := min(want, c.tree.Len()); cap(c.buf) < n {
		// At once rather than as it fills: a page of a cursor that has
		// just started would be copied nine times.
		c.buf = make([]Selected, 0, n)
	}
	scanned := 0
	finished := true
	first, last := true, (*state.Object)(nil)
	c.tree.AscendGreaterOrEqual(c.from, func(o *state.Object) bool {
		// Only the first object can be from itself: the tree holds each
		// once, and the rest follow it. Comparing each would read every
		// object's name, one more cache miss each in a large state.
		if first {
			first = false
			if c.fromExclusive && !state.ObjectLess(c.from, o) {
				return true // o is from itself
			}
		}
		if c.sel.Namespace() != "" && o.Namespace != c.sel.Namespace() {
			return false // past the namespace
		}
		if len(c.buf) == want || scanned == 16*CursorBatch {
			// o is for the next batch. Stopping here rather than at the
			// last object taken tells a batch that took the rest from one
			// that did not: a page that ends with the objects has Last set,
			// with no empty page after it.
			finished = false
			return false
		}
		last = o
		c.examined++
		scanned++
		if c.match == nil {
			c.buf = append(c.buf, Selected{obj: o})
			return true
		}
		c.eval.Reset()
		if v := c.match.Matches(o, &c.eval); v.Match {
			c.buf = append(c.buf, Selected{obj: o, Undecided: v.Undecided})
		}
		return true
	})
	if last != nil {
		c.from, c.fromExclusive = last, true
	}
	c.done = finished
}

// MaxLeft bounds the matching objects the cursor has yet to return: those
// it holds, and the objects of the tree it has not examined.
func (c *Cursor) MaxLeft() int {
	return len(c.buf) - c.bufNext + max(c.tree.Len()-c.examined, 0)
}

// Examined counts the objects the cursor has tested against its selector.
func (c *Cursor) Examined() int { return c.examined }
