package informerhub

import (
	"github.com/google/btree"

	"github.com/informerhub/informerhub/informerhub/internal/selection"
	"github.com/informerhub/informerhub/informerhub/internal/state"
)

// cloneFor returns, for a snapshot of sel, a clone of the tree it reads
// (see store.cloneFor), its position, and the clone's account
// (state.Clones), under the feed's lock.
func (f *feed) cloneFor(sel *selection.Selector) (*btree.BTreeG[*state.Object], state.Position, *indexBuild, *state.Clone, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, state.Position{}, nil, nil, f.err
	}
	tree, _, build := f.store.cloneFor(sel)
	return tree, f.store.pos, build, f.store.clones.Take(), nil
}

// closeClone stops counting a clone cloneFor took.
func (f *feed) closeClone(c *state.Clone) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.store.clones.Close(c)
}
