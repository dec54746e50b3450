package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// writer changes ConfigMaps at a steady rate, stamping each change with the
// time it was sent (data.sentAt, in Unix nanoseconds), from which receivers
// measure latency.
type writer struct {
	env     *Env
	ns      string
	names   []string
	workers int
}

// newWriter creates objects ConfigMaps of about objectBytes each in ns.
func newWriter(ctx context.Context, e *Env, ns string, objects, objectBytes int) (*writer, error) {
	w := &writer{env: e, ns: ns, workers: 8}
	pad := strings.Repeat("x", objectBytes)
	for i := range objects {
		w.names = append(w.names, fmt.Sprintf("fanout-%04d", i))
	}
	err := forEach(ctx, len(w.names), 16, func(ctx context.Context, i int) error {
		_, err := e.kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: w.names[i]},
			Data:       map[string]string{"pad": pad, "sentAt": "0"},
		}, metav1.CreateOptions{})
		return err
	})
	return w, err
}

// touch changes the i-th object (modulo their number), stamped now.
func (w *writer) touch(ctx context.Context, i int) error {
	patch := `{"data":{"sentAt":"` + strconv.FormatInt(time.Now().UnixNano(), 10) + `"}}`
	_, err := w.env.kube.CoreV1().ConfigMaps(w.ns).Patch(ctx, w.names[i%len(w.names)], types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// run makes changes at rate per second for d, and returns how many it made.
func (w *writer) run(ctx context.Context, rate float64, d time.Duration) (int, error) {
	return paced(ctx, w.workers, rate, d, w.touch)
}

// paced calls change(ctx, i) for i from 0, at rate per second for d, on
// workers goroutines, and returns how many calls it made. Calls are paced
// by the clock, not by their answers, so a slow API server shows as
// latency, not as a lower rate (up to the workers' number in flight).
func paced(ctx context.Context, workers int, rate float64, d time.Duration, change func(ctx context.Context, i int) error) (int, error) {
	total := max(1, int(rate*d.Seconds()))
	interval := time.Duration(float64(time.Second) / rate)
	jobs := make(chan int)
	g, gctx := errgroup.WithContext(ctx)
	for range workers {
		g.Go(func() error {
			for i := range jobs {
				if err := change(gctx, i); err != nil {
					return err
				}
			}
			return nil
		})
	}
	start := time.Now()
	g.Go(func() error {
		defer close(jobs)
		for i := range total {
			if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
				select {
				case <-time.After(wait):
				case <-gctx.Done():
					return gctx.Err()
				}
			}
			select {
			case jobs <- i:
			case <-gctx.Done():
				return gctx.Err()
			}
		}
		return nil
	})
	return total, g.Wait()
}

// forEach runs f for 0..n-1 on at most parallel goroutines, stopping at the
// first error.
func forEach(ctx context.Context, n, parallel int, f func(ctx context.Context, i int) error) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(parallel)
	for i := range n {
		if gctx.Err() != nil {
			break
		}
		g.Go(func() error { return f(gctx, i) })
	}
	return g.Wait()
}

// written is what a run of changes made: how many, and why it stopped
// early.
type written struct {
	n   int
	err error
}

// inBackground runs changes (a writer's or a changer's run) on a goroutine
// of their own, while the caller measures; their result arrives on the
// channel.
func inBackground(run func() (int, error)) <-chan written {
	out := make(chan written, 1)
	go func() {
		n, err := run()
		out <- written{n, err}
	}()
	return out
}
