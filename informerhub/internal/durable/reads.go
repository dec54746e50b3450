package durable

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/informerhub/informerhub/informerhub/historystore"
)

// reads reads the history on disk for subscribers catching up from it and
// resuming into it, a bounded number of batches at a time, fenced against
// the store's close.
type reads struct {
	store  Store
	codecs *codecs // open what is read
	// turns bounds the batches read at once; more readers wait their turn
	// (each read is one batch, short).
	turns chan struct{}
	// mu fences reads against close: once closed is set, none starts, and
	// close waits for those under way.
	mu     sync.RWMutex // guards closed
	closed bool

	batches atomic.Uint64 // read by subscribers catching up
	// afterBatch, when set, is called after each batch a subscriber reads
	// (History.AfterRead).
	afterBatch atomic.Pointer[func()]
}

// maxConcurrentReads bounds the disk batches read at once.
const maxConcurrentReads = 8

// A subscriber catching up from the disk reads this many records at most
// at a time, holding at most about batchBytes: its batch is its own
// (records in memory are shared), so the batch bounds what each costs.
const (
	batchRecords = 64
	batchBytes   = 64 << 10
)

func newReads(store Store, codecs *codecs) *reads {
	return &reads{store: store, codecs: codecs, turns: make(chan struct{}, maxConcurrentReads)}
}

// do runs fn, which reads the store, unless the history closed; while
// throttled is set it waits for one of the maxConcurrentReads turns.
func (r *reads) do(ctx context.Context, throttled bool, fn func() error) error {
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
		return ErrClosed
	}
	return fn()
}

// close waits for the reads under way, and refuses the rest.
func (r *reads) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
}

// Read returns a batch of a resource type's records from seq on, before
// upTo. historystore.ErrMissing: retention deleted seq since the caller
// looked; historystore.ErrUndecryptable: the encryption configuration
// cannot read it; ErrClosed: the history closed.
func (d *History) Read(ctx context.Context, resource string, seq, upTo uint64) ([]historystore.Record, error) {
	r := d.reads
	t := r.codecs.of(resource).transformer
	var recs []historystore.Record
	err := r.do(ctx, true, func() (err error) {
		recs, err = r.store.Read(resource, t, seq, upTo, batchRecords, batchBytes)
		return err
	})
	r.batches.Add(1)
	if hook := r.afterBatch.Load(); hook != nil {
		(*hook)()
	}
	return recs, err
}

// AfterRead makes fn run after each batch Read reads.
func (d *History) AfterRead(fn func()) { d.reads.afterBatch.Store(&fn) }

// LastAtOrBefore places rv among a resource type's records on disk, from
// first to last.
func (d *History) LastAtOrBefore(ctx context.Context, resource string, first, last, rv uint64) (seq uint64, err error) {
	err = d.reads.do(ctx, false, func() error {
		seq, err = d.store.LastAtOrBefore(resource, first, last, rv)
		return err
	})
	return seq, err
}
