package feed

import (
	"github.com/google/btree"

	"github.com/informerhub/informerhub/informerhub/internal/selection"
	"github.com/informerhub/informerhub/informerhub/internal/state"
)

// Opening is what a subscription's start found under its feed's lock, to
// finish without it.
type Opening struct {
	Start state.Position
	// Loc is where the token continues: when its SearchUpTo is set, it is
	// still to be placed among the disk's records.
	Loc Located
	// Ahead is set when replaying a token ahead of the feed: the API server
	// must have reached it.
	Ahead bool
	// Replayable is set when the token may be replayed from the API server
	// (see token.Token.Replayable), should the disk no longer hold where it continues.
	Replayable bool
	// For initial events: the clone of the state to walk, the label its
	// objects carry (nil: it is the state), the records to roll it back
	// through to start, and its account, which says whether the memory
	// budget ended it (Err; the lease closes it).
	Tree  *btree.BTreeG[*state.Object]
	Eq    *selection.LabelPair
	Undo  []*state.Record
	Clone *state.Clone
	// Build is the index to build for Tree, without the lock (see
	// store.cloneFor).
	Build *IndexBuild
}
