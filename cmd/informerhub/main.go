// Command informerhub serves Kubernetes resources as gRPC streams: one shared
// informer per resource type, any number of subscribers, exact resume.
//
// It reads its cluster from --kubeconfig, else the in-cluster service
// account, else $KUBECONFIG, else ~/.kube/config. It serves
// informerhub.v1.InformerHubService, grpc.health.v1 and server reflection on
// --listen, and on SIGTERM or SIGINT it ends every stream with UNAVAILABLE
// (clients resume elsewhere with their tokens) and stops.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/server"
)

type options struct {
	kubeconfig      string
	listen          string
	hub             informerhub.Config
	kubeQPS         float64
	kubeBurst       int
	logFormat       string
	logLevel        slog.Level
	maxSendStall    time.Duration
	shutdownTimeout time.Duration
}

func parseFlags(args []string) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("informerhub", flag.ContinueOnError)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file of the cluster (default: in-cluster, then $KUBECONFIG, then ~/.kube/config)")
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8080", "host:port to serve gRPC on")
	fs.IntVar(&o.hub.HistorySize, "history-size", informerhub.DefaultHistorySize, "changes kept per resource type for resuming")
	fs.IntVar(&o.hub.QueueSize, "queue-size", informerhub.DefaultQueueSize, "changes that may wait for one subscriber before it is disconnected as too slow")
	fs.DurationVar(&o.hub.BookmarkInterval, "bookmark-interval", informerhub.DefaultBookmarkInterval, "a quiet stream gets a bookmark with a fresh resume token this often")
	fs.DurationVar(&o.hub.IdleTimeout, "idle-timeout", informerhub.DefaultIdleTimeout, "how long a resource type's informer runs after its last subscriber left")
	fs.IntVar(&o.hub.SnapshotPageSize, "snapshot-page-size", informerhub.DefaultSnapshotPageSize, "objects per Snapshot page at most")
	fs.IntVar(&o.hub.SnapshotPageBytes, "snapshot-page-bytes", informerhub.DefaultSnapshotPageBytes, "bytes of objects per Snapshot page at most (a page always holds one object)")
	fs.BoolVar(&o.hub.StripManagedFields, "strip-managed-fields", false, "drop metadata.managedFields from cached objects to save memory")
	fs.Float64Var(&o.kubeQPS, "kube-api-qps", 50, "queries per second to the Kubernetes API server")
	fs.IntVar(&o.kubeBurst, "kube-api-burst", 100, "burst of queries to the Kubernetes API server")
	fs.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	fs.TextVar(&o.logLevel, "log-level", slog.LevelInfo, "log level: debug, info, warn or error")
	fs.DurationVar(&o.maxSendStall, "max-send-stall", 30*time.Second, "end a stream whose client has not read anything for this long")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 10*time.Second, "how long to wait for streams to end on shutdown")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if o.logFormat != "text" && o.logFormat != "json" {
		return nil, fmt.Errorf("--log-format must be text or json, not %q", o.logFormat)
	}
	return o, nil
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "informerhub:", err)
		os.Exit(2)
	}
	log := newLogger(o)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	lis, err := net.Listen("tcp", o.listen)
	if err != nil {
		log.Error("cannot listen", "address", o.listen, "error", err)
		os.Exit(1)
	}
	if err := run(ctx, o, log, lis); err != nil {
		log.Error("informerhub failed", "error", err)
		os.Exit(1)
	}
}

func newLogger(o *options) *slog.Logger {
	handlerOpts := &slog.HandlerOptions{Level: o.logLevel}
	var h slog.Handler = slog.NewTextHandler(os.Stderr, handlerOpts)
	if o.logFormat == "json" {
		h = slog.NewJSONHandler(os.Stderr, handlerOpts)
	}
	log := slog.New(h)
	klog.SetSlogLogger(log.With("component", "client-go"))
	return log
}

// run serves on lis until ctx ends, then shuts down gracefully.
func run(ctx context.Context, o *options, log *slog.Logger, lis net.Listener) error {
	restConfig, source, err := loadKubeconfig(o.kubeconfig)
	if err != nil {
		return err
	}
	restConfig.QPS, restConfig.Burst = float32(o.kubeQPS), o.kubeBurst
	log.Info("using Kubernetes API server", "host", restConfig.Host, "config", source)

	o.hub.Logger = log
	o.hub.EncodeEvent = server.EncodeEvent
	hub, err := informerhub.NewForConfig(restConfig, o.hub)
	if err != nil {
		return err
	}
	defer hub.Close()

	healthServer := health.NewServer()
	healthServer.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	healthServer.SetServingStatus(informerhubv1.InformerHubService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
	g := grpc.NewServer(append(server.ServerOptions(),
		// Find dead subscribers: ping connections that are quiet for a
		// minute, drop those that do not answer.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: time.Minute, Timeout: 20 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	)...)
	server.New(hub, server.Config{Logger: log, MaxSendStall: o.maxSendStall}).Register(g)
	healthpb.RegisterHealthServer(g, healthServer)
	reflection.Register(g)

	serveErr := make(chan error, 1)
	go func() { serveErr <- g.Serve(lis) }()
	log.Info("serving gRPC", "address", lis.Addr().String())

	// Serving once the API server answers; until then, health says so.
	go waitForAPIServer(ctx, restConfig, log, func() {
		healthServer.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
		healthServer.SetServingStatus(informerhubv1.InformerHubService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	})

	select {
	case err := <-serveErr:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down")
	healthServer.Shutdown()
	hub.Close() // every stream ends with UNAVAILABLE; clients resume elsewhere
	stopped := make(chan struct{})
	go func() {
		g.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(o.shutdownTimeout):
		log.Warn("streams did not end in time; closing them", "timeout", o.shutdownTimeout)
		g.Stop()
	}
	return nil
}

// loadKubeconfig finds the cluster: --kubeconfig, else in-cluster, else the
// standard kubeconfig rules ($KUBECONFIG, then ~/.kube/config).
func loadKubeconfig(path string) (*rest.Config, string, error) {
	if path != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		return cfg, path, err
	}
	cfg, err := rest.InClusterConfig()
	if err == nil {
		return cfg, "in-cluster", nil
	}
	if !errors.Is(err, rest.ErrNotInCluster) {
		return nil, "", err
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("no cluster: not in a cluster, and %w (set --kubeconfig)", err)
	}
	return cfg, "kubeconfig", nil
}

func waitForAPIServer(ctx context.Context, restConfig *rest.Config, log *slog.Logger, ready func()) {
	client, err := discovery.NewDiscoveryClientForConfig(restConfig)
	if err != nil {
		log.Error("cannot check the API server", "error", err)
		return
	}
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, 10*time.Second) {
		version, err := client.ServerVersion()
		if err == nil {
			log.Info("API server reachable", "version", version.GitVersion)
			ready()
			return
		}
		log.Warn("API server not reachable yet", "error", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
}
