package durable

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/storage/value"

	"github.com/informerhub/informerhub/informerhub/historystore"
	"github.com/informerhub/informerhub/informerhub/upstream"
)

// Config says where the disk history lives and how much it keeps.
type Config struct {
	// Store is where it lives. Required.
	Store Store
	// Transformers seal what it writes of each resource type; nil writes
	// values as they are, and keeps Secrets in memory only.
	Transformers value.ResourceTransformers
	// Retention and DiskBytes bound it: records older than Retention go,
	// then the oldest whatever their resource type while the store takes
	// more than DiskBytes; zero keeps them. Retention runs every
	// RetentionCheck (required).
	Retention      time.Duration
	DiskBytes      int64
	RetentionCheck time.Duration
	Logger         *slog.Logger
}

// History keeps every resource type's history on disk:
//
//   - One goroutine (run) writes. A feed only wakes it (Log.Notify); it
//     collects the new records from the feed under the feed's lock
//     (Feed.Unwritten), and encodes and writes them, with the state
//     changes they make and the Meta that covers them, as one synced
//     batch, off the lock. The feed never evicts a record from memory
//     before it is written (Feed.Written), so every record is in memory or
//     on disk.
//
//   - A feed's sequence numbers continue those on disk, so a record has one
//     seq for the store's life: every run of the feed (an epoch) numbers on
//     from the last, and a token of an earlier run whose seq the disk holds
//     is placed exactly (the Meta's Epochs). A run that crashed holds only
//     what it wrote; its later tokens are placed by resourceVersion, as any
//     other replica's.
//
//   - A feed starts from the disk (ListerWatcher): its informer's first
//     LIST is the stored state at the stored resourceVersion, so the
//     informer watches on from exactly there. If the API server no longer
//     has that version (410), the informer relists, and the differences
//     become records marked FromRelist across a relist range: a gap is never
//     silent.
//
//   - Catch-up reads the disk below the memory's oldest record, a batch at a
//     time outside the feed's lock (Read), so a client hours behind costs a
//     disk scan, and the hub's memory stays flat.
//
//   - Retention, every Config.RetentionCheck, deletes the oldest records
//     past Config.Retention or DiskBytes.
//
//   - When a type's feed stops writing (Log.Spilled: its changes waiting
//     to be written grew past what it may hold, or its write failed), that
//     type alone is served from memory; once the writer has caught up (a
//     minute after a failure), its disk history starts over from there
//     (restartSpilled). The other types write on.
//
// If retention or a drop fails, the store is broken: the disk history
// stops for the process (logged, and counted in Stats), memory serves on,
// and a restart continues from what the disk holds, as after a crash.
type History struct {
	store     Store
	log       *slog.Logger
	retention *retention
	reads     *reads
	// codecs say how each resource type is written, if at all
	// (Config.Transformers).
	codecs *codecs

	wake chan struct{} // a record or a stop to write; capacity 1
	// retainNow asks the writer to apply retention now, and is answered by
	// closing the channel sent (RetainNow).
	retainNow chan chan struct{}
	quit      chan struct{} // closed by Close
	done      chan struct{} // closed when run has returned

	mu     sync.Mutex // guards logs and failed
	logs   map[string]*Log
	failed bool
	// writeMu is held by whatever writes to the store: the writer
	// goroutine, drop and Cut. Taken before any other lock.
	writeMu sync.Mutex

	writeErrors atomic.Uint64
	// retryAfter is how long a resource type whose write failed stays in
	// memory only (defaultRetryAfter; SetRetryAfter).
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

// defaultRetryAfter is how long a resource type whose write failed stays
// in memory only before the writer starts its disk history over.
const defaultRetryAfter = time.Minute

// ErrClosed answers reads after the history closed.
var ErrClosed = errors.New("the history on disk is closed")

// New starts the disk history's writer; Close stops it. It deletes what
// the store holds of the resource types it no longer writes first.
func New(cfg Config) *History {
	log := cfg.Logger.With("component", "history-disk")
	codecs := newCodecs(cfg.Transformers)
	d := &History{
		store: cfg.Store, log: log, codecs: codecs,
		reads: newReads(cfg.Store, codecs),
		wake:  make(chan struct{}, 1), retainNow: make(chan chan struct{}), quit: make(chan struct{}), done: make(chan struct{}),
		logs: map[string]*Log{},
	}
	d.retryAfter.Store(int64(defaultRetryAfter))
	d.retention = newRetention(&cfg, d.logOf, log)
	if !codecs.of(upstream.FormatResource(secrets.WithVersion("v1"))).writes {
		log.Warn("Secrets are not written to the history on disk, which would hold them in plaintext: their history stays in memory " +
			"(an encryption configuration whose first provider for secrets encrypts keeps it on disk)")
	}
	d.purgeMemoryOnly()
	go d.run()
	return d
}

// Writes reports whether the disk history writes a resource type: a feed
// of a type it does not write keeps its history in memory, as without a
// disk history.
func (d *History) Writes(resource string) bool { return d.codecs.of(resource).writes }

// purgeMemoryOnly deletes, and compacts away, what the store holds of the
// resource types it no longer writes (Secrets written encrypted before the
// encryption configuration went, or by a hub that wrote them as they are),
// before any feed starts.
func (d *History) purgeMemoryOnly() {
	metas, err := d.store.Resources()
	if err != nil {
		d.Fail(err)
		return
	}
	for resource := range metas {
		if d.codecs.of(resource).writes {
			continue
		}
		d.log.Warn("deleting the history on disk of a resource type whose history now stays in memory", "resource", resource)
		if err := d.store.Purge(context.Background(), resource); err != nil {
			d.Fail(err)
			return
		}
	}
}

// Close writes what the stopped feeds have left, stops the writer, and
// waits for the reads and compactions under way: the caller may then close
// the store. The caller has stopped every feed.
func (d *History) Close() {
	close(d.quit)
	<-d.done
	d.retention.close()
	d.reads.close()
}

func (d *History) notify() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

func (d *History) run() {
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

// RetainNow makes the writer write what the feeds hold and apply the
// retention now, and waits until it has.
func (d *History) RetainNow() {
	done := make(chan struct{})
	d.retainNow <- done
	<-done
}

// retain applies the retention, unless the disk history failed; it fails
// it when retention cannot be applied.
func (d *History) retain() {
	if d.isFailed() {
		return
	}
	if err := d.retention.apply(); err != nil {
		d.Fail(err)
	}
}

// writing runs fn, which writes to the store, holding writeMu.
func (d *History) writing(fn func()) {
	d.writeMu.Lock()
	defer d.writeMu.Unlock()
	fn()
}

// isFailed reports whether the disk history stopped for the process.
func (d *History) isFailed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.failed
}

// Stats is what the disk history holds and did.
type Stats struct {
	Bytes       uint64 // the store's files
	Deleted     uint64 // records retention deleted
	WriteErrors uint64
	Failed      bool   // stopped for the process
	BatchesRead uint64 // by subscribers catching up
}

// Stats reports what the disk history holds and did.
func (d *History) Stats() Stats {
	return Stats{Bytes: d.store.DiskBytes(), Deleted: d.retention.deleted.Load(), WriteErrors: d.writeErrors.Load(),
		Failed: d.isFailed(), BatchesRead: d.reads.batches.Load()}
}

// Log returns the resource type's log, reading its Meta on first use.
func (d *History) Log(resource string) (*Log, error) { return d.logOf(resource) }

func (d *History) logOf(resource string) (*Log, error) {
	d.mu.Lock()
	dl := d.logs[resource]
	if dl == nil {
		dl = &Log{resource: resource, writer: d, transformer: d.codecs.of(resource).transformer}
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

// Window returns the oldest position the disk resumes a resource type
// from, and when the hub reached it, for ListResources.
func (d *History) Window(resource string) (floorRV uint64, floorAt int64, ok bool) {
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
// ctx ends. log is the feed's.
func (d *History) attach(ctx context.Context, resource string, f Feed, log *slog.Logger) (*Restored, error) {
	dl, err := d.logOf(resource)
	if errors.Is(err, ErrClosed) {
		return nil, err // the hub is closing
	}
	if err != nil {
		return nil, d.drop(resource, err)
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
	// The disk may have failed since: Fail detaches the feeds it finds
	// attached, and a feed attached after it found none sees failed.
	attached := f.AttachDisk(dl, d.isFailed)
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
		return d.store.State(resource, dl.transformer, func(o historystore.Object) error {
			raw := &upstream.Object{JSON: unsafeBytes(o.JSON)} // never written (see upstream.Object)
			raw.Namespace, raw.Name, raw.UID = o.Namespace, o.Name, types.UID(o.UID)
			raw.ResourceVersion, raw.Labels = strconv.FormatUint(o.ResourceVersion, 10), o.Labels
			list.Items = append(list.Items, raw)
			return nil
		})
	})
	if ctx.Err() != nil || errors.Is(err, ErrClosed) {
		d.detach(dl, f)
		return nil, errors.Join(ctx.Err(), err) // stopping: nothing to drop
	}
	if err != nil {
		// The state cannot be read, so no relist can be diffed against
		// it: start the resource type over rather than guess.
		f.DetachDisk(dl)
		d.detach(dl, f)
		return nil, d.drop(resource, err)
	}
	log.Info("resuming from the history on disk", "objects", len(list.Items), "resourceVersion", meta.LastRV,
		"records", meta.LastSeq+1-meta.FirstSeq)
	return &Restored{Meta: meta, List: list}, nil
}

// drop deletes what the store holds of a resource type it cannot read,
// so that the feed starts it over; tokens into it are then placed by
// resourceVersion, or replayed. It returns nil: the feed goes on.
func (d *History) drop(resource string, cause error) error {
	d.log.Error("cannot read the history on disk; starting the resource type over", "resource", resource, "error", cause)
	var err error
	d.writing(func() {
		err = d.reads.do(context.Background(), false, func() error { return d.store.Drop(resource) })
		delete(d.retention.undecryptable, resource) // what the next feed writes reads
	})
	if err != nil {
		d.Fail(err)
	}
	d.mu.Lock()
	delete(d.logs, resource)
	d.mu.Unlock()
	return nil
}

func (d *History) detach(dl *Log, f Feed) {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	if dl.feed == f {
		dl.feed = nil
		close(dl.detached)
	}
}

// Fail stops the disk history for the rest of the process, as a full disk
// does: every feed goes on from memory.
func (d *History) Fail(err error) {
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
			f.DetachDisk(dl)
			d.detach(dl, f)
		}
	}
}

// SetRetryAfter sets how long a resource type whose write failed stays in
// memory only before its disk history starts over (default a minute).
func (d *History) SetRetryAfter(after time.Duration) { d.retryAfter.Store(int64(after)) }

// logsLocked returns the logs; the caller holds d.mu.
func (d *History) logsLocked() []*Log {
	logs := make([]*Log, 0, len(d.logs))
	for _, dl := range d.logs {
		logs = append(logs, dl)
	}
	return logs
}
