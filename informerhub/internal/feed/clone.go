package feed

import (
	"errors"

	"github.com/google/btree"

	"github.com/informerhub/informerhub/informerhub/digest"
	"github.com/informerhub/informerhub/informerhub/internal/errs"

	"github.com/informerhub/informerhub/informerhub/internal/selection"
	"github.com/informerhub/informerhub/informerhub/internal/state"
)

// SnapshotClone is what a snapshot of a selection reads: a clone of the
// tree it walks, the label every object of that tree carries (nil: it is
// the state), and the index to build for it without the lock (see the
// feed's store.cloneFor); the position they are of, and the clone's
// account (state.Clones).
type SnapshotClone struct {
	Tree  *btree.BTreeG[*state.Object]
	Eq    *selection.LabelPair
	Build *IndexBuild
	Pos   state.Position
	Clone *state.Clone
}

// CloneFor returns, under the feed's lock, what a snapshot of sel reads.
func (f *Feed) CloneFor(sel *selection.Selector) (SnapshotClone, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return SnapshotClone{}, f.err
	}
	c := SnapshotClone{Pos: f.store.pos, Clone: f.store.clones.Take()}
	c.Tree, c.Eq, c.Build = f.store.cloneFor(sel)
	return c, nil
}

// CloseClone stops counting a clone cloneFor took.
func (f *Feed) CloseClone(c *state.Clone) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.store.clones.Close(c)
}

// DigestClone is what a digest of a selection at a position reads: the
// digest the feed keeps of the selection at its position now (Pos), when it
// keeps one (Kept), else a clone of the tree to scan; and the records
// after At up to Pos, to undo (Records, oldest first). Moved is set when
// At was asked for but the history in memory no longer reaches it: the
// digest is then of Pos, with no records.
type DigestClone struct {
	Kept    *digest.Set
	Tree    *btree.BTreeG[*state.Object]
	Eq      *selection.LabelPair // the label Tree's objects carry; nil: Tree is the state
	Build   *IndexBuild
	Clone   *state.Clone
	Pos, At state.Position
	Records []*state.Record
	Moved   bool
}

// CloneForDigest returns, under the feed's lock, what a digest of sel at
// at reads (now when at is nil). It copies the history's records after at,
// at most the history's size, and nothing of the state. With kept, the
// caller asks for the digest the feed keeps of a selector that selects
// whole namespaces (selection.Selector.SelectsWholeNamespaces), which then
// costs no clone nor scan.
func (f *Feed) CloneForDigest(sel *selection.Selector, at *state.Position, kept bool) (DigestClone, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return DigestClone{}, f.err
	}
	st := f.store
	d := DigestClone{Pos: st.pos, At: st.pos}
	if at != nil {
		loc, err := st.locate(*at)
		var expired *errs.ExpiredError
		switch {
		case errors.As(err, &expired) || err == nil && loc.onDisk:
			d.Moved = true
		case err != nil:
			return DigestClone{}, err
		default:
			d.At = loc.pos
			for seq := loc.pos.Seq + 1; seq <= st.pos.Seq; seq++ {
				r, _ := st.history.Get(seq)
				d.Records = append(d.Records, r)
			}
		}
	}
	if kept {
		set := st.digests.of(sel.Namespace())
		d.Kept = &set
		return d, nil
	}
	d.Tree, d.Eq, d.Build = st.cloneFor(sel)
	d.Clone = st.clones.Take()
	return d, nil
}
