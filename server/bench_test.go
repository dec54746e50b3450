//go:build unix

package server

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/informerhub/hubtest"
	"github.com/informerhub/informerhub/internal/benchusage"
	"github.com/informerhub/informerhub/server/metrics"
)

// BenchmarkGRPCFanOut measures Watch streams over loopback TCP: each
// iteration is one 4 KiB change received by every stream before the next.
// Two variants run on the same layout of connections and streams:
//
//   - hub: this package's Server on a Hub on the fake cluster, configured
//     like --auth=none; each iteration modifies a ConfigMap.
//   - hub-metrics: the same, with the Prometheus metrics the binary serves
//     on --metrics-listen (go-grpc-middleware's provider counts every
//     message sent);
//   - limit: a bare gRPC server whose handler only sends, per iteration,
//     one WatchResponse encoded once for all streams as a grpc.PreparedMsg:
//     the cheapest send grpc-go offers (no codec call, no header to build),
//     so the gap between the two is everything the hub adds to gRPC.
//
// The streams are spread over min(streams, maxBenchConns) client
// connections, as many clients would be. The clients run in the benchmark's
// process and count responses without decoding them (rawCodec), so that
// they cost the same in both variants; deliveries/cpu-s (deliveries per
// second of the process's user and system time) includes them, and the
// fake API server.
func BenchmarkGRPCFanOut(b *testing.B) {
	for _, streams := range []int{1, 100, 1000, 10000} {
		b.Run(fmt.Sprintf("streams=%d/hub", streams), func(b *testing.B) {
			benchmarkGRPCFanOut(b, streams, serveHubForBench(b, streams, false))
		})
		b.Run(fmt.Sprintf("streams=%d/hub-metrics", streams), func(b *testing.B) {
			benchmarkGRPCFanOut(b, streams, serveHubForBench(b, streams, true))
		})
		b.Run(fmt.Sprintf("streams=%d/limit", streams), func(b *testing.B) {
			benchmarkGRPCFanOut(b, streams, serveLimitForBench(b, streams))
		})
	}
}

// maxBenchConns bounds the client connections of BenchmarkGRPCFanOut. One
// connection's streams share one writer goroutine on the server; a few
// let the server use every core, as a hub serving many clients does.
const maxBenchConns = 16

// benchObject is the size of the object of each change.
const benchObject = 4 << 10

// benchServer is what a variant of BenchmarkGRPCFanOut serves.
type benchServer struct {
	addr   string
	method string
	req    any
	// change makes every stream receive one more response.
	change func()
}

func benchmarkGRPCFanOut(b *testing.B, streams int, srv benchServer) {
	conns := make([]*grpc.ClientConn, min(streams, maxBenchConns))
	for i := range conns {
		conn, err := grpc.NewClient(srv.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{proto: encoding.GetCodecV2("proto")})),
			// Static windows, the same in both variants, with room for an
			// iteration's responses: no BDP pings, no stalls.
			grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(16<<20))
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		conns[i] = conn
	}

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	var pending atomic.Int64
	received := make(chan struct{}, 1)
	failed := make(chan error, streams)
	desc := &grpc.StreamDesc{ServerStreams: true}
	for i := range streams {
		stream, err := conns[i%len(conns)].NewStream(ctx, desc, srv.method)
		if err != nil {
			b.Fatal(err)
		}
		if err := stream.SendMsg(srv.req); err != nil {
			b.Fatal(err)
		}
		if err := stream.CloseSend(); err != nil {
			b.Fatal(err)
		}
		// Both servers send the header once the stream will receive
		// every change.
		if _, err := stream.Header(); err != nil {
			b.Fatal(err)
		}
		wg.Go(func() {
			var resp rawResponse
			for {
				if err := stream.RecvMsg(&resp); err != nil {
					if ctx.Err() == nil {
						failed <- err
					}
					return
				}
				if pending.Add(-1) == 0 {
					received <- struct{}{}
				}
			}
		})
	}

	changes := 0
	b.ReportAllocs()
	start := benchusage.Now()
	for b.Loop() {
		pending.Store(int64(streams))
		srv.change()
		changes++
		select {
		case <-received:
		case err := <-failed:
			b.Fatalf("a stream failed: %v", err)
		}
	}
	benchusage.ReportDeliveries(b, start, float64(changes*streams))
}

// serveHubForBench serves a Server on a Hub on the fake cluster, with
// metrics or without; each change modifies a ConfigMap of the namespace the
// streams watch.
func serveHubForBench(b *testing.B, streams int, withMetrics bool) benchServer {
	srv, bs := newHubForBench(b, streams, withMetrics)
	g := grpc.NewServer(srv.ServerOptions()...)
	srv.Register(g)
	bs.addr = serveForBench(b, g)
	return bs
}

// newHubForBench returns a Server on a Hub on the fake cluster, and what
// the benchmarks' streams request and change, without its address.
func newHubForBench(b *testing.B, streams int, withMetrics bool) (*Server, benchServer) {
	cluster := hubtest.NewCluster(b)
	hub := informerhub.New(informerhub.Config{
		Logger:    discard,
		QueueSize: 64, // a queue holds at most one change: see BenchmarkFanOut
		// Neither a bookmark nor an idle informer may interfere.
		BookmarkInterval: time.Hour,
		IdleTimeout:      time.Hour,
		EncodeEvent:      EncodeEvent,
	}, cluster, cluster)
	b.Cleanup(hub.Close)
	cfg := Config{
		Logger:                      discard,
		MaxSubscriptionsPerIdentity: streams,
		MaxSubscriptions:            streams,
		RatePerIdentity:             1e9,
		RateBurstPerIdentity:        streams,
		MaxConcurrentStreams:        uint32(streams),
		AuthzRecheckInterval:        time.Hour,
	}
	if withMetrics {
		cfg.Metrics = metrics.New(hub, metrics.BuildInfo{Version: "bench"})
	}
	srv := New(hub, cfg)

	base := hubtest.ConfigMap("bench", "cm", nil, strings.Repeat("x", benchObject))
	change := func() {
		cm := *base // the fake sets the copy's resourceVersion, and keeps it
		cluster.ConfigMaps().Modify(&cm)
	}
	change()
	return srv, benchServer{
		method: informerhubv1.InformerHubService_Watch_FullMethodName,
		req: &informerhubv1.WatchRequest{Selector: &informerhubv1.ResourceSelector{
			Version: "v1", Resource: "configmaps", Namespace: "bench"}},
		change: change,
	}
}

// serveLimitForBench serves the limit variant: a hand-registered
// server-streaming method whose streams each wait for a signal and send the
// one prepared response. A change signals every stream, as the hub hands a
// change to every subscriber's queue.
func serveLimitForBench(b *testing.B, streams int) benchServer {
	resp := &informerhubv1.WatchResponse{
		Type:            informerhubv1.EventType_EVENT_TYPE_MODIFIED,
		Object:          strings.Repeat("x", benchObject),
		ResourceVersion: "1",
		ResumeToken:     "token",
	}
	var (
		prepareOnce sync.Once
		prepared    grpc.PreparedMsg
		prepareErr  error
		mu          sync.Mutex
		signals     []chan struct{}
	)
	handler := func(_ any, stream grpc.ServerStream) error {
		var req informerhubv1.WatchRequest
		if err := stream.RecvMsg(&req); err != nil {
			return err
		}
		// Any stream of the server encodes it as all the others would.
		prepareOnce.Do(func() { prepareErr = prepared.Encode(stream, resp) })
		if prepareErr != nil {
			return prepareErr
		}
		signal := make(chan struct{}, 64)
		mu.Lock()
		signals = append(signals, signal)
		mu.Unlock()
		if err := stream.SendHeader(nil); err != nil {
			return err
		}
		for {
			select {
			case <-signal:
				if err := stream.SendMsg(&prepared); err != nil {
					return err
				}
			case <-stream.Context().Done():
				return stream.Context().Err()
			}
		}
	}
	g := grpc.NewServer(grpc.MaxConcurrentStreams(uint32(streams)))
	g.RegisterService(&grpc.ServiceDesc{
		ServiceName: "bench.Limit",
		HandlerType: (*any)(nil),
		Streams:     []grpc.StreamDesc{{StreamName: "Watch", Handler: handler, ServerStreams: true}},
	}, nil)
	addr := serveForBench(b, g)
	return benchServer{
		addr:   addr,
		method: "/bench.Limit/Watch",
		req:    &informerhubv1.WatchRequest{},
		change: func() {
			mu.Lock()
			defer mu.Unlock()
			for _, signal := range signals {
				signal <- struct{}{}
			}
		},
	}
}

// serveForBench serves g on a loopback TCP port until the benchmark ends.
func serveForBench(b *testing.B, g *grpc.Server) (addr string) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		g.Serve(lis) //nolint:errcheck // ends with Stop
	}()
	b.Cleanup(func() {
		g.Stop()
		<-served
	})
	return lis.Addr().String()
}

// rawResponse is a response the benchmark's clients receive undecoded.
type rawResponse struct{ size int }

// rawCodec is the benchmark clients' codec: requests are encoded as
// protobuf; a rawResponse only records the response's size.
type rawCodec struct{ proto encoding.CodecV2 }

func (c rawCodec) Marshal(v any) (mem.BufferSlice, error) { return c.proto.Marshal(v) }

func (c rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if resp, ok := v.(*rawResponse); ok {
		resp.size = data.Len()
		return nil
	}
	return c.proto.Unmarshal(data, v)
}

func (c rawCodec) Name() string { return c.proto.Name() }
