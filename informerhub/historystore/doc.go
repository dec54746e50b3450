// Package historystore keeps informerhub's history of changes on disk, in
// Pebble, so that resume tokens outlive the process and etcd's compaction.
//
// It stores, per resource type: the records of changes by sequence number,
// the current state of every object (so that a restart loads the state in
// O(objects), never by replaying records), and a small Meta that says what
// the records cover. It knows nothing of feeds, tokens or subscribers: the
// informerhub package decides what to write and when, from one goroutine.
//
// Pebble was chosen over bbolt by measurement on this workload (4 KiB
// Kubernetes JSON records, see docs/architecture.md#durable-history): it
// appends at 46,000–74,000 records/s with a sync per batch, scans cold
// at about 200,000 records/s where bbolt managed 15,000, stores about half
// the bytes per record compressed (Snappy then; MinLZ now, which
// decompresses in about half Snappy's time), opens in milliseconds, and
// gives back the space of deleted ranges, where a bbolt file never shrinks.
//
// Every write is one atomic, synced batch: a crash loses at most the batch
// being written, never part of one, and never corrupts what was written.
//
// Objects are written through the resource type's value.Transformer from
// k8s.io/apiserver, as the API server writes to etcd with its
// EncryptionConfiguration: encrypted, with the key they are stored under
// as authenticated data (seal.go). Keys, record headers and the Meta stay
// as they are.
package historystore
