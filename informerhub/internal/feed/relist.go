package feed

import (
	"log/slog"
	"time"

	"github.com/google/btree"
	"k8s.io/client-go/tools/cache"

	"github.com/informerhub/informerhub/informerhub/internal/fanout"
	"github.com/informerhub/informerhub/informerhub/internal/state"
)

// preparedRelist is what the informer's handler makes of a list before
// the feed's lock, as prepare does of a change: the list's objects; the
// first list's state; once the feed has synced, the list's differences
// from the state, found in a clone of it, as the records of the relist's
// batch; the state with them made, in a clone again; and the deliveries of
// each record to the live groups of when it began, with their filters
// evaluated (planDeliveries).
// Under the lock, replaceLocked then installs the state, and records and
// queues the batch: a relist of thousands of differences after an API
// server restart holds the lock for its recording only, while CEL, the
// comparison with the state, the state's tree and the matching of groups
// are done without it.
//
// Only process writes the state, so it does not change between the clone
// and the lock; replaceLocked checks that by the position (seq), and finds
// the differences again under the lock if it did. Groups made meanwhile
// are matched under the lock (see deliverBatch).
type preparedRelist struct {
	// objs are the list's objects, once decoded.
	objs    []*state.Object
	decoded bool
	// first is the state of the feed's first list.
	first *initialState
	// planned is set when the rest was prepared, at the state of seq:
	// records, the state with them applied, and the deliveries to the
	// groups made up to made; visits counts the groups the records were
	// matched against.
	planned bool
	seq     uint64
	records []*state.Record
	applied *appliedChanges
	plans   []fanout.GroupPlan
	made    uint64
	visits  uint64

	// What replaceLocked did with the list at listRV: it became the state
	// (synced), or a relist's batch (relisted).
	listRV           uint64
	synced, relisted bool
}

// prepareRelist prepares a list, as far as it can: not at all when one of
// its objects is not one (replaceLocked reports it).
func (f *Feed) prepareRelist(info cache.ReplacedAllInfo) *preparedRelist {
	p := &preparedRelist{}
	objs := make([]*state.Object, len(info.Objects))
	for i, obj := range info.Objects {
		o, err := state.NewObject(obj)
		if err != nil {
			return p
		}
		objs[i] = o
	}
	p.objs, p.decoded = objs, true
	objects, groups, synced := f.relistBase(p)
	switch {
	case !synced: // the first list, which becomes the state
		p.first = stateOf(p.objs)
		return p
	case objects == nil: // stopped
		return p
	}
	p.records = differences(objects, p.objs)
	p.applied = applied(objects, p.records)
	p.plans, p.visits = fanout.PlanDeliveries(groups, p.records)
	return p
}

// relistBase returns a clone of the state and the live groups, and notes
// in p what they are as of; or whether the feed has synced at all, and a
// nil state if it has stopped. It takes the feed's lock for an O(1) clone
// and a copy of the groups.
func (f *Feed) relistBase(p *preparedRelist) (objects *btree.BTreeG[*state.Object], groups []*fanout.Group, synced bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.store.synced || f.err != nil {
		return nil, nil, f.store.synced
	}
	groups, made := f.live.Groups()
	p.planned, p.seq, p.made = true, f.store.pos.Seq, made
	return f.store.state.Clone(), groups, true
}

// plannedAt reports whether p holds the relist's records, state and
// deliveries as of the state st holds now.
func (p *preparedRelist) plannedAt(st *store) bool {
	return p.planned && p.seq == st.pos.Seq
}

// relistLocked records the differences of a list at listRV against the
// state as one batch, and hands them to the live subscribers: as p
// planned them, or else found under the lock.
func (f *Feed) relistLocked(p *preparedRelist, listRV uint64) {
	planned := p.plannedAt(f.store)
	if !planned {
		p.records = differences(f.store.state, p.objs)
	}
	batchRV := f.store.beginRelist(listRV)
	f.counters.Relists.Add(1)
	p.relisted = true
	if !planned {
		for i, r := range p.records {
			r.RV = batchRV
			f.store.apply(r)
			f.recordLocked(r, relistOffset(i, len(p.records)), nil)
		}
		f.store.endRelist(batchRV)
		return
	}
	f.store.applyAll(p.records, p.applied)
	start := f.store.pos
	for i, r := range p.records {
		r.RV = batchRV
		f.store.record(r, relistOffset(i, len(p.records)))
	}
	f.counters.Received.Add(uint64(len(p.records)))
	if n := len(p.records); n > 0 {
		f.live.TurnPeak(p.records[n-1].Received)
	}
	f.live.CountVisits(p.visits)
	f.live.DeliverBatch(p.records, start, p.plans, f.live.MadeSince(p.made), &f.counters.FellBehind)
	f.store.endRelist(batchRV)
	f.boundUnwrittenLocked() // a huge relist spills at once
}

// relistOffset is the offset of the i-th of a relist's n records (see
// store.record): the last completes the batch, at its version.
func relistOffset(i, n int) uint32 {
	if i == n-1 {
		return 0
	}
	return uint32(i + 1)
}

// log says what the list did, once the feed's lock is released, and how
// long the feed held the lock for it: after an API server restart every
// resource type relists at once, and whatever else needs their locks
// waits meanwhile.
func (p *preparedRelist) log(log *slog.Logger, held time.Duration) {
	switch {
	case p.synced:
		log.Info("informer synced", "objects", len(p.objs), "resourceVersion", p.listRV, "lockHeld", held)
	case p.relisted:
		log.Info("informer relisted", "objects", len(p.objs), "changes", len(p.records), "resourceVersion", p.listRV,
			"lockHeld", held)
	}
}
