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
	// Loc is where the token continues: when its searchUpTo is set, it is
	// still to be placed among the disk's records.
	Loc Located
	// Ahead is set when replaying a token ahead of the feed: the API server
	// must have reached it.
	Ahead bool
	// Replayable is set when the token may be replayed from the API server
	// (see replayable), should the disk no longer hold where it continues.
	Replayable bool
	// For initial events: the clone of the state to walk, the label its
	// objects carry (nil: it is the state), and the records to roll it back
	// through to start.
	Tree *btree.BTreeG[*state.Object]
	Eq   *selection.LabelPair
	Undo []*state.Record
	// Build is the index to build for tree, without the lock (see
	// store.cloneFor).
	Build *IndexBuild
}
