package feed

import (
	"github.com/google/btree"

	"github.com/informerhub/informerhub/informerhub/internal/selection"
	"github.com/informerhub/informerhub/informerhub/internal/state"
)

// CloneFor returns, for a snapshot of sel, a clone of the tree it reads
// (see the feed's store.cloneFor), its position, and the clone's account
// (state.Clones), under the feed's lock.
func (f *Feed) CloneFor(sel *selection.Selector) (*btree.BTreeG[*state.Object], state.Position, *IndexBuild, *state.Clone, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, state.Position{}, nil, nil, f.err
	}
	tree, _, build := f.store.cloneFor(sel)
	return tree, f.store.pos, build, f.store.clones.Take(), nil
}

// CloseClone stops counting a clone cloneFor took.
func (f *Feed) CloseClone(c *state.Clone) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.store.clones.Close(c)
}
