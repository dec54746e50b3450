package informerhub_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/informerhub/hubtest"
)

// BenchmarkSnapshot takes a snapshot of a large cached state and reads all
// its pages: of every object, and of the 1% labeled bench-sel=yes, once
// with that selector, which a label index serves, and once with an
// equivalent one the index cannot serve, which scans the state. Besides
// ns/op and allocs/op it reports ns/first-page: from the Snapshot call to
// its first page.
func BenchmarkSnapshot(b *testing.B) {
	const objects = 100000
	h := snapshotBenchHub(b, objects)
	for _, bc := range snapshotBenchSelections {
		b.Run(fmt.Sprintf("objects=%d/%s", objects, bc.name), func(b *testing.B) {
			sel := informerhub.Selector{Resource: hubtest.ConfigMaps, LabelSelector: bc.labels}
			// Untimed: the first snapshot waits for the informer to sync,
			// and the first of a selector may build its index.
			readSnapshot(b, h, sel)
			b.ReportAllocs()
			var firstPage time.Duration
			n := 0
			for b.Loop() {
				firstPage += readSnapshot(b, h, sel)
				n++
			}
			b.ReportMetric(float64(firstPage.Nanoseconds())/float64(n), "ns/first-page")
		})
	}
}

// snapshotBenchHub is a hub whose cached state is objects ConfigMaps in
// namespaces of 2000, 1% of them labeled bench-sel=yes, spread through
// each namespace.
func snapshotBenchHub(b *testing.B, objects int) *informerhub.Hub {
	c := hubtest.NewCluster(b)
	for i := range objects {
		l := map[string]string{"app": fmt.Sprint("app-", i%20)}
		if i%100 == 0 {
			l["bench-sel"] = "yes"
		}
		c.ConfigMaps().Add(hubtest.ConfigMap(fmt.Sprint("ns-", i/2000), fmt.Sprintf("cm-%06d", i), l, "data"))
	}
	h := informerhub.New(informerhub.Config{Logger: slog.New(slog.DiscardHandler)}, c, c)
	b.Cleanup(h.Close)
	return h
}

// snapshotBenchSelections are every object, and the 1% labeled
// bench-sel=yes by a selector a label index serves and by an equivalent
// one it cannot, which scans the state.
var snapshotBenchSelections = []struct{ name, labels string }{
	{"select=all", ""},
	{"select=1%/index", "bench-sel=yes"},
	{"select=1%/scan", "bench-sel in (yes,no)"},
}

// readSnapshot reads a whole snapshot and returns the time to its first page.
func readSnapshot(b *testing.B, h *informerhub.Hub, sel informerhub.Selector) (firstPage time.Duration) {
	start := time.Now()
	snap, err := h.Snapshot(context.Background(), informerhub.SnapshotRequest{Selector: sel})
	if err != nil {
		b.Fatal(err)
	}
	defer snap.Close()
	page, err := snap.NextPage(context.Background())
	firstPage = time.Since(start)
	for err == nil && !page.Last {
		page, err = snap.NextPage(context.Background())
	}
	if err != nil {
		b.Fatal(err)
	}
	return firstPage
}

// BenchmarkDigest digests the selections BenchmarkSnapshot reads, beside
// a Snapshot of each read whole in the same run: a Digest scans as a
// Snapshot does, and sends nothing but the digest.
func BenchmarkDigest(b *testing.B) {
	objects := 100000
	if testing.Short() {
		objects = 10000
	}
	h := snapshotBenchHub(b, objects)
	for _, bc := range snapshotBenchSelections {
		sel := informerhub.Selector{Resource: hubtest.ConfigMaps, LabelSelector: bc.labels}
		readSnapshot(b, h, sel) // untimed: the sync, and the selector's index
		b.Run(fmt.Sprintf("objects=%d/%s/digest", objects, bc.name), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := h.Digest(context.Background(), informerhub.DigestRequest{Selector: sel}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("objects=%d/%s/snapshot", objects, bc.name), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				readSnapshot(b, h, sel)
			}
		})
	}
}
