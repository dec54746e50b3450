package feed

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/informerhub/informerhub/informerhub/historystore"
	"github.com/informerhub/informerhub/informerhub/internal/durable"
	"github.com/informerhub/informerhub/informerhub/internal/errs"
	"github.com/informerhub/informerhub/informerhub/internal/event"
	"github.com/informerhub/informerhub/informerhub/internal/state"
)

// A feed's side of its resource type's history on disk: what the disk
// history asks of it (durable.Feed), and what its subscriptions read of the
// disk, which they ask the feed for, not the hub's disk or the store's log.
// Records and objects cross to the disk as historystore's, converted here.

// AttachDisk makes the feed write to dl, unless the disk failed.
func (f *Feed) AttachDisk(dl *durable.Log, failed func() bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if failed() {
		return false
	}
	f.store.disk.log = dl
	return true
}

// DetachDisk leaves the feed with its memory alone.
func (f *Feed) DetachDisk(*durable.Log) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.store.disk.stop()
	if f.store.synced {
		f.store.history.Persisted = math.MaxUint64
	}
}

// ResumeDisk makes the feed write to dl again after a spill, from its
// position on: dl holds nothing of the type now, and its first write is the
// state. It reports false for a feed that stopped.
func (f *Feed) ResumeDisk(dl *durable.Log) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.store
	if f.err != nil || !st.synced || st.released {
		return false
	}
	st.disk.resume(dl, st.pos.RV)
	st.history.Persisted = st.pos.Seq // the state at pos is written with the next records
	f.log.Info("writing the history to disk again", "resourceVersion", st.pos.RV)
	return true
}

// SpillDisk is spillDiskLocked for the writer, which does not hold f.mu.
func (f *Feed) SpillDisk(dl *durable.Log, cause error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.store.disk.log == dl {
		f.spillDiskLocked(cause)
	}
}

// spillDiskLocked stops writing the feed's changes to disk, because what
// the disk does not hold yet went past Config.HistoryMaxUnwrittenBytes (a
// slow or stalled disk, a huge relist), the hub is over its memory budget
// with nothing else to evict, or writing failed: the history in memory may
// evict its records again, so memory stays bounded. The disk keeps what it
// wrote; once its writer has caught up, it starts the type over from the
// feed's position then (durable.History): tokens from before
// are placed in memory, or replayed from the API server (exactly, or
// OUT_OF_RANGE), never across a silent hole. The caller holds f.mu.
func (f *Feed) spillDiskLocked(cause error) {
	st := f.store
	dl := st.disk.log
	if dl == nil {
		return
	}
	unwritten := st.disk.stop()
	st.history.Persisted = math.MaxUint64
	if !st.released {
		st.history.Trim()
		st.noteOldest()
	}
	f.counters.DiskSpills.Add(1)
	f.log.Warn("stopped writing the history to disk, which fell behind; memory only until the writer catches up, then the disk history starts over from there",
		"reason", cause, "unwrittenBytes", unwritten)
	dl.Spilled()
}

// RestoreFrom gives the feed what the disk held of its type, for its first
// list to take.
func (f *Feed) RestoreFrom(r *durable.Restored) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.store.disk.restore = r
}

// Unwritten collects what the feed recorded that dl does not hold: the
// records' pointers and, with withState, a clone of the state, both read
// outside the lock (records are immutable once appended).
func (f *Feed) Unwritten(dl *durable.Log, withState bool) durable.Pending {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.store
	p := durable.Pending{Writing: st.synced && st.disk.log == dl, Stopped: f.err != nil, Epoch: f.epoch}
	if !p.Writing {
		return p
	}
	p.From, p.Seq, p.RV = st.history.Persisted+1, st.pos.Seq, st.pos.RV
	p.FloorRV, p.FloorAt = st.disk.floorRV, st.disk.floorAt
	recs := make(diskRecords, 0, p.Seq+1-p.From)
	for seq := p.From; seq <= p.Seq; seq++ {
		r, _ := st.history.Get(seq) // held: never evicted unwritten
		recs = append(recs, r)
	}
	p.Records = recs
	if withState {
		objects := st.state.Clone()
		p.State = func(yield func(historystore.Object) bool) {
			objects.Ascend(func(o *state.Object) bool { return yield(diskObject(o)) })
		}
	}
	for _, r := range st.relists {
		p.Relists = append(p.Relists, historystore.Range{From: r.from, To: r.to})
	}
	return p
}

// Written marks the feed's records up to seq as on disk: the history may
// evict them now.
func (f *Feed) Written(dl *durable.Log, seq uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.store
	if st.disk.log != dl {
		return
	}
	for s := st.history.Persisted + 1; s <= seq; s++ {
		if r, ok := st.history.Get(s); ok { // held: never evicted unwritten
			st.disk.unwritten -= r.Counted
		}
	}
	st.history.Persisted = seq
	if !st.released {
		st.history.Trim()
		st.noteOldest()
	}
}

// diskHoldsLocked reports whether the feed's history on disk holds the
// records after seq. The caller holds f.mu.
func (f *Feed) diskHoldsLocked(seq uint64) bool {
	return f.store.disk.log != nil && f.store.disk.log.Holds(seq)
}

// ReadDisk appends to dst a batch of the feed's records on disk after
// seq, before upTo (see durable.History.Read).
func (f *Feed) ReadDisk(ctx context.Context, seq, upTo uint64, dst []*state.Record) ([]*state.Record, error) {
	recs, err := f.deps.Disk.Read(ctx, f.resource, seq+1, upTo)
	for i := range recs {
		dst = append(dst, recordFromDisk(&recs[i]))
	}
	return dst, err
}

// FindOnDisk places rv among the feed's records on disk, from first to
// last (see durable.History.LastAtOrBefore).
func (f *Feed) FindOnDisk(ctx context.Context, first, last, rv uint64) (seq uint64, err error) {
	return f.deps.Disk.LastAtOrBefore(ctx, f.resource, first, last, rv)
}

// ReadError is what a subscriber of the feed gets when its disk history
// cannot be read (err, from ReadDisk or FindOnDisk).
func (f *Feed) ReadError(err error) error {
	switch {
	case errors.Is(err, historystore.ErrMissing):
		return f.Expired(false)
	case errors.Is(err, durable.ErrClosed):
		return errs.ErrClosed // the hub is closing
	}
	f.log.Error("cannot read the history on disk", "error", err)
	return &errs.ResourceError{Resource: f.info.Resource, Err: fmt.Errorf("%w: reading the history on disk: %w", errs.ErrUnavailable, err)}
}

// diskRecords are records as the disk history takes them (durable.Records).
type diskRecords []*state.Record

func (rs diskRecords) Len() int                     { return len(rs) }
func (rs diskRecords) At(i int) historystore.Record { return diskRecord(rs[i]) }

func diskObject(o *state.Object) historystore.Object {
	return historystore.Object{Namespace: o.Namespace, Name: o.Name, UID: o.UID, ResourceVersion: o.RV, Labels: o.Labels, JSON: o.JSON}
}

func diskRecord(r *state.Record) historystore.Record {
	out := historystore.Record{Seq: r.Pos.Seq, Epoch: r.Pos.Epoch, RV: r.RV, TokenRV: r.Pos.RV, Offset: r.Pos.Offset,
		Type: uint8(r.Type), Received: r.Received, FromRelist: r.FromRelist, Object: diskObject(r.Object)}
	if r.Previous != nil {
		prev := diskObject(r.Previous)
		out.Previous = &prev
	}
	return out
}

func objectFromDisk(o *historystore.Object) *state.Object {
	return &state.Object{Namespace: o.Namespace, Name: o.Name, UID: o.UID, RV: o.ResourceVersion, Labels: o.Labels, JSON: o.JSON}
}

func recordFromDisk(r *historystore.Record) *state.Record {
	out := &state.Record{Pos: state.Position{Epoch: r.Epoch, Seq: r.Seq, RV: r.TokenRV, Offset: r.Offset}, RV: r.RV,
		Type: event.Type(r.Type), Received: r.Received, FromRelist: r.FromRelist, Object: objectFromDisk(&r.Object)}
	if r.Previous != nil {
		out.Previous = objectFromDisk(r.Previous)
	}
	return out
}
