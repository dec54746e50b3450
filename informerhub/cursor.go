package informerhub

import "github.com/google/btree"

// stateCursor walks the matching objects of a state clone in order, scanning
// a bounded batch at a time, reading the clone without locks: for a
// snapshot's pages and a subscription's initial events. The clone may be of
// a label index tree (see store.cloneFor), which holds fewer objects in the
// same order.
type stateCursor struct {
	tree    *btree.BTreeG[*object]
	sel     *selector
	buf     []*object
	bufNext int
	// from is where the next batch starts; fromExclusive skips from itself.
	from          *object
	fromExclusive bool
	done          bool
	examined      int // objects tested against sel, for tests
	// eval is the scratch of the filter's evaluations; once it holds a
	// filter that exceeded its cost, the cursor stops (see costly).
	eval evaluation
}

// costly reports whether the cursor stopped on a filter that exceeded its
// cost.
func (c *stateCursor) costly() bool { return len(c.eval.costly) > 0 }

const cursorBatch = 128

func newStateCursor(tree *btree.BTreeG[*object], sel *selector) *stateCursor {
	return &stateCursor{tree: tree, sel: sel, from: &object{namespace: sel.namespace}}
}

// skipThrough makes the cursor continue after o.
func (c *stateCursor) skipThrough(o *object) {
	if c.sel.namespace != "" && o.namespace != c.sel.namespace {
		if o.namespace > c.sel.namespace {
			c.done = true
		}
		return
	}
	c.from, c.fromExclusive = o, true
}

// next returns the next matching object, or nil at the end.
func (c *stateCursor) next() *object {
	if !c.more() {
		return nil
	}
	return c.take()
}

// step is next bounded to scanning one batch: it returns nil and done=false
// when that batch matched nothing, so a caller can check for cancellation
// between batches of a large state.
func (c *stateCursor) step() (o *object, done bool) {
	if c.bufNext >= len(c.buf) {
		if c.done {
			return nil, true
		}
		c.fill()
		if c.bufNext >= len(c.buf) {
			return nil, c.done
		}
	}
	return c.take(), false
}

func (c *stateCursor) take() *object {
	o := c.buf[c.bufNext]
	c.buf[c.bufNext] = nil
	c.bufNext++
	return o
}

// peek returns the object next will return, or nil at the end.
func (c *stateCursor) peek() *object {
	if !c.more() {
		return nil
	}
	return c.buf[c.bufNext]
}

// more reports whether next will return an object.
func (c *stateCursor) more() bool {
	for c.bufNext >= len(c.buf) {
		if c.done {
			return false
		}
		c.fill()
	}
	return true
}

func (c *stateCursor) fill() {
	c.buf, c.bufNext = c.buf[:0], 0
	scanned := 0
	finished := true
	c.tree.AscendGreaterOrEqual(c.from, func(o *object) bool {
		if c.fromExclusive && !objectLess(c.from, o) {
			return true // o is from itself
		}
		if c.sel.namespace != "" && o.namespace != c.sel.namespace {
			return false // past the namespace
		}
		c.from, c.fromExclusive = o, true
		c.examined++
		c.eval.reset()
		if c.sel.matches(o, &c.eval) {
			c.buf = append(c.buf, o)
		}
		if c.costly() {
			finished = true
			return false
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
