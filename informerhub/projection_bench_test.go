//go:build unix

package informerhub_test

import (
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/mem"
	corev1 "k8s.io/api/core/v1"

	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/informerhub/hubtest"
	"github.com/informerhub/informerhub/informerhub/projection"
	"github.com/informerhub/informerhub/internal/benchusage"
)

// BenchmarkProjection compares subscribers of whole pods with subscribers of
// the same pods projected to metadata.labels and status.phase (a
// WatchRequest's Fields): 1,000 subscribers on the 100 pods of a namespace
// (about 6 KB each, benchusage.Pod, with managedFields), every change (a
// label) delivered to all of them, in both variants:
//
//   - objects=whole: no projection;
//   - objects=projected: Fields metadata.labels and status.phase; the hub
//     projects each change once for all of them.
//
// Besides cpu-ns/change (see selective_bench_test.go) it reports
// bytes/delivery: the size of the WatchResponse each delivery sends, as
// server.EncodeEvent encodes it once per change for the gRPC streams (the
// protobuf message; gRPC's 5-byte prefix and HTTP/2 framing not counted).
// The CPU here is the hub's core (dispatch, projection, encoding, Next);
// the cost of writing each delivery to a stream, which grows with its
// bytes, is the end-to-end harness's to measure (test/bench).
func BenchmarkProjection(b *testing.B) {
	const subscribers, objects = 1000, 100
	for _, variant := range []struct {
		name   string
		fields []string
	}{
		{"whole", nil},
		{"projected", []string{"metadata.labels", "status.phase"}},
	} {
		b.Run(fmt.Sprintf("subscribers=%d/objects=%s", subscribers, variant.name), func(b *testing.B) {
			template := benchPodTemplate()
			pods := make([]*corev1.Pod, objects)
			for i := range pods {
				pods[i] = podFrom(template, "bench", fmt.Sprintf("pod-%05d", i), benchusage.NodeName(i%10), nil)
			}
			cluster, relabel := podCluster(b, pods)
			change := func(k int) int {
				relabel(k)
				return subscribers
			}
			// Every subscriber receives the same event per change: the
			// first one measures them.
			var bytes, events atomic.Int64
			measure := func(i int, ev *informerhub.Event) {
				if i != 0 {
					return
				}
				encoded, ok := ev.Encoded().(mem.BufferSlice)
				if !ok {
					panic("an event without the server's encoding")
				}
				bytes.Add(int64(encoded.Len()))
				events.Add(1)
			}

			selectiveBench{
				gvr:         hubtest.Pods,
				subscribers: subscribers,
				request: func(int) informerhub.WatchRequest {
					return informerhub.WatchRequest{Selector: informerhub.Selector{Namespace: "bench"}, Fields: variant.fields}
				},
				onEvent: measure,
				change:  change,
				warm:    len(pods),
				measure: func(b *testing.B, _ *informerhub.Hub) func(int) {
					bytes.Store(0)
					events.Store(0)
					return func(int) {
						b.ReportMetric(float64(bytes.Load())/float64(max(events.Load(), 1)), "bytes/delivery")
					}
				},
			}.run(b, cluster)
		})
	}
}

// BenchmarkProjectPod measures projecting one pod of the benchmarks above
// (about 6 KB, most of it short strings: its managedFields) to
// metadata.labels and status.phase: one scan of its JSON.
func BenchmarkProjectPod(b *testing.B) {
	data, err := json.Marshal(benchPodTemplate())
	if err != nil {
		b.Fatal(err)
	}
	p, err := projection.Parse([]string{"metadata.labels", "status.phase"}, 2)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Apply(data); err != nil {
			b.Fatal(err)
		}
	}
}
