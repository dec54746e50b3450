// Package fanout hands a feed's changes to its live subscribers, as etcd's
// cache demux and watchers do: the Dispatcher groups subscribers by
// selector and indexes the groups by a trigger (an equality every object
// they select satisfies), so that a change visits only the groups it may
// concern; each subscriber is a Member with a bounded queue the feed fills
// without ever blocking, and a subscriber whose queue is full falls behind
// rather than holding the feed back; a connection's Woken counts its
// readers woken and not yet done, for its transport to write their events
// together.
//
// It knows records (package state) and selectors (package selection),
// and a subscription only as a Subscriber it fails; nothing of feeds,
// histories or disks. A Dispatcher and its Members have no lock of their
// own: the feed's lock guards them, but for each queue's leaf lock and
// the atomics a Member's reader shares with the feed. Nothing is sent under
// any of them: TakeWakes hands the readers to wake to the caller, which
// wakes them once it has let go of the feed's lock.
package fanout
