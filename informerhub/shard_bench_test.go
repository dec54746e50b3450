//go:build unix

package informerhub_test

import (
	"fmt"
	"math/big"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/informerhub/hubtest"
)

// BenchmarkShards measures sharded subscribers, as the replicas of a
// horizontally scaled controller are: 16 subscribers, each on one
// sixteenth of the uid hash space (shardRange(object.metadata.uid, ...)),
// against one unsharded subscriber, on 1,000 pods of about 6 KB whose
// changes go round the pods. Either way each change is delivered once; the
// dispatcher finds a change's shard with a binary search over the shards'
// ranges (shard.Index), so a change should cost the same with 16 shards as
// with none: groups/change counts the subscriber groups it was matched
// against (1).
func BenchmarkShards(b *testing.B) {
	for _, shards := range []int{0, 16} {
		name := "unsharded"
		if shards > 0 {
			name = fmt.Sprintf("shards=%d", shards)
		}
		b.Run(name, func(b *testing.B) {
			template := benchPodTemplate()
			pods := make([]*corev1.Pod, 1000)
			for i := range pods {
				pods[i] = podFrom(template, "bench", fmt.Sprintf("pod-%05d", i), "node-0", map[string]string{"rev": "0"})
			}
			cluster, relabel := podCluster(b, pods)
			selectiveBench{
				gvr:         hubtest.Pods,
				subscribers: max(shards, 1),
				request: func(i int) informerhub.WatchRequest {
					if shards == 0 {
						return informerhub.WatchRequest{}
					}
					return informerhub.WatchRequest{Selector: informerhub.Selector{ShardSelector: shardRange(i, shards)}}
				},
				change: func(k int) int {
					relabel(k)
					return 1
				},
				warm:    len(pods),
				measure: groupsVisited(hubtest.Pods),
			}.run(b, cluster)
		})
	}
}

// shardRange is the i-th of n equal shards of the uid hash space.
func shardRange(i, n int) string {
	bound := func(k int) string {
		v := new(big.Int).Lsh(big.NewInt(int64(k)), 64)
		v.Div(v, big.NewInt(int64(n)))
		return fmt.Sprintf("0x%016x", v)
	}
	return fmt.Sprintf("shardRange(object.metadata.uid, '%s', '%s')", bound(i), bound(i+1))
}
