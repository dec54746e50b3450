// Package budget counts bytes that holders add and give back from any
// goroutine: what the hub holds beyond the objects of its state (histories,
// subscribers' queues, label indexes, within its memory budget) and the state
// of its replays. A Bytes may count within a parent, which then counts
// everything its children do; a Share is one holder's part of a Bytes, given
// back at once.
package budget
