//go:build unix

package informerhub_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/informerhub/hubtest"
	"github.com/informerhub/informerhub/internal/benchusage"
)

// BenchmarkFanOut measures the hub's cost per delivery: one change of a
// 4 KiB ConfigMap per iteration, received by every subscriber before the
// next. Besides allocs/op it reports
//
//   - deliveries/cpu-s: deliveries per second of the process's CPU time
//     (user and system, all goroutines: the informer, the subscribers and
//     the fake API server), so it is meaningful on a busy machine;
//   - allocs/delivery: heap allocations per delivery, the per-change
//     allocations (decoding, encoding, the informer) spread over them;
//   - encodes/change: calls of Config.EncodeEvent per change. It must be 1
//     whatever the number of subscribers, and the benchmark fails otherwise.
func BenchmarkFanOut(b *testing.B) {
	for _, n := range []int{1, 100, 1000, 10000} {
		b.Run(fmt.Sprintf("subscribers=%d", n), func(b *testing.B) { benchmarkFanOut(b, n) })
	}
}

func benchmarkFanOut(b *testing.B, subscribers int) {
	cluster := hubtest.NewCluster(b)
	var encodes atomic.Int64
	hub := informerhub.New(informerhub.Config{
		Logger: slog.New(slog.DiscardHandler),
		// Each iteration waits for every subscriber, so a queue holds at
		// most one change: no subscriber overflows.
		QueueSize: 64,
		// Neither a bookmark nor an idle informer may interfere.
		BookmarkInterval: time.Hour,
		IdleTimeout:      time.Hour,
		EncodeEvent: func(ev *informerhub.Event) informerhub.Encoded {
			encodes.Add(1)
			return encodeForBench(ev)
		},
	}, cluster, cluster)
	defer hub.Close()

	base := hubtest.ConfigMap("bench", "cm", nil, strings.Repeat("x", 4<<10))
	change := func() {
		cm := *base // the fake sets the copy's resourceVersion, and keeps it
		cluster.ConfigMaps().Modify(&cm)
	}
	change()

	// The last subscriber to receive a change signals received.
	var pending atomic.Int64
	received := make(chan struct{}, 1)
	failed := make(chan error, subscribers)
	var wg sync.WaitGroup
	subs := make([]*informerhub.Subscription, subscribers)
	ctx := context.Background()
	for i := range subs {
		sub, err := hub.Watch(ctx, informerhub.WatchRequest{
			Selector: informerhub.Selector{Resource: hubtest.ConfigMaps, Namespace: "bench"},
		})
		if err != nil {
			b.Fatal(err)
		}
		subs[i] = sub
		wg.Go(func() {
			for {
				ev, err := sub.Next(ctx)
				if err != nil {
					if !errors.Is(err, informerhub.ErrSubscriptionClosed) {
						failed <- err
					}
					return
				}
				if ev.Type == informerhub.EventModified && pending.Add(-1) == 0 {
					received <- struct{}{}
				}
			}
		})
	}
	defer func() {
		for _, sub := range subs {
			sub.Close()
		}
		wg.Wait()
	}()

	encodes.Store(0)
	changes := 0
	b.ReportAllocs()
	start := benchusage.Now()
	for b.Loop() {
		pending.Store(int64(subscribers))
		change()
		changes++
		select {
		case <-received:
		case err := <-failed:
			b.Fatalf("a subscriber failed: %v", err)
		}
	}
	benchusage.ReportDeliveries(b, start, float64(changes*subscribers))

	if got := encodes.Load(); got != int64(changes) {
		b.Fatalf("%d encodings for %d changes to %d subscribers, want one per change", got, changes, subscribers)
	}
	b.ReportMetric(float64(encodes.Load())/float64(changes), "encodes/change")
}

// encodeForBench stands in for a transport's encoding: one copy of the event.
func encodeForBench(ev *informerhub.Event) encodedBytes {
	b := make([]byte, 0, len(ev.Object)+len(ev.ResourceVersion)+len(ev.ResumeToken)+2)
	b = append(b, ev.Type.String()...)
	b = append(b, ev.Object...)
	b = append(b, ev.ResourceVersion...)
	return append(b, ev.ResumeToken...)
}

// encodedBytes is an encoding of an event in tests.
type encodedBytes []byte

func (b encodedBytes) Len() int { return len(b) }
