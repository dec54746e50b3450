// Command benchwatch is a plain Watch client of the Go SDK (clients/go):
// one hubclient Watch of a namespace's objects of one resource type, which
// reads each event and notes its lag. It is the baseline of test/bench's
// export scenario, beside informerhub-export on the same changes, run as a
// process of its own so that the harness can read its CPU time from /proc.
//
// Each object the harness changes carries, in its data, "seq" (the
// change's number) and "sentAt" (Unix nanoseconds, taken just before the
// change was made). For every event it receives, benchwatch finds them in
// the object's JSON (a byte search, as the harness's own clients do) and,
// for changes in the window it was told of, keeps the time from sentAt to
// its receipt.
//
// It prints "open" on stdout once the first event (the initial state of
// the objects: it watches with SendInitialEvents) has arrived, then
// answers commands read from stdin, one a line:
//
//	wait FROM TO   prints "got N P50 P99" once the change numbered TO has
//	               arrived: N changes numbered FROM to TO received, and the
//	               50th and 99th percentiles of their lags, in nanoseconds
//
// At SIGTERM, or at the end of stdin (the harness has gone), it stops the
// CPU profile (-cpuprofile, taken from "open" on) and exits.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"math"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	hubclient "github.com/informerhub/informerhub/clients/go"
)

func main() {
	var (
		hub        = flag.String("hub", "", "the hub's address, host:port (plaintext)")
		resource   = flag.String("resource", "configmaps", "the core/v1 resource type to watch")
		namespace  = flag.String("namespace", "", "the namespace to watch")
		cpuProfile = flag.String("cpuprofile", "", "write a CPU profile, from the first event to the exit, to this file")
	)
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("benchwatch: ")
	if err := run(*hub, *resource, *namespace, *cpuProfile); err != nil {
		log.Fatal(err)
	}
}

func run(hub, resource, namespace, cpuProfile string) error {
	client, err := hubclient.New([]string{hub}, hubclient.WithInsecure())
	if err != nil {
		return err
	}
	defer client.Close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	w := client.Watch(ctx, hubclient.Selector{Resource: schema.GroupVersionResource{Version: "v1", Resource: resource}, Namespace: namespace},
		hubclient.WatchOptions{SendInitialEvents: true})
	defer w.Close()

	r := &receiver{progress: make(chan struct{}, 1)}
	first := make(chan struct{})
	ended := make(chan error, 1)
	go func() {
		opened := false
		for {
			e, err := w.Next()
			if err != nil {
				ended <- err
				return
			}
			r.received(e.Object, time.Now())
			if !opened {
				opened = true
				close(first)
			}
		}
	}()
	select {
	case <-first:
	case err := <-ended:
		return fmt.Errorf("the watch ended before its first event: %w", err)
	}
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return err
		}
		defer func() {
			pprof.StopCPUProfile()
			if err := f.Close(); err != nil {
				log.Printf("writing %s: %v", cpuProfile, err)
			}
		}()
	}
	fmt.Println("open")

	// Commands, until stdin ends, which ends the run too. The goroutine is
	// not waited for: it may be blocked reading when the run ends.
	commandsDone := make(chan error, 1)
	go func() {
		lines := bufio.NewScanner(os.Stdin)
		for lines.Scan() {
			var from, to int64
			if _, err := fmt.Sscanf(lines.Text(), "wait %d %d", &from, &to); err != nil {
				commandsDone <- fmt.Errorf("command %q: %w", lines.Text(), err)
				return
			}
			n, p50, p99, err := r.waitFor(ctx, from, to)
			if err != nil {
				commandsDone <- err
				return
			}
			fmt.Printf("got %d %d %d\n", n, p50, p99)
		}
		commandsDone <- lines.Err()
	}()
	select {
	case err := <-commandsDone:
		return err
	case <-ctx.Done():
		return nil
	case err := <-ended:
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("the watch ended: %w", err)
	}
}

// receiver keeps, for each change received, its number and lag.
type receiver struct {
	mu       sync.Mutex
	last     int64 // the greatest change number received
	seqs     []int64
	lags     []time.Duration
	progress chan struct{} // signalled after each change received
}

var (
	seqKey    = []byte(`"seq":"`)
	sentAtKey = []byte(`"sentAt":"`)
)

// field finds the decimal string value of key in an object's JSON.
func field(object, key []byte) (int64, bool) {
	i := bytes.Index(object, key)
	if i < 0 {
		return 0, false
	}
	rest := object[i+len(key):]
	end := bytes.IndexByte(rest, '"')
	if end < 0 {
		return 0, false
	}
	v, err := strconv.ParseInt(string(rest[:end]), 10, 64)
	return v, err == nil
}

func (r *receiver) received(object []byte, at time.Time) {
	seq, ok := field(object, seqKey)
	if !ok {
		return
	}
	sentAt, ok := field(object, sentAtKey)
	if !ok {
		return
	}
	r.mu.Lock()
	r.seqs = append(r.seqs, seq)
	r.lags = append(r.lags, at.Sub(time.Unix(0, sentAt)))
	r.last = max(r.last, seq)
	r.mu.Unlock()
	select {
	case r.progress <- struct{}{}:
	default:
	}
}

// waitFor waits until change to has arrived, and returns the changes from
// from to to received, and their lags' 50th and 99th percentiles.
func (r *receiver) waitFor(ctx context.Context, from, to int64) (n int, p50, p99 time.Duration, err error) {
	for {
		r.mu.Lock()
		if r.last >= to {
			var lags []time.Duration
			for i, s := range r.seqs {
				if s >= from && s <= to {
					lags = append(lags, r.lags[i])
				}
			}
			r.mu.Unlock()
			return len(lags), percentile(lags, 50), percentile(lags, 99), nil
		}
		r.mu.Unlock()
		select {
		case <-r.progress:
		case <-ctx.Done():
			return 0, 0, 0, errors.New("stopped while waiting")
		}
	}
}

// percentile is the p-th percentile of ds by the nearest-rank method, as
// the harness computes it; it sorts ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	rank := int(math.Ceil(p / 100 * float64(len(ds))))
	return ds[max(rank, 1)-1]
}
