// Package state holds what a feed knows of its resource type, as values:
// objects in the hub's cached form, the records of their changes, the
// positions they are at, the history of recent records, and the clones of
// the state that snapshots and initial events read.
//
// It has no lock of its own, as the kube-apiserver cacher's store: a
// feed's lock guards its History and Clones, and objects and records are
// immutable once published (but for what they cache of themselves, which
// they guard with atomics: the verdicts of filters on an object, the events
// a record builds once for every subscriber of a form). It imports nothing
// of the core but the event type, so every layer above may use it.
package state
