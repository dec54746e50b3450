//go:build unix

package informerhub_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/informerhub/hubtest"
)

// BenchmarkCount measures what Count callers cost a resource type per
// change: 1,000 pods of about 6 KB in 10 namespaces, changes round the
// pods (each sets the label rev to a new value), one Watch subscriber of
// every pod (which each iteration waits for), and either no Count callers
// or 1,000 over 10 distinct requests (group_by label:rev in each
// namespace: 100 callers share each request's counter). Each change moves
// one pod from one group to another of one counter, whose callers receive
// new counts at most once per Config.CountInterval (1 s, the default):
// what a change costs is one more subscriber's delivery, whatever the
// callers, and the callers cost their wakeups per interval.
// cpu-ns/change is the process's CPU per change, the counters' and
// callers' goroutines included.
func BenchmarkCount(b *testing.B) {
	const namespaces, perRequest = 10, 100
	for _, callers := range []int{0, namespaces * perRequest} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			template := benchPodTemplate()
			pods := make([]*corev1.Pod, 1000)
			for i := range pods {
				pods[i] = podFrom(template, fmt.Sprint("ns-", i%namespaces), fmt.Sprintf("pod-%05d", i), "node-0", map[string]string{"rev": "0"})
			}
			cluster, relabel := podCluster(b, pods)
			selectiveBench{
				gvr:         hubtest.Pods,
				subscribers: 1,
				request:     func(int) informerhub.WatchRequest { return informerhub.WatchRequest{} },
				change: func(k int) int {
					relabel(k)
					return 1
				},
				warm: len(pods),
				measure: func(b *testing.B, hub *informerhub.Hub) func(int) {
					stop := startCountCallers(b, hub, callers, func(i int) informerhub.CountRequest {
						return informerhub.CountRequest{Selector: informerhub.Selector{Resource: hubtest.Pods, Namespace: fmt.Sprint("ns-", i%namespaces)}, GroupBy: "label:rev"}
					})
					return func(int) { stop() } // before the hub closes
				},
			}.run(b, cluster)
		})
	}
}

// startCountCallers opens n Count callers, each reading its counts in a
// goroutine of its own, and returns once every one has its first counts;
// stop closes them and waits for their goroutines.
func startCountCallers(b *testing.B, hub *informerhub.Hub, n int, request func(i int) informerhub.CountRequest) (stop func()) {
	var wg sync.WaitGroup
	var subs []*informerhub.CountSubscription
	first := make(chan error, n)
	for i := range n {
		sub, err := hub.Count(context.Background(), request(i))
		if err != nil {
			b.Fatal(err)
		}
		subs = append(subs, sub)
		wg.Go(func() {
			_, err := sub.Next(context.Background())
			first <- err
			for err == nil {
				_, err = sub.Next(context.Background())
			}
			if !errors.Is(err, informerhub.ErrSubscriptionClosed) {
				b.Error(err)
			}
		})
	}
	for range n {
		if err := <-first; err != nil {
			b.Fatal(err)
		}
	}
	return func() {
		for _, sub := range subs {
			sub.Close()
		}
		wg.Wait()
	}
}
