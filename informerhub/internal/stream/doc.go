// Package stream is a subscription's side of the hub: a Stream moves
// through phases, each a type whose step Next calls, over its feed's
// locked API (feed.Lease) and the disk history's reads, and takes no lock
// of a feed itself:
//
//  1. initial events, when asked for (initialPhase, phase.go): ADDED for
//     every matching object of a point-in-time clone of the state, walked
//     by a Cursor without the lock and rolled back to the start, then a
//     bookmark that ends them;
//  2. replay, when resuming from a token the history cannot place (older
//     than the history, or ahead of the feed): the changes after the
//     token's resourceVersion, from an upstream watch (replay.go, its
//     watch and LIST in replaywatch.go), with what the API server
//     evaluates of the selector (selection.Selector.UpstreamQuery) and
//     the hub the rest; it rejoins the history once that holds every
//     change after its version;
//  3. catch-up (catchUpPhase): the history records after its position,
//     read in batches from the feed's memory (Lease.Fetch) or, below its
//     window, from the disk off the lock (no queue, so a slow start cannot
//     overflow);
//  4. live (livePhase): once caught up, it joins the feed's live
//     subscribers, atomically with the last record it read, and receives
//     records through its bounded queue. A live subscriber whose queue is
//     full when a record comes falls behind: it leaves the live
//     subscribers, passes what its queue holds, and catches up again from
//     the history (phase 3), as etcd's watch cache serves its lagging
//     watchers; so a burst (a relist's thousands of differences) delays a
//     subscriber, never ends it. It ends (*TooSlowError) only if the
//     history no longer holds its position by the time it reads on.
//
// Locks: none of the feed's. ReplayLimits.owners has its own (the shares
// of replays per owner), and quietClock its timer's; a stream is read by
// one goroutine at a time, which owns its phase.
package stream
