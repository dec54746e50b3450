// Package informerhub is the transport-agnostic core of informerhub: one
// shared Kubernetes informer per resource type (GroupVersionResource), fanned
// out to any number of subscribers, with exact resume and consistent
// snapshots. It has no gRPC in it; package server adapts it to gRPC.
//
// # A tour
//
// A [Hub] keeps one feed per resource type (feed.go). The first subscriber
// starts the feed's informer; it stops when the last subscriber has been gone
// for [Config.IdleTimeout]. A feed's informer is client-go's Reflector and
// RealFIFO with one Process function, feed.process, which keeps three things
// and advances them together under one lock:
//
//   - the state: every object, as the JSON the API server sent (rawjson.go),
//     in a copy-on-write B-tree ordered by namespace and name;
//   - the history: a ring of the most recent changes (history.go);
//   - the position: where the stream is, as a sequence number of this feed
//     instance and the Kubernetes resourceVersion (token.go).
//
// Each change is recorded once; its event is built and encoded once per form
// (whole or projected, with or without the previous state, per encoding:
// view.go), by the first subscriber that needs it, and shared by the rest
// (Event.Encoded).
//
// A selector (selector.go) is a namespace, label and field selectors, and a
// CEL filter. Field selectors name the fields the API server supports for
// the resource type (fieldset*.go; a CRD's selectableFields, from crds.go),
// read from objects' JSON without decoding them (internal/jsonscan).
// Filters (filter.go) are Kubernetes' CEL, compiled once per expression,
// evaluated once per distinct filter per change before the feed's lock, on
// the paths of the object they read (filteruse.go). Live subscribers are
// grouped by selector and the groups indexed by an equality they require
// (dispatch.go), so a change visits the subscribers it may concern.
//
// A [Subscription] (subscription.go) starts at a position: now, or a resume
// token's. It first sends initial events, when asked, from an O(1) clone of
// the state rolled back to its start; then catches up from the history
// without any queue; then joins the feed's live subscribers atomically with
// the last record it read, and from then on receives changes through a
// bounded queue that process fills without ever blocking. A subscriber whose
// queue is full when a change comes falls behind: it leaves the live
// subscribers and reads on from the history, as in catch-up, until it has
// caught up again (etcd's lagging watchers); nobody else waits for it, and a
// burst such as a relist's thousands of differences ends nobody. Only a
// subscriber the history has moved past is dropped, with a *TooSlowError
// carrying the token to resume from. The history holds the newest relist's
// differences whole for this.
//
// With Config.HistoryStore, the history is also kept on disk
// (durable.go, in Pebble through package historystore): one writer
// goroutine writes each feed's records off its lock, sequence numbers
// continue across runs, a feed starts from the stored state and watches on
// from the stored resourceVersion, and catch-up reads the disk below the
// memory's window. Tokens then resume across restarts and long after etcd
// compacted their versions, within Config.HistoryRetention.
//
// A token the history no longer holds is replayed from the API server
// (replay.go): its watch from the token's resourceVersion, and for a filter,
// projection or previous state, which the API server cannot compute, its
// LIST of the selection at exactly that version.
//
// Resume tokens are opaque strings (token.go) tied to their resource type.
// A token of the running feed instance resumes by sequence number; any other
// by resourceVersion, which the whole cluster shares, where this instance's
// history covers it. A token older than the history is ErrTokenExpired,
// never silently accepted.
//
// Errors are sentinels (errors.go) matched with errors.Is, with typed errors
// carrying what a transport needs to tell a client what to do next.
package informerhub
