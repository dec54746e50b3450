package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/testing/protocmp"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/gen/informerhub/v1/informerhubv1connect"
	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/informerhub/hubtest"
	"github.com/informerhub/informerhub/server/cork"
	"github.com/informerhub/informerhub/server/oneport"
)

// onePortOptions are what serveOnePort serves beside srv, and how.
type onePortOptions struct {
	health      *health.Server                  // grpc.health.v1 from it; nil: none
	wrap        func(http.Handler) http.Handler // around the HTTP side; nil: none
	readTimeout time.Duration                   // oneport.Config.ReadTimeout; 0: its default
	// maxConcurrentStreams is oneport.Config.MaxConcurrentStreams; 0:
	// its default.
	maxConcurrentStreams uint32
	// writes, when set, counts the writes to the connections, each a
	// system call.
	writes *atomic.Int64
	// cork is the connections' package cork Config.
	cork cork.Config
}

// serveOnePort serves srv as the binary does (oneport: native gRPC and
// connect-go on one loopback listener, a connection's streams sharing its
// writes on both), and returns its address. It stops
// when the test ends.
func serveOnePort(t testing.TB, srv *Server, o onePortOptions) string {
	t.Helper()
	g := grpc.NewServer(append(srv.ServerOptions(), grpc.Creds(cork.Credentials(oneport.Credentials(), o.cork)))...)
	srv.Register(g)
	if o.health != nil {
		healthpb.RegisterHealthServer(g, srv.HealthService(o.health))
	}
	h := srv.HTTPHandler(HTTPServices{Health: o.health})
	if o.wrap != nil {
		h = o.wrap(h)
	}
	web := oneport.New(oneport.Config{GRPC: g, HTTP: h, ReadTimeout: o.readTimeout, MaxConcurrentStreams: o.maxConcurrentStreams, Logger: discard,
		HTTPConn: func(c net.Conn) net.Conn { return cork.Wrap(c, o.cork) }, ConnContext: cork.NewContext})
	var lis net.Listener
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if o.writes != nil {
		lis = &countingListener{Listener: lis, writes: o.writes}
	}
	served := make(chan error, 1)
	go func() { served <- web.Serve(lis) }()
	t.Cleanup(func() {
		web.Close()
		if err := <-served; err != nil {
			t.Errorf("serving: %v", err)
		}
	})
	return lis.Addr().String()
}

// connectClientOf is a connect-go client of addr over HTTP/1.1 or h2c, whose
// connections close when the test ends.
func connectClientOf(t *testing.T, addr string, http1 bool, opts ...connect.ClientOption) informerhubv1connect.InformerHubServiceClient {
	var p http.Protocols
	p.SetHTTP1(http1)
	p.SetUnencryptedHTTP2(!http1)
	transport := &http.Transport{Protocols: &p,
		// A small window, so that a client that stops reading stalls the
		// hub's sends soon.
		HTTP2: &http.HTTP2Config{MaxReceiveBufferPerStream: 64 << 10, MaxReceiveBufferPerConnection: 64 << 10}}
	t.Cleanup(transport.CloseIdleConnections)
	return informerhubv1connect.NewInformerHubServiceClient(&http.Client{Transport: transport}, "http://"+addr, opts...)
}

// TestEachChangeIsEncodedOncePerWireEncoding: Watch streams of every
// protocol and both wire encodings on one hub receive the same change; the
// hub encodes it twice, once in binary (native gRPC, Connect and gRPC-Web
// binary share it) and once in protobuf's JSON mapping (Connect and
// gRPC-Web JSON), never per stream; and every stream receives the same
// response.
func TestEachChangeIsEncodedOncePerWireEncoding(t *testing.T) {
	cluster := hubtest.NewCluster(t)
	var mu sync.Mutex // guards encodes
	encodes := map[bool]int{}
	// No bookmark may come between: it would be encoded too.
	hub := informerhub.New(informerhub.Config{Logger: discard, BookmarkInterval: time.Hour, EncodeEvent: func(ev *informerhub.Event) informerhub.Encoded {
		mu.Lock()
		encodes[ev.Encoding&encodingWireJSON != 0]++
		mu.Unlock()
		return EncodeEvent(ev)
	}}, cluster, cluster)
	defer hub.Close()
	addr := serveOnePort(t, New(hub, Config{Logger: discard}), onePortOptions{})
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req := &informerhubv1.WatchRequest{Selector: &informerhubv1.ResourceSelector{Version: "v1", Resource: "configmaps"}}

	var recvs []func() (*informerhubv1.WatchResponse, error)
	for range 2 {
		stream, err := informerhubv1.NewInformerHubServiceClient(conn).Watch(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Header(); err != nil { // subscribed
			t.Fatal(err)
		}
		recvs = append(recvs, stream.Recv)
	}
	for _, c := range []informerhubv1connect.InformerHubServiceClient{
		connectClientOf(t, addr, false),
		connectClientOf(t, addr, true, connect.WithGRPCWeb()),
		connectClientOf(t, addr, true, connect.WithProtoJSON()),
		connectClientOf(t, addr, false, connect.WithGRPCWeb(), connect.WithProtoJSON()),
	} {
		for range 2 {
			stream, err := c.Watch(ctx, connect.NewRequest(req))
			if err != nil {
				t.Fatal(err)
			}
			stream.ResponseHeader() // waits for the headers: subscribed
			recvs = append(recvs, func() (*informerhubv1.WatchResponse, error) {
				if !stream.Receive() {
					return nil, stream.Err()
				}
				return stream.Msg(), nil
			})
		}
	}

	cluster.ConfigMaps().Add(hubtest.ConfigMap("ns", "a", nil, strings.Repeat("x", 100)))
	var first *informerhubv1.WatchResponse
	for i, recv := range recvs {
		resp, err := recv()
		if err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		if first == nil {
			first = resp
		} else if diff := cmp.Diff(first, resp, protocmp.Transform()); diff != "" {
			t.Errorf("stream %d received another response (-first +got):\n%s", i, diff)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if want := map[bool]int{false: 1, true: 1}; !cmp.Equal(encodes, want) {
		t.Fatalf("encodes by wire JSON: %v, want %v", encodes, want)
	}
}

// TestAStalledConnectStreamEnds: a Connect stream whose client stopped
// reading, over HTTP/1.1 and over h2c, is ended by MaxSendStall, and its
// handler returns although a send is blocked on that client (net/http would
// otherwise keep it forever); the hub serves others on.
func TestAStalledConnectStreamEnds(t *testing.T) {
	for _, http1 := range []bool{true, false} {
		name := "h2c"
		if http1 {
			name = "http1.1"
		}
		t.Run(name, func(t *testing.T) {
			cluster := hubtest.NewCluster(t)
			hub := informerhub.New(informerhub.Config{Logger: discard, EncodeEvent: EncodeEvent}, cluster, cluster)
			defer hub.Close()
			returned := make(chan string, 10)
			srv := New(hub, Config{Logger: discard, MaxSendStall: 100 * time.Millisecond, StalledSendGrace: 100 * time.Millisecond})
			addr := serveOnePort(t, srv, onePortOptions{wrap: func(h http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					h.ServeHTTP(w, r)
					returned <- r.URL.Path
				})
			}})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			client := connectClientOf(t, addr, http1)
			req := connect.NewRequest(&informerhubv1.WatchRequest{Selector: &informerhubv1.ResourceSelector{Version: "v1", Resource: "configmaps"}})
			stalled, err := client.Watch(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			defer stalled.Close()
			stalled.ResponseHeader() // subscribed; it reads nothing more

			// Changes of 1 MiB until the hub gives up on the stream:
			// beyond what socket buffers and flow-control windows hold.
			big := strings.Repeat("x", 1<<20)
			var path string
			for i := 0; i < 64 && path == ""; i++ {
				select {
				case path = <-returned:
				default:
					cluster.ConfigMaps().Add(hubtest.ConfigMap("ns", fmt.Sprintf("cm-%02d", i), nil, big))
				}
			}
			if path == "" {
				select {
				case path = <-returned:
				case <-ctx.Done():
					t.Fatal("the stalled stream's handler never returned")
				}
			}
			if path != informerhubv1connect.InformerHubServiceWatchProcedure {
				t.Fatalf("%s returned, want the stalled Watch", path)
			}

			// Another stream is served as ever.
			other, err := connectClientOf(t, addr, http1).Watch(ctx, connect.NewRequest(&informerhubv1.WatchRequest{
				Selector: &informerhubv1.ResourceSelector{Version: "v1", Resource: "configmaps", Namespace: "other"}}))
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()
			other.ResponseHeader()
			cluster.ConfigMaps().Add(hubtest.ConfigMap("other", "x", nil, ""))
			if !other.Receive() {
				t.Fatalf("another stream: %v", other.Err())
			}
		})
	}
}

// TestAnUnfinishedRequestIsCutOff: a client that sends a call's headers and
// then never finishes its request, over HTTP/1.1 and HTTP/2, does not hold
// the call (nor the shutdown) past the listener's ReadTimeout: connect-go
// reads a request whole before authentication runs.
func TestAnUnfinishedRequestIsCutOff(t *testing.T) {
	cluster := hubtest.NewCluster(t)
	hub := informerhub.New(informerhub.Config{Logger: discard, EncodeEvent: EncodeEvent}, cluster, cluster)
	defer hub.Close()
	returned := make(chan string, 10)
	srv := New(hub, Config{Logger: discard})
	addr := serveOnePort(t, srv, onePortOptions{readTimeout: 100 * time.Millisecond, wrap: func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h.ServeHTTP(w, r)
			returned <- r.Proto
		})
	}})
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	watch := informerhubv1connect.InformerHubServiceWatchProcedure

	c := dial()
	if _, err := fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: hub\r\nContent-Type: application/connect+json\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{\"s\r\n", watch); err != nil {
		t.Fatal(err)
	}
	c = dial()
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, hf := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "hub"}, {":path", watch}, {"content-type", "application/connect+json"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: hf[0], Value: hf[1]})
	}
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block.Bytes(), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteData(1, false, []byte(`{"s`)); err != nil {
		t.Fatal(err)
	}
	go func() { // the connection's frames, answered as a client must
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			if s, ok := f.(*http2.SettingsFrame); ok && !s.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		}
	}()

	bound := time.After(time.Minute) // of a failing test
	ended := map[string]bool{}
	for len(ended) < 2 {
		select {
		case proto := <-returned:
			ended[proto] = true
		case <-bound:
			t.Fatalf("a call whose request never ended is still being read (ended: %v)", ended)
		}
	}
	if !ended["HTTP/1.1"] || !ended["HTTP/2.0"] {
		t.Fatalf("ended: %v, want the calls over HTTP/1.1 and HTTP/2", ended)
	}
}

// TestAStreamOutlivesTheReadTimeout: once a Watch's request has been read,
// the stream runs on past the listener's ReadTimeout, over HTTP/1.1 (where
// net/http reads the connection on, to notice a client leaving) and h2c.
func TestAStreamOutlivesTheReadTimeout(t *testing.T) {
	const timeout = 50 * time.Millisecond
	cluster := hubtest.NewCluster(t)
	hub := informerhub.New(informerhub.Config{Logger: discard, EncodeEvent: EncodeEvent}, cluster, cluster)
	defer hub.Close()
	addr := serveOnePort(t, New(hub, Config{Logger: discard}), onePortOptions{readTimeout: timeout})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var streams []*connect.ServerStreamForClient[informerhubv1.WatchResponse]
	for _, http1 := range []bool{true, false} {
		stream, err := connectClientOf(t, addr, http1).Watch(ctx, connect.NewRequest(&informerhubv1.WatchRequest{
			Selector: &informerhubv1.ResourceSelector{Version: "v1", Resource: "configmaps"}}))
		if err != nil {
			t.Fatal(err)
		}
		defer stream.Close()
		stream.ResponseHeader() // subscribed
		streams = append(streams, stream)
	}
	<-time.After(6 * timeout) // what is tested: time passing
	cluster.ConfigMaps().Add(hubtest.ConfigMap("ns", "a", nil, ""))
	for i, stream := range streams {
		if !stream.Receive() {
			t.Fatalf("stream %d ended: %v", i, stream.Err())
		}
	}
}

// connectWatch opens a Watch of namespace ns's ConfigMaps with client, and
// waits until it is subscribed.
func connectWatch(ctx context.Context, t *testing.T, client informerhubv1connect.InformerHubServiceClient, ns string) *connect.ServerStreamForClient[informerhubv1.WatchResponse] {
	t.Helper()
	stream, err := client.Watch(ctx, connect.NewRequest(&informerhubv1.WatchRequest{
		Selector: &informerhubv1.ResourceSelector{Version: "v1", Resource: "configmaps", Namespace: ns}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stream.Close() })
	if stream.ResponseHeader().Get(ResumeTokenHeader) == "" {
		stream.Receive()
		t.Fatalf("not subscribed: %v", stream.Err())
	}
	return stream
}

// TestConnectStreamsOnCorkedConnections: the HTTP side's connections hold
// writes as gRPC's do (package cork), and nothing they hold is left
// behind: with MaxHold far beyond the test, 50 Connect streams of one
// HTTP/2 connection receive every change. Over HTTP/1.1, each message is
// one write, though net/http writes it in pieces (a chunk's header, and
// the message through its 4 KiB buffer). (Over HTTP/2, net/http's
// goroutine writes a change's frames after most of the streams have handed
// theirs on: a connection of few streams per change shares its writes, one
// of 50 hardly; BenchmarkConnectFanOut's syscalls/delivery measures it.)
func TestConnectStreamsOnCorkedConnections(t *testing.T) {
	for _, http1 := range []bool{false, true} {
		name := "h2c"
		if http1 {
			name = "http1.1"
		}
		t.Run(name, func(t *testing.T) {
			cluster := hubtest.NewCluster(t)
			hub := informerhub.New(informerhub.Config{Logger: discard, BookmarkInterval: time.Hour, EncodeEvent: EncodeEvent}, cluster, cluster)
			defer hub.Close()
			writes := new(atomic.Int64)
			// MaxHold far beyond the test: only the streams release what
			// is held.
			addr := serveOnePort(t, New(hub, Config{Logger: discard, RateBurstPerIdentity: 100, MaxSubscriptionsPerIdentity: 100}),
				onePortOptions{writes: writes, cork: cork.Config{MaxHold: time.Hour}})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			streams := 50
			if http1 {
				streams = 1 // a connection per stream
			}
			// One connection, whose window (net/http's default, 1 MiB)
			// holds a change to every stream: the streams are read in turn.
			var protocols http.Protocols
			protocols.SetHTTP1(http1)
			protocols.SetUnencryptedHTTP2(!http1)
			transport := &http.Transport{Protocols: &protocols}
			defer transport.CloseIdleConnections()
			client := informerhubv1connect.NewInformerHubServiceClient(&http.Client{Transport: transport}, "http://"+addr)
			var watches []*connect.ServerStreamForClient[informerhubv1.WatchResponse]
			for range streams {
				watches = append(watches, connectWatch(ctx, t, client, "ns"))
			}
			receive := func(i int) {
				// 4 KiB objects: each message is larger than net/http's
				// buffers.
				cluster.ConfigMaps().Add(hubtest.ConfigMap("ns", fmt.Sprint("cm-", i), nil, strings.Repeat("x", 4<<10)))
				for j, w := range watches {
					if !w.Receive() {
						t.Fatalf("change %d, stream %d: %v", i, j, w.Err())
					}
				}
			}
			receive(-1) // every subscription live
			const changes = 10
			before := writes.Load()
			for i := range changes {
				receive(i)
			}
			n := int(writes.Load() - before)
			t.Logf("%d writes for %d changes to %d streams of one connection", n, changes, streams)
			if http1 && n != changes {
				t.Fatalf("%d writes for %d messages over HTTP/1.1, want one each", n, changes)
			}
		})
	}
}

// TestAStalledConnectStreamHoldsBackNoOther: a Connect stream whose client
// stopped reading, its handler blocked in a send on HTTP/2's flow control,
// is not waited for: another stream of its connection receives a change at
// once, not after the connection's MaxHold.
func TestAStalledConnectStreamHoldsBackNoOther(t *testing.T) {
	cluster := hubtest.NewCluster(t)
	hub := informerhub.New(informerhub.Config{Logger: discard, EncodeEvent: EncodeEvent}, cluster, cluster)
	defer hub.Close()
	addr := serveOnePort(t, New(hub, Config{Logger: discard}), onePortOptions{cork: cork.Config{MaxHold: time.Hour}})
	// Held for the stalled stream, the healthy one's change would wait for
	// MaxHold: the streams' context ends long before.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := connectClientOf(t, addr, false) // one connection for both
	stalled, healthy := connectWatch(ctx, t, client, "ns"), connectWatch(ctx, t, client, "ns")
	_ = stalled // never read: its 64 KiB window fills, its sends block
	big := strings.Repeat("x", 64<<10)
	for i := range 4 {
		cluster.ConfigMaps().Add(hubtest.ConfigMap("ns", fmt.Sprint("big-", i), nil, big))
		if !healthy.Receive() {
			t.Fatal(healthy.Err())
		}
	}
	start := time.Now()
	cluster.ConfigMaps().Add(hubtest.ConfigMap("ns", "small", nil, ""))
	if !healthy.Receive() {
		t.Fatal(healthy.Err())
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the healthy stream received the change after %v: held for the stalled one", took)
	}
}
