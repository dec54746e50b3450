//go:build unix

package informerhub_test

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/informerhub/hubtest"
	"github.com/informerhub/informerhub/internal/benchusage"
)

// BenchmarkFilter compares CEL filters with label selectors of the same
// selectivity: 1,000 subscribers share 10 distinct selectors (100 each),
// over 100 pods of about 6 KB (benchusage.Pod, with managedFields) whose
// label shard takes 10 values. Each change (a label of one pod) concerns the
// 100 subscribers of its pod's shard, in both variants:
//
//   - selector=labels: label selectors shard=s0 ... shard=s9, whose groups
//     the dispatcher indexes by that label (one group visited per change);
//   - selector=cel: filters object.metadata.labels["shard"] == "s0" ... ,
//     which select exactly the same pods; their groups are matched against
//     every change, each filter evaluated once per change, on the object
//     decoded once for all of them.
//
// Besides cpu-ns/change (see selective_bench_test.go) it reports
// decodes/change: the objects decoded for CEL per change, over every
// filter and subscriber (informerhub.FilterDecodes). A change's previous
// state keeps its filter results from when it was new, so it should be 1
// with filters and 0 without.
func BenchmarkFilter(b *testing.B) {
	const subscribers, shards, objects = 1000, 10, 100
	for _, variant := range []string{"labels", "cel"} {
		b.Run(fmt.Sprintf("subscribers=%d/selector=%s", subscribers, variant), func(b *testing.B) {
			template := benchPodTemplate()
			pods := make([]*corev1.Pod, objects)
			for i := range pods {
				pods[i] = podFrom(template, "bench", fmt.Sprintf("pod-%05d", i), benchusage.NodeName(i%shards),
					map[string]string{"shard": fmt.Sprint("s", i%shards)})
			}
			cluster, relabel := podCluster(b, pods)
			change := func(k int) int {
				relabel(k)
				return subscribers / shards
			}
			request := func(i int) informerhub.WatchRequest {
				shard := fmt.Sprint("s", i%shards)
				if variant == "cel" {
					return informerhub.WatchRequest{Selector: informerhub.Selector{Filter: `object.metadata.labels["shard"] == "` + shard + `"`}}
				}
				return informerhub.WatchRequest{Selector: informerhub.Selector{LabelSelector: "shard=" + shard}}
			}

			selectiveBench{
				gvr:         hubtest.Pods,
				subscribers: subscribers,
				request:     request,
				change:      change,
				warm:        len(pods),
				measure: func(b *testing.B, h *informerhub.Hub) func(int) {
					decodes0 := informerhub.FilterDecodes(h)
					return func(changes int) {
						b.ReportMetric(float64(informerhub.FilterDecodes(h)-decodes0)/float64(changes), "decodes/change")
					}
				},
			}.run(b, cluster)
		})
	}
}
