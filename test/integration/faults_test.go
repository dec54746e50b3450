package integration

import (
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/server"
)

// restartableHub is a hub at a fixed address that a test can kill (its
// connections drop at once, as when the process dies) and start again: a new
// hub, with new informers and an empty history.
type restartableHub struct {
	t    *testing.T
	cfg  informerhub.Config
	addr string

	mu  sync.Mutex // guards hub and g
	hub *informerhub.Hub
	g   *grpc.Server

	// snapshots counts the Snapshot calls served, across restarts.
	snapshots atomic.Int64
}

func startRestartableHub(t *testing.T, cfg informerhub.Config) *restartableHub {
	t.Helper()
	r := &restartableHub{t: t, cfg: cfg, addr: "127.0.0.1:0"}
	r.start()
	t.Cleanup(r.kill)
	return r
}

func (r *restartableHub) start() {
	r.t.Helper()
	cfg := r.cfg
	cfg.EncodeEvent = server.EncodeEvent
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(newTestWriter(r.t), &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	h, err := informerhub.NewForConfig(cluster.Config, cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	var lis net.Listener
	// The address may take a moment to be free again after a kill.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if lis, err = net.Listen("tcp", r.addr); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		r.t.Fatal(err)
	}
	serverCfg := server.Config{Logger: cfg.Logger, MaxSubscriptionsPerIdentity: 1 << 20, MaxSubscriptions: 1 << 20, RatePerIdentity: 1 << 20, RateBurstPerIdentity: 1 << 20, MaxConcurrentStreams: 1 << 20}
	countSnapshots := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if strings.HasSuffix(info.FullMethod, "/Snapshot") {
			r.snapshots.Add(1)
		}
		return handler(srv, ss)
	}
	srv := server.New(h, serverCfg)
	g := grpc.NewServer(append(srv.ServerOptions(), grpc.ChainStreamInterceptor(countSnapshots))...)
	srv.Register(g)
	go g.Serve(lis) //nolint:errcheck // ends with Stop
	r.mu.Lock()
	r.hub, r.g, r.addr = h, g, lis.Addr().String()
	r.mu.Unlock()
}

// subscribers counts the streams the hub serves on a resource type.
func (r *restartableHub) subscribers(t *testing.T, gvr schema.GroupVersionResource) int {
	t.Helper()
	r.mu.Lock()
	h := r.hub
	r.mu.Unlock()
	resources, err := h.Resources(ctxFor(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range resources {
		if res.Resource == gvr {
			return res.Subscribers
		}
	}
	return 0
}

// kill drops every connection at once and stops the hub.
func (r *restartableHub) kill() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.g == nil {
		return
	}
	r.g.Stop()
	r.hub.Close()
	r.g, r.hub = nil, nil
}

// tcpProxy forwards connections to a target, and can cut them (while cut,
// it closes every connection and refuses new ones) or stall them (while
// paused, it forwards nothing, keeping connections open, as a network that
// silently stops delivering).
type tcpProxy struct {
	target string
	lis    net.Listener

	mu     sync.Mutex // guards conns, down and paused
	conns  map[net.Conn]struct{}
	down   bool
	paused chan struct{} // non-nil while paused; closed by unpause
	wg     sync.WaitGroup
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{target: target, lis: lis, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		lis.Close()
		p.unpause()
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *tcpProxy) addr() string { return p.lis.Addr().String() }

func (p *tcpProxy) accept() {
	for {
		client, err := p.lis.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		down := p.down
		p.mu.Unlock()
		if down {
			client.Close()
			continue
		}
		upstream, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		p.mu.Lock()
		p.conns[client], p.conns[upstream] = struct{}{}, struct{}{}
		p.mu.Unlock()
		for _, pipe := range [][2]net.Conn{{client, upstream}, {upstream, client}} {
			p.wg.Go(func() {
				p.forward(pipe[0], pipe[1])
				pipe[0].Close()
				pipe[1].Close()
			})
		}
	}
}

// forward copies src to dst, holding what it read while the proxy is
// paused.
func (p *tcpProxy) forward(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			paused := p.paused
			p.mu.Unlock()
			if paused != nil {
				<-paused
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// pause stops forwarding on every connection, without closing any.
func (p *tcpProxy) pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused == nil {
		p.paused = make(chan struct{})
	}
}

// unpause forwards again what was held and what follows.
func (p *tcpProxy) unpause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused != nil {
		close(p.paused)
		p.paused = nil
	}
}

// cut closes every connection and refuses new ones until restore.
func (p *tcpProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

func (p *tcpProxy) restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = false
}
