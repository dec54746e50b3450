// Package feed runs one informer per resource type and keeps what the hub
// holds of it, under one lock per feed: it is the only package that takes
// that lock, and every section under it is one of its methods.
//
// A Feed is one informer, client-go's Reflector and RealFIFO with one
// Process function (feed.go), and its parts, each a type of its own:
//
//   - the store (store.go), as the kube-apiserver's watchCache: the state,
//     every object as the JSON the API server sent, in a copy-on-write
//     B-tree ordered by namespace and name, with label indexes (index.go)
//     and its digests in all and per namespace (digests.go); the history,
//     a ring of the most recent changes; and the position. They advance
//     together. A relist's true differences are computed
//     before the lock and recorded as one batch (relist.go);
//   - the live subscribers (package internal/fanout);
//   - admission (package internal/selection): the views subscribers
//     share, and the distinct filters and projections in use;
//   - readiness (readiness.go): whether the first list arrived, and since
//     when the upstream fails;
//   - the consistency check (check.go): the state against the API server's
//     LIST at its position, off the lock, and a relist when they differ.
//
// Events makes the feed's events: each record's once per form, shared;
// initial events, bookmarks and replayed changes, each subscription's own.
//
// Feeds (feeds.go) is the running feeds, one per resource type, each held
// by an Entry while anyone uses it, stopped after an idle timeout; the
// Counters of a resource type outlive its feeds. A Feed implements
// memory.Holder (the budget across feeds) and durable.Feed (feeddisk.go,
// the disk history's only view of a feed), with what Deps gives it.
//
// A subscription holds a Lease (lease.go): its admission, its member of
// the live subscribers, and how it ended. The lease's methods are its
// sections under its feed's lock: Open places its start (and joins the
// live subscribers if it starts there), Fetch reads a batch of the
// history and joins atomically with the last record read, Rejoin and
// PollReplay end a replay where the history takes over, Close leaves.
// Besides them, it takes the lock only through the Feed's BuildIndex
// (which installs the index it built off the lock), Expired and
// ReadError (which read the history's window), and CloneFor and
// CloseClone for a snapshot. Everything else a subscription does, it does
// off the lock; its member's reader side (fanout.Reader) is all of the
// member it sees.
//
// Locks, in the order they are taken: Feeds.mu (the map; never taken
// under a feed's lock), a Feed's mu (its store, live subscribers,
// admission, readiness, and why it stopped; nothing is sent under it),
// then the locks below it: a member queue's, a Log's (package durable), an
// Ending's.
package feed
