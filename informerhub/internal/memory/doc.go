// Package memory keeps the hub's account of what it holds for all
// resource types at once, bounded by the memory budget
// (informerhub.Config.MemoryBudget), and decides what goes to stay within
// it: the oldest history records of any resource type first, then the
// changes a disk that fell behind has not written, then the oldest state
// clone a slow reader keeps. It sees the resource types' feeds only
// through Holder, which they implement under their own locks.
//
// Its one lock, reclaiming, is held by the goroutine evicting, one at a
// time; everything else is atomics (package budget), read and added to
// from any goroutine.
package memory
