package durable

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"time"
	"unsafe"

	"github.com/informerhub/informerhub/informerhub/historystore"
)

func (d *History) flushAll() {
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
// goes on from memory, and its disk history starts over after retryAfter.
func (d *History) failLog(dl *Log, err error) {
	d.writeErrors.Add(1)
	d.log.Error("cannot write the history of a resource type to disk; serving it from memory only, and starting its disk history over later",
		"resource", dl.resource, "error", err, "retryAfter", time.Duration(d.retryAfter.Load()))
	dl.mu.Lock()
	f := dl.feed
	dl.mu.Unlock()
	if f != nil {
		f.SpillDisk(dl, err)
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
func (d *History) restartSpilled(logs []*Log) {
	now := time.Now()
	for _, dl := range logs {
		dl.mu.Lock()
		restart, f := dl.spill && !now.Before(dl.retryAt), dl.feed
		if restart && f != nil && f.IsStopped() {
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
			if !errors.Is(err, ErrClosed) {
				d.Fail(err)
			}
			return
		}
		dl.mu.Lock()
		dl.meta, dl.known, dl.loaded, dl.initial, dl.spill = historystore.Meta{}, false, true, true, false
		dl.restarted = now
		dl.mu.Unlock()
		if f != nil && !f.ResumeDisk(dl) {
			d.detach(dl, f) // it stopped: the next feed of the type starts the disk afresh
		}
	}
}

// flush writes what the log's feed recorded since the last write: it
// collects it from the feed, writes it in batches of at most maxWriteBytes,
// commits each batch's Meta as what the log holds, and marks its records
// written on the feed, which may then evict them from memory.
func (d *History) flush(dl *Log) error {
	dl.mu.Lock()
	f, initial, meta := dl.feed, dl.initial, dl.meta
	dl.mu.Unlock()
	if f == nil {
		return nil
	}
	p := f.Unwritten(dl, initial)
	if p.Writing && (p.Records.Len() > 0 || initial || p.RV != meta.LastRV) {
		if initial {
			// A resource type the disk does not hold yet: its state first,
			// in batches, with no Meta, so that a crash meanwhile leaves it
			// unknown, to be written again. The state is the current one;
			// the records' changes, written after it, leave it as it is.
			meta = historystore.Meta{FirstSeq: p.From, FloorRV: p.FloorRV, FloorAt: p.FloorAt}
			if err := d.writeState(dl, p.State); err != nil {
				return err
			}
		}
		meta.Relists = meta.Relists[:0:0]
		for _, r := range p.Relists {
			if r.To > meta.FloorRV {
				meta.Relists = append(meta.Relists, r)
			}
		}
		if err := d.writeRecords(dl, f, &p, meta, initial); err != nil {
			return err
		}
	}
	if p.Stopped {
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
func (d *History) writeRecords(dl *Log, f Feed, p *Pending, meta historystore.Meta, fresh bool) error {
	initial := fresh
	for i, n := 0, p.Records.Len(); i < n || initial || p.RV != meta.LastRV; initial = false {
		if dl.isSpilled() {
			return nil // its feed stopped writing: what is left goes when it starts over
		}
		var w historystore.Write
		var size int
		w.Records, size, i = writeBatch(p.Records, i)
		if size > maxBatchBytes {
			// One relist's differences, written whole: past what a Pebble
			// batch takes (4 GiB). Memory alone from here, not a crash.
			return fmt.Errorf("a relist of %d bytes of differences is more than the disk history writes at once (%d)", size, maxBatchBytes)
		}
		last, lastRV := p.Seq, p.RV
		if i < n {
			end := &w.Records[len(w.Records)-1]
			last, lastRV = end.Seq, end.TokenRV
		}
		meta = advanced(meta, p.Epoch, p.From, last, lastRV)
		if !fresh || i == n {
			m := meta
			w.Meta = &m
		}
		if err := d.store.Append(dl.resource, dl.transformer, w); err != nil {
			return err
		}
		if w.Meta != nil {
			dl.committed(meta)
		}
		f.Written(dl, last)
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

// writeBatch takes the writer's next batch of recs from i, and returns it,
// its bytes and where the next begins: at least one record, and past
// maxWriteBytes only to end after a record that completes a position
// (never inside a relist's differences, whose state is no position).
func writeBatch(recs Records, i int) (batch []historystore.Record, size, next int) {
	for n := recs.Len(); i < n && (len(batch) == 0 || size < maxWriteBytes || batch[len(batch)-1].Offset != 0); i++ {
		r := recs.At(i)
		size += len(r.Object.JSON)
		if r.Previous != nil {
			size += len(r.Previous.JSON)
		}
		batch = append(batch, r)
	}
	return batch, size, i
}

// writeState writes a resource type's state over what the store holds of
// it, in batches of at most maxWriteBytes.
func (d *History) writeState(dl *Log, state iter.Seq[historystore.Object]) error {
	w := historystore.Write{ResetState: true}
	size := 0
	var err error
	for o := range state {
		w.State = append(w.State, o)
		if size += len(o.JSON); size >= maxWriteBytes {
			if err = d.store.Append(dl.resource, dl.transformer, w); err != nil {
				break
			}
			w, size = historystore.Write{}, 0
		}
	}
	if err == nil && (w.ResetState || len(w.State) > 0) {
		err = d.store.Append(dl.resource, dl.transformer, w)
	}
	return err
}

// unsafeBytes is s's bytes, shared, for what only reads them.
func unsafeBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }
