package informerhub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
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
	"k8s.io/client-go/tools/cache"

	"github.com/informerhub/informerhub/informerhub/historystore"
	"github.com/informerhub/informerhub/informerhub/upstream"
)

// diskHistory keeps every resource type's history on disk
// (Config.HistoryStore), behind the in-memory one, which stays the hot tail:
//
//   - One goroutine (run) writes. appendLocked only wakes it; it copies the
//     new records' pointers from the feed's history under the feed's lock,
//     and encodes and writes them, with the state changes they make and the
//     Meta that covers them, as one synced batch, off the lock. The history
//     never evicts a record before it is written (history.persisted), so
//     every record is in memory or on disk.
//   - A feed's sequence numbers continue those on disk, so a record has one
//     seq for the store's life: every run of the feed (an epoch) numbers on
//     from the last, and a token of an earlier run whose seq the disk holds
//     is placed exactly (recordedLocked). A run that crashed holds only what
//     it wrote; its later tokens are placed by resourceVersion, as any other
//     replica's.
//   - A feed starts from the disk (diskListerWatcher): its informer's first
//     LIST is the stored state at the stored resourceVersion, so the
//     informer watches on from exactly there. If the API server no longer
//     has that version (410), the informer relists, and the differences
//     become records marked FromRelist across a relist range: a gap is never
//     silent.
//   - Catch-up reads the disk below the memory's oldest record, a batch at a
//     time outside the feed's lock (nextCatchUp), so a client hours behind
//     costs a disk scan, and the hub's memory stays flat.
//   - Retention (retain), every Config.HistoryRetentionCheck, deletes the
//     oldest records past Config.HistoryRetention or HistoryDiskBytes.
//
// If a write fails, the disk history stops for the process (logged, and
// counted in Stats): memory serves on, and a restart continues from what
// the disk holds, as after a crash.
type diskHistory struct {
	hub   *Hub
	store *historystore.Store
	log   *slog.Logger

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
	// reads bounds the batches read from the store at once, for
	// subscribers catching up from it; readMu fences reads against close:
	// once closed is set, none starts, and close waits for those under way.
	reads  chan struct{}
	readMu sync.RWMutex // guards closed
	closed bool
	// compacting counts the compactions under way (see cut), which
	// compactCtx ends at close.
	compacting    sync.WaitGroup
	compactingNow atomic.Bool
	compactCtx    context.Context
	compactCancel context.CancelFunc

	writeErrors atomic.Uint64
	retained    atomic.Uint64 // records deleted by retention
	batchesRead atomic.Uint64 // by subscribers catching up
	// afterRead, when set, is called after each batch a subscriber reads
	// (tests).
	afterRead atomic.Pointer[func()]
}

// maxConcurrentDiskReads bounds the disk batches read at once; more readers
// wait their turn (each read is one batch, short).
const maxConcurrentDiskReads = 8

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

// errDiskClosed answers reads after the hub closed.
var errDiskClosed = errors.New("the history on disk is closed")

// diskLog is what the disk holds of one resource type, and the feed that
// writes it. Lock order: feed.mu before diskLog.mu; the writer never takes
// a feed's lock holding one.
type diskLog struct {
	resource string

	mu sync.Mutex // guards the fields below
	// meta is what the store holds; written only by the writer goroutine
	// (and attach, before a feed writes).
	meta   historystore.Meta
	known  bool // the store holds the resource type
	loaded bool // meta was read from the store
	feed   *feed
	// initial is set while the feed's initial list is still to be written:
	// a fresh resource type's first write stores the state.
	initial  bool
	detached chan struct{} // closed once feed is nil again
}

func newDiskHistory(h *Hub) *diskHistory {
	d := &diskHistory{
		hub: h, store: h.cfg.HistoryStore, log: h.log.With("component", "history-disk"),
		wake: make(chan struct{}, 1), retainNow: make(chan chan struct{}), quit: make(chan struct{}), done: make(chan struct{}),
		logs: map[string]*diskLog{}, reads: make(chan struct{}, maxConcurrentDiskReads),
	}
	d.compactCtx, d.compactCancel = context.WithCancel(context.Background())
	go d.run()
	return d
}

// close writes what the stopped feeds have left, stops the writer, and
// waits for the reads and compactions under way: the caller may then close
// the store. The caller has stopped every feed.
func (d *diskHistory) close() {
	close(d.quit)
	<-d.done
	d.compactCancel()
	d.compacting.Wait()
	d.readMu.Lock()
	d.closed = true
	d.readMu.Unlock()
}

// read runs fn, which reads the store, unless the hub closed; while
// throttled is set it waits for one of the maxConcurrentDiskReads turns.
func (d *diskHistory) read(ctx context.Context, throttled bool, fn func() error) error {
	if throttled {
		select {
		case d.reads <- struct{}{}:
			defer func() { <-d.reads }()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	d.readMu.RLock()
	defer d.readMu.RUnlock()
	if d.closed {
		return errDiskClosed
	}
	return fn()
}

// lastAtOrBefore places rv among a resource type's records on disk.
func (d *diskHistory) lastAtOrBefore(ctx context.Context, resource string, first, last, rv uint64) (seq uint64, err error) {
	err = d.read(ctx, false, func() error {
		seq, err = d.store.LastAtOrBefore(resource, first, last, rv)
		return err
	})
	return seq, err
}

func (d *diskHistory) notify() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

func (d *diskHistory) run() {
	defer close(d.done)
	ticker := time.NewTicker(d.hub.cfg.HistoryRetentionCheck)
	defer ticker.Stop()
	for {
		select {
		case <-d.wake:
		case <-ticker.C:
			d.writeMu.Lock()
			d.retain()
			d.writeMu.Unlock()
		case done := <-d.retainNow:
			d.writeMu.Lock()
			d.flushAll()
			d.retain()
			d.writeMu.Unlock()
			close(done)
		case <-d.quit:
			d.writeMu.Lock()
			d.flushAll()
			d.writeMu.Unlock()
			return
		}
		d.writeMu.Lock()
		d.flushAll()
		d.writeMu.Unlock()
	}
}

// logOf returns the resource type's log, reading its Meta on first use.
func (d *diskHistory) logOf(resource string) (*diskLog, error) {
	d.mu.Lock()
	dl := d.logs[resource]
	if dl == nil {
		dl = &diskLog{resource: resource}
		d.logs[resource] = dl
	}
	d.mu.Unlock()
	dl.mu.Lock()
	defer dl.mu.Unlock()
	if !dl.loaded {
		var m historystore.Meta
		var ok bool
		err := d.read(context.Background(), false, func() (err error) {
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

// restored is what a feed starts from when the disk holds its resource
// type: the stored state, as its informer's first LIST.
type restored struct {
	meta historystore.Meta
	list *upstream.ObjectList
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
	dl.feed, dl.detached, dl.initial = f, make(chan struct{}), !dl.known
	meta, known := dl.meta, dl.known
	dl.mu.Unlock()
	// The disk may have failed since: fail clears f.disk of the feeds it
	// finds attached, and a feed attached after it found none sees failed.
	f.mu.Lock()
	d.mu.Lock()
	failed := d.failed
	d.mu.Unlock()
	if !failed {
		f.disk = dl
	}
	f.mu.Unlock()
	d.notify() // the feed may have stopped meanwhile: let the writer see
	if failed {
		d.detach(dl, f)
		return nil, nil // memory only
	}
	if !known {
		return nil, nil
	}
	list := &upstream.ObjectList{}
	list.ResourceVersion = strconv.FormatUint(meta.LastRV, 10)
	err = d.read(ctx, false, func() error {
		return d.store.State(f.resource, func(o historystore.Object) error {
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
		f.mu.Lock()
		f.disk = nil
		f.mu.Unlock()
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
	d.writeMu.Lock()
	err := d.read(context.Background(), false, func() error { return d.store.Drop(resource) })
	d.writeMu.Unlock()
	if err != nil {
		d.fail(err)
	}
	d.mu.Lock()
	delete(d.logs, resource)
	d.mu.Unlock()
	return nil
}

func (d *diskHistory) detach(dl *diskLog, f *feed) {
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
	logs := make([]*diskLog, 0, len(d.logs))
	for _, dl := range d.logs {
		logs = append(logs, dl)
	}
	d.mu.Unlock()
	d.log.Error("cannot write the history to disk; serving from memory only until restarted", "error", err)
	for _, dl := range logs {
		dl.mu.Lock()
		f := dl.feed
		dl.mu.Unlock()
		if f != nil {
			f.mu.Lock()
			// Memory alone from now: no floor for eviction, no disk to
			// read (it holds holes where records go unwritten).
			f.disk = nil
			if f.isSynced {
				f.history.persisted = math.MaxUint64
			}
			f.mu.Unlock()
			d.detach(dl, f)
		}
	}
}

func (d *diskHistory) flushAll() {
	d.mu.Lock()
	if d.failed {
		d.mu.Unlock()
		return
	}
	logs := make([]*diskLog, 0, len(d.logs))
	for _, dl := range d.logs {
		logs = append(logs, dl)
	}
	d.mu.Unlock()
	for _, dl := range logs {
		if err := d.flush(dl); err != nil {
			d.fail(err)
			return
		}
	}
}

// flush writes what the log's feed recorded since the last write, in
// batches of at most maxWriteBytes, each with the Meta that covers it.
func (d *diskHistory) flush(dl *diskLog) error {
	dl.mu.Lock()
	f, initial, meta := dl.feed, dl.initial, dl.meta
	dl.mu.Unlock()
	if f == nil {
		return nil
	}
	f.mu.Lock()
	stopped := f.err != nil
	if !f.isSynced || f.disk != dl {
		f.mu.Unlock()
		if stopped {
			d.detach(dl, f)
		}
		return nil
	}
	from, to, pos := f.history.persisted+1, f.pos.seq, f.pos
	floorRV, floorAt := f.history.floorRV, f.history.floorAt
	recs := make([]*record, 0, to+1-from)
	for seq := from; seq <= to; seq++ {
		r, _ := f.history.get(seq) // held: never evicted unwritten
		recs = append(recs, r)
	}
	var state *btree.BTreeG[*object]
	if initial {
		state = f.state.Clone()
	}
	relists := slices.Clone(f.relists)
	f.mu.Unlock()

	if len(recs) == 0 && !initial && pos.rv == meta.LastRV {
		if stopped {
			d.detach(dl, f)
		}
		return nil
	}
	if initial {
		// A resource type the disk does not hold yet: its state first, in
		// batches, with no Meta, so that a crash meanwhile leaves it
		// unknown, to be written again. The state is the current one; the
		// records' changes, written after it, leave it as it is.
		meta = historystore.Meta{FirstSeq: from, FloorRV: floorRV, FloorAt: floorAt}
		if err := d.writeState(f.resource, state); err != nil {
			return err
		}
	}
	meta.Relists = meta.Relists[:0:0]
	for _, r := range relists {
		if r.to > meta.FloorRV {
			meta.Relists = append(meta.Relists, historystore.Range{From: r.from, To: r.to})
		}
	}
	// A fresh type's records carry its Meta only in their last batch: its
	// state, written first, is the current one, which only the last
	// batch's Meta describes. A crash before it leaves the type unknown,
	// to be written again, rather than a state ahead of its Meta.
	fresh := initial
	for len(recs) > 0 || initial || pos.rv != meta.LastRV {
		// A batch ends after a record that completes a position (never
		// inside a relist's differences, whose state is no position).
		n, size := 0, 0
		for n < len(recs) && (n == 0 || size < maxWriteBytes || recs[n-1].pos.offset != 0) {
			size += len(recs[n].obj.json)
			if recs[n].prev != nil {
				size += len(recs[n].prev.json)
			}
			n++
		}
		if size > maxBatchBytes {
			// One relist's differences, written whole: past what a Pebble
			// batch takes (4 GiB). Memory alone from here, not a crash.
			return fmt.Errorf("a relist of %d bytes of differences is more than the disk history writes at once (%d)", size, maxBatchBytes)
		}
		batch, last, lastRV := recs[:n], to, pos.rv
		if n < len(recs) {
			last, lastRV = batch[n-1].pos.seq, batch[n-1].pos.rv
		}
		recs = recs[n:]
		meta.LastSeq, meta.LastRV, meta.LastAt = last, lastRV, time.Now().UnixNano()
		if k := len(meta.Epochs); k > 0 && meta.Epochs[k-1].ID == f.epoch {
			meta.Epochs = slices.Clone(meta.Epochs)
			meta.Epochs[k-1].Last = last
		} else {
			meta.Epochs = append(slices.Clone(meta.Epochs), historystore.Epoch{ID: f.epoch, First: from, Last: last})
		}
		if k := len(meta.Epochs); k > maxEpochs {
			meta.Epochs = meta.Epochs[k-maxEpochs:]
		}
		out := make([]historystore.Record, len(batch))
		for i, r := range batch {
			out[i] = diskRecord(r)
		}
		w := historystore.Write{Records: out}
		if !fresh || len(recs) == 0 {
			m := meta
			w.Meta = &m
		}
		if err := d.store.Append(f.resource, w); err != nil {
			return err
		}
		if w.Meta != nil {
			dl.mu.Lock()
			dl.meta, dl.known, dl.initial = meta, true, false
			dl.mu.Unlock()
		}
		initial = false
		f.mu.Lock()
		if f.disk == dl {
			f.history.persisted = last
			if !stopped {
				f.history.trim()
				f.noteOldestLocked()
			}
		}
		f.mu.Unlock()
	}
	if stopped {
		d.detach(dl, f)
	}
	return nil
}

// writeState writes a resource type's state over what the store holds of
// it, in batches of at most maxWriteBytes.
func (d *diskHistory) writeState(resource string, state *btree.BTreeG[*object]) error {
	w := historystore.Write{ResetState: true}
	size := 0
	var err error
	state.Ascend(func(o *object) bool {
		w.State = append(w.State, diskObject(o))
		if size += len(o.json); size >= maxWriteBytes {
			err = d.store.Append(resource, w)
			w, size = historystore.Write{}, 0
		}
		return err == nil
	})
	if err == nil && (w.ResetState || len(w.State) > 0) {
		err = d.store.Append(resource, w)
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

func objectFromDisk(o *historystore.Object) *object {
	return &object{namespace: o.Namespace, name: o.Name, uid: o.UID, rv: o.ResourceVersion, labels: o.Labels, json: o.JSON}
}

func recordFromDisk(r *historystore.Record) *record {
	out := &record{pos: position{epoch: r.Epoch, seq: r.Seq, rv: r.TokenRV, offset: r.Offset}, rv: r.RV,
		typ: EventType(r.Type), received: r.Received, fromRelist: r.FromRelist, obj: objectFromDisk(&r.Object)}
	if r.Previous != nil {
		out.prev = objectFromDisk(r.Previous)
	}
	return out
}

// window returns the oldest record the disk holds and the position before
// it.
func (dl *diskLog) window() (first, last, floorRV uint64, floorAt int64) {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	return dl.meta.FirstSeq, dl.meta.LastSeq, dl.meta.FloorRV, dl.meta.FloorAt
}

// holds reports whether the disk continues a subscriber that has every
// record up to seq.
func (dl *diskLog) holds(seq uint64) bool {
	first, last, _, _ := dl.window()
	return seq+1 >= first && seq <= last
}

// A subscriber catching up from the disk reads this many records at most
// at a time, holding at most about diskBatchBytes: its batch is its own
// (records in memory are shared), so the batch bounds what each costs.
const (
	diskBatch      = 64
	diskBatchBytes = 64 << 10
)

// readDisk reads a batch of the feed's disk history from seq on, before
// upTo. ErrMissing: retention deleted seq since the caller looked.
func (f *feed) readDisk(ctx context.Context, seq, upTo uint64, dst []*record) ([]*record, error) {
	var recs []historystore.Record
	err := f.hub.disk.read(ctx, true, func() (err error) {
		recs, err = f.hub.cfg.HistoryStore.Read(f.resource, seq, upTo, diskBatch, diskBatchBytes)
		return err
	})
	f.hub.disk.batchesRead.Add(1)
	if hook := f.hub.disk.afterRead.Load(); hook != nil {
		(*hook)()
	}
	if err != nil {
		return dst, err
	}
	for i := range recs {
		dst = append(dst, recordFromDisk(&recs[i]))
	}
	return dst, nil
}

// diskError is what a subscriber gets when the disk history cannot be read.
func (f *feed) diskError(err error) error {
	switch {
	case errors.Is(err, historystore.ErrMissing):
		return f.expired(false)
	case errors.Is(err, errDiskClosed):
		return ErrClosed // the hub is closing
	}
	f.log.Error("cannot read the history on disk", "error", err)
	return &ResourceError{Resource: f.info.Resource, Err: fmt.Errorf("%w: reading the history on disk: %w", ErrUnavailable, err)}
}

// recordedLocked reports whether p is a position an earlier run of the
// feed wrote to disk, which the feed's seqs continue.
func (f *feed) recordedLocked(p position) bool {
	for _, e := range f.epochs {
		if e.ID == p.epoch {
			return p.seq+1 >= e.First && p.seq <= e.Last
		}
	}
	return false
}

// retain deletes the records older than Config.HistoryRetention, then the
// oldest across resource types while the store is over
// Config.HistoryDiskBytes.
func (d *diskHistory) retain() {
	d.mu.Lock()
	failed := d.failed
	d.mu.Unlock()
	if failed {
		return
	}
	metas, err := d.store.Resources()
	if err != nil {
		d.fail(err)
		return
	}
	if age := d.hub.cfg.HistoryRetention; age > 0 {
		cutoff := time.Now().Add(-age).UnixNano()
		for resource, m := range metas {
			if m.FirstSeq > m.LastSeq {
				continue
			}
			seq, err := d.store.FirstAfter(resource, m.FirstSeq, m.LastSeq, cutoff)
			if err == nil && seq > m.FirstSeq {
				// Pebble compacts what age deletes in its own time: a
				// compaction now would flush the memtable every check.
				err = d.cut(resource, seq, false)
			}
			if err != nil && !errors.Is(err, historystore.ErrMissing) {
				d.fail(err)
				return
			}
		}
	}
	// One cut a tick: the space a cut frees shows only once Pebble has
	// compacted and deleted its files, so measuring again at once would
	// cut again, too much.
	limit := d.hub.cfg.HistoryDiskBytes
	{
		excess := int64(d.store.DiskBytes()) - limit
		if limit <= 0 || excess <= 0 {
			return
		}
		if metas, err = d.store.Resources(); err != nil {
			d.fail(err)
			return
		}
		// The resource type whose oldest record is the oldest gives up
		// about the excess, as Pebble estimates its records' bytes.
		var oldest string
		oldestAt := int64(math.MaxInt64)
		for resource, m := range metas {
			if m.FirstSeq <= m.LastSeq {
				if r, err := d.store.Get(resource, m.FirstSeq); err == nil && r.Received < oldestAt {
					oldest, oldestAt = resource, r.Received
				}
			}
		}
		if oldest == "" {
			return // nothing left but states
		}
		m := metas[oldest]
		lo, hi := m.FirstSeq+1, m.LastSeq+1
		for lo < hi {
			mid := lo + (hi-lo)/2
			n, err := d.store.EstimateBytes(oldest, mid)
			if err != nil {
				d.fail(err)
				return
			}
			if int64(n) >= excess {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		if err := d.cut(oldest, lo, true); err != nil {
			d.fail(err)
			return
		}
	}
}

// cut deletes a resource type's records before seq, and with compact
// gives their space back now (retention by size) rather than whenever
// Pebble compacts there.
func (d *diskHistory) cut(resource string, seq uint64, compact bool) error {
	dl, err := d.logOf(resource)
	if err != nil {
		return err
	}
	dl.mu.Lock()
	m := dl.meta
	dl.mu.Unlock()
	if seq <= m.FirstSeq {
		return nil
	}
	last, err := d.store.Get(resource, seq-1)
	if err != nil {
		return err
	}
	deleted := seq - m.FirstSeq
	// The floor is the newest deleted change's own version, as memory
	// eviction has it: inside a relist's differences, the version before
	// them would claim the deleted part of them held.
	m.FirstSeq, m.FloorRV, m.FloorAt = seq, last.RV, last.Received
	m.Epochs = slices.DeleteFunc(slices.Clone(m.Epochs), func(e historystore.Epoch) bool { return e.Last+1 < seq })
	m.Relists = slices.DeleteFunc(slices.Clone(m.Relists), func(r historystore.Range) bool { return r.To <= m.FloorRV })
	start, end, err := d.store.DeleteBefore(resource, seq, m)
	if err != nil {
		return err
	}
	dl.mu.Lock()
	dl.meta = m
	dl.mu.Unlock()
	d.retained.Add(deleted)
	// Off the writer: a compaction may take a while, and writes must not
	// wait for it. One at a time: the next cut waits its check.
	if !compact || !d.compactingNow.CompareAndSwap(false, true) {
		return nil
	}
	d.compacting.Add(1)
	go func() {
		defer d.compacting.Done()
		defer d.compactingNow.Store(false)
		if err := d.store.Compact(d.compactCtx, start, end); err != nil && d.compactCtx.Err() == nil {
			d.log.Warn("cannot compact the history's deleted records; Pebble will in its own time", "resource", resource, "error", err)
		}
	}()
	return nil
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
	f := w.feed
	f.mu.Lock()
	f.restore = r
	f.mu.Unlock()
	return r.list, nil
}

func (w *diskListerWatcher) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return w.WatchWithContext(context.Background(), opts)
}

// IsWatchListSemanticsUnSupported keeps the reflector on LIST and WATCH:
// its first LIST is the disk's.
func (w *diskListerWatcher) IsWatchListSemanticsUnSupported() bool { return true }

// diskStatus is what ListResources reports of a resource type's disk
// history.
func (d *diskHistory) window(resource string) (floorRV uint64, floorAt int64, ok bool) {
	dl, err := d.logOf(resource)
	if err != nil {
		return 0, 0, false
	}
	dl.mu.Lock()
	defer dl.mu.Unlock()
	return dl.meta.FloorRV, dl.meta.FloorAt, dl.known
}
