package informerhub

import (
	"github.com/google/btree"

	"github.com/informerhub/informerhub/informerhub/internal/selection"
	"github.com/informerhub/informerhub/informerhub/internal/state"
)

// stateCursor walks the matching objects of a state clone in order, scanning
// a bounded batch at a time, reading the clone without locks: for a
// snapshot's pages and a subscription's initial events. The clone may be of
// a label index tree (see the feed's store.cloneFor), which holds fewer objects in the
// same order.
type stateCursor struct {
	tree    *btree.BTreeG[*state.Object]
	sel     *selection.Selector
	buf     []selected
	bufNext int
	// from is where the next batch starts; fromExclusive skips from itself.
	from          *state.Object
	fromExclusive bool
	done          bool
	examined      int // objects tested against sel, for tests
	// eval is the scratch of the filter's evaluations.
	eval selection.Evaluation
}

// selected is an object a cursor selected, and why the filter could not
// decide on it if it could not (see verdict).
type selected struct {
	obj       *state.Object
	undecided *selection.FilterError
}

const cursorBatch = 128

func newStateCursor(tree *btree.BTreeG[*state.Object], sel *selection.Selector) *stateCursor {
	return &stateCursor{tree: tree, sel: sel, from: &state.Object{Namespace: sel.Namespace()}}
}

// skipThrough makes the cursor continue after o.
func (c *stateCursor) skipThrough(o *state.Object) {
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
func (c *stateCursor) step() (o selected, done bool) {
	if c.peek() == nil {
		if c.finished() {
			return selected{}, true
		}
		c.fill()
		if c.peek() == nil {
			return selected{}, c.finished()
		}
	}
	return c.take(), false
}

// peek returns the next matching object of those scanned, without taking
// it; nil when the cursor must scan (fill) to find one, or is finished.
func (c *stateCursor) peek() *state.Object {
	if c.bufNext >= len(c.buf) {
		return nil
	}
	return c.buf[c.bufNext].obj
}

// take takes the object peek returns.
func (c *stateCursor) take() selected {
	o := c.buf[c.bufNext]
	c.buf[c.bufNext] = selected{}
	c.bufNext++
	return o
}

// finished reports whether the cursor has returned every matching object.
func (c *stateCursor) finished() bool { return c.done && c.bufNext >= len(c.buf) }

// fill scans the next batch of the state, of at most cursorBatch matching
// objects and 16 × cursorBatch objects in all.
func (c *stateCursor) fill() {
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
			c.buf = append(c.buf, selected{obj: o, undecided: v.Undecided})
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
