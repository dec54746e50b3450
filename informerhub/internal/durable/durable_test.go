package durable

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/informerhub/informerhub/informerhub/historystore"
	"github.com/informerhub/informerhub/informerhub/upstream"
)

// fakeFeed is a feed that recorded records, for the writer to write.
type fakeFeed struct {
	mu       sync.Mutex
	log      *Log
	restored *Restored
	records  []historystore.Record // from seq 1 on
	state    []historystore.Object
	written  uint64
	wrote    chan uint64 // each Written
}

type recordSlice []historystore.Record

func (rs recordSlice) Len() int                     { return len(rs) }
func (rs recordSlice) At(i int) historystore.Record { return rs[i] }

func (f *fakeFeed) AttachDisk(dl *Log, failed func() bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if failed() {
		return false
	}
	f.log = dl
	return true
}
func (f *fakeFeed) DetachDisk(*Log) { f.mu.Lock(); f.log = nil; f.mu.Unlock() }
func (f *fakeFeed) RestoreFrom(r *Restored) {
	f.mu.Lock()
	f.restored = r
	f.mu.Unlock()
}
func (f *fakeFeed) SpillDisk(dl *Log, _ error) { f.DetachDisk(dl); dl.Spilled() }
func (f *fakeFeed) ResumeDisk(dl *Log) bool    { return f.AttachDisk(dl, func() bool { return false }) }
func (f *fakeFeed) IsStopped() bool            { return false }

func (f *fakeFeed) Unwritten(dl *Log, withState bool) Pending {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := Pending{Writing: f.log == dl, Epoch: 7, From: f.written + 1}
	if !p.Writing {
		return p
	}
	p.Records = recordSlice(f.records[f.written:])
	if n := len(f.records); n > 0 {
		p.Seq, p.RV = f.records[n-1].Seq, f.records[n-1].TokenRV
	}
	if withState {
		state := f.state
		p.State = func(yield func(historystore.Object) bool) {
			for _, o := range state {
				if !yield(o) {
					return
				}
			}
		}
	}
	return p
}

func (f *fakeFeed) Written(_ *Log, seq uint64) {
	f.mu.Lock()
	f.written = seq
	f.mu.Unlock()
	f.wrote <- seq
}

// record adds a change at resourceVersion rv, and wakes the writer.
func (f *fakeFeed) record(rv uint64) {
	f.mu.Lock()
	seq := uint64(len(f.records)) + 1
	o := historystore.Object{Namespace: "ns", Name: "cm-" + strconv.FormatUint(seq, 10), UID: "u", ResourceVersion: rv, JSON: `{"kind":"ConfigMap"}`}
	f.records = append(f.records, historystore.Record{Seq: seq, Epoch: 7, RV: rv, TokenRV: rv, Type: 1, Received: time.Now().UnixNano(), Object: o})
	f.state = append(f.state, o)
	dl := f.log
	f.mu.Unlock()
	dl.Notify()
}

// emptyList is an API server with nothing of the type at resourceVersion 1.
type emptyList struct{}

func (emptyList) ListWithContext(context.Context, metav1.ListOptions) (runtime.Object, error) {
	l := &upstream.ObjectList{}
	l.ResourceVersion = "1"
	return l, nil
}
func (emptyList) WatchWithContext(context.Context, metav1.ListOptions) (watch.Interface, error) {
	return nil, errors.New("not watched here")
}

func openStore(t *testing.T, dir string) *historystore.Store {
	t.Helper()
	s, err := historystore.Open(historystore.Options{Dir: dir, MemTableBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var discard = slog.New(slog.DiscardHandler)

func newHistory(s Store) *History {
	return New(Config{Store: s, RetentionCheck: time.Hour, Logger: discard})
}

// TestWritesWhatTheFeedRecordedAndRestoresIt writes a feed's records
// through the writer, reads them back as a subscriber catching up does,
// and starts a second run from what the disk holds: its first LIST is the
// stored state at the stored resourceVersion.
func TestWritesWhatTheFeedRecordedAndRestoresIt(t *testing.T) {
	dir := t.TempDir()
	const resource = "configmaps.v1"
	store := openStore(t, dir)
	d := newHistory(store)
	f := &fakeFeed{wrote: make(chan uint64, 16)}
	lw := d.ListerWatcher(emptyList{}, resource, f, discard)
	if _, err := lw.List(metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if f.restored != nil {
		t.Fatal("a type the disk does not hold restored something")
	}
	for rv := uint64(10); rv < 13; rv++ {
		f.record(rv)
	}
	for seq := uint64(0); seq < 3; {
		seq = <-f.wrote
	}
	dl, err := d.Log(resource)
	if err != nil {
		t.Fatal(err)
	}
	if first, last, _, _, ok := dl.Window(); !ok || first != 1 || last != 3 {
		t.Fatalf("the disk holds %d..%d (known %v), want 1..3", first, last, ok)
	}
	if !dl.Holds(0) || !dl.Holds(3) || dl.Holds(4) {
		t.Fatal("Holds does not say what continues a subscriber from the disk")
	}
	recs, err := d.Read(context.Background(), resource, 2, 4)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].RV != 11 || recs[1].RV != 12 || recs[1].Object.Name != "cm-3" {
		t.Fatalf("read back %+v", recs)
	}
	if s := d.Stats(); s.BatchesRead != 1 || s.Failed || s.WriteErrors != 0 {
		t.Fatalf("stats %+v", s)
	}
	d.Close()
	if _, err := d.Read(context.Background(), resource, 1, 4); !errors.Is(err, ErrClosed) {
		t.Fatalf("a read after Close: %v, want ErrClosed", err)
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}

	store = openStore(t, dir)
	defer store.Close()
	d = newHistory(store)
	defer d.Close()
	next := &fakeFeed{wrote: make(chan uint64, 16)}
	out, err := d.ListerWatcher(emptyList{}, resource, next, discard).List(metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	list := out.(*upstream.ObjectList)
	if list.ResourceVersion != "12" || len(list.Items) != 3 {
		t.Fatalf("restored a list of %d at %q, want 3 at 12", len(list.Items), list.ResourceVersion)
	}
	if next.restored == nil || next.restored.Meta.LastSeq != 3 || len(next.restored.Meta.Epochs) != 1 || next.restored.Meta.Epochs[0].ID != 7 {
		t.Fatalf("restored %+v", next.restored)
	}
}

// TestFailDetachesTheFeeds stops the disk history for the process: its
// feed goes on from memory, and a feed attached later writes nothing.
func TestFailDetachesTheFeeds(t *testing.T) {
	store := openStore(t, t.TempDir())
	defer store.Close()
	d := newHistory(store)
	defer d.Close()
	f := &fakeFeed{wrote: make(chan uint64, 1)}
	if _, err := d.ListerWatcher(emptyList{}, "configmaps.v1", f, discard).List(metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	d.Fail(errors.New("injected"))
	if f.log != nil {
		t.Fatal("the feed still writes after the disk failed")
	}
	g := &fakeFeed{wrote: make(chan uint64, 1)}
	if _, err := d.ListerWatcher(emptyList{}, "secrets.v1", g, discard).List(metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if g.log != nil {
		t.Fatal("a feed attached after the failure writes")
	}
	if s := d.Stats(); !s.Failed || s.WriteErrors != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestSecretsAreWrittenOnlyEncrypted(t *testing.T) {
	c := newCodecs(nil)
	if c.of("secrets.v1").writes {
		t.Error("Secrets written without an encryption")
	}
	if !c.of("configmaps.v1").writes || !c.of("secrets.v1.example.com").writes {
		t.Error("other types are not written")
	}
}

func TestSpillBackoff(t *testing.T) {
	for n, want := range map[int]time.Duration{1: 0, 2: time.Minute, 3: 2 * time.Minute, 7: 32 * time.Minute, 20: 32 * time.Minute} {
		if got := spillBackoff(time.Minute, n); got != want {
			t.Errorf("spill %d waits %v, want %v", n, got, want)
		}
	}
}

// TestWriteBatchEndsOnAPosition: past maxWriteBytes a batch still ends
// only after a record that completes a position, never inside a relist's
// differences.
func TestWriteBatchEndsOnAPosition(t *testing.T) {
	big := strings.Repeat("x", maxWriteBytes/2)
	recs := recordSlice{
		{Seq: 1, Object: historystore.Object{JSON: big}},
		{Seq: 2, Offset: 1, Object: historystore.Object{JSON: big}}, // a relist's differences begin
		{Seq: 3, Offset: 2, Object: historystore.Object{JSON: big}},
		{Seq: 4, Object: historystore.Object{JSON: big}}, // and end
		{Seq: 5, Object: historystore.Object{JSON: big}},
	}
	batch, size, next := writeBatch(recs, 0)
	if len(batch) != 4 || next != 4 || size != 4*len(big) {
		t.Fatalf("first batch: %d records, %d bytes, next %d; want the 4 up to the end of the relist", len(batch), size, next)
	}
	if batch, _, next = writeBatch(recs, next); len(batch) != 1 || next != 5 {
		t.Fatalf("second batch: %d records, next %d", len(batch), next)
	}
}

func TestAdvancedNeverChangesEpochsInPlace(t *testing.T) {
	held := historystore.Meta{Epochs: []historystore.Epoch{{ID: 1, First: 1, Last: 5}}}
	m := advanced(held, 1, 1, 9, 90)
	if held.Epochs[0].Last != 5 || m.Epochs[0].Last != 9 || m.LastSeq != 9 || m.LastRV != 90 {
		t.Fatalf("held %+v, advanced %+v", held.Epochs, m)
	}
	if m = advanced(m, 2, 10, 12, 120); len(m.Epochs) != 2 || m.Epochs[1] != (historystore.Epoch{ID: 2, First: 10, Last: 12}) {
		t.Fatalf("a new run: %+v", m.Epochs)
	}
}
