// Package informerhub is the transport-agnostic core of informerhub: one
// shared Kubernetes informer per resource type (GroupVersionResource), fanned
// out to any number of subscribers, with exact resume and consistent
// snapshots. It has no gRPC in it; package server adapts it to gRPC.
//
// # A map
//
// This package is the public API: [Hub], [Config], the requests, [Event],
// the handles ([Subscription], [Snapshot], [CountSubscription],
// [ManySubscription]) and the errors. What implements them is below it, in
// packages that never import it, each with a doc.go that names its one job
// and its lock:
//
//   - internal/feed: one informer per resource type and what the hub holds
//     of it (state, history, position, live subscribers, admission,
//     readiness), under the feed's one lock, which no other package takes;
//     a subscription's sections under it are the methods of its feed.Lease.
//   - internal/stream: a subscription's phases (initial events, replay,
//     catch-up, live) over that lease and the disk history.
//   - internal/fanout: the live subscribers, grouped by selector and
//     indexed by an equality they require, each with a bounded queue.
//   - internal/selection: the parsed selector (what the API server
//     evaluates of it, and what the hub matches), filters' evaluations,
//     views, admission.
//   - internal/state: objects, records, positions, the history, clones.
//   - internal/event, internal/token, internal/errs: events, resume
//     tokens, errors (aliased here).
//   - internal/durable: the history on disk (Config.HistoryStore).
//   - internal/memory: the budget across feeds (Config.MemoryBudget).
//
// Beside them: package upstream (the API server's side: discovery, lists
// and watches, one-pass JSON), fieldset, celfilter, projection, shard, digest,
// budget, historystore, and hubtest (an in-memory cluster for unit tests).
//
// Here: [Hub] (hub.go) resolves resource types and keeps the feeds;
// Count (count.go, counter.go) runs one counter per distinct request, one
// subscription with initial events whose events are not encoded; WatchMany
// (many.go) is several subscriptions on one stream, with composite tokens;
// retain.go keeps the feeds of Config.Retain running.
//
// docs/architecture.md explains why the promises hold; the proto
// (proto/informerhub/v1/informerhub.proto) is the contract.
package informerhub
