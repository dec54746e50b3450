// Package conformance checks every promise a request makes, on every path
// an event can take to a client, against a real kube-apiserver and etcd
// (internal/controlplane): the matrix of docs/conformance.md, which its
// tests write (make conformance-doc) and check.
//
// The rows are the promises: each field of a request (ResourceSelector,
// WatchRequest, WatchManyRequest, SnapshotRequest, CountRequest) and what
// the service promises of every stream (the caller's RBAC, bookmarks, an
// exact resume token). The columns are the paths: live dispatch, initial
// events, Snapshot pages, catch-up from memory of a subscriber that fell
// behind, catch-up from the disk history, a replay from the API server (at
// resume, and mid-stream), a relist, WatchMany, Count, and each protocol.
// Each path is forced, and shown to have been taken: a small history, a
// reader that stops reading, a fresh replica, a retention cut, an API
// server that forgets its history.
//
// The oracle is the API server: its own watch of everything (a
// checker.Reference), its LISTs at exact versions (checker.CheckState),
// with the field selectors it evaluates and, with ShardedListAndWatch on,
// its shard selectors. What it cannot evaluate (a CEL filter, a
// projection, previous states) the tests compute apart from the hub, from
// the reference's objects.
//
// Every probe of one path runs at once, each on a connection of its own,
// so that a path costs one workload, not one per promise. With
// -full-size, the workload is larger (make soak).
package conformance
