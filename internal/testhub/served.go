package testhub

import (
	"crypto/tls"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/client-go/rest"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/server"
	"github.com/informerhub/informerhub/server/console"
	"github.com/informerhub/informerhub/server/cork"
	"github.com/informerhub/informerhub/server/oneport"
)

// Served is a hub run in the test's process and served on one loopback
// port, as the binary serves it: gRPC, gRPC-Web and the Connect protocol
// (package oneport).
type Served struct {
	Hub    *informerhub.Hub
	Server *server.Server
	// Addr is the port's host:port; Client a plaintext gRPC client of it
	// (nil with TLS).
	Addr   string
	Conn   *grpc.ClientConn
	Client informerhubv1.InformerHubServiceClient
	// Stop stops the hub and its server before the test ends (and is
	// called again, to no effect, when it does).
	Stop func()
}

// A ServeOption configures the hub's listener.
type ServeOption func(*serveConfig)

type serveConfig struct {
	oneport.Config
	addr string // default: a free port of loopback
}

// WithTLS serves with TLS.
func WithTLS(c *tls.Config) ServeOption { return func(o *serveConfig) { o.TLS = c } }

// WithAddr serves on addr: a hub restarted there is the same hub to its
// clients.
func WithAddr(addr string) ServeOption { return func(o *serveConfig) { o.addr = addr } }

// Serve runs a hub with cfg against the API server restConfig reaches,
// served with serverCfg, and a client connected to it; both stop when the
// test ends. Limits the tests do not mean to reach are out of the way (the
// tests open many streams as one identity). Without a Logger in cfg, the
// hub logs warnings to the test's log.
func Serve(t testing.TB, restConfig *rest.Config, cfg informerhub.Config, serverCfg server.Config, opts ...ServeOption) *Served {
	t.Helper()
	cfg.EncodeEvent = server.EncodeEvent
	if cfg.Logger == nil {
		cfg.Logger = TestLogger(t)
	}
	h, err := informerhub.NewForConfig(restConfig, cfg)
	if err != nil {
		t.Fatal(err)
	}
	serverCfg.Logger = cfg.Logger
	for _, limit := range []*int{&serverCfg.MaxSubscriptionsPerIdentity, &serverCfg.MaxSubscriptions, &serverCfg.RateBurstPerIdentity} {
		if *limit == 0 {
			*limit = 1 << 20
		}
	}
	if serverCfg.RatePerIdentity == 0 {
		serverCfg.RatePerIdentity = 1 << 20
	}
	if serverCfg.MaxConcurrentStreams == 0 {
		serverCfg.MaxConcurrentStreams = 1 << 20
	}
	srv := server.New(h, serverCfg)
	// As the binary serves it: a connection's streams share its writes
	// (package cork) on both sides of the port.
	g := grpc.NewServer(append(srv.ServerOptions(), grpc.Creds(cork.Credentials(oneport.Credentials(), cork.Config{})))...)
	srv.Register(g)
	sc := serveConfig{addr: "127.0.0.1:0", Config: oneport.Config{GRPC: g, HTTP: srv.HTTPHandler(server.HTTPServices{Other: console.Handler()}),
		MaxConcurrentStreams: serverCfg.MaxConcurrentStreams, Logger: cfg.Logger,
		HTTPConn: func(c net.Conn) net.Conn { return cork.Wrap(c, cork.Config{}) }, ConnContext: cork.NewContext}}
	for _, o := range opts {
		o(&sc)
	}
	lis, err := net.Listen("tcp", sc.addr)
	if err != nil {
		h.Close()
		t.Fatal(err)
	}
	web := oneport.New(sc.Config)
	served := make(chan struct{})
	go func() {
		defer close(served)
		web.Serve(lis) //nolint:errcheck // returns when the test stops it
	}()
	s := &Served{Hub: h, Server: srv, Addr: lis.Addr().String()}
	if sc.TLS == nil {
		conn, err := grpc.NewClient(s.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		s.Conn, s.Client = conn, informerhubv1.NewInformerHubServiceClient(conn)
	}
	s.Stop = sync.OnceFunc(func() {
		if s.Conn != nil {
			s.Conn.Close()
		}
		h.Close()
		web.Close()
		<-served
	})
	t.Cleanup(s.Stop)
	return s
}

// TestLogger logs warnings and errors to the test's log, until the test
// and its cleanups are over.
func TestLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(NewTestWriter(t), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// TestWriter sends log lines to the test's log, until the test and its
// cleanups are over: gRPC handlers that Stop did not wait for may still
// log then, and the testing package forbids it.
type TestWriter struct {
	t    testing.TB
	mu   sync.Mutex // guards done
	done bool
}

// NewTestWriter returns a TestWriter of t. Call it before starting what
// logs to it: its cleanup must run after theirs.
func NewTestWriter(t testing.TB) *TestWriter {
	w := &TestWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.done = true
	})
	return w
}

func (w *TestWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimSpace(string(p)))
	}
	return len(p), nil
}
