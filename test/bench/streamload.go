package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
)

// StreamLoad is the client side of the streams scenario: many Watch
// streams over a few connections, in a process of its own
// (cmd/streamload), so that the hub's memory and CPU are the hub's alone
// and the clients' goroutines do not share its scheduler.
type StreamLoad struct {
	Addr        string // the hub
	Namespace   string // of the ConfigMaps every stream watches
	Streams     int
	Connections int
	// Parallel bounds the streams being opened at once.
	Parallel int
}

// StreamLoadReport is a line StreamLoad.Run writes, as JSON: once when
// every stream is open (Opened), then once per change every stream has
// received (Change).
type StreamLoadReport struct {
	// Opened is the number of streams open, and OpenSeconds how long
	// opening them took, from the first request to the last stream's
	// header.
	Opened      int     `json:"opened,omitempty"`
	OpenSeconds float64 `json:"openSeconds,omitempty"`
	// Change is a change's stamp (data.sentAt, Unix nanoseconds), and the
	// latencies of its receipt over every stream, from the stamp.
	Change int64         `json:"change,omitempty"`
	P50    time.Duration `json:"p50,omitempty"`
	P99    time.Duration `json:"p99,omitempty"`
	Max    time.Duration `json:"max,omitempty"`
}

// Run opens the streams, reports, and then reports each change that every
// stream received, until ctx ends or a stream fails.
func (l StreamLoad) Run(ctx context.Context, out io.Writer) error {
	conns, err := hubConns(l.Addr, l.Connections, 0)
	if err != nil {
		return err
	}
	defer closeConns(conns)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	changes := &changeLatencies{streams: l.Streams, out: json.NewEncoder(out), byStamp: map[int64][]time.Duration{}}
	req := &informerhubv1.WatchRequest{Selector: &informerhubv1.ResourceSelector{Version: "v1", Resource: "configmaps", Namespace: l.Namespace}}
	var wg sync.WaitGroup
	defer wg.Wait()
	began := time.Now()
	err = forEach(ctx, l.Streams, max(l.Parallel, 1), func(_ context.Context, i int) error {
		// The stream lives on ctx, not on forEach's, which ends first.
		stream, err := openHubWatch(ctx, conns[i%len(conns)], req)
		if err != nil {
			return fmt.Errorf("stream %d: %w", i, err)
		}
		wg.Go(func() {
			if err := changes.receive(stream); err != nil && ctx.Err() == nil {
				cancel(fmt.Errorf("stream %d: %w", i, err))
			}
		})
		return nil
	})
	if err != nil {
		cancel(err)
		return err
	}
	if err := changes.report(StreamLoadReport{Opened: l.Streams, OpenSeconds: time.Since(began).Seconds()}); err != nil {
		return err
	}
	<-ctx.Done()
	if err := context.Cause(ctx); err != context.Canceled {
		return err
	}
	return nil
}

// changeLatencies gathers each change's latencies from every stream, and
// reports a change once all have received it.
type changeLatencies struct {
	streams int
	mu      sync.Mutex // guards the fields below
	out     *json.Encoder
	byStamp map[int64][]time.Duration
}

func (c *changeLatencies) receive(stream grpc.ClientStream) error {
	var msg rawMessage
	for {
		if err := stream.RecvMsg(&msg); err != nil {
			return err
		}
		now := time.Now()
		if sent, ok := sentAt(msg.b); ok {
			if err := c.add(sent.UnixNano(), now.Sub(sent)); err != nil {
				return err
			}
		}
	}
}

func (c *changeLatencies) add(stamp int64, latency time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	lat := append(c.byStamp[stamp], latency)
	if len(lat) < c.streams {
		c.byStamp[stamp] = lat
		return nil
	}
	delete(c.byStamp, stamp)
	return c.out.Encode(StreamLoadReport{Change: stamp, P50: percentile(lat, 50), P99: percentile(lat, 99), Max: lat[len(lat)-1]}) // percentile sorted lat
}

func (c *changeLatencies) report(r StreamLoadReport) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.Encode(r)
}
