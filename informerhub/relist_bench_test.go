//go:build unix

package informerhub_test

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/informerhub/hubtest"
	"github.com/informerhub/informerhub/server"
)

// BenchmarkRelistLockHold measures how long a relist holds its feed's
// lock, which every subscription takes to catch up, go live or read a
// bookmark's position, and which metrics scrapes and the disk's writer
// take too: after an API server restart every resource type relists at
// once. 5,000 ConfigMaps of about 1 KiB are relisted, each changed (a
// label), with 1,000 live subscribers over 100 distinct CEL filters
// (object.metadata.labels.shard == "s00" ... "s99", ten subscribers
// each), so that each change concerns ten subscribers and is matched
// against every filter. Each iteration is one relist, through the
// informer's handler (informerhub.ProcessList), whose 50,000 deliveries
// are received before the next.
//
// Besides ns/op (the relist and its deliveries) it reports
//
//   - longest-wait-ns: the longest a goroutine that takes and releases
//     the feed's lock over and over waited for it during the relists
//     (informerhub.ProbeLock): what anyone waiting for the lock waited at
//     worst, the longest hold plus the time the scheduler took to run the
//     probe again, which on a busy machine may be milliseconds;
//   - relist-hold-ns: the longest the feed held its lock for a relist, as
//     its "informer relisted" log line says (lockHeld);
//   - relist-ns: how long the informer's handler took per relist, with
//     the lock and without.
func BenchmarkRelistLockHold(b *testing.B) {
	const objects, filters, subscribers = 5000, 100, 1000
	b.Run(fmt.Sprintf("objects=%d/filters=%d/subscribers=%d", objects, filters, subscribers), func(b *testing.B) {
		const rv0 = 1
		relists := &relistLog{}
		hub := informerhub.New(informerhub.Config{
			Logger:                slog.New(relists),
			MaxFiltersPerResource: filters,
			// Neither a bookmark nor an idle informer may interfere; a
			// subscriber's 50 changes of a relist fit in its queue (the
			// default, 1,000).
			BookmarkInterval: time.Hour,
			IdleTimeout:      time.Hour,
			EncodeEvent:      server.EncodeEvent,
		}, hubtest.NewCluster(b), informerhub.QuietSource(rv0))
		defer hub.Close()
		subs := openBenchSubscribers(b, hub, hubtest.ConfigMaps, subscribers, func(i int) informerhub.WatchRequest {
			return informerhub.WatchRequest{Selector: informerhub.Selector{
				Filter: fmt.Sprintf("object.metadata.labels.shard == %q", shard(i%filters)),
			}}
		}, nil)
		defer subs.close()

		data := strings.Repeat("x", 768)
		var longest, handler time.Duration
		relist := func(k int) int {
			// List k holds every object at a version of its own, above
			// list k-1's: every object changed.
			list := make([]informerhub.RawChange, objects)
			base := rv0 + uint64(k)*objects
			for i := range list {
				name, rv := fmt.Sprintf("cm-%05d", i), base+uint64(i)+1
				labels := map[string]string{"shard": shard(i % filters), "rev": strconv.Itoa(k)}
				list[i] = informerhub.RawChange{Namespace: "bench", Name: name, RV: rv, Labels: labels,
					JSON: fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q,"namespace":"bench","uid":"uid-%s","resourceVersion":"%d","labels":{"rev":%q,"shard":%q}},"data":{"payload":%q}}`,
						name, name, rv, labels["rev"], labels["shard"], data)}
			}
			stop := informerhub.ProbeLock(hub, hubtest.ConfigMaps)
			start := time.Now()
			err := informerhub.ProcessList(hub, hubtest.ConfigMaps, base+objects, list)
			handler += time.Since(start)
			held, _ := stop()
			if err != nil {
				b.Fatal(err)
			}
			longest = max(longest, held)
			return objects * subscribers / filters
		}

		k := 0
		subs.await(b, relist, k) // the objects appear
		k++
		longest, handler = 0, 0
		relists.reset()
		n := 0
		for b.Loop() {
			subs.await(b, relist, k)
			k++
			n++
		}
		b.ReportMetric(float64(longest.Nanoseconds()), "longest-wait-ns")
		if held, logged := relists.longest(); logged > 0 {
			b.ReportMetric(float64(held.Nanoseconds()), "relist-hold-ns")
		}
		b.ReportMetric(float64(handler.Nanoseconds())/float64(n), "relist-ns")
	})
}

func shard(i int) string { return fmt.Sprintf("s%02d", i) }
