// Package durable keeps the hub's history on disk, behind the in-memory
// one, which stays the hot tail: one writer goroutine that collects each
// feed's new records and writes them as synced batches, the reads of
// subscribers catching up from the disk, retention by age and size, and
// how each resource type is sealed (value.Transformer, Secrets only
// encrypted).
//
// It sees a feed only through the Feed interface, and records only as
// historystore records: the core converts its own at the boundary. A hub
// without a history store never creates a History.
//
// Locks, in the order they are taken: History.writeMu (whatever writes to
// the store), a feed's own lock (taken by the Feed methods but IsStopped),
// Log.mu (what one resource type's disk holds), History.mu (the logs and
// the failed flag). A feed may call a Log's methods holding its own lock
// (Notify, Holds, Window, Spilled take only Log.mu), never History's; the
// writer never takes a feed's lock while holding a Log's.
package durable
