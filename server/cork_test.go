package server

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/informerhub/hubtest"
	"github.com/informerhub/informerhub/server/cork"
)

// corkedConns are credentials that cork each connection (package cork) and
// keep the Conns, for a test to count their writes.
type corkedConns struct {
	credentials.TransportCredentials
	mu    sync.Mutex // guards conns
	conns []*cork.Conn
}

func (c *corkedConns) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ServerHandshake(raw)
	if cc, ok := conn.(*cork.Conn); ok {
		c.mu.Lock()
		c.conns = append(c.conns, cc)
		c.mu.Unlock()
	}
	return conn, info, err
}

func (c *corkedConns) only(t *testing.T) *cork.Conn {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.conns) != 1 {
		t.Fatalf("%d connections, want 1", len(c.conns))
	}
	return c.conns[0]
}

// dialCorked serves hub as the binary does, a connection's streams sharing
// its writes, over loopback TCP (an in-memory listener, in a synctest
// bubble), and returns a client of one connection, and the server's side
// of it.
func dialCorked(t *testing.T, hub *informerhub.Hub, cfg Config, corkCfg cork.Config, inBubble bool) (informerhubv1.InformerHubServiceClient, func() *cork.Conn) {
	t.Helper()
	var lis net.Listener
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	}
	if inBubble {
		mem := bufconn.Listen(1 << 20)
		lis, dial = mem, func(ctx context.Context, _ string) (net.Conn, error) { return mem.DialContext(ctx) }
	} else {
		var err error
		if lis, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	srv := New(hub, cfg)
	creds := &corkedConns{TransportCredentials: cork.Credentials(insecure.NewCredentials(), corkCfg)}
	g := grpc.NewServer(append(srv.ServerOptions(), grpc.Creds(creds))...)
	srv.Register(g)
	go g.Serve(lis) //nolint:errcheck // ends with Stop
	conn, err := grpc.NewClient("passthrough:///"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(1<<20), grpc.WithContextDialer(dial))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		hub.Close()
		g.Stop()
	})
	return informerhubv1.NewInformerHubServiceClient(conn), func() *cork.Conn { return creds.only(t) }
}

// TestAChangeToAConnectionsStreamsSharesItsWrites: a change that a hundred
// Watch streams of one connection select is written to it in a few writes,
// not a hundred: each stream's send is held until the last of them has
// handed its event to gRPC, whose writer then writes them together. (About
// one write per change on an idle machine; a few when the streams'
// goroutines wait for a core, which cuts a change's wave short: the
// benchmarks measure it, BenchmarkGRPCFanOut's syscalls/delivery.)
func TestAChangeToAConnectionsStreamsSharesItsWrites(t *testing.T) {
	cluster := hubtest.NewCluster(t)
	hub := informerhub.New(informerhub.Config{Logger: discard, EncodeEvent: EncodeEvent}, cluster, cluster)
	// MaxHold far beyond the test: only the streams release what is held.
	client, serverConn := dialCorked(t, hub, Config{Logger: discard, RateBurstPerIdentity: 200, MaxSubscriptionsPerIdentity: 200}, cork.Config{MaxHold: time.Hour}, false)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const streams, changes = 100, 10
	var watches []informerhubv1.InformerHubService_WatchClient
	for range streams {
		w, err := client.Watch(ctx, &informerhubv1.WatchRequest{Selector: cmSelector})
		if err == nil {
			_, err = w.Header()
		}
		if err != nil {
			t.Fatal(err)
		}
		watches = append(watches, w)
	}
	receive := func(i int) {
		cluster.ConfigMaps().Add(hubtest.ConfigMap("a", fmt.Sprint("cm-", i), nil, strings.Repeat("x", 2<<10)))
		for _, w := range watches {
			if _, err := w.Recv(); err != nil {
				t.Fatal(err)
			}
		}
	}
	receive(-1) // every subscription live (no longer catching up)
	before := serverConn().Writes()
	for i := range changes {
		receive(i)
	}
	n := serverConn().Writes() - before
	if n > 5*changes {
		t.Fatalf("%d writes for %d changes to %d streams of one connection, want a few per change", n, changes, streams)
	}
}

// TestAStalledStreamHoldsBackNoOther: a stream whose client stopped
// reading, its handler blocked in a send, is not waited for: another
// stream of its connection receives a change at once, not after MaxHold.
func TestAStalledStreamHoldsBackNoOther(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cluster := hubtest.NewCluster(t)
		hub := informerhub.New(informerhub.Config{Logger: discard, EncodeEvent: EncodeEvent}, cluster, cluster)
		client, _ := dialCorked(t, hub, Config{Logger: discard}, cork.Config{MaxHold: time.Hour}, true)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		open := func() informerhubv1.InformerHubService_WatchClient {
			w, err := client.Watch(ctx, &informerhubv1.WatchRequest{Selector: cmSelector})
			if err == nil {
				_, err = w.Header()
			}
			if err != nil {
				t.Fatal(err)
			}
			return w
		}
		stalled, healthy := open(), open()
		_ = stalled // never read: its 64 KiB window fills, its sends block
		big := strings.Repeat("x", 64<<10)
		for i := range 4 {
			cluster.ConfigMaps().Add(hubtest.ConfigMap("a", fmt.Sprint("big-", i), nil, big))
			if _, err := healthy.Recv(); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait() // the stalled stream's handler is blocked in a send
		start := time.Now()
		cluster.ConfigMaps().Add(hubtest.ConfigMap("a", "small", nil, ""))
		if _, err := healthy.Recv(); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took > time.Second {
			t.Fatalf("the healthy stream received the change after %v: held for the stalled one", took)
		}
	})
}
