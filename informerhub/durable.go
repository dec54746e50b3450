package informerhub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/btree"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage/value"
	"k8s.io/client-go/tools/cache"

	"github.com/informerhub/informerhub/informerhub/historystore"
	"github.com/informerhub/informerhub/informerhub/upstream"
)

// diskHistory keeps every resource type's history on disk
// (Config.HistoryStore), behind the in-memory one, which stays the hot tail:
//
//   - One goroutine (run) writes. A feed's store only wakes it; it collects
//     the new records' pointers from the feed under the feed's lock
//     (diskFeed), and encodes and writes them, with the state changes they
//     make and the Meta that covers them, as one synced batch, off the
//     lock. The history never evicts a record before it is written
//     (history.persisted), so every record is in memory or on disk.
//
//   - A feed's sequence numbers continue those on disk, so a record has one
//     seq for the store's life: every run of the feed (an epoch) numbers on
//     from the last, and a token of an earlier run whose seq the disk holds
//     is placed exactly (store.recorded). A run that crashed holds only what
//     it wrote; its later tokens are placed by resourceVersion, as any other
//     replica's.
//
//   - A feed starts from the disk (diskListerWatcher): its informer's first
//     LIST is the stored state at the stored resourceVersion, so the
//     informer watches on from exactly there. If the API server no longer
//     has that version (410), the informer relists, and the differences
//     become records marked FromRelist across a relist range: a gap is never
//     silent.
//
//   - Catch-up reads the disk below the memory's oldest record, a batch at a
//     time outside the feed's lock (diskReads), so a client hours behind
//     costs a disk scan, and the hub's memory stays flat.
//
//   - Retention (retain), every Config.HistoryRetentionCheck, deletes the
//     oldest records past Config.HistoryRetention or HistoryDiskBytes.
//
//   - What a type's changes waiting to be written hold is bounded
//     (Config.HistoryMaxUnwrittenBytes, and the memory budget): past it,
//     or when its write fails, that type alone stops writing and is served
//     from memory (feed.spillDiskLocked); once the writer has caught up (a
//     minute after a failure), its disk history starts over from there
//     (restartSpilled). The other types write on.
//
// If retention or a drop fails, the store is broken: the disk history
// stops for the process (logged, and counted in Stats), memory serves on,
// and a restart continues from what the disk holds, as after a crash.
type diskHistory struct {
	store     HistoryStore
	log       *slog.Logger
	retention *retention
	reads     *diskReads
	// codecs say how each resource type is written, if at all
	// (Config.HistoryTransformers).
	codecs *diskCodecs

	wake chan struct{} // a record or a stop to write; capacity 1
	// retainNow asks the writer to apply retention now, and is answered by
	// closing the channel sent (tests).
	retainNow chan chan struct{}
	quit      chan struct{} // closed by close
	done      chan struct{} // closed when run has returned

	mu     sync.Mutex // guards logs and failed
	logs   map[string]*diskLog
	failed bool
	// writeMu is held by whatever writes to the store: the writer
	// goroutine, and drop. Taken before any other lock.
	writeMu sync.Mutex

	writeErrors atomic.Uint64
	// retryAfter is how long a resource type whose write failed stays in
	// memory only (diskRetryAfter; tests shorten it).
	retryAfter atomic.Int64 // nanoseconds
}

// maxWriteBytes bounds one batch of the writer (besides one record, or one
// relist's differences, which are written whole), so that a writer that
// fell behind catches up in batches Pebble takes, freeing memory as it
// goes.
const maxWriteBytes = 32 << 20

// maxBatchBytes bounds a batch that cannot be split (one relist's
// differences), below Pebble's limit on a batch.
const maxBatchBytes = 2 << 30

// maxEpochs bounds the runs the Meta remembers: a token of an older run
// is placed by its resourceVersion instead, as another replica's is.
const maxEpochs = 256

func newDiskHistory(h *Hub) *diskHistory {
	log := h.log.With("component", "history-disk")
	codecs := newDiskCodecs(h.cfg.HistoryTransformers)
	d := &diskHistory{
		store: h.cfg.HistoryStore, log: log, codecs: codecs,
		reads: newDiskReads(h.cfg.HistoryStore, codecs),
		wake:  make(chan struct{}, 1), retainNow: make(chan chan struct{}), quit: make(chan struct{}), done: make(chan struct{}),
		logs: map[string]*diskLog{},
	}
	d.retryAfter.Store(int64(diskRetryAfter))
	d.retention = newRetention(&h.cfg, d.logOf, log)
	if !codecs.of(upstream.FormatResource(secrets.WithVersion("v1"))).writes {
		log.Warn("Secrets are not written to the history on disk, which would hold them in plaintext: their history stays in memory " +
			"(an encryption configuration whose first provider for secrets encrypts keeps it on disk)")
	}
	d.purgeMemoryOnly()
	go d.run()
	return d
}

// writes reports whether the disk history writes a resource type: a feed
// of a type it does not write keeps its history in memory, as without a
// disk history.
func (d *diskHistory) writes(resource string) bool { return d.codecs.of(resource).writes }

// purgeMemoryOnly deletes, and compacts away, what the store holds of the
// resource types it no longer writes (Secrets written encrypted before the
// encryption configuration went, or by a hub that wrote them as they are),
// before any feed starts.
func (d *diskHistory) purgeMemoryOnly() {
	metas, err := d.store.Resources()
	if err != nil {
		d.fail(err)
		return
	}
	for resource := range metas {
		if d.codecs.of(resource).writes {
			continue
		}
		d.log.Warn("deleting the history on disk of a resource type whose history now stays in memory", "resource", resource)
		if err := d.store.Purge(context.Background(), resource); err != nil {
			d.fail(err)
			return
		}
	}
}

// diskLog is what the disk holds of one resource type, and the feed that
// writes it. Lock order: feed.mu before diskLog.mu; the writer never takes
// a feed's lock holding one.
type diskLog struct {
	resource string
	writer   *diskHistory
	// transformer seals what the log writes and opens what it reads.
	transformer value.Transformer

	mu sync.Mutex // guards the fields below
	// meta is what the store holds; written only by the writer goroutine
	// (and attach, before a feed writes).
	meta   historystore.Meta
	known  bool // the store holds the resource type
	loaded bool // meta was read from the store
	feed   diskFeed
	// initial is set while the feed's initial list is still to be written:
	// a fresh resource type's first write stores the state.
	initial  bool
	detached chan struct{} // closed once feed is nil again
	// spill is set when the feed stopped writing (feed.spillDiskLocked),
	// for the writer to start the type over once it has caught up, not
	// before retryAt. spills counts the spills in a row, each waiting
	// twice as long (see spillBackoff), so that a cause that persists (a
	// disk too slow for the type's changes) does not make the type drop and
	// rewrite its disk history over and over; restarted is when the last
	// restart was.
	spill     bool
	retryAt   time.Time
	spills    int
	restarted time.Time
}

// spilled tells the writer that the log's feed stopped writing to it, to
// start the type over after backoff.
func (dl *diskLog) spilled(retryAfter time.Duration) {
	dl.mu.Lock()
	now := time.Now()
	if !dl.restarted.IsZero() && now.Sub(dl.restarted) > spillCalm*retryAfter {
		dl.spills = 0 // it wrote long enough since: a new cause
	}
	dl.spills++
	dl.spill, dl.retryAt = true, now.Add(spillBackoff(retryAfter, dl.spills))
	dl.mu.Unlock()
	dl.notify()
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
func (dl *diskLog) isSpilled() bool {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	return dl.spill
}

// diskRetryAfter is how long a resource type whose write failed stays in
// memory only before the writer starts its disk history over.
const diskRetryAfter = time.Minute

// diskFeed is what a resource type's disk log needs of the feed that
// writes it; a *feed is one. Each method takes the feed's lock.
type diskFeed interface {
	// attachDisk makes the feed's store write to dl, unless failed reports
	// that the disk failed meanwhile.
	attachDisk(dl *diskLog, failed func() bool) bool
	// detachDisk leaves the feed with its memory alone: no floor for
	// eviction, no disk to read (it holds holes where records go
	// unwritten).
	detachDisk(dl *diskLog)
	// restoreFrom gives the feed what the disk held of its type when it
	// started, for its first list to take.
	restoreFrom(r *restored)
	// spillDisk makes the feed stop writing to dl, and resumeDisk write
	// to it again, from its position, once dl holds nothing of the type.
	spillDisk(dl *diskLog, cause error)
	resumeDisk(dl *diskLog) bool
	// isStopped reports whether the feed has stopped.
	isStopped() bool
	// unwritten collects what the feed recorded since the last write, and
	// its state when withState is set.
	unwritten(dl *diskLog, withState bool) pendingWrite
	// written marks the records up to seq as on disk: memory may evict
	// them now.
	written(dl *diskLog, seq uint64)
}

// pendingWrite is what a feed recorded that its disk log does not hold.
type pendingWrite struct {
	// writing is set when the feed has synced and writes the log; stopped
	// when it stopped: the log is the next feed's once this is written.
	writing, stopped bool
	epoch            uint64
	// records are the feed's records from seq from on; pos is the feed's
	// position, at or past the last of them.
	records []*record
	from    uint64
	pos     position
	// floorRV and floorAt are the oldest point the feed's memory resumes
	// from, for the Meta of a type the disk does not hold yet; state is the
	// feed's state, when asked for.
	floorRV uint64
	floorAt int64
	state   *btree.BTreeG[*object]
	relists []versionRange
}

// restored is what a feed starts from when the disk holds its resource
// type: the stored state, as its informer's first LIST.
type restored struct {
	meta historystore.Meta
	list *upstream.ObjectList
}

// notify wakes the log's writer.
func (dl *diskLog) notify() { dl.writer.notify() }

// window returns the oldest record the disk holds, the newest, and the
// position before the oldest; ok is unset while the disk does not hold
// the resource type (a fresh type's first write comes with its feed's
// first change): its zero Meta reaches nothing.
func (dl *diskLog) window() (first, last, floorRV uint64, floorAt int64, ok bool) {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	return dl.meta.FirstSeq, dl.meta.LastSeq, dl.meta.FloorRV, dl.meta.FloorAt, dl.known
}

// holds reports whether the disk continues a subscriber that has every
// record up to seq.
func (dl *diskLog) holds(seq uint64) bool {
	first, last, _, _, ok := dl.window()
	return ok && seq+1 >= first && seq <= last
}

// committed records meta as what the store holds.
func (dl *diskLog) committed(meta historystore.Meta) {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	dl.meta, dl.known, dl.initial = meta, true, false
}

// close writes what the stopped feeds have left, stops the writer, and
// waits for the reads and compactions under way: the caller may then close
// the store. The caller has stopped every feed.
func (d *diskHistory) close() {
	close(d.quit)
	<-d.done
	d.retention.close()
	d.reads.close()
}

func (d *diskHistory) notify() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

func (d *diskHistory) run() {
	defer close(d.done)
	ticker := time.NewTicker(d.retention.check)
	defer ticker.Stop()
	for {
		select {
		case <-d.wake:
		case <-ticker.C:
			d.writing(d.retain)
		case done := <-d.retainNow:
			d.writing(func() {
				d.flushAll()
				d.retain()
			})
			close(done)
		case <-d.quit:
			d.writing(d.flushAll)
			return
		}
		d.writing(d.flushAll)
	}
}

// retain applies the retention, unless the disk history failed; it fails
// it when retention cannot be applied.
func (d *diskHistory) retain() {
	if d.isFailed() {
		return
	}
	if err := d.retention.apply(); err != nil {
		d.fail(err)
	}
}

// writing runs fn, which writes to the store, holding writeMu.
func (d *diskHistory) writing(fn func()) {
	d.writeMu.Lock()
	defer d.writeMu.Unlock()
	fn()
}

// isFailed reports whether the disk history stopped for the process.
func (d *diskHistory) isFailed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.failed
}

// stats reports what the disk history holds and did.
func (d *diskHistory) stats() DiskStats {
	return DiskStats{Enabled: true, Bytes: d.store.DiskBytes(), Deleted: d.retention.deleted.Load(), WriteErrors: d.writeErrors.Load(), Failed: d.isFailed()}
}

// logOf returns the resource type's log, reading its Meta on first use.
func (d *diskHistory) logOf(resource string) (*diskLog, error) {
	d.mu.Lock()
	dl := d.logs[resource]
	if dl == nil {
		dl = &diskLog{resource: resource, writer: d, transformer: d.codecs.of(resource).transformer}
		d.logs[resource] = dl
	}
	d.mu.Unlock()
	dl.mu.Lock()
	defer dl.mu.Unlock()
	if !dl.loaded {
		var m historystore.Meta
		var ok bool
		err := d.reads.do(context.Background(), false, func() (err error) {
			m, ok, err = d.store.Meta(resource)
			return err
		})
		if err != nil {
			return nil, err
		}
		dl.meta, dl.known, dl.loaded = m, ok, true
	}
	return dl, nil
}

// window returns the oldest position the disk resumes a resource type
// from, and when the hub reached it, for ListResources.
func (d *diskHistory) window(resource string) (floorRV uint64, floorAt int64, ok bool) {
	dl, err := d.logOf(resource)
	if err != nil {
		return 0, 0, false
	}
	dl.mu.Lock()
	defer dl.mu.Unlock()
	return dl.meta.FloorRV, dl.meta.FloorAt, dl.known
}

// attach makes f the feed writing its resource type, once the one before it
// has written everything, and returns what the disk holds of it (nil:
// nothing; f starts from a LIST and writes its state). It fails only when
// ctx ends.
func (d *diskHistory) attach(ctx context.Context, f *feed) (*restored, error) {
	dl, err := d.logOf(f.resource)
	if errors.Is(err, errDiskClosed) {
		return nil, err // the hub is closing
	}
	if err != nil {
		return nil, d.drop(f.resource, err)
	}
	for {
		dl.mu.Lock()
		if dl.feed == nil {
			break
		}
		detached := dl.detached
		dl.mu.Unlock()
		select {
		case <-detached:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	// A new feed continues the disk from its end, the API server filling
	// in what a spilled feed did not write: nothing to start over.
	dl.feed, dl.detached, dl.initial, dl.spill = f, make(chan struct{}), !dl.known, false
	meta, known := dl.meta, dl.known
	dl.mu.Unlock()
	// The disk may have failed since: fail detaches the feeds it finds
	// attached, and a feed attached after it found none sees failed.
	attached := f.attachDisk(dl, d.isFailed)
	d.notify() // the feed may have stopped meanwhile: let the writer see
	if !attached {
		d.detach(dl, f)
		return nil, nil // memory only
	}
	if !known {
		return nil, nil
	}
	list := &upstream.ObjectList{}
	list.ResourceVersion = strconv.FormatUint(meta.LastRV, 10)
	err = d.reads.do(ctx, false, func() error {
		return d.store.State(f.resource, dl.transformer, func(o historystore.Object) error {
			raw := &upstream.Object{JSON: unsafeBytes(o.JSON)} // never written (see upstream.Object)
			raw.Namespace, raw.Name, raw.UID = o.Namespace, o.Name, types.UID(o.UID)
			raw.ResourceVersion, raw.Labels = strconv.FormatUint(o.ResourceVersion, 10), o.Labels
			list.Items = append(list.Items, raw)
			return nil
		})
	})
	if ctx.Err() != nil || errors.Is(err, errDiskClosed) {
		d.detach(dl, f)
		return nil, errors.Join(ctx.Err(), err) // stopping: nothing to drop
	}
	if err != nil {
		// The state cannot be read, so no relist can be diffed against
		// it: start the resource type over rather than guess.
		f.detachDisk(dl)
		d.detach(dl, f)
		return nil, d.drop(f.resource, err)
	}
	f.log.Info("resuming from the history on disk", "objects", len(list.Items), "resourceVersion", meta.LastRV,
		"records", meta.LastSeq+1-meta.FirstSeq)
	return &restored{meta: meta, list: list}, nil
}

// drop deletes what the store holds of a resource type it cannot read,
// so that the feed starts it over; tokens into it are then placed by
// resourceVersion, or replayed. It returns nil: the feed goes on.
func (d *diskHistory) drop(resource string, cause error) error {
	d.log.Error("cannot read the history on disk; starting the resource type over", "resource", resource, "error", cause)
	var err error
	d.writing(func() {
		err = d.reads.do(context.Background(), false, func() error { return d.store.Drop(resource) })
		delete(d.retention.undecryptable, resource) // what the next feed writes reads
	})
	if err != nil {
		d.fail(err)
	}
	d.mu.Lock()
	delete(d.logs, resource)
	d.mu.Unlock()
	return nil
}

func (d *diskHistory) detach(dl *diskLog, f diskFeed) {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	if dl.feed == f {
		dl.feed = nil
		close(dl.detached)
	}
}

// fail stops the disk history for the rest of the process.
func (d *diskHistory) fail(err error) {
	d.writeErrors.Add(1)
	d.mu.Lock()
	if d.failed {
		d.mu.Unlock()
		return
	}
	d.failed = true
	logs := d.logsLocked()
	d.mu.Unlock()
	d.log.Error("cannot write the history to disk; serving from memory only until restarted", "error", err)
	for _, dl := range logs {
		dl.mu.Lock()
		f := dl.feed
		dl.mu.Unlock()
		if f != nil {
			f.detachDisk(dl)
			d.detach(dl, f)
		}
	}
}

// logsLocked returns the logs; the caller holds d.mu.
func (d *diskHistory) logsLocked() []*diskLog {
	logs := make([]*diskLog, 0, len(d.logs))
	for _, dl := range d.logs {
		logs = append(logs, dl)
	}
	return logs
}

func (d *diskHistory) flushAll() {
	d.mu.Lock()
	failed, logs := d.failed, d.logsLocked()
	d.mu.Unlock()
	if failed {
		return
	}
	for _, dl := range logs {
		if err := d.flush(dl); err != nil {
			d.failLog(dl, err)
		}
	}
	d.restartSpilled(logs)
}

// failLog handles a failed write of one resource type: that type alone
// goes on from memory, and its disk history starts over after
// diskRetryAfter.
func (d *diskHistory) failLog(dl *diskLog, err error) {
	d.writeErrors.Add(1)
	d.log.Error("cannot write the history of a resource type to disk; serving it from memory only, and starting its disk history over later",
		"resource", dl.resource, "error", err, "retryAfter", time.Duration(d.retryAfter.Load()))
	dl.mu.Lock()
	f := dl.feed
	dl.mu.Unlock()
	if f != nil {
		f.spillDisk(dl, err)
	}
	// A failed write waits at least retryAfter, whatever spilled before.
	dl.mu.Lock()
	dl.spill = true
	if at := time.Now().Add(time.Duration(d.retryAfter.Load())); dl.retryAt.Before(at) {
		dl.retryAt = at
	}
	dl.mu.Unlock()
}

// restartSpilled starts over the disk history of each type whose feed
// stopped writing (spill), now that the writer has caught up with the
// rest: it drops what the disk holds of the type, and the feed writes its
// state and changes from its position on. The caller holds writeMu.
func (d *diskHistory) restartSpilled(logs []*diskLog) {
	now := time.Now()
	for _, dl := range logs {
		dl.mu.Lock()
		restart, f := dl.spill && !now.Before(dl.retryAt), dl.feed
		if restart && f != nil && f.isStopped() {
			dl.feed = nil
			close(dl.detached)
			f = nil
		}
		if restart && f == nil {
			// The spilled feed stopped: the disk is as it left it, and the
			// next feed continues from its end, the API server filling in
			// what was not written (attach); nothing to start over.
			dl.spill, restart = false, false
		}
		dl.mu.Unlock()
		if !restart {
			continue
		}
		err := d.reads.do(context.Background(), false, func() error { return d.store.Drop(dl.resource) })
		if err != nil {
			if !errors.Is(err, errDiskClosed) {
				d.fail(err)
			}
			return
		}
		dl.mu.Lock()
		dl.meta, dl.known, dl.loaded, dl.initial, dl.spill = historystore.Meta{}, false, true, true, false
		dl.restarted = now
		dl.mu.Unlock()
		if f != nil && !f.resumeDisk(dl) {
			d.detach(dl, f) // it stopped: the next feed of the type starts the disk afresh
		}
	}
}

// flush writes what the log's feed recorded since the last write: it
// collects it from the feed, writes it in batches of at most maxWriteBytes,
// commits each batch's Meta as what the log holds, and marks its records
// written on the feed, which may then evict them from memory.
func (d *diskHistory) flush(dl *diskLog) error {
	dl.mu.Lock()
	f, initial, meta := dl.feed, dl.initial, dl.meta
	dl.mu.Unlock()
	if f == nil {
		return nil
	}
	p := f.unwritten(dl, initial)
	if p.writing && (len(p.records) > 0 || initial || p.pos.rv != meta.LastRV) {
		if initial {
			// A resource type the disk does not hold yet: its state first,
			// in batches, with no Meta, so that a crash meanwhile leaves it
			// unknown, to be written again. The state is the current one;
			// the records' changes, written after it, leave it as it is.
			meta = historystore.Meta{FirstSeq: p.from, FloorRV: p.floorRV, FloorAt: p.floorAt}
			if err := d.writeState(dl, p.state); err != nil {
				return err
			}
		}
		meta.Relists = meta.Relists[:0:0]
		for _, r := range p.relists {
			if r.to > meta.FloorRV {
				meta.Relists = append(meta.Relists, historystore.Range{From: r.from, To: r.to})
			}
		}
		if err := d.writeRecords(dl, f, &p, meta, initial); err != nil {
			return err
		}
	}
	if p.stopped {
		d.detach(dl, f)
	}
	return nil
}

// writeRecords writes the records of p after what meta covers, in
// batches, each with the Meta that covers it; it commits each Meta as what
// the log holds, and marks each batch's records written on f. fresh is set
// for a type the disk does not hold yet: its records carry its Meta only in
// their last batch, because its state, written first, is the current one,
// which only the last batch's Meta describes. A crash before it leaves the
// type unknown, to be written again, rather than a state ahead of its Meta.
func (d *diskHistory) writeRecords(dl *diskLog, f diskFeed, p *pendingWrite, meta historystore.Meta, fresh bool) error {
	initial := fresh
	for recs := p.records; len(recs) > 0 || initial || p.pos.rv != meta.LastRV; initial = false {
		if dl.isSpilled() {
			return nil // its feed stopped writing: what is left goes when it starts over
		}
		n, size := writeBatch(recs)
		if size > maxBatchBytes {
			// One relist's differences, written whole: past what a Pebble
			// batch takes (4 GiB). Memory alone from here, not a crash.
			return fmt.Errorf("a relist of %d bytes of differences is more than the disk history writes at once (%d)", size, maxBatchBytes)
		}
		batch, last, lastRV := recs[:n], p.pos.seq, p.pos.rv
		if n < len(recs) {
			last, lastRV = batch[n-1].pos.seq, batch[n-1].pos.rv
		}
		recs = recs[n:]
		meta = advanced(meta, p.epoch, p.from, last, lastRV)
		w := historystore.Write{Records: make([]historystore.Record, len(batch))}
		for i, r := range batch {
			w.Records[i] = diskRecord(r)
		}
		if !fresh || len(recs) == 0 {
			m := meta
			w.Meta = &m
		}
		if err := d.store.Append(dl.resource, dl.transformer, w); err != nil {
			return err
		}
		if w.Meta != nil {
			dl.committed(meta)
		}
		f.written(dl, last)
	}
	return nil
}

// advanced is meta once the records of epoch up to last are written: the
// log ends there, at lastRV, and the epoch's records run from first (or
// its earliest on disk) to last. It never changes meta's Epochs in place:
// they are shared with what the log held.
func advanced(meta historystore.Meta, epoch, first, last, lastRV uint64) historystore.Meta {
	meta.LastSeq, meta.LastRV, meta.LastAt = last, lastRV, time.Now().UnixNano()
	if k := len(meta.Epochs); k > 0 && meta.Epochs[k-1].ID == epoch {
		meta.Epochs = slices.Clone(meta.Epochs)
		meta.Epochs[k-1].Last = last
	} else {
		meta.Epochs = append(slices.Clone(meta.Epochs), historystore.Epoch{ID: epoch, First: first, Last: last})
	}
	if k := len(meta.Epochs); k > maxEpochs {
		meta.Epochs = meta.Epochs[k-maxEpochs:]
	}
	return meta
}

// writeBatch returns how many of recs the writer's next batch takes, and
// their bytes: at least one, and past maxWriteBytes only to end after a
// record that completes a position (never inside a relist's differences,
// whose state is no position).
func writeBatch(recs []*record) (n, size int) {
	for n < len(recs) && (n == 0 || size < maxWriteBytes || recs[n-1].pos.offset != 0) {
		size += len(recs[n].obj.json)
		if recs[n].prev != nil {
			size += len(recs[n].prev.json)
		}
		n++
	}
	return n, size
}

// writeState writes a resource type's state over what the store holds of
// it, in batches of at most maxWriteBytes.
func (d *diskHistory) writeState(dl *diskLog, state *btree.BTreeG[*object]) error {
	w := historystore.Write{ResetState: true}
	size := 0
	var err error
	state.Ascend(func(o *object) bool {
		w.State = append(w.State, diskObject(o))
		if size += len(o.json); size >= maxWriteBytes {
			err = d.store.Append(dl.resource, dl.transformer, w)
			w, size = historystore.Write{}, 0
		}
		return err == nil
	})
	if err == nil && (w.ResetState || len(w.State) > 0) {
		err = d.store.Append(dl.resource, dl.transformer, w)
	}
	return err
}

func diskObject(o *object) historystore.Object {
	return historystore.Object{Namespace: o.namespace, Name: o.name, UID: o.uid, ResourceVersion: o.rv, Labels: o.labels, JSON: o.json}
}

func diskRecord(r *record) historystore.Record {
	out := historystore.Record{Seq: r.pos.seq, Epoch: r.pos.epoch, RV: r.rv, TokenRV: r.pos.rv, Offset: r.pos.offset,
		Type: uint8(r.typ), Received: r.received, FromRelist: r.fromRelist, Object: diskObject(r.obj)}
	if r.prev != nil {
		prev := diskObject(r.prev)
		out.Previous = &prev
	}
	return out
}

// diskListerWatcher is a feed's lister-watcher when the hub keeps a disk
// history: its first LIST attaches the feed to its resource type's log and,
// when the disk holds the type, is the stored state at the stored
// resourceVersion, so that the informer watches on from there.
type diskListerWatcher struct {
	cache.ListerWatcherWithContext
	feed     *feed
	attached atomic.Bool
}

func (w *diskListerWatcher) List(opts metav1.ListOptions) (runtime.Object, error) {
	return w.ListWithContext(context.Background(), opts)
}

func (w *diskListerWatcher) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	if w.attached.Load() {
		return w.ListerWatcherWithContext.ListWithContext(ctx, opts)
	}
	r, err := w.feed.hub.disk.attach(ctx, w.feed)
	if err != nil {
		return nil, err
	}
	w.attached.Store(true)
	if r == nil {
		return w.ListerWatcherWithContext.ListWithContext(ctx, opts)
	}
	w.feed.restoreFrom(r)
	return r.list, nil
}

func (w *diskListerWatcher) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return w.WatchWithContext(context.Background(), opts)
}

// IsWatchListSemanticsUnSupported keeps the reflector on LIST and WATCH:
// its first LIST is the disk's.
func (w *diskListerWatcher) IsWatchListSemanticsUnSupported() bool { return true }
