package stream

import (
	"github.com/google/btree"

	"github.com/informerhub/informerhub/informerhub/internal/selection"
	"github.com/informerhub/informerhub/informerhub/internal/state"
)

// Cursor walks the matching objects of a state clone in order, scanning
// a bounded batch at a time, reading the clone without locks: for a
// snapshot's pages and a subscription's initial events. The clone may be of
// a label index tree (see the feed's store.cloneFor), which holds fewer objects in the
// same order.
type Cursor struct {
	tree    *btree.BTreeG[*state.Object]
	sel     *selection.Selector
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

const cursorBatch = 128

func NewCursor(tree *btree.BTreeG[*state.Object], sel *selection.Selector) *Cursor {
	return &Cursor{tree: tree, sel: sel, from: &state.Object{Namespace: sel.Namespace()}}
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
		c.Fill()
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

// Fill scans the next batch of the state, of at most cursorBatch matching
// objects and 16 × cursorBatch objects in all.
func (c *Cursor) Fill() {
	c.buf, c.bufNext = c.buf[:0], 0
	scanned := 0
	finished := true
	c.tree.AscendGreaterOrEqual(c.from, func(o *state.Object) bool {
		if c.fromExclusive && !state.ObjectLess(c.from, o) {
			return true // o is from itself
		}
		if c.sel.Namespace() != "" && o.Namespace != c.sel.Namespace() {
			return false // past the namespace
		}
		c.from, c.fromExclusive = o, true
		c.examined++
		c.eval.Reset()
		if v := c.sel.Matches(o, &c.eval); v.Match {
			c.buf = append(c.buf, Selected{obj: o, Undecided: v.Undecided})
		}
		scanned++
		if len(c.buf) == cursorBatch || scanned == 16*cursorBatch {
			finished = false
			return false
		}
		return true
	})
	c.done = finished
}

// Examined counts the objects the cursor has tested against its selector.
func (c *Cursor) Examined() int { return c.examined }
