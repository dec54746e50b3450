package feed

import (
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/google/btree"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/informerhub/informerhub/informerhub/budget"
	"github.com/informerhub/informerhub/informerhub/historystore"
	"github.com/informerhub/informerhub/informerhub/internal/durable"
	"github.com/informerhub/informerhub/informerhub/internal/errs"
	"github.com/informerhub/informerhub/informerhub/internal/event"
	"github.com/informerhub/informerhub/informerhub/internal/memory"
	"github.com/informerhub/informerhub/informerhub/internal/selection"
	"github.com/informerhub/informerhub/informerhub/internal/state"
)

// store is what a feed holds of its resource type: the current state, a
// history of its recent changes, and the position they are at, advancing
// together, as the kube-apiserver's watchCache does. It has no lock of its
// own: its feed's mu guards it, with the feed's live subscribers, so that a
// change is recorded and handed to them at once, and a subscriber joins
// them exactly after the last record it read. Only oldestAt is read
// without the lock.
type store struct {
	resource schema.GroupVersionResource
	epoch    uint64 // the feed instance's, in every position it makes
	// historySize and historyBytes bound the history (Config.HistorySize,
	// HistoryBytes); memory is where the store counts what it holds.
	historySize  int
	historyBytes int64
	memory       *memory.Account
	log          *slog.Logger

	// state is the current objects, ordered by namespace and name. Clones
	// are taken for snapshots and initial events; it is never mutated
	// outside the lock.
	state *btree.BTreeG[*state.Object]
	// index indexes some label keys of state, and changes with it.
	index labelIndex
	// digests are the state's digests, and change with it.
	digests stateDigests
	// stateBytes counts the state's objects in memory.state.
	stateBytes *budget.Bytes
	history    state.History
	pos        state.Position
	// synced is set once the initial list is in state; until then there is
	// no history or position. released is set when the feed stopped.
	synced, released bool
	// advanced is closed the next time pos moves; see advancedCh.
	advanced chan struct{}
	// relists are the version ranges relists jumped across that the
	// history still reaches; see insideRelist.
	relists []versionRange
	// disk is the store's side of the resource type's history on disk.
	disk storeDisk
	// clones are the open clones of state that snapshots and initial
	// events read, and what they keep (state.Clones).
	clones state.Clones
	// oldestAt is when the history's oldest record arrived (Unix
	// nanoseconds), or 0 when memory eviction may take none: written under
	// the lock (noteOldest), read without it (feed.OldestAt, for the
	// memory budget).
	oldestAt atomic.Int64
}

// storeDisk is a store's side of its resource type's history on disk
// (internal/durable): the log it writes to, what the disk held when the feed
// started, and what the store recorded that the disk does not hold yet.
// The feed's lock guards it, as the rest of the store.
type storeDisk struct {
	// log is the type's history on disk while the store writes it; nil
	// without one, or while spilled (feed.spillDiskLocked).
	log *durable.Log
	// restore is what the disk held when the feed started, until its
	// first list takes it; epochs are the earlier runs whose records the
	// disk holds (see store.recorded).
	restore *durable.Restored
	epochs  []historystore.Epoch
	// unwritten is what the records the disk does not hold yet count in
	// memory (History.count of those after History.Persisted), which the
	// history cannot evict: bounded by Config.HistoryMaxUnwrittenBytes
	// (see feed.spillDiskLocked).
	unwritten int64
	// floorRV and floorAt are where the disk's history of the type begins
	// when the disk does not hold it yet: the initial list, or the
	// position the feed went on writing from after a spill.
	floorRV uint64
	floorAt int64
}

// resume makes the store write to dl again after a spill: the disk's
// history of the type begins at rv, now, the state written with the next
// records.
func (d *storeDisk) resume(dl *durable.Log, rv uint64) {
	d.log, d.unwritten = dl, 0
	d.floorRV, d.floorAt = rv, time.Now().UnixNano()
}

// stop stops the store writing to its log, and returns what its records
// not written held.
func (d *storeDisk) stop() (unwritten int64) {
	unwritten = d.unwritten
	d.log, d.unwritten = nil, 0
	return unwritten
}

const btreeDegree = 32

func newStore(resource schema.GroupVersionResource, epoch uint64, deps *Deps, log *slog.Logger) *store {
	mem := deps.Memory
	return &store{
		resource:     resource,
		epoch:        epoch,
		historySize:  deps.HistorySize,
		historyBytes: deps.HistoryBytes,
		memory:       mem,
		log:          log,
		state:        btree.NewG(btreeDegree, state.ObjectLess),
		index:        newLabelIndex(mem.Indexes),
		digests:      stateDigests{byNamespace: namespaceDigests{}},
		stateBytes:   budget.Counter(mem.State),
		clones:       state.Clones{Kept: budget.Counter(mem.Clones)},
	}
}

// versionRange is the resourceVersions after from, up to and including to.
type versionRange struct{ from, to uint64 }

// put adds o to the state, or replaces the object of its namespace and
// name, and returns what it replaced.
func (st *store) put(o *state.Object) (prev *state.Object, existed bool) {
	prev, existed = st.state.ReplaceOrInsert(o)
	st.index.update(prev, o)
	st.stateBytes.Force(state.ObjectSize(o))
	st.digests.add(o)
	if existed {
		st.digests.remove(prev)
		size := state.ObjectSize(prev)
		st.stateBytes.Force(-size)
		st.clones.Replaced(size)
	}
	return prev, existed
}

// delete removes the object of o's namespace and name from the state, and
// returns it.
func (st *store) delete(o *state.Object) (prev *state.Object, existed bool) {
	prev, existed = st.state.Delete(o)
	if existed {
		st.index.update(prev, nil)
		st.digests.remove(prev)
		size := state.ObjectSize(prev)
		st.stateBytes.Force(-size)
		st.clones.Replaced(size)
	}
	return prev, existed
}

// initialState is a state made from a list, with what the store keeps of
// it: the bytes its objects hold, and its digests.
type initialState struct {
	objects *btree.BTreeG[*state.Object]
	size    int64
	digests stateDigests
}

// stateOf returns a state of objs.
func stateOf(objs []*state.Object) *initialState {
	objects, size := btree.NewG(btreeDegree, state.ObjectLess), int64(0)
	for _, o := range objs {
		if prev, ok := objects.ReplaceOrInsert(o); ok {
			size -= state.ObjectSize(prev)
		}
		size += state.ObjectSize(o)
	}
	return &initialState{objects: objects, size: size, digests: digestsOf(objects)}
}

// sync takes the initial list, at listRV, as the state, and starts the
// history there. When the list is the disk's state (restore), the records
// continue the disk's, and this run is one more epoch. The state is made
// from the list beforehand (stateOf), without the feed's lock: nothing
// reads it before the feed has synced.
func (st *store) sync(initial *initialState, listRV uint64) {
	st.state, st.digests = initial.objects, initial.digests
	st.stateBytes.Force(initial.size)
	var base uint64 // the seq of the initial state
	floorAt := time.Now().UnixNano()
	if r := st.disk.restore; r != nil {
		st.disk.restore = nil
		base, floorAt = r.Meta.LastSeq, r.Meta.LastAt
		st.disk.epochs = r.Meta.Epochs
		for _, rg := range r.Meta.Relists {
			st.relists = append(st.relists, versionRange{from: rg.From, to: rg.To})
		}
	}
	st.pos = state.Position{Epoch: st.epoch, Seq: base, RV: listRV}
	st.history = state.NewHistory(st.historySize, st.historyBytes, listRV, floorAt, st.memory.History)
	st.history.StartAfter(base)
	if st.disk.log != nil {
		st.history.Persisted = base // the state at base is written with the first records
	}
	st.disk.floorRV, st.disk.floorAt = listRV, floorAt
	st.synced = true
}

// differences returns the true differences of a later list (a relist
// after the watch failed or expired) against state, as the records of a
// relist's batch still to be recorded: objects whose resourceVersion did
// not change produce nothing. It only reads state, which may be a clone
// taken under the lock (see preparedRelist).
func differences(objects *btree.BTreeG[*state.Object], objs []*state.Object) (changes []*state.Record) {
	add := func(typ event.Type, obj, prev *state.Object) {
		changes = append(changes, &state.Record{Type: typ, Object: obj, Previous: prev, FromRelist: true})
	}
	listed := make(map[state.Key]struct{}, len(objs))
	for _, o := range objs {
		listed[state.Key{Namespace: o.Namespace, Name: o.Name}] = struct{}{}
	}
	objects.Ascend(func(old *state.Object) bool {
		if _, ok := listed[state.Key{Namespace: old.Namespace, Name: old.Name}]; !ok {
			add(event.Deleted, old, old)
		}
		return true
	})
	for _, o := range objs {
		old, exists := objects.Get(o)
		switch {
		case !exists:
			add(event.Added, o, nil)
		case old.UID != o.UID:
			// Deleted and created again while the hub was not watching.
			add(event.Deleted, old, old)
			add(event.Added, o, nil)
		case old.RV != o.RV:
			add(event.Modified, o, old)
		}
	}
	return changes
}

// beginRelist starts a relist's batch, the differences of a list at listRV
// against the state, to be applied and recorded as one batch, then
// completed with endRelist. It remembers the range of versions the relist
// jumps across, even when it changed nothing (objects may have come and
// gone in between, unseen), and returns the version the batch completes
// at.
func (st *store) beginRelist(listRV uint64) (batchRV uint64) {
	batchRV, relistFrom := max(listRV, st.pos.RV), st.pos.RV
	// Against what memory and disk reach: the disk keeps what they say.
	floor := st.floorRV()
	st.relists = slices.DeleteFunc(st.relists, func(r versionRange) bool { return r.to <= floor })
	if batchRV > relistFrom {
		st.relists = append(st.relists, versionRange{from: relistFrom, to: batchRV})
	}
	st.history.BeginRelist()
	return batchRV
}

// endRelist completes a relist's batch at batchRV. The disk's writer
// learns of it with the next change or bookmark.
func (st *store) endRelist(batchRV uint64) {
	st.history.EndRelist()
	st.pos.RV = batchRV
	st.notifyAdvanced()
}

// apply makes a relist's change in the state.
func (st *store) apply(r *state.Record) {
	if r.Type == event.Deleted {
		st.delete(r.Object)
	} else {
		st.put(r.Object)
	}
}

// appliedChanges is a state with a relist's changes made, off the lock:
// what applyAll installs.
type appliedChanges struct {
	state *btree.BTreeG[*state.Object]
	// grown is the bytes its objects hold beyond the state's; replaced,
	// those of the objects it replaced or deleted, which the state's open
	// clones keep (Clones.Replaced).
	grown, replaced int64
	// added and removed are the objects it put in and took out, for the
	// digests: as the tree did it, whatever the changes say.
	added, removed []*state.Object
}

// applied returns a clone of state with a relist's changes made.
func applied(objects *btree.BTreeG[*state.Object], changes []*state.Record) *appliedChanges {
	a := &appliedChanges{state: objects.Clone()}
	for _, r := range changes {
		var prev *state.Object
		var existed bool
		if r.Type == event.Deleted {
			prev, existed = a.state.Delete(r.Object)
		} else {
			prev, existed = a.state.ReplaceOrInsert(r.Object)
			a.grown += state.ObjectSize(r.Object)
			a.added = append(a.added, r.Object)
		}
		if existed {
			size := state.ObjectSize(prev)
			a.grown, a.replaced = a.grown-size, a.replaced+size
			a.removed = append(a.removed, prev)
		}
	}
	return a
}

// applyAll makes a relist's changes in the state at once, as applied made
// them. The digests follow what the tree did; the label index, the changes
// one by one.
func (st *store) applyAll(changes []*state.Record, a *appliedChanges) {
	st.state = a.state
	st.stateBytes.Force(a.grown)
	st.clones.Replaced(a.replaced)
	// Added first: an object the batch added and replaced again is taken
	// out of a namespace the digests then hold.
	for _, o := range a.added {
		st.digests.add(o)
	}
	for _, o := range a.removed {
		st.digests.remove(o)
	}
	if len(st.index.keys) == 0 {
		return
	}
	for _, r := range changes {
		switch r.Type {
		case event.Added:
			st.index.update(nil, r.Object)
		case event.Modified:
			st.index.update(r.Previous, r.Object)
		case event.Deleted:
			st.index.update(r.Object, nil)
		}
	}
}

// record appends r to the history and advances the position past it, and
// returns the position before it. A record inside a relist's batch has an
// offset, and its position keeps the version before the batch: only the
// batch's last record (offset 0) completes it at r.rv.
func (st *store) record(r *state.Record, offset uint32) (before state.Position) {
	before = st.pos
	r.Pos = state.Position{Epoch: st.epoch, Seq: st.pos.Seq + 1, RV: r.RV, Offset: offset}
	r.Received = time.Now().UnixNano()
	if offset != 0 {
		r.Pos.RV = st.pos.RV
	}
	st.history.Push(r)
	if st.disk.log != nil && st.history.Persisted != math.MaxUint64 {
		st.disk.unwritten += r.Counted
	}
	st.noteOldest()
	st.moved(r.Pos)
	return before
}

// bookmark moves the position to rv, a version the API server says the
// state is at, if it is ahead.
func (st *store) bookmark(rv uint64) {
	if !st.synced || rv <= st.pos.RV {
		return
	}
	pos := st.pos
	pos.RV = rv
	st.moved(pos)
}

// moved makes pos the position, and tells those waiting for it to move:
// the replays waiting for the feed to reach their version, and the disk's
// writer.
func (st *store) moved(pos state.Position) {
	st.pos = pos
	st.notifyAdvanced()
	if st.disk.log != nil {
		st.disk.log.Notify()
	}
}

// notifyAdvanced wakes those waiting for the position to move.
func (st *store) notifyAdvanced() {
	if st.advanced != nil {
		close(st.advanced)
		st.advanced = nil
	}
}

// advancedCh returns a channel closed the next time the position moves.
func (st *store) advancedCh() <-chan struct{} {
	if st.advanced == nil {
		st.advanced = make(chan struct{})
	}
	return st.advanced
}

// Located is where a token's position continues in this store.
type Located struct {
	pos state.Position
	// onDisk is set when pos is below the oldest record in memory, on disk.
	// A position of another instance is then still to be placed by its
	// resourceVersion among the disk's records from searchFrom (the disk's
	// oldest when it was located: if retention takes it meanwhile, the
	// search fails rather than skip what went) up to searchUpTo (set).
	onDisk                 bool
	SearchFrom, SearchUpTo uint64
}

// locate turns a token's position into one of this feed instance.
func (st *store) locate(p state.Position) (Located, error) {
	if p.Epoch == st.epoch || st.recorded(p) {
		// A seq of this feed's numbering: this run's, or an earlier run's
		// that the disk holds.
		if p.Seq > st.pos.Seq {
			return Located{}, &errs.RequestError{Field: errs.FieldResumeToken, Err: errs.ErrInvalidToken,
				Reason: "resume token points past the end of this hub's stream"}
		}
		if p.Seq+1 >= st.history.First {
			return Located{pos: p}, nil
		}
		if st.disk.log != nil && st.disk.log.Holds(p.Seq) {
			return Located{pos: p, onDisk: true}, nil
		}
		return Located{}, st.expiredError(false)
	}
	// A token of another instance: only its resourceVersion means
	// something here.
	if p.Offset != 0 || p.RV < st.floorRV() {
		return Located{}, st.expiredError(false)
	}
	if p.RV > st.pos.RV {
		return Located{}, &errs.ResourceError{Resource: st.resource, Err: fmt.Errorf(
			"%w: the token is at resourceVersion %d, the hub at %d; retry shortly", errs.ErrTokenAhead, p.RV, st.pos.RV)}
	}
	if st.insideRelist(p.RV) {
		// The hub never saw the state there, so it cannot tell which of the
		// relist's changes the client already has.
		return Located{}, st.expiredError(false)
	}
	if p.RV >= st.history.FloorRV {
		return Located{pos: state.Position{Epoch: st.epoch, Seq: st.history.LastAtOrBefore(p.RV), RV: p.RV}}, nil
	}
	first, _, _, _, _ := st.disk.log.Window() // reached: floorRV took the disk's floor
	return Located{pos: state.Position{Epoch: st.epoch, RV: p.RV}, onDisk: true, SearchFrom: first, SearchUpTo: st.history.First - 1}, nil
}

// joinable returns the seq of the history after which the records
// continue a subscriber that holds every selected change up to rv, or
// false when the history cannot: rv is older than the history, newer than
// the position, or inside the versions a relist jumped across.
func (st *store) joinable(rv uint64) (uint64, bool) {
	if rv < st.history.FloorRV || rv > st.pos.RV || st.insideRelist(rv) {
		return 0, false
	}
	return st.history.LastAtOrBefore(rv), true
}

// recorded reports whether p is a position an earlier run of the feed
// wrote to disk, which this run's seqs continue.
func (st *store) recorded(p state.Position) bool {
	for _, e := range st.disk.epochs {
		if e.ID == p.Epoch {
			return p.Seq+1 >= e.First && p.Seq <= e.Last
		}
	}
	return false
}

// floorRV is the oldest resourceVersion the store resumes from without the
// API server: its memory's, or its disk's when that reaches further.
func (st *store) floorRV() uint64 {
	rv, _ := st.oldest()
	return rv
}

// oldest returns the oldest position the store resumes from without the
// API server, and when it got there (Unix nanoseconds).
func (st *store) oldest() (rv uint64, at int64) {
	rv, at = st.history.FloorRV, st.history.FloorAt
	if st.disk.log != nil {
		if first, _, diskRV, diskAt, ok := st.disk.log.Window(); ok && first < st.history.First {
			rv, at = diskRV, diskAt
		}
	}
	return rv, at
}

// expiredError is the ErrTokenExpired of a token older than what the store
// resumes from, saying what that is.
func (st *store) expiredError(upstream bool) *errs.ExpiredError {
	e := &errs.ExpiredError{Resource: st.resource, Upstream: upstream}
	if st.synced {
		rv, at := st.oldest()
		e.OldestResourceVersion, e.Oldest = rv, time.Unix(0, at)
	}
	return e
}

// insideRelist reports whether rv lies strictly inside the versions a
// relist jumped across: a client there holds a state the hub never saw.
func (st *store) insideRelist(rv uint64) bool {
	for _, r := range st.relists {
		if r.from < rv && rv < r.to {
			return true
		}
	}
	return false
}

// noteOldest publishes when the store's oldest record that memory eviction
// may take arrived (oldestAt): zero when it holds only its newest, or its
// feed has stopped.
func (st *store) noteOldest() {
	var at int64
	if !st.released && st.synced && st.history.Len() > 1 && st.history.First <= st.history.Persisted {
		r, _ := st.history.Get(st.history.First)
		at = max(r.Received, 1)
	}
	st.oldestAt.Store(at)
}

// evictForMemory evicts the oldest records while the hub is over its
// memory budget, up to the first that arrived after until, keeping the
// newest and what is not on disk yet. It returns how many it evicted.
func (st *store) evictForMemory(until int64) (evicted int) {
	if st.released || !st.synced {
		st.noteOldest()
		return 0
	}
	for st.memory.Over() && st.history.Len() > 1 && st.history.First <= st.history.Persisted {
		if r, _ := st.history.Get(st.history.First); evicted > 0 && r.Received > until {
			break
		}
		st.history.Evict()
		evicted++
	}
	st.noteOldest()
	return evicted
}

// release gives back what the store counts in the hub's memory, for a feed
// that stopped: what it holds goes once its last subscriber lets go of it,
// and the next feed of the type fills the memory anew.
func (st *store) release() {
	st.released = true
	if st.synced {
		st.history.Release()
	}
	st.oldestAt.Store(0)
	st.index.release()
	st.stateBytes.Drain()
	st.clones.Release()
}

// cloneFor returns a clone of the tree a cursor for sel walks: the index
// tree of sel's most selective indexed equality, or else the state; and
// the equality whose tree it is, nil for the state. Either way the cursor
// applies sel to each object, but for that equality, which every object
// of its tree carries (selection.Selector.Given): the tree narrows what it
// examines, and holds the objects in the state's order.
//
// With the clone of the state it may return an index to build (see
// labelIndexMinObjects), which the caller builds without the lock, and
// installs (Feed.BuildIndex): never more than O(1) under the lock.
func (st *store) cloneFor(sel *selection.Selector) (*btree.BTreeG[*state.Object], *selection.LabelPair, *IndexBuild) {
	tree, eq, b := st.index.treeFor(sel, st.state)
	if b != nil {
		b.seq = st.pos.Seq
	}
	return tree, eq, b
}

// installIndex makes the key b built an indexed one, following the changes
// recorded since the state b was built from; or gives it up, if the feed
// has stopped or its history no longer holds them all (the next request
// builds it again). It reports whether it installed it.
func (st *store) installIndex(b *IndexBuild) bool {
	x := &st.index
	if st.released || b.seq < st.pos.Seq && b.seq+1 < st.history.First {
		delete(x.building, b.pair.Key)
		return false
	}
	x.install(b)
	key, values := b.pair.Key, x.keys[b.pair.Key]
	for seq := b.seq + 1; seq <= st.pos.Seq; seq++ {
		r, _ := st.history.Get(seq)
		switch r.Type {
		case event.Added:
			x.updateKey(key, values, nil, r.Object)
		case event.Modified:
			x.updateKey(key, values, r.Previous, r.Object)
		case event.Deleted:
			x.updateKey(key, values, r.Previous, nil) // the state's: a watch's DELETED carries a final state
		}
	}
	return true
}

// levels fills in what the store holds.
func (st *store) levels(l *Levels) {
	l.CachedObjects = st.state.Len()
	if !st.synced {
		return
	}
	l.Synced = true
	l.HistoryEvents, l.HistoryBytes = st.history.Len(), st.history.Bytes()
	l.HistoryFloorRV = st.history.FloorRV
	l.HistoryOldest = time.Unix(0, st.history.FloorAt)
	l.HistoryNewest = time.Unix(0, st.history.NewestAt())
	rv, at := st.oldest()
	l.RetainedRV, l.RetainedSince = rv, time.Unix(0, at)
	if st.disk.log != nil && st.history.Persisted != math.MaxUint64 {
		l.DiskPending = st.pos.Seq - st.history.Persisted
	}
}
