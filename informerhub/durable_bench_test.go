package informerhub_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/informerhub/historystore"
	"github.com/informerhub/informerhub/informerhub/hubtest"
	"github.com/informerhub/informerhub/informerhub/upstream"
)

// BenchmarkDiskHistory measures the disk history (internal/durable) with
// ConfigMaps of about 4 KiB, of 1,000 names, each change a MODIFIED with
// its previous state (with -short, a few thousand records, for make
// test's smoke run):
//
//   - append: 200,000 changes through the feed's handler, until the
//     writer has written them all; records/s is their rate end to end
//     (the handler and the writer share the machine), disk-bytes/record
//     what their tables take at rest (Store.Settle: compressed; the
//     state, the write-ahead log and files awaiting deletion apart).
//   - catch-up: a client 1,000,000 records behind reads them all from
//     the disk through Subscription.Next: events/s, and the heap before
//     and at its largest during (heap-before-MiB, heap-max-MiB).
//   - startup: a hub over the same 1,000,000 records serves a Watch:
//     startup-ms from New to the subscription.
func BenchmarkDiskHistory(b *testing.B) {
	appends, records := 200_000, 1_000_000
	if testing.Short() {
		appends, records = 2_000, 5_000
	}
	b.Run("append", func(b *testing.B) { benchmarkDiskAppend(b, appends) })
	// Filled once, by the first benchmark that needs it.
	dir := b.TempDir()
	var (
		fill    sync.Once
		epoch   uint64
		fillErr error
	)
	filled := func(b *testing.B) {
		fill.Do(func() { epoch, fillErr = fillDiskHistory(dir, records) })
		if fillErr != nil {
			b.Fatal(fillErr)
		}
	}
	b.Run("catch-up", func(b *testing.B) { filled(b); benchmarkDiskCatchUp(b, dir, epoch, records) })
	b.Run("startup", func(b *testing.B) { filled(b); benchmarkDiskStartup(b, dir) })
}

const diskBenchObjects = 1000

// diskBenchJSON is a ConfigMap of about 4 KiB whose data is words of
// random hex, which compress about as much as real objects' do.
func diskBenchJSON(rnd *rand.Rand, name string, rv uint64) string {
	var data strings.Builder
	for data.Len() < 4<<10 {
		fmt.Fprintf(&data, "%08x ", rnd.Uint32()&0x0f0f0f0f)
	}
	return fmt.Sprintf(`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":%q,"namespace":"bench","uid":"uid-%s","resourceVersion":"%d","labels":{"app":"bench","shard":"%d"}},"data":{"v":%q}}`,
		name, name, rv, rv%16, data.String())
}

func benchmarkDiskAppend(b *testing.B, n int) {
	for b.Loop() {
		store, err := historystore.Open(historystore.Options{Dir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		c := hubtest.NewCluster(b)
		h := informerhub.New(informerhub.Config{HistoryStore: store, Logger: slog.New(slog.DiscardHandler), IdleTimeout: time.Hour, BookmarkInterval: time.Hour},
			c, informerhub.QuietSource(1))
		s, err := h.Watch(context.Background(), informerhub.WatchRequest{Selector: informerhub.Selector{Resource: hubtest.ConfigMaps}})
		if err != nil {
			b.Fatal(err)
		}
		rnd := rand.New(rand.NewPCG(1, 2))
		objs := make([]informerhub.RawChange, n)
		for i := range objs {
			name, rv := fmt.Sprintf("cm-%04d", i%diskBenchObjects), uint64(2+i)
			objs[i] = informerhub.RawChange{Namespace: "bench", Name: name, RV: rv, JSON: diskBenchJSON(rnd, name, rv)}
		}
		s.Close() // no subscriber: the writer alone reads the records
		start := time.Now()
		for _, change := range objs {
			if err := informerhub.ProcessRaw(h, hubtest.ConfigMaps, change); err != nil {
				b.Fatal(err)
			}
		}
		informerhub.ApplyRetention(h) // writes everything first
		elapsed := time.Since(start)
		if err := store.Settle(context.Background()); err != nil {
			b.Fatal(err)
		}
		recordBytes, err := store.EstimateBytes(upstream.FormatResource(hubtest.ConfigMaps), uint64(n)+1)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(n)/elapsed.Seconds(), "records/s")
		b.ReportMetric(float64(recordBytes)/float64(n), "disk-bytes/record")
		h.Close()
		store.Close()
	}
}

// fillDiskHistory writes n records of ConfigMaps to a store in dir, as a
// hub would have, and returns their epoch.
func fillDiskHistory(dir string, n int) (uint64, error) {
	store, err := historystore.Open(historystore.Options{Dir: dir})
	if err != nil {
		return 0, err
	}
	defer store.Close()
	const epoch, base = 7, 1000
	rnd := rand.New(rand.NewPCG(3, 4))
	last := map[string]*historystore.Object{}
	const batch = 2000
	resource := upstream.FormatResource(hubtest.ConfigMaps)
	for first := 1; first <= n; first += batch {
		recs := make([]historystore.Record, 0, batch)
		for seq := first; seq < first+batch && seq <= n; seq++ {
			name, rv := fmt.Sprintf("cm-%04d", seq%diskBenchObjects), uint64(base+seq)
			obj := historystore.Object{Namespace: "bench", Name: name, UID: "uid-" + name, ResourceVersion: rv,
				Labels: map[string]string{"app": "bench"}, JSON: diskBenchJSON(rnd, name, rv)}
			r := historystore.Record{Seq: uint64(seq), Epoch: epoch, RV: rv, TokenRV: rv, Type: historystore.TypeAdded,
				Received: time.Now().UnixNano(), Object: obj}
			if prev := last[name]; prev != nil {
				r.Type, r.Previous = historystore.TypeModified, prev
			}
			last[name] = &obj
			recs = append(recs, r)
		}
		m := historystore.Meta{LastSeq: recs[len(recs)-1].Seq, LastRV: recs[len(recs)-1].RV, LastAt: time.Now().UnixNano(),
			FirstSeq: 1, FloorRV: base, FloorAt: time.Now().UnixNano(), Epochs: []historystore.Epoch{{ID: epoch, First: 1, Last: recs[len(recs)-1].Seq}}}
		if err := store.Append(resource, nil, historystore.Write{Records: recs, Meta: &m}); err != nil {
			return 0, err
		}
	}
	return epoch, store.Settle(context.Background())
}

// openFilled starts a hub over the store in dir, whose API server is at
// the store's newest version and quiet.
func openFilled(b *testing.B, dir string) (*informerhub.Hub, *historystore.Store, historystore.Meta) {
	store, err := historystore.Open(historystore.Options{Dir: dir})
	if err != nil {
		b.Fatal(err)
	}
	m, _, err := store.Meta(upstream.FormatResource(hubtest.ConfigMaps))
	if err != nil {
		b.Fatal(err)
	}
	c := hubtest.NewCluster(b)
	return informerhub.New(informerhub.Config{HistoryStore: store, Logger: slog.New(slog.DiscardHandler), IdleTimeout: time.Hour, BookmarkInterval: time.Hour},
		c, informerhub.QuietSource(m.LastRV)), store, m
}

func benchmarkDiskCatchUp(b *testing.B, dir string, epoch uint64, n int) {
	for b.Loop() {
		h, store, m := openFilled(b, dir)
		runtime.GC()
		before := heapInUse()
		token := informerhub.ForgeToken(upstream.FormatResource(hubtest.ConfigMaps), epoch, 0, m.FloorRV, 0)
		start := time.Now()
		s, err := h.Watch(context.Background(), informerhub.WatchRequest{Selector: informerhub.Selector{Resource: hubtest.ConfigMaps}, ResumeToken: token})
		if err != nil {
			b.Fatal(err)
		}
		peak := before
		for i := range n {
			ev, err := s.Next(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			if ev.Type == informerhub.EventBookmark {
				b.Fatalf("a bookmark after %d events", i)
			}
			if i%(n/20+1) == 0 {
				peak = max(peak, heapInUse())
			}
		}
		b.ReportMetric(float64(n)/time.Since(start).Seconds(), "events/s")
		b.ReportMetric(float64(before)/(1<<20), "heap-before-MiB")
		b.ReportMetric(float64(peak)/(1<<20), "heap-max-MiB")
		s.Close()
		h.Close()
		store.Close()
	}
}

func heapInUse() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

func benchmarkDiskStartup(b *testing.B, dir string) {
	for b.Loop() {
		start := time.Now()
		h, store, _ := openFilled(b, dir)
		s, err := h.Watch(context.Background(), informerhub.WatchRequest{Selector: informerhub.Selector{Resource: hubtest.ConfigMaps}})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(time.Since(start).Milliseconds()), "startup-ms")
		if n := h.Stats()[0].CachedObjects; n != diskBenchObjects {
			b.Fatalf("%d objects cached, want the stored %d", n, diskBenchObjects)
		}
		s.Close()
		h.Close()
		store.Close()
	}
}
