package historystore

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable/block"
	"k8s.io/apiserver/pkg/storage/value"
)

// Options configures a Store.
type Options struct {
	// Dir is the directory of the store, created if missing.
	Dir string
	// MemTableBytes is the size of each of Pebble's memtables (default
	// 64 MiB); up to two are held, one filling while the other is written
	// out. Smaller ones make more, smaller files to compact: appends slow
	// down (BenchmarkDiskHistory/append: 18k records/s at 16 MiB, 25k at
	// 64 MiB).
	MemTableBytes uint64
	// Logger receives Pebble's errors; nil: slog.Default.
	Logger *slog.Logger
}

// Store is the history on disk. Its methods are safe for concurrent use;
// informerhub writes from one goroutine and reads from many.
//
// The methods that write or read objects take the resource type's
// value.Transformer, through which the objects are sealed (seal.go); nil is
// identity. What stays as it is: the keys (the resource type's name, and
// the namespace and name of each object of its state), each record's
// header (type, epoch, resourceVersions, time) and the Meta.
type Store struct {
	db  *pebble.DB
	log *slog.Logger
}

// Keys: a one-byte kind, the resource type's name and a 0 (names never hold
// one), then the kind's own part. Records sort by sequence number within a
// resource type, state entries by namespace and name.
const (
	kindMeta   = 'm'
	kindRecord = 'r'
	kindState  = 's'
)

// Open opens (or creates) the store in opts.Dir.
func Open(opts Options) (*Store, error) {
	if opts.MemTableBytes == 0 {
		opts.MemTableBytes = 64 << 20
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	// The history holds whole objects (encrypted when the caller's
	// transformers encrypt them, see seal.go): only the hub's user may read
	// it.
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating the history directory: %w", err)
	}
	po := &pebble.Options{
		// Pinned, not FormatNewest: upgrading Pebble must not upgrade the
		// files under an informerhub one might roll back to.
		FormatMajorVersion: pebble.FormatValueSeparation,
		Logger:             pebbleLogger{opts.Logger},
		// Written to more than read: the defaults stall writes once a few
		// files wait in L0, which a burst of appends reaches in seconds on
		// a small disk (measured; see the package doc).
		MemTableSize:                opts.MemTableBytes,
		MemTableStopWritesThreshold: 2,
		L0CompactionThreshold:       2,
		L0StopWritesThreshold:       1000,
		LBaseMaxBytes:               64 << 20,
		CompactionConcurrencyRange:  func() (int, int) { return 1, 2 },
	}
	// Blocks of 32 KiB, not 4: a record of a 4 KiB object and its
	// previous state is a block of its own at 4 KiB, so a subscriber
	// catching up read, looked up and decompressed one block per record.
	// A binary search (LastAtOrBefore, FirstAfter) decompresses a few
	// blocks of 32 KiB instead, well under a millisecond.
	for i := range po.Levels {
		po.Levels[i].BlockSize = 32 << 10
	}
	// MinLZ, but not where files are written to be rewritten soon:
	// decompressing was half of what a subscriber catching up from the
	// disk costs with Snappy, and MinLZ decompresses in about half the
	// time (issue 42: BENCHMARKS.md); compression is most of what
	// appending costs on a small machine (profiled: a quarter of
	// BenchmarkDiskHistory/append's CPU), and a flush's L0 files are
	// compacted within seconds. Every Pebble an informerhub with a history
	// has shipped reads MinLZ, and Snappy files written before stay
	// readable.
	po.ApplyCompressionSettings(func() pebble.DBCompressionSettings {
		cs := pebble.UniformDBCompressionSettings(block.MinLZCompression)
		cs.Levels[0] = block.NoCompression
		return cs
	})
	db, err := pebble.Open(opts.Dir, po)
	if err != nil {
		return nil, fmt.Errorf("opening the history in %s: %w", opts.Dir, err)
	}
	return &Store{db: db, log: opts.Logger}, nil
}

// Close closes the store; nothing may use it after.
func (s *Store) Close() error { return s.db.Close() }

// Settle writes what Pebble holds in memory out to its tables and
// compacts them all, so that DiskBytes and EstimateBytes measure what the
// data costs at rest rather than in the write-ahead log and uncompressed
// level-0 files (benchmarks report bytes per record after it).
func (s *Store) Settle(ctx context.Context) error {
	if err := s.db.Flush(); err != nil {
		return err
	}
	return s.db.Compact(ctx, []byte{0}, []byte{0xff}, false)
}

// DiskBytes is what the store takes on disk.
func (s *Store) DiskBytes() uint64 { return s.db.Metrics().DiskSpaceUsage() }

func prefix(kind byte, resource string) []byte {
	k := make([]byte, 0, 2+len(resource)+16)
	k = append(k, kind)
	k = append(k, resource...)
	return append(k, 0)
}

func recordKey(resource string, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(prefix(kindRecord, resource), seq)
}

func stateKey(resource, namespace, name string) []byte {
	k := append(prefix(kindState, resource), namespace...)
	k = append(k, 0)
	return append(k, name...)
}

// upperBound is the first key after every key that starts with p.
func upperBound(p []byte) []byte {
	end := bytes.Clone(p)
	end[len(end)-1]++ // p ends in the 0 after the name
	return end
}

// Epoch is the sequence numbers one run of a resource type's feed
// recorded: First to Last. A run that crashed has Last at what it wrote.
type Epoch struct {
	ID    uint64 `json:"id"`
	First uint64 `json:"first"`
	Last  uint64 `json:"last"`
}

// Range is the resourceVersions after From, up to and including To.
type Range struct {
	From uint64 `json:"from"`
	To   uint64 `json:"to"`
}

// Meta says what the store holds of one resource type.
type Meta struct {
	// LastSeq is the newest record's sequence number (or, before any, that
	// of the state the records start from); LastRV the resourceVersion the
	// state is at, and LastAt when it was written.
	LastSeq uint64 `json:"lastSeq"`
	LastRV  uint64 `json:"lastRV"`
	LastAt  int64  `json:"lastAt"`
	// FirstSeq is the oldest record held (FirstSeq > LastSeq: none).
	// FloorRV and FloorAt are the resourceVersion and time of the position
	// just before it: every change after FloorRV is held.
	FirstSeq uint64 `json:"firstSeq"`
	FloorRV  uint64 `json:"floorRV"`
	FloorAt  int64  `json:"floorAt"`
	// Epochs are the runs whose records are held, oldest first.
	Epochs []Epoch `json:"epochs,omitempty"`
	// Relists are the versions relists jumped across that the records
	// still reach: what a client held inside them the hub never saw.
	Relists []Range `json:"relists,omitempty"`
}

// keyCluster holds the identity of the cluster the store records.
var keyCluster = []byte{'c'}

// ClaimCluster makes the store the history of the cluster named id (the
// UID of its kube-system namespace, say): a store that holds another
// cluster's history is emptied first, and reports true. Resource versions
// of one cluster mean nothing in another, so a history must never be
// continued against a different one (an etcd restored from nothing, a
// --history-dir moved between clusters).
func (s *Store) ClaimCluster(id string) (reset bool, err error) {
	v, closer, err := s.db.Get(keyCluster)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
	case err != nil:
		return false, err
	default:
		held := string(v)
		closer.Close()
		if held == id {
			return false, nil
		}
		if err := s.reset(); err != nil {
			return false, err
		}
		return true, s.db.Set(keyCluster, []byte(id), pebble.Sync)
	}
	return false, s.db.Set(keyCluster, []byte(id), pebble.Sync)
}

// reset deletes everything the store holds but its cluster's identity.
func (s *Store) reset() error {
	b := s.db.NewBatch()
	defer b.Close()
	for _, kind := range []byte{kindMeta, kindRecord, kindState} {
		if err := b.DeleteRange([]byte{kind}, []byte{kind + 1}, nil); err != nil {
			return err
		}
	}
	return b.Commit(pebble.Sync)
}

// Meta returns what the store holds of a resource type; false if nothing.
func (s *Store) Meta(resource string) (Meta, bool, error) {
	v, closer, err := s.db.Get(prefix(kindMeta, resource))
	if errors.Is(err, pebble.ErrNotFound) {
		return Meta{}, false, nil
	}
	if err != nil {
		return Meta{}, false, err
	}
	defer closer.Close()
	var m Meta
	if err := json.Unmarshal(v, &m); err != nil {
		return Meta{}, false, fmt.Errorf("reading the history's index of %s: %w", resource, err)
	}
	return m, true, nil
}

// Resources returns the resource types the store holds, with their Meta.
func (s *Store) Resources() (map[string]Meta, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{kindMeta}, UpperBound: []byte{kindMeta + 1}})
	if err != nil {
		return nil, err
	}
	out := map[string]Meta{}
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		var m Meta
		if err := json.Unmarshal(it.Value(), &m); err != nil {
			it.Close()
			return nil, fmt.Errorf("reading the history's index of %q: %w", k[1:len(k)-1], err)
		}
		out[string(k[1:len(k)-1])] = m
	}
	return out, it.Close()
}

// Write is what Append writes of one resource type, as one batch.
type Write struct {
	// ResetState deletes the stored state first; State adds objects to it.
	ResetState bool
	State      []Object
	// Records are written in order, each with the change it makes to the
	// state.
	Records []Record
	// Meta, when set, replaces the resource type's Meta.
	Meta *Meta
}

// Append writes w as one atomic, synced batch, its objects sealed with t.
func (s *Store) Append(resource string, t value.Transformer, w Write) error {
	b := s.db.NewBatch()
	defer b.Close()
	if w.ResetState {
		p := prefix(kindState, resource)
		if err := b.DeleteRange(p, upperBound(p), nil); err != nil {
			return err
		}
	}
	var buf, body []byte
	for i := range w.State {
		o := &w.State[i]
		key := stateKey(resource, o.Namespace, o.Name)
		var err error
		if buf, err = appendStateObject(buf[:0], o, t, key); err != nil {
			return err
		}
		if err := b.Set(key, buf, nil); err != nil {
			return err
		}
	}
	// The state entry of an object a record changed points at the newest
	// such record, which holds the object: written once per object per
	// batch, eight bytes, not the object again.
	newest := make(map[[2]string]int, len(w.Records))
	for i := range w.Records {
		r := &w.Records[i]
		key := recordKey(resource, r.Seq)
		body = appendBody(body[:0], r)
		var err error
		if buf, err = seal(appendHeader(buf[:0], r), body, t, key); err != nil {
			return err
		}
		if err := b.Set(key, buf, nil); err != nil {
			return err
		}
		newest[[2]string{r.Object.Namespace, r.Object.Name}] = i
	}
	for key, i := range newest {
		r := &w.Records[i]
		sk := stateKey(resource, key[0], key[1])
		var err error
		if r.Type == TypeDeleted {
			err = b.Delete(sk, nil)
		} else {
			err = b.Set(sk, appendStatePointer(buf[:0], r.Seq), nil)
		}
		if err != nil {
			return err
		}
	}
	if w.Meta != nil {
		if err := s.setMeta(b, resource, *w.Meta); err != nil {
			return err
		}
	}
	return b.Commit(pebble.Sync)
}

func (s *Store) setMeta(b *pebble.Batch, resource string, m Meta) error {
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return b.Set(prefix(kindMeta, resource), data, nil)
}

// DeleteBefore deletes a resource type's records before seq, with the Meta
// that no longer covers them, and returns the key range to Compact to give
// the space back. The objects it takes into the state are opened and
// sealed again with t, under their state keys.
func (s *Store) DeleteBefore(resource string, t value.Transformer, seq uint64, m Meta) (start, end []byte, err error) {
	b := s.db.NewBatch()
	defer b.Close()
	// State entries pointing at records about to go take their objects
	// in: the objects that have not changed since.
	p := prefix(kindState, resource)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: upperBound(p)})
	if err != nil {
		return nil, nil, err
	}
	for it.First(); it.Valid(); it.Next() {
		ptr, ok := statePointer(it.Value())
		if !ok || ptr >= seq {
			continue
		}
		r, err := s.Get(resource, t, ptr)
		if err != nil {
			it.Close()
			return nil, nil, fmt.Errorf("reading the record of a stored object of %s: %w", resource, err)
		}
		key := bytes.Clone(it.Key())
		v, err := appendStateObject(nil, &r.Object, t, key)
		if err == nil {
			err = b.Set(key, v, nil)
		}
		if err != nil {
			it.Close()
			return nil, nil, err
		}
	}
	if err := it.Close(); err != nil {
		return nil, nil, err
	}
	start, end = recordKey(resource, 0), recordKey(resource, seq)
	if err := b.DeleteRange(start, end, nil); err != nil {
		return nil, nil, err
	}
	if err := s.setMeta(b, resource, m); err != nil {
		return nil, nil, err
	}
	return start, end, b.Commit(pebble.Sync)
}

// Compact rewrites a range deleted by DeleteBefore, so that its space is
// given back now rather than whenever Pebble compacts there.
func (s *Store) Compact(ctx context.Context, start, end []byte) error {
	return s.db.Compact(ctx, start, end, false)
}

// Drop deletes everything the store holds of a resource type.
func (s *Store) Drop(resource string) error {
	b := s.db.NewBatch()
	defer b.Close()
	for _, kind := range []byte{kindRecord, kindState} {
		p := prefix(kind, resource)
		if err := b.DeleteRange(p, upperBound(p), nil); err != nil {
			return err
		}
	}
	if err := b.Delete(prefix(kindMeta, resource), nil); err != nil {
		return err
	}
	return b.Commit(pebble.Sync)
}

// Purge deletes everything the store holds of a resource type, as Drop
// does, then compacts where it was, so that no table of the store holds
// its values any longer (Pebble would otherwise keep them until it
// compacts there in its own time).
func (s *Store) Purge(ctx context.Context, resource string) error {
	if err := s.Drop(resource); err != nil {
		return err
	}
	for _, kind := range []byte{kindRecord, kindState} {
		p := prefix(kind, resource)
		if err := s.db.Compact(ctx, p, upperBound(p), false); err != nil {
			return err
		}
	}
	return nil
}

// State calls fn with each object of a resource type's stored state, in
// namespace and name order, opened with t. The Object is fn's to keep. An
// object changed since the records' oldest is read from its newest record:
// one read per object, never a scan of the records.
func (s *Store) State(resource string, t value.Transformer, fn func(Object) error) error {
	// From one snapshot: retention may delete a record a state entry
	// points at (taking its object in first) while this reads.
	snap := s.db.NewSnapshot()
	defer snap.Close()
	p := prefix(kindState, resource)
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: upperBound(p)})
	if err != nil {
		return err
	}
	for it.First(); it.Valid(); it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			return err
		}
		var o Object
		if ptr, ok := statePointer(v); ok {
			var r Record
			if r, err = s.get(snap, resource, t, ptr); err == nil {
				o = r.Object
			}
		} else {
			o, err = readStateObject(v, t, it.Key())
		}
		if err != nil {
			it.Close()
			return fmt.Errorf("reading the stored state of %s: %w", resource, err)
		}
		if err := fn(o); err != nil {
			it.Close()
			return err
		}
	}
	return it.Close()
}

// ErrMissing reports a record the store does not hold: deleted by
// retention since the caller looked.
var ErrMissing = errors.New("the record is no longer on disk")

// Read returns up to max records of a resource type from seq on, in order,
// opened with t, stopping before to (exclusive) and once they hold
// maxBytes (at least one; 0: no bound). It returns ErrMissing if the
// record of seq is not held, and an error matching ErrUndecryptable if t
// cannot open one.
func (s *Store) Read(resource string, t value.Transformer, seq, to uint64, max, maxBytes int) ([]Record, error) {
	return s.read(s.db, resource, &opening{t: t, oneCopy: true}, seq, to, max, maxBytes)
}

// opening is how read opens records' bodies: with t, or, when nil, not at
// all (headers only). With oneCopy, each object's strings share one copy
// of its bytes (copyObject): for records read to be sent and dropped, not
// for objects the hub keeps (the state, Get), whose labels and namespace
// longer-lived indexes may keep after the object is gone.
type opening struct {
	t       value.Transformer
	oneCopy bool
}

// headers reads records' headers only: their objects stay unread.
var headers *opening

// reader is what records are read from: the store, or a snapshot of it.
type reader interface {
	NewIter(*pebble.IterOptions) (*pebble.Iterator, error)
}

func (s *Store) read(db reader, resource string, how *opening, seq, to uint64, max, maxBytes int) ([]Record, error) {
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: recordKey(resource, seq), UpperBound: recordKey(resource, to)})
	if err != nil {
		return nil, err
	}
	var out []Record
	next, size := seq, 0
	for it.First(); it.Valid() && len(out) < max && (maxBytes <= 0 || size < maxBytes); it.Next() {
		k := it.Key()
		got := binary.BigEndian.Uint64(k[len(k)-8:])
		if got != next {
			break // a hole: retention ran since the caller looked
		}
		v, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			return nil, err
		}
		r, flags, body, err := readHeader(v)
		if err == nil && how != nil {
			if body, err = unseal(body, how.t, k); err == nil {
				err = readBody(&r, flags, body, how.oneCopy)
			}
		}
		if err != nil {
			it.Close()
			return nil, fmt.Errorf("reading record %d of %s: %w", got, resource, err)
		}
		r.Seq = got
		out = append(out, r)
		size += len(v)
		next++
	}
	if err := it.Close(); err != nil {
		return nil, err
	}
	if len(out) == 0 && seq < to {
		return nil, ErrMissing
	}
	return out, nil
}

// Get returns one record.
func (s *Store) Get(resource string, t value.Transformer, seq uint64) (Record, error) {
	return s.get(s.db, resource, t, seq)
}

// Head returns one record's header: all but its objects, which it neither
// opens nor reads.
func (s *Store) Head(resource string, seq uint64) (Record, error) {
	return s.one(s.db, resource, headers, seq)
}

func (s *Store) get(db reader, resource string, t value.Transformer, seq uint64) (Record, error) {
	return s.one(db, resource, &opening{t: t}, seq)
}

func (s *Store) one(db reader, resource string, how *opening, seq uint64) (Record, error) {
	recs, err := s.read(db, resource, how, seq, seq+1, 1, 0)
	if err != nil {
		return Record{}, err
	}
	return recs[0], nil
}

// LastAtOrBefore returns the seq of the newest record in [first, last]
// whose resourceVersion is at most rv (first-1 when none): records are in
// resourceVersion order.
func (s *Store) LastAtOrBefore(resource string, first, last, rv uint64) (uint64, error) {
	seq, err := s.search(resource, first, last, func(r *Record) bool { return r.RV > rv })
	return seq - 1, err
}

// FirstAfter returns the seq of the oldest record in [first, last] received
// after the Unix nanosecond at (last+1 when none): records are in the order
// the hub received them.
func (s *Store) FirstAfter(resource string, first, last uint64, at int64) (uint64, error) {
	return s.search(resource, first, last, func(r *Record) bool { return r.Received > at })
}

// search returns the seq of the oldest record in [first, last] for which
// past holds (last+1 when none), by binary search: past must hold for
// every record after one it holds for.
func (s *Store) search(resource string, first, last uint64, past func(*Record) bool) (uint64, error) {
	lo, hi := first, last+1
	for lo < hi {
		mid := lo + (hi-lo)/2
		r, err := s.Head(resource, mid)
		if err != nil {
			return 0, err
		}
		if past(&r) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo, nil
}

// EstimateBytes estimates the disk bytes of a resource type's records
// before seq.
func (s *Store) EstimateBytes(resource string, seq uint64) (uint64, error) {
	return s.db.EstimateDiskUsage(recordKey(resource, 0), recordKey(resource, seq))
}

type pebbleLogger struct{ log *slog.Logger }

func (l pebbleLogger) Infof(string, ...any) {}
func (l pebbleLogger) Errorf(format string, args ...any) {
	l.log.Error("history store: " + fmt.Sprintf(format, args...))
}
func (l pebbleLogger) Fatalf(format string, args ...any) {
	// Pebble calls Fatalf on an invariant it cannot continue past; it
	// expects the process to end.
	panic("history store: " + fmt.Sprintf(format, args...))
}
