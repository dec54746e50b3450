package informerhub

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/informerhub/informerhub/informerhub/historystore"
)

// diskReads reads the history on disk for subscribers catching up from it
// and resuming into it, a bounded number of batches at a time, fenced
// against the store's close.
type diskReads struct {
	store  HistoryStore
	codecs *diskCodecs // open what is read
	// turns bounds the batches read at once; more readers wait their turn
	// (each read is one batch, short).
	turns chan struct{}
	// mu fences reads against close: once closed is set, none starts, and
	// close waits for those under way.
	mu     sync.RWMutex // guards closed
	closed bool

	batches atomic.Uint64 // read by subscribers catching up
	// afterBatch, when set, is called after each batch a subscriber reads
	// (tests).
	afterBatch atomic.Pointer[func()]
}

// maxConcurrentDiskReads bounds the disk batches read at once.
const maxConcurrentDiskReads = 8

// A subscriber catching up from the disk reads this many records at most
// at a time, holding at most about diskBatchBytes: its batch is its own
// (records in memory are shared), so the batch bounds what each costs.
const (
	diskBatch      = 64
	diskBatchBytes = 64 << 10
)

// errDiskClosed answers reads after the hub closed.
var errDiskClosed = errors.New("the history on disk is closed")

func newDiskReads(store HistoryStore, codecs *diskCodecs) *diskReads {
	return &diskReads{store: store, codecs: codecs, turns: make(chan struct{}, maxConcurrentDiskReads)}
}

// do runs fn, which reads the store, unless the hub closed; while throttled
// is set it waits for one of the maxConcurrentDiskReads turns.
func (r *diskReads) do(ctx context.Context, throttled bool, fn func() error) error {
	if throttled {
		select {
		case r.turns <- struct{}{}:
			defer func() { <-r.turns }()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		return errDiskClosed
	}
	return fn()
}

// close waits for the reads under way, and refuses the rest.
func (r *diskReads) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
}

// batch appends to dst a batch of a resource type's records from seq on,
// before upTo. ErrMissing: retention deleted seq since the caller looked;
// ErrUndecryptable: the encryption configuration cannot read it.
func (r *diskReads) batch(ctx context.Context, resource string, seq, upTo uint64, dst []*record) ([]*record, error) {
	t := r.codecs.of(resource).transformer
	var recs []historystore.Record
	err := r.do(ctx, true, func() (err error) {
		recs, err = r.store.Read(resource, t, seq, upTo, diskBatch, diskBatchBytes)
		return err
	})
	r.batches.Add(1)
	if hook := r.afterBatch.Load(); hook != nil {
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

// lastAtOrBefore places rv among a resource type's records on disk, from
// first to last.
func (r *diskReads) lastAtOrBefore(ctx context.Context, resource string, first, last, rv uint64) (seq uint64, err error) {
	err = r.do(ctx, false, func() error {
		seq, err = r.store.LastAtOrBefore(resource, first, last, rv)
		return err
	})
	return seq, err
}

// A feed's history on disk, as its subscriptions read it: the phases ask
// the feed, not the hub's disk or the store's log.

// diskHoldsLocked reports whether the feed's history on disk holds the
// records after seq. The caller holds f.mu.
func (f *feed) diskHoldsLocked(seq uint64) bool {
	return f.store.disk.log != nil && f.store.disk.log.holds(seq)
}

// readDisk appends to dst a batch of the feed's records on disk after
// seq, before upTo (see diskReads.batch).
func (f *feed) readDisk(ctx context.Context, seq, upTo uint64, dst []*record) ([]*record, error) {
	return f.hub.disk.reads.batch(ctx, f.resource, seq+1, upTo, dst)
}

// findOnDisk places rv among the feed's records on disk, from first to
// last (see diskReads.lastAtOrBefore).
func (f *feed) findOnDisk(ctx context.Context, first, last, rv uint64) (seq uint64, err error) {
	return f.hub.disk.reads.lastAtOrBefore(ctx, f.resource, first, last, rv)
}

// readError is what a subscriber of f gets when the disk history cannot be
// read.
func readError(f *feed, err error) error {
	switch {
	case errors.Is(err, historystore.ErrMissing):
		return f.expired(false)
	case errors.Is(err, errDiskClosed):
		return ErrClosed // the hub is closing
	}
	f.log.Error("cannot read the history on disk", "error", err)
	return &ResourceError{Resource: f.info.Resource, Err: fmt.Errorf("%w: reading the history on disk: %w", ErrUnavailable, err)}
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
