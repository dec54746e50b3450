//go:build unix

package server

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/runtime/schema"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/gen/informerhub/v1/informerhubv1connect"
	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/informerhub/hubtest"
	"github.com/informerhub/informerhub/informerhub/upstream"
	"github.com/informerhub/informerhub/internal/benchusage"
	"github.com/informerhub/informerhub/server/cork"
	"github.com/informerhub/informerhub/server/metrics"
)

// BenchmarkGRPCFanOut measures Watch streams over loopback TCP: each
// iteration is one 4 KiB change received by every stream before the next.
// The variants run on the same layout of connections and streams:
//
//   - hub: this package's Server on a Hub on the fake cluster, configured
//     like --auth=none; each iteration modifies a ConfigMap.
//   - hub-metrics: the same, with the Prometheus metrics the binary serves
//     on --metrics-listen (go-grpc-middleware's provider counts every
//     message sent);
//   - oneport: hub's Server, served as the binary serves it: through
//     package oneport, which hands the connections whose first request is
//     native gRPC to grpc-go (and would hand any other to connect-go; see
//     BenchmarkConnectFanOut). hub stays on a bare grpc-go listener, as
//     limit is, so that hub's numbers compare with those before oneport;
//   - limit: a bare gRPC server whose handler only sends, per iteration,
//     one WatchResponse encoded once for all streams as a grpc.PreparedMsg:
//     the cheapest send grpc-go offers (no codec call, no header to build),
//     so the gap between hub and limit is everything the hub adds to gRPC.
//
// The streams are spread over min(streams, maxBenchConns) client
// connections, as many clients would be. The clients run in the benchmark's
// process and count responses without decoding them (rawCodec), so that
// they cost the same in every variant; deliveries/cpu-s (deliveries per
// second of the process's user and system time) includes them, and the
// fake API server. encodes/change counts the hub's calls of EncodeEvent per
// change: 1, however many streams. syscalls/delivery counts the server's
// writes to its connections (the hub's and limit's), each a system call,
// per delivery; p50-µs and p99-µs are the delays from a change (the call
// that makes it) to each stream's receipt of it.
func BenchmarkGRPCFanOut(b *testing.B) {
	for _, streams := range []int{1, 100, 1000, 10000} {
		b.Run(fmt.Sprintf("streams=%d/hub", streams), func(b *testing.B) {
			benchmarkGRPCFanOut(b, streams, serveHubForBench(b, streams, false))
		})
		b.Run(fmt.Sprintf("streams=%d/hub-metrics", streams), func(b *testing.B) {
			benchmarkGRPCFanOut(b, streams, serveHubForBench(b, streams, true))
		})
		b.Run(fmt.Sprintf("streams=%d/oneport", streams), func(b *testing.B) {
			benchmarkGRPCFanOut(b, streams, serveOnePortForBench(b, streams))
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
	// encodes counts the hub's calls of EncodeEvent; nil: not a hub.
	encodes *atomic.Int64
	// writes counts the server's writes to its connections; nil: not
	// counted.
	writes *atomic.Int64
}

func benchmarkGRPCFanOut(b *testing.B, streams int, srv benchServer) {
	restore := clientSide()
	conns := dialBenchConns(b, srv.addr, min(streams, maxBenchConns))
	fo := newFanOut(streams)
	defer fo.stop()
	for i := range streams {
		fo.open(b, conns[i%len(conns)], srv.method, srv.req)
	}
	restore()
	fo.run(b, srv)
}

// clientSide labels the calling goroutine, and those it starts until
// restore, as the clients' (side=client in a CPU profile): the fan-out
// benchmarks count the whole process's CPU, and a profile then tells the
// clients' share from the server's (go tool pprof -tagfocus side=client).
func clientSide() (restore func()) {
	pprof.SetGoroutineLabels(pprof.WithLabels(context.Background(), pprof.Labels("side", "client")))
	return func() { pprof.SetGoroutineLabels(context.Background()) }
}

// dialBenchConns opens n client connections to addr, closed when the
// benchmark ends, whose streams count responses without decoding them
// (rawCodec).
func dialBenchConns(b *testing.B, addr string, n int) []*grpc.ClientConn {
	conns := make([]*grpc.ClientConn, n)
	for i := range conns {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{proto: encoding.GetCodecV2("proto")})),
			// Static windows, the same in every variant, with room for an
			// iteration's responses: no BDP pings, no stalls.
			grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(16<<20))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { conn.Close() })
		conns[i] = conn
	}
	return conns
}

// open opens a server stream of method on conn with req, returns once the
// server has sent its header (the stream will receive every change), and
// counts its responses until it ends.
func (fo *fanOut) open(b *testing.B, conn *grpc.ClientConn, method string, req any) {
	stream, err := conn.NewStream(fo.ctx, &grpc.StreamDesc{ServerStreams: true}, method)
	if err == nil {
		err = stream.SendMsg(req)
	}
	if err == nil {
		err = stream.CloseSend()
	}
	if err == nil {
		_, err = stream.Header()
	}
	if err != nil {
		b.Fatal(err)
	}
	fo.streams.Go(func() {
		var resp rawResponse
		var delays []time.Duration
		defer func() { fo.addDelays(delays) }()
		for {
			if err := stream.RecvMsg(&resp); err != nil {
				fo.ended(err)
				return
			}
			delays = append(delays, fo.delivered())
		}
	})
}

// fanOut is the measured part of the fan-out benchmarks: each stream's
// goroutine (run in streams) reports each response it receives (delivered)
// and how its stream ended (ended); run makes one change per iteration and
// waits until every stream has received it, or one failed.
type fanOut struct {
	ctx     context.Context // of the streams: ended by stop
	stop    func()          // ends the streams, and waits for their goroutines
	streams sync.WaitGroup

	n        int
	pending  atomic.Int64 // responses of this iteration not yet received
	changed  atomic.Int64 // when this iteration's change was made, in Unix nanoseconds
	received chan struct{}
	failed   chan error

	mu     sync.Mutex      // guards delays
	delays []time.Duration // from each change to each receipt, of the streams that ended
}

func newFanOut(streams int) *fanOut {
	fo := &fanOut{n: streams, received: make(chan struct{}, 1), failed: make(chan error, streams)}
	ctx, cancel := context.WithCancel(context.Background())
	fo.ctx = ctx
	var once sync.Once
	fo.stop = func() {
		once.Do(func() {
			cancel()
			fo.streams.Wait()
		})
	}
	return fo
}

// delivered counts a response received, and returns its delay since the
// change.
func (fo *fanOut) delivered() time.Duration {
	delay := time.Duration(time.Now().UnixNano() - fo.changed.Load())
	if fo.pending.Add(-1) == 0 {
		fo.received <- struct{}{}
	}
	return delay
}

func (fo *fanOut) addDelays(delays []time.Duration) {
	fo.mu.Lock()
	defer fo.mu.Unlock()
	fo.delays = append(fo.delays, delays...)
}

func (fo *fanOut) ended(err error) {
	if fo.ctx.Err() == nil {
		fo.failed <- fmt.Errorf("a stream ended: %w", err)
	}
}

// run is the benchmark's loop; it reports deliveries/cpu-s, and, for a hub,
// encodes/change: the hub's encodings of each change, one per wire encoding
// in use, however many streams receive it.
func (fo *fanOut) run(b *testing.B, srv benchServer) {
	changes := 0
	b.ReportAllocs()
	if srv.encodes != nil {
		srv.encodes.Store(0)
	}
	var writes int64
	if srv.writes != nil {
		writes = srv.writes.Load()
	}
	start := benchusage.Now()
	for b.Loop() {
		fo.pending.Store(int64(fo.n))
		fo.changed.Store(time.Now().UnixNano())
		srv.change()
		changes++
		select {
		case <-fo.received:
		case err := <-fo.failed:
			b.Fatal(err)
		}
	}
	deliveries := float64(changes * fo.n)
	benchusage.ReportDeliveries(b, start, deliveries)
	if srv.encodes != nil {
		b.ReportMetric(float64(srv.encodes.Load())/float64(changes), "encodes/change")
	}
	if srv.writes != nil {
		b.ReportMetric(float64(srv.writes.Load()-writes)/deliveries, "syscalls/delivery")
	}
	b.StopTimer()
	fo.stop()
	if len(fo.delays) > 0 {
		slices.Sort(fo.delays)
		at := func(q float64) float64 {
			return float64(fo.delays[int(q*float64(len(fo.delays)-1))]) / float64(time.Microsecond)
		}
		b.ReportMetric(at(0.5), "p50-µs")
		b.ReportMetric(at(0.99), "p99-µs")
	}
}

// serveHubForBench serves a Server on a Hub on the fake cluster, with
// metrics or without; each change modifies a ConfigMap of the namespace the
// streams watch.
func serveHubForBench(b *testing.B, streams int, withMetrics bool) benchServer {
	srv, bs := newHubForBench(b, streams, withMetrics)
	// As the binary serves it: a connection's streams share its writes.
	g := grpc.NewServer(append(srv.ServerOptions(), grpc.Creds(cork.Credentials(insecure.NewCredentials(), cork.Config{})))...)
	srv.Register(g)
	bs.writes = new(atomic.Int64)
	bs.addr = serveForBench(b, g, bs.writes)
	return bs
}

// newHubForBench returns a Server on a Hub on the fake cluster, and what
// the benchmarks' streams request and change, without its address.
func newHubForBench(b *testing.B, streams int, withMetrics bool) (*Server, benchServer) {
	cluster := hubtest.NewCluster(b)
	encodes := new(atomic.Int64)
	hub := informerhub.New(informerhub.Config{
		Logger:    discard,
		QueueSize: 64, // a queue holds at most one change: see BenchmarkFanOut
		// Neither a bookmark nor an idle informer may interfere.
		BookmarkInterval: time.Hour,
		IdleTimeout:      time.Hour,
		EncodeEvent: func(ev *informerhub.Event) informerhub.Encoded {
			encodes.Add(1)
			return EncodeEvent(ev)
		},
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
		change:  change,
		encodes: encodes,
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
	writes := new(atomic.Int64)
	addr := serveForBench(b, g, writes)
	return benchServer{
		addr:   addr,
		writes: writes,
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

// serveForBench serves g on a loopback TCP port until the benchmark ends,
// counting its writes to its connections in writes.
func serveForBench(b *testing.B, g *grpc.Server, writes *atomic.Int64) (addr string) {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	lis := &countingListener{Listener: tcp, writes: writes}
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

// countingListener counts the writes to the connections it accepts.
type countingListener struct {
	net.Listener
	writes *atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, writes: l.writes}, nil
}

type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
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

// BenchmarkConnectFanOut measures Watch streams of connect-go clients
// (informerhubv1connect), as BenchmarkGRPCFanOut measures gRPC's: each
// iteration is one 4 KiB change received by every stream before the next.
// The hub is served as the binary serves it: package oneport on one
// loopback TCP listener, native gRPC to grpc-go and every other request to
// connect-go (Server.HTTPHandler). The variants, on the same hub setup as
// BenchmarkGRPCFanOut's hub variant (no metrics):
//
//   - grpc: native gRPC through oneport, with BenchmarkGRPCFanOut's
//     clients (BenchmarkGRPCFanOut's oneport variant, repeated here): the
//     baseline the others are compared with, measured beside them;
//   - connect-proto-h2c: the Connect protocol in binary
//     (application/connect+proto) over h2c, the streams spread over
//     min(streams, maxBenchConns) connections as gRPC's are; the codec
//     appends the WatchResponse bytes the hub encoded once;
//   - connect-json-h2c: the same in protobuf's JSON mapping
//     (application/connect+json): the hub encodes each change once more,
//     as JSON, for the streams of that encoding;
//   - connect-json-http1: Connect JSON over HTTP/1.1, as a browser without
//     HTTP/2 calls: one connection per stream.
//
// The Connect clients count responses without decoding them
// (rawConnectCodec), as the gRPC clients do; deliveries/cpu-s counts the
// whole process, and encodes/change the hub's encodings per change (1 in
// every variant: one wire encoding each), as in BenchmarkGRPCFanOut.
func BenchmarkConnectFanOut(b *testing.B) {
	for _, streams := range []int{100, 1000} {
		b.Run(fmt.Sprintf("streams=%d/grpc", streams), func(b *testing.B) {
			benchmarkGRPCFanOut(b, streams, serveOnePortForBench(b, streams))
		})
		for _, v := range connectVariants {
			b.Run(fmt.Sprintf("streams=%d/%s", streams, v.name), func(b *testing.B) {
				benchmarkConnectFanOut(b, streams, serveOnePortForBench(b, streams), v)
			})
		}
	}
}

// connectVariant is how the clients of a variant of BenchmarkConnectFanOut
// call.
type connectVariant struct {
	name  string
	json  bool // application/connect+json, else +proto
	http1 bool // HTTP/1.1, else h2c
}

var connectVariants = []connectVariant{
	{name: "connect-proto-h2c"},
	{name: "connect-json-h2c", json: true},
	{name: "connect-json-http1", json: true, http1: true},
}

func benchmarkConnectFanOut(b *testing.B, streams int, srv benchServer, v connectVariant) {
	restore := clientSide()
	clients := make([]informerhubv1connect.InformerHubServiceClient, min(streams, maxBenchConns))
	if v.http1 {
		// HTTP/1.1 takes a connection per stream, however many clients.
		clients = clients[:1]
	}
	for i := range clients {
		var protocols http.Protocols
		if v.http1 {
			protocols.SetHTTP1(true)
		} else {
			protocols.SetUnencryptedHTTP2(true)
		}
		// A transport of its own per client: one HTTP/2 connection each.
		transport := &http.Transport{Protocols: &protocols,
			// A stream's window as gRPC's clients have it, with room for an
			// iteration's response; the connection's is net/http's
			// default, larger than any iteration's responses.
			HTTP2: &http.HTTP2Config{MaxReceiveBufferPerStream: 64 << 10}}
		defer transport.CloseIdleConnections()
		clients[i] = informerhubv1connect.NewInformerHubServiceClient(&http.Client{Transport: transport}, "http://"+srv.addr,
			connect.WithCodec(rawConnectCodec{json: v.json}))
	}

	fo := newFanOut(streams)
	defer fo.stop()
	req := srv.req.(*informerhubv1.WatchRequest)
	for i := range streams {
		stream, err := clients[i%len(clients)].Watch(fo.ctx, connect.NewRequest(req))
		if err != nil {
			b.Fatal(err)
		}
		// The hub sends the header, with the resume token, once the
		// stream will receive every change; ResponseHeader waits for it.
		if stream.ResponseHeader().Get(ResumeTokenHeader) == "" {
			stream.Receive()
			b.Fatalf("stream %d has no resume token: %v", i, stream.Err())
		}
		fo.streams.Go(func() {
			defer stream.Close()
			for stream.Receive() {
				fo.delivered()
			}
			fo.ended(stream.Err())
		})
	}
	restore()
	fo.run(b, srv)
}

// serveOnePortForBench serves a Server on a Hub on the fake cluster (as
// serveHubForBench does, without metrics) as the binary serves it: native
// gRPC and connect-go on one loopback TCP listener, through package
// oneport.
func serveOnePortForBench(b *testing.B, streams int) benchServer {
	srv, bs := newHubForBench(b, streams, false)
	bs.writes = new(atomic.Int64)
	bs.addr = serveOnePort(b, srv, onePortOptions{maxConcurrentStreams: uint32(streams), writes: bs.writes})
	return bs
}

// rawConnectCodec is the Connect clients' codec: requests are encoded in
// protobuf's binary or JSON mapping; responses are not decoded (the
// message received stays empty).
type rawConnectCodec struct{ json bool }

func (c rawConnectCodec) Name() string {
	if c.json {
		return "json"
	}
	return "proto"
}

func (c rawConnectCodec) Marshal(m any) ([]byte, error) {
	msg, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("cannot encode a %T", m)
	}
	if c.json {
		return protojson.Marshal(msg)
	}
	return proto.Marshal(msg)
}

func (rawConnectCodec) Unmarshal([]byte, any) error { return nil }

// BenchmarkWatchMany compares one WatchMany of 10 resource types with 10
// Watch streams of the same types, per client: 100 clients on
// maxBenchConns connections, each iteration one 4 KiB change of each type,
// received by every client before the next (1,000 deliveries). The
// variants:
//
//   - watch: each client opens 10 Watch streams, one per type;
//   - watchmany: each client opens one WatchMany of the 10 types, which
//     frames each event's shared encoding with its own composite token
//     (about 10 tokens long).
//
// deliveries/cpu-s counts the whole process, clients and fake API server
// included, as in BenchmarkGRPCFanOut; the ratio of the two variants is the
// CPU a WatchMany costs per delivery against separate streams.
func BenchmarkWatchMany(b *testing.B) {
	const clients, types = 100, 10
	for _, many := range []bool{false, true} {
		name := "watch"
		if many {
			name = "watchmany"
		}
		b.Run(fmt.Sprintf("clients=%d/types=%d/%s", clients, types, name), func(b *testing.B) {
			benchmarkWatchMany(b, clients, types, many)
		})
	}
}

func benchmarkWatchMany(b *testing.B, clients, types int, many bool) {
	cluster := hubtest.NewCluster(b)
	var gvrs []schema.GroupVersionResource
	for i := range types {
		gvr := schema.GroupVersionResource{Group: "bench.example.com", Version: "v1", Resource: fmt.Sprint("widgets", i)}
		cluster.Serve(b, upstream.ResourceInfo{Resource: gvr, Kind: fmt.Sprint("Widget", i), Namespaced: true})
		gvrs = append(gvrs, gvr)
	}
	hub := informerhub.New(informerhub.Config{Logger: discard, QueueSize: 64, BookmarkInterval: time.Hour, IdleTimeout: time.Hour,
		EncodeEvent: EncodeEvent}, cluster, cluster)
	b.Cleanup(hub.Close)
	streams := clients * types
	srv := New(hub, Config{Logger: discard, MaxSubscriptionsPerIdentity: streams, MaxSubscriptions: streams, RatePerIdentity: 1e9,
		RateBurstPerIdentity: streams, MaxConcurrentStreams: uint32(streams), AuthzRecheckInterval: time.Hour})
	g := grpc.NewServer(srv.ServerOptions()...)
	srv.Register(g)
	addr := serveForBench(b, g, new(atomic.Int64))
	base := hubtest.ConfigMap("bench", "w", nil, strings.Repeat("x", benchObject))
	change := func() {
		for _, gvr := range gvrs {
			obj := *base
			cluster.Source(gvr).Modify(&obj)
		}
	}
	change()

	conns := dialBenchConns(b, addr, maxBenchConns)
	fo := newFanOut(clients * types)
	defer fo.stop()
	watch := func(gvr schema.GroupVersionResource) *informerhubv1.WatchRequest {
		return &informerhubv1.WatchRequest{Selector: &informerhubv1.ResourceSelector{
			Group: gvr.Group, Version: gvr.Version, Resource: gvr.Resource, Namespace: "bench"}}
	}
	for c := range clients {
		conn := conns[c%len(conns)]
		if many {
			req := &informerhubv1.WatchManyRequest{}
			for _, gvr := range gvrs {
				req.Watches = append(req.Watches, watch(gvr))
			}
			fo.open(b, conn, informerhubv1.InformerHubService_WatchMany_FullMethodName, req)
			continue
		}
		for _, gvr := range gvrs {
			fo.open(b, conn, informerhubv1.InformerHubService_Watch_FullMethodName, watch(gvr))
		}
	}
	fo.run(b, benchServer{change: change})
}
