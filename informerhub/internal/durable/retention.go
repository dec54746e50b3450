package durable

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/informerhub/informerhub/informerhub/historystore"
)

// retention deletes the history on disk past what the hub keeps: records
// older than Config.Retention, then the oldest of any resource type while
// the store takes more than Config.DiskBytes. The writer applies it, every
// Config.RetentionCheck, holding History.writeMu.
type retention struct {
	store Store
	age   time.Duration
	bytes int64
	check time.Duration
	// logOf is the disk history's, whose Meta a cut changes.
	logOf     func(resource string) (*Log, error)
	log       *slog.Logger
	compactor *compactor
	deleted   atomic.Uint64 // records deleted
	// undecryptable are the resource types whose records the encryption
	// configuration cannot read (a key it no longer lists): retention
	// leaves them to the next feed of the type, whose first read of them
	// drops them (History.attach). Written under History.writeMu.
	undecryptable map[string]bool
}

func newRetention(cfg *Config, logOf func(string) (*Log, error), log *slog.Logger) *retention {
	return &retention{
		store: cfg.Store, age: cfg.Retention, bytes: cfg.DiskBytes, check: cfg.RetentionCheck,
		logOf: logOf, log: log, compactor: newCompactor(cfg.Store, log), undecryptable: map[string]bool{},
	}
}

// close ends the compaction under way, and waits for it.
func (r *retention) close() { r.compactor.close() }

// apply deletes the records older than the retention's age, then the
// oldest across resource types while the store is over its bytes.
func (r *retention) apply() error {
	metas, err := r.store.Resources()
	if err != nil {
		return err
	}
	if err := r.byAge(metas); err != nil {
		return err
	}
	return r.bySize()
}

// byAge deletes each resource type's records older than the retention's
// age.
func (r *retention) byAge(metas map[string]historystore.Meta) error {
	if r.age <= 0 {
		return nil
	}
	cutoff := time.Now().Add(-r.age).UnixNano()
	for resource, m := range metas {
		if m.FirstSeq > m.LastSeq || r.undecryptable[resource] {
			continue
		}
		seq, err := r.store.FirstAfter(resource, m.FirstSeq, m.LastSeq, cutoff)
		if err == nil && seq > m.FirstSeq {
			// Pebble compacts what age deletes in its own time: a
			// compaction now would flush the memtable every check.
			err = r.cut(resource, seq, false)
		}
		if err != nil && !errors.Is(err, historystore.ErrMissing) && !r.cannotDecrypt(resource, err) {
			return err
		}
	}
	return nil
}

// cannotDecrypt reports whether err is the encryption configuration's
// failure to read a resource type's records, and then leaves the type out
// of retention: one type whose key went does not stop the disk history of
// the others.
func (r *retention) cannotDecrypt(resource string, err error) bool {
	if !errors.Is(err, historystore.ErrUndecryptable) {
		return false
	}
	r.log.Error("cannot apply retention to a resource type whose history on disk the encryption configuration cannot read; "+
		"its next informer starts it over", "resource", resource, "error", err)
	r.undecryptable[resource] = true
	return true
}

// bySize deletes, while the store takes more than the retention's bytes, about the excess of the resource type whose oldest record is the
// oldest. One cut a check: the space a cut frees shows only once Pebble has
// compacted and deleted its files, so measuring again at once would cut
// again, too much.
func (r *retention) bySize() error {
	limit := r.bytes
	excess := int64(r.store.DiskBytes()) - limit
	if limit <= 0 || excess <= 0 {
		return nil
	}
	metas, err := r.store.Resources()
	if err != nil {
		return err
	}
	var oldest string
	oldestAt := int64(math.MaxInt64)
	for resource, m := range metas {
		if m.FirstSeq <= m.LastSeq && !r.undecryptable[resource] {
			if r, err := r.store.Head(resource, m.FirstSeq); err == nil && r.Received < oldestAt {
				oldest, oldestAt = resource, r.Received
			}
		}
	}
	if oldest == "" {
		return nil // nothing left but states
	}
	// The first seq whose records before it are about the excess, as
	// Pebble estimates their bytes.
	m := metas[oldest]
	lo, hi := m.FirstSeq+1, m.LastSeq+1
	for lo < hi {
		mid := lo + (hi-lo)/2
		n, err := r.store.EstimateBytes(oldest, mid)
		if err != nil {
			return err
		}
		if int64(n) >= excess {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	if err := r.cut(oldest, lo, true); err != nil && !r.cannotDecrypt(oldest, err) {
		return err
	}
	return nil
}

// cut deletes a resource type's records before seq, and with compact
// gives their space back now (retention by size) rather than whenever
// Pebble compacts there.
func (r *retention) cut(resource string, seq uint64, compact bool) error {
	dl, err := r.logOf(resource)
	if err != nil {
		return err
	}
	dl.mu.Lock()
	m := dl.meta
	dl.mu.Unlock()
	if seq <= m.FirstSeq {
		return nil
	}
	last, err := r.store.Head(resource, seq-1)
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
	start, end, err := r.store.DeleteBefore(resource, dl.transformer, seq, m)
	if err != nil {
		return err
	}
	dl.mu.Lock()
	dl.meta = m
	dl.mu.Unlock()
	r.deleted.Add(deleted)
	if compact {
		r.compactor.start(resource, start, end)
	}
	return nil
}

// compactor gives back the space of deleted records now, off the writer
// (a compaction may take a while, and writes must not wait for it), one at
// a time: a cut while one runs leaves its space to Pebble.
type compactor struct {
	store   Store
	log     *slog.Logger
	running sync.WaitGroup
	busy    atomic.Bool
	// ctx ends the compaction under way at close.
	ctx    context.Context
	cancel context.CancelFunc
}

func newCompactor(store Store, log *slog.Logger) *compactor {
	c := &compactor{store: store, log: log}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	return c
}

// start compacts the keys from start to end, unless a compaction runs.
func (c *compactor) start(resource string, start, end []byte) {
	if !c.busy.CompareAndSwap(false, true) {
		return
	}
	c.running.Go(func() {
		defer c.busy.Store(false)
		if err := c.store.Compact(c.ctx, start, end); err != nil && c.ctx.Err() == nil {
			c.log.Warn("cannot compact the history's deleted records; Pebble will in its own time", "resource", resource, "error", err)
		}
	})
}

// close ends the compaction under way, and waits for it.
func (c *compactor) close() {
	c.cancel()
	c.running.Wait()
}

// Cut deletes a resource type's records before seq, as retention by size
// does, from the writer's side.
func (d *History) Cut(resource string, seq uint64) error {
	d.writeMu.Lock()
	defer d.writeMu.Unlock()
	return d.retention.cut(resource, seq, true)
}
