package durable

import (
	"iter"
	"sync"
	"time"

	"k8s.io/apiserver/pkg/storage/value"

	"github.com/informerhub/informerhub/informerhub/historystore"
	"github.com/informerhub/informerhub/informerhub/upstream"
)

// Log is what the disk holds of one resource type, and the feed that
// writes it. Lock order: the feed's lock before Log.mu; the writer never
// takes a feed's lock holding one.
type Log struct {
	resource string
	writer   *History
	// transformer seals what the log writes and opens what it reads.
	transformer value.Transformer

	mu sync.Mutex // guards the fields below
	// meta is what the store holds; written only by the writer goroutine
	// (and attach, before a feed writes).
	meta   historystore.Meta
	known  bool // the store holds the resource type
	loaded bool // meta was read from the store
	feed   Feed
	// initial is set while the feed's initial list is still to be written:
	// a fresh resource type's first write stores the state.
	initial  bool
	detached chan struct{} // closed once feed is nil again
	// spill is set when the feed stopped writing (Log.Spilled), for the
	// writer to start the type over once it has caught up, not before
	// retryAt. spills counts the spills in a row, each waiting twice as
	// long (see spillBackoff), so that a cause that persists (a disk too
	// slow for the type's changes) does not make the type drop and
	// rewrite its disk history over and over; restarted is when the last
	// restart was.
	spill     bool
	retryAt   time.Time
	spills    int
	restarted time.Time
}

// Feed is what a resource type's disk log needs of the feed that writes
// it. Each method but IsStopped takes the feed's lock, and none of those is
// called holding a Log's; IsStopped takes no lock, and is called holding
// Log.mu.
type Feed interface {
	// AttachDisk makes the feed write to dl, unless failed reports that
	// the disk failed meanwhile.
	AttachDisk(dl *Log, failed func() bool) bool
	// DetachDisk leaves the feed with its memory alone: no floor for
	// eviction, no disk to read (it holds holes where records go
	// unwritten).
	DetachDisk(dl *Log)
	// RestoreFrom gives the feed what the disk held of its type when it
	// started, for its first list to take.
	RestoreFrom(r *Restored)
	// SpillDisk makes the feed stop writing to dl (then calling
	// dl.Spilled), and ResumeDisk write to it again, from its position,
	// once dl holds nothing of the type.
	SpillDisk(dl *Log, cause error)
	ResumeDisk(dl *Log) bool
	// IsStopped reports whether the feed has stopped, without a lock.
	IsStopped() bool
	// Unwritten collects what the feed recorded since the last write, and
	// its state when withState is set.
	Unwritten(dl *Log, withState bool) Pending
	// Written marks the records up to seq as on disk: memory may evict
	// them now.
	Written(dl *Log, seq uint64)
}

// Pending is what a feed recorded that its disk log does not hold.
type Pending struct {
	// Writing is set when the feed has synced and writes the log; Stopped
	// when it stopped: the log is the next feed's once this is written.
	Writing, Stopped bool
	Epoch            uint64
	// Records are the feed's records from seq From on; Seq and RV are the
	// feed's position, at or past the last of them.
	Records Records
	From    uint64
	Seq, RV uint64
	// FloorRV and FloorAt are the oldest point the feed's memory resumes
	// from, for the Meta of a type the disk does not hold yet; State is
	// the feed's state (taken under its lock, read outside it), when
	// asked for; Relists are the version ranges relists jumped across.
	FloorRV uint64
	FloorAt int64
	State   iter.Seq[historystore.Object]
	Relists []historystore.Range
}

// Records are a feed's records in the order they are written, converted
// one at a time as the writer takes them, off the feed's lock.
type Records interface {
	Len() int
	At(i int) historystore.Record
}

// Restored is what a feed starts from when the disk holds its resource
// type: the stored state, as its informer's first LIST.
type Restored struct {
	Meta historystore.Meta
	List *upstream.ObjectList
}

// Notify wakes the log's writer: its feed recorded a change, or stopped.
func (dl *Log) Notify() { dl.writer.notify() }

// Window returns the oldest record the disk holds, the newest, and the
// position before the oldest; ok is unset while the disk does not hold
// the resource type (a fresh type's first write comes with its feed's
// first change): its zero Meta reaches nothing.
func (dl *Log) Window() (first, last, floorRV uint64, floorAt int64, ok bool) {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	return dl.meta.FirstSeq, dl.meta.LastSeq, dl.meta.FloorRV, dl.meta.FloorAt, dl.known
}

// Holds reports whether the disk continues a subscriber that has every
// record up to seq.
func (dl *Log) Holds(seq uint64) bool {
	first, last, _, _, ok := dl.Window()
	return ok && seq+1 >= first && seq <= last
}

// Spilled tells the writer that the log's feed stopped writing to it
// (Feed.SpillDisk), to start the type over after backoff.
func (dl *Log) Spilled() {
	retryAfter := time.Duration(dl.writer.retryAfter.Load())
	dl.mu.Lock()
	now := time.Now()
	if !dl.restarted.IsZero() && now.Sub(dl.restarted) > spillCalm*retryAfter {
		dl.spills = 0 // it wrote long enough since: a new cause
	}
	dl.spills++
	dl.spill, dl.retryAt = true, now.Add(spillBackoff(retryAfter, dl.spills))
	dl.mu.Unlock()
	dl.Notify()
}

// spillBackoff is how long a type waits after its n-th spill in a row
// before its disk history starts over: none after the first (the writer
// has caught up by then), then retryAfter, doubling, up to 32 times it.
func spillBackoff(retryAfter time.Duration, n int) time.Duration {
	if n <= 1 {
		return 0
	}
	return retryAfter << min(n-2, 5)
}

// spillCalm is how many retryAfters a type must write without spilling for
// its next spill to count as the first again.
const spillCalm = 10

// isSpilled reports whether the log's feed stopped writing to it.
func (dl *Log) isSpilled() bool {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	return dl.spill
}

// committed records meta as what the store holds.
func (dl *Log) committed(meta historystore.Meta) {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	dl.meta, dl.known, dl.initial = meta, true, false
}
