// Package informerhub is the transport-agnostic core of informerhub: one
// shared Kubernetes informer per resource type (GroupVersionResource), fanned
// out to any number of subscribers, with exact resume and consistent
// snapshots. It has no gRPC in it; package server adapts it to gRPC.
//
// # A tour
//
// A [Hub] (hub.go) keeps one feed per resource type (package
// internal/feed, the only package that takes a feed's lock): the first
// subscriber starts it; it stops when the last subscriber has been gone for
// [Config.IdleTimeout]. A feed is one informer, client-go's Reflector and
// RealFIFO with one Process function, and what the hub keeps of it: the
// store, as the kube-apiserver's watchCache (the state, the history and
// the position, which advance together under the feed's one lock; their
// objects, records and positions are package internal/state); the live
// subscribers (package internal/fanout), grouped by selector and indexed by
// an equality they require, each with a bounded queue the feed fills
// without ever blocking; admission (package internal/selection); and
// readiness.
//
// Each change is recorded once; its event is built and encoded once per form
// (whole or projected, with or without the previous state, per encoding),
// by the first subscriber that needs it, and shared by the rest
// (feed.Events).
//
// A selector (package internal/selection) is a namespace, label, field and
// shard selectors, and a CEL filter. Field selectors name the fields the
// API server supports for the resource type (package fieldset), read from
// objects' JSON without decoding them. Filters are Kubernetes' CEL (package
// celfilter), evaluated once per distinct filter per change before the
// feed's lock, on the paths of the object they read (selection.Evaluation).
// Projections keep only the fields asked for (package projection).
//
// A [Subscription] (subscription.go) holds a lease on its feed
// (feed.Lease), whose methods are the only sections the subscription runs
// under the feed's lock, and moves through phases (phase.go, replay.go), each a type
// with its own step: it
// starts at a position, now or a resume token's; first sends initial
// events, when asked, from an O(1) clone of the state rolled back to its
// start (cursor.go); then catches up from the history without any queue;
// then joins the feed's live subscribers atomically with the last record it
// read. A subscriber whose queue is full when a change comes falls behind:
// it leaves the live subscribers and reads on from the history, as in
// catch-up, until it has caught up again (etcd's lagging watchers); nobody
// else waits for it, and a burst such as a relist's thousands of
// differences ends nobody. Only a subscriber the history has moved past is
// dropped, with a *TooSlowError carrying the token to resume from.
//
// Count (count.go, counter.go) counts what a selector selects, per group:
// one counter per distinct request, shared by its callers, is one
// subscription with initial events, whose events are not encoded (they go
// to no transport) and whose objects' group values it reads in place; it
// publishes immutable Counts at most once per Config.CountInterval. A
// counter the history overtakes counts afresh from a new subscription,
// rather than replay or end its callers.
//
// WatchMany (many.go) is several subscriptions on one stream: their
// initial events first, then each one's events as they come, every event
// with a composite token (package internal/token) that resumes them all.
//
// A token the history no longer holds is replayed from the API server
// (replay.go, replaywatch.go): its watch from the token's resourceVersion,
// with what the API server evaluates of the selector (the one place that
// says which parts: selection.Selector.UpstreamQuery), the hub evaluating the rest;
// and for a filter, projection or previous state, which the API server
// cannot compute, its LIST of the selection at exactly that version.
//
// With Config.HistoryStore, the history is also kept on disk (package
// internal/durable, which sees a feed only as its durable.Feed; in Pebble through package historystore): one
// writer goroutine writes each feed's records off its lock, sequence
// numbers continue across runs, a feed starts from the stored state and
// watches on from the stored resourceVersion, and catch-up reads the disk
// below the memory's window. Tokens then resume across restarts and long
// after etcd compacted their versions, within Config.HistoryRetention.
//
// What the hub holds beyond the state is bounded by Config.MemoryBudget
// (package internal/memory, which sees feeds only as its Holder, and
// package budget), which evicts the oldest changes of any resource type
// first.
//
// The API server's side, discovery, the informers' lists and watches, and
// the one-pass reading of its JSON, is package upstream.
//
// Resume tokens are opaque strings (package internal/token) tied to their resource type.
// A token of the running feed instance resumes by sequence number; any other
// by resourceVersion, which the whole cluster shares, where this instance's
// history covers it. A token older than the history is ErrTokenExpired,
// never silently accepted.
//
// Errors are sentinels (errors.go) matched with errors.Is, with typed errors
// carrying what a transport needs to tell a client what to do next.
package informerhub
