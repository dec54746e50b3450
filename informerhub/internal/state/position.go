package state

// Position is a point in a feed's stream of changes: everything up to it has
// been delivered, nothing after it.
//
// Within one feed instance (one epoch) positions are exact sequence numbers.
// Across instances (the informer was restarted, or the token came from an
// earlier run) they are resourceVersions, which the whole cluster shares.
type Position struct {
	// Epoch identifies the feed instance that numbered seq.
	Epoch uint64
	// Seq counts the records of that instance up to this position; 0 is the
	// state of the initial list.
	Seq uint64
	// RV is the resourceVersion everything up to which is included, unless
	// offset is set.
	RV uint64
	// Offset is set inside a relist: rv is the version before the relist, and
	// offset records of the relist's changes are included. Such positions
	// only mean something to the feed instance that made them.
	Offset uint32
}
