// Command informerhub serves Kubernetes resources as gRPC streams: one shared
// informer per resource type, any number of subscribers, exact resume.
//
// It reads its cluster from --kubeconfig, else the in-cluster service
// account, else $KUBECONFIG, else ~/.kube/config. It serves
// informerhub.v1.InformerHubService, grpc.health.v1 and server reflection on
// --listen; Prometheus metrics and the probes /healthz and /readyz on
// --metrics-listen; Go profiles on --debug-listen. On SIGTERM or SIGINT it
// says it is not ready, refuses new streams, ends its streams one by one
// over --shutdown-drain with UNAVAILABLE and their tokens (clients resume
// elsewhere, a few at a time) and stops.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/informerhub/historystore"
	"github.com/informerhub/informerhub/server"
	"github.com/informerhub/informerhub/server/auth"
	"github.com/informerhub/informerhub/server/console"
	"github.com/informerhub/informerhub/server/cork"
	"github.com/informerhub/informerhub/server/metrics"
	"github.com/informerhub/informerhub/server/oneport"
)

type options struct {
	kubeconfig      string
	listen          string
	console         bool
	metricsListen   string
	debugListen     string
	apiServerCheck  time.Duration
	printVersion    bool
	hub             informerhub.Config
	server          server.Config
	kubeQPS         float64
	kubeBurst       int
	logFormat       string
	logLevel        slog.Level
	shutdownTimeout time.Duration
	shutdownDrain   time.Duration
	historyDir      string
	// historyEncryption is --history-encryption-config's file.
	historyEncryption string

	auth                string
	insecureAllowRemote bool // deprecated: all three below
	// Each unlocks one thing the hub otherwise serves on loopback only.
	allowRemoteUnauthenticated, allowRemotePlaintext, allowRemoteDebug bool
	tlsCert, tlsKey                                                    string
	clientCA                                                           string
	tokenAudience                                                      string
	authnCacheTTL                                                      time.Duration
	authzAllowTTL                                                      time.Duration
	authzDenyTTL                                                       time.Duration
	authQPS                                                            float64
	authBurst                                                          int
	authMaxStale                                                       time.Duration
	reviewsPerPeer                                                     float64
	rejectedReviews                                                    float64
}

func parseFlags(args []string) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("informerhub", flag.ContinueOnError)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file of the cluster (default: in-cluster, then $KUBECONFIG, then ~/.kube/config)")
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8080", "host:port to serve on: gRPC, gRPC-Web and the Connect protocol (HTTP/1.1 and HTTP/2), and the console with --console")
	fs.BoolVar(&o.console, "console", false, "serve the web console at / on --listen")
	fs.Func("cors-allowed-origins", "comma-separated origins whose pages may call the hub from a browser, such as https://portal.example.com (* for any); none by default", func(v string) error {
		for _, origin := range strings.Split(v, ",") {
			if origin = strings.TrimSpace(origin); origin != "" {
				o.server.CORSAllowedOrigins = append(o.server.CORSAllowedOrigins, origin)
			}
		}
		return nil
	})
	fs.StringVar(&o.metricsListen, "metrics-listen", "", "host:port to serve Prometheus metrics (/metrics) and the probes /healthz and /readyz on, over HTTP; off when empty")
	fs.StringVar(&o.debugListen, "debug-listen", "", "host:port to serve Go profiles (/debug/pprof/) and memory statistics (/debug/vars) on; off when empty")
	fs.DurationVar(&o.apiServerCheck, "apiserver-check-interval", 10*time.Second, "how often readiness checks that the Kubernetes API server answers; after 3 failures in a row the hub is not ready")
	fs.BoolVar(&o.printVersion, "version", false, "print the version and exit (after checking the other flags)")

	fs.StringVar(&o.auth, "auth", "kubernetes", "how callers authenticate: kubernetes (a bearer token, checked with a TokenReview), mtls (a client certificate signed by --client-ca), or none (local development only)")
	fs.BoolVar(&o.allowRemoteUnauthenticated, "insecure-allow-remote-unauthenticated", false, "allow --auth=none on an address other than loopback: anyone who reaches it reads what the hub can")
	fs.BoolVar(&o.allowRemotePlaintext, "insecure-allow-remote-plaintext", false, "allow serving without TLS on an address other than loopback: bearer tokens cross the network in the clear")
	fs.BoolVar(&o.allowRemoteDebug, "insecure-allow-remote-debug", false, "allow --debug-listen on an address other than loopback: profiles expose the hub's memory")
	fs.BoolVar(&o.insecureAllowRemote, "insecure-allow-remote", false, "deprecated: all three --insecure-allow-remote-* flags at once")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "serving certificate file (PEM); reloaded when it changes")
	fs.StringVar(&o.tlsKey, "tls-key", "", "serving key file (PEM); reloaded when it changes")
	fs.StringVar(&o.clientCA, "client-ca", "", "CA certificates that sign client certificates, for --auth=mtls")
	fs.StringVar(&o.tokenAudience, "token-audience", "", "with --auth=kubernetes, accept only tokens issued for this audience")
	fs.DurationVar(&o.authnCacheTTL, "authn-cache-ttl", 2*time.Minute, "how long an accepted token's identity is reused")
	fs.DurationVar(&o.authzAllowTTL, "authz-allow-ttl", 5*time.Minute, "how long an allowed authorization decision is reused (never longer than --authz-recheck-interval)")
	fs.DurationVar(&o.authzDenyTTL, "authz-deny-ttl", 30*time.Second, "how long a denied authorization decision is reused (never longer than --authz-recheck-interval)")
	fs.DurationVar(&o.server.AuthzRecheckInterval, "authz-recheck-interval", time.Minute, "how often a running Watch is authorized again (revoked access ends it); also the oldest cached decision any call may use")

	fs.IntVar(&o.server.MaxSubscriptionsPerIdentity, "max-subscriptions-per-identity", 100, "Watch, Snapshot and Count streams one identity may have open at once")
	fs.IntVar(&o.server.MaxSubscriptions, "max-subscriptions", 20000, "Watch, Snapshot and Count streams all identities together may have open at once on this replica")
	fs.IntVar(&o.server.MaxWatchesPerStream, "max-watches-per-stream", 32, "watches one WatchMany may hold; each counts as a stream against --max-subscriptions-per-identity and --max-subscriptions")
	fs.Float64Var(&o.server.RatePerIdentity, "rate-per-identity", 10, "calls per second one identity may make on average")
	fs.IntVar(&o.server.RateBurstPerIdentity, "rate-burst-per-identity", 50, "calls one identity may make at once")
	fs.Func("max-concurrent-streams", "streams one connection may have open (default 100)", func(v string) error {
		n, err := strconv.ParseUint(v, 10, 32)
		o.server.MaxConcurrentStreams = uint32(n)
		return err
	})
	fs.IntVar(&o.server.MaxRecvMsgSize, "max-recv-msg-size", 64<<10, "bytes a request may have")
	fs.DurationVar(&o.server.KeepaliveTime, "keepalive-time", time.Minute, "ping a connection quiet for this long")
	fs.DurationVar(&o.server.KeepaliveTimeout, "keepalive-timeout", 20*time.Second, "close a connection that does not answer a ping within this")
	fs.DurationVar(&o.server.KeepaliveMinTime, "keepalive-min-time", 10*time.Second, "disconnect clients that ping more often than this")
	fs.IntVar(&o.hub.MaxSelectorLength, "max-selector-length", informerhub.DefaultMaxSelectorLength, "bytes a label or field selector may have")
	fs.IntVar(&o.hub.MaxSelectorTerms, "max-selector-terms", informerhub.DefaultMaxSelectorTerms, "requirements a label or field selector may have")
	fs.IntVar(&o.hub.MaxFilterLength, "max-filter-length", informerhub.DefaultMaxFilterLength, "bytes a CEL filter may have")
	fs.Uint64Var(&o.hub.MaxFilterEstimatedCost, "max-filter-estimated-cost", informerhub.DefaultMaxFilterEstimatedCost, "the cost a CEL filter may have as estimated when it is compiled, on the largest objects (refuses expressions quadratic in an object's size)")
	fs.Uint64Var(&o.hub.MaxFilterCost, "max-filter-cost", informerhub.DefaultMaxFilterCost, "the CEL cost one evaluation of a filter on one object may have (about 0.1-0.4 µs a unit); an evaluation that would cost more stops, and the object is sent as if it matched, marked with filter_error")
	fs.IntVar(&o.hub.MaxFiltersPerResource, "max-filters-per-resource", informerhub.DefaultMaxFiltersPerResource, "distinct CEL filters in use on one resource type at once; each costs an evaluation per change")
	fs.IntVar(&o.hub.MaxProjectionsPerResource, "max-projections-per-resource", informerhub.DefaultMaxProjectionsPerResource, "distinct projections (fields) in use on one resource type at once")
	fs.IntVar(&o.hub.MaxFiltersPerOwner, "max-filters-per-identity", informerhub.DefaultMaxFiltersPerOwner, "distinct CEL filters one identity's streams may hold on one resource type")
	fs.IntVar(&o.hub.MaxProjectionsPerOwner, "max-projections-per-identity", informerhub.DefaultMaxProjectionsPerOwner, "distinct projections (fields) one identity's streams may hold on one resource type")
	fs.IntVar(&o.hub.MaxFields, "max-fields", informerhub.DefaultMaxFields, "paths one projection (fields) may have")
	fs.DurationVar(&o.server.MaxSendStall, "max-send-stall", 30*time.Second, "end a stream whose client has not read anything for this long")

	fs.IntVar(&o.hub.HistorySize, "history-size", informerhub.DefaultHistorySize, "changes kept per resource type for resuming; older tokens are replayed from the API server")
	fs.Int64Var(&o.hub.HistoryBytes, "history-bytes", informerhub.DefaultHistoryBytes, "bytes the changes kept per resource type may hold, with the objects only they keep alive and their events (and as much again for the events built for projections, previous states and Struct objects)")
	fs.StringVar(&o.historyDir, "history-dir", "", "keep every resource type's history on disk here too (created if missing), so that resume tokens continue across restarts and after etcd compacted their versions; unset: memory only")
	fs.DurationVar(&o.hub.HistoryRetention, "history-retention", 24*time.Hour, "with --history-dir, delete changes older than this (0: no limit by age)")
	fs.Int64Var(&o.hub.HistoryMaxUnwrittenBytes, "history-max-unwritten-bytes", informerhub.DefaultHistoryMaxUnwritten, "with --history-dir, the most one resource type's changes waiting to be written may hold in memory; past it (a slow disk), that type is kept in memory only until the disk catches up, then its disk history starts over")
	fs.Int64Var(&o.hub.HistoryDiskBytes, "history-disk-bytes", 10<<30, "with --history-dir, delete the oldest changes of any resource type while the history takes more than this on disk (0: no limit by size)")
	fs.StringVar(&o.historyEncryption, "history-encryption-config", "", "with --history-dir, encrypt the history on disk per resource as the API server encrypts etcd: an EncryptionConfiguration file (apiserver.config.k8s.io/v1: aesgcm, aescbc, secretbox, kms v2, identity), read once at start. Secrets are written to disk only when it encrypts them; otherwise their history stays in memory")
	fs.Func("retain", "resource types whose informers run from the start and never stop for idleness, so their history is recorded whether or not anyone watches: comma-separated, as pods,deployments.apps,events.events.k8s.io (highest version served) or deployments.v1.apps", func(v string) error {
		for _, name := range strings.Split(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				o.hub.Retain = append(o.hub.Retain, name)
			}
		}
		return nil
	})
	fs.Int64Var(&o.hub.MemoryBudget, "memory-budget", informerhub.DefaultMemoryBudget, "bytes the histories, subscriber queues and label indexes of all resource types may hold together; past it, the oldest changes of any resource type are evicted first")
	fs.IntVar(&o.hub.MaxConcurrentReplays, "max-concurrent-replays", informerhub.DefaultMaxConcurrentReplays, "tokens older than the history replayed from the API server at once, each an upstream watch; more wait")
	fs.IntVar(&o.hub.MaxReplaysPerOwner, "max-replays-per-identity", informerhub.DefaultMaxReplaysPerOwner, "of --max-concurrent-replays, how many one identity's replays may hold at once; more of its replays wait for its own")
	fs.Int64Var(&o.hub.MaxReplayStateBytes, "max-replay-state-bytes", informerhub.DefaultMaxReplayStateBytes, "bytes of listed objects all replays with a filter, fields or previous state may hold at once; more are refused (RESOURCE_EXHAUSTED)")
	fs.IntVar(&o.hub.QueueSize, "queue-size", informerhub.DefaultQueueSize, "changes that may wait for one subscriber; past them it reads on from the history")
	fs.DurationVar(&o.hub.BookmarkInterval, "bookmark-interval", informerhub.DefaultBookmarkInterval, "a stream that received nothing for between half this and all of it gets a bookmark with a fresh resume token")
	fs.DurationVar(&o.hub.CountInterval, "count-interval", informerhub.DefaultCountInterval, "a Count stream receives new counts when they change, at most once per this")
	fs.IntVar(&o.hub.MaxCountGroups, "max-count-groups", informerhub.DefaultMaxCountGroups, "groups one Count's objects may fall in; a Count of more ends with RESOURCE_EXHAUSTED")
	fs.DurationVar(&o.hub.MaxUpstreamFailure, "max-upstream-failure", informerhub.DefaultMaxUpstreamFailure, "how long an informer's lists and watches may fail, with nothing delivered, before its streams end with UNAVAILABLE (UPSTREAM_UNAVAILABLE) and their tokens; the hub is not ready after three --apiserver-check-interval of it")
	fs.DurationVar(&o.hub.ConsistencyCheckInterval, "consistency-check-interval", informerhub.DefaultConsistencyCheck, "how often each informer checks its cache against the API server's LIST at the same resourceVersion (jittered up to a fifth longer), and relists when they differ; 0 turns the checks off")
	fs.Int64Var(&o.hub.ConsistencyCheckPageSize, "consistency-check-page-size", informerhub.DefaultConsistencyPageSize, "objects per page of a consistency check's LIST: larger pages cost the API server less CPU (its watch cache walks from each page's start: about objects² ÷ (2 × this) fetched a check) and both processes more memory a page")
	fs.DurationVar(&o.hub.IdleTimeout, "idle-timeout", informerhub.DefaultIdleTimeout, "how long a resource type's informer runs after its last subscriber left")
	fs.IntVar(&o.hub.SnapshotPageSize, "snapshot-page-size", informerhub.DefaultSnapshotPageSize, "objects per Snapshot page at most")
	fs.IntVar(&o.hub.SnapshotPageBytes, "snapshot-page-bytes", informerhub.DefaultSnapshotPageBytes, "bytes of objects per Snapshot page at most (a page always holds one object)")
	fs.BoolVar(&o.hub.StripManagedFields, "strip-managed-fields", false, "drop metadata.managedFields from cached objects to save memory")
	fs.BoolVar(&o.hub.UpstreamCompression, "upstream-compression", false, "ask the API server to gzip lists and watch-list streams: fewer bytes, more CPU on both sides (for a slow or metered link to it)")
	fs.Float64Var(&o.kubeQPS, "kube-api-qps", 50, "queries per second to the Kubernetes API server")
	fs.IntVar(&o.kubeBurst, "kube-api-burst", 100, "burst of queries to the Kubernetes API server")
	fs.Float64Var(&o.authQPS, "auth-api-qps", 100, "queries per second of each of three budgets, apart from --kube-api-qps and from each other: TokenReviews, SubjectAccessReviews of new calls, and those of running streams' rechecks")
	fs.IntVar(&o.authBurst, "auth-api-burst", 200, "burst of each budget of --auth-api-qps")
	fs.DurationVar(&o.authMaxStale, "auth-max-stale", 10*time.Minute, "how long past its cache lifetime an accepted token's identity (never past the token's expiry) and an allowed decision stand in while the API server cannot answer")
	fs.Float64Var(&o.rejectedReviews, "token-reviews-rejected", 50, "TokenReviews per second (and under way at once) that tokens the API server rejects may cause from all client addresses together")
	fs.Float64Var(&o.reviewsPerPeer, "token-reviews-per-peer", 10, "TokenReviews per second (and under way at once) that tokens the API server rejects may cause from one client address; past it, calls with tokens not accepted lately are refused from there before any review")
	fs.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	fs.TextVar(&o.logLevel, "log-level", slog.LevelInfo, "log level: debug, info, warn or error")
	fs.DurationVar(&o.shutdownDrain, "shutdown-drain", 10*time.Second, "on shutdown, end the Watch and Count streams one by one over this period (SHUTTING_DOWN, with their tokens), so their clients move to other replicas a few at a time")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 10*time.Second, "after the drain, how long to wait for the remaining calls to end")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	// --version checks the other flags too, so that a deployment's flags
	// can be checked without running the hub.
	return o, o.validate()
}

// validate rejects combinations that cannot work, and those that would
// expose the cluster: without authentication, or bearer tokens in plaintext,
// the hub serves only loopback unless told otherwise.
func (o *options) validate() error {
	if o.apiServerCheck <= 0 {
		return errors.New("--apiserver-check-interval must be positive")
	}
	switch {
	case o.hub.ConsistencyCheckInterval < 0:
		return errors.New("--consistency-check-interval must not be negative (0 turns the checks off)")
	case o.hub.ConsistencyCheckInterval == 0:
		o.hub.ConsistencyCheckInterval = -1 // Config's "never"; its zero is the default
	}
	if o.hub.ConsistencyCheckPageSize <= 0 {
		return errors.New("--consistency-check-page-size must be positive")
	}
	if o.hub.HistoryRetention < 0 || o.hub.HistoryDiskBytes < 0 {
		return errors.New("--history-retention and --history-disk-bytes must not be negative")
	}
	if o.historyEncryption != "" && o.historyDir == "" {
		return errors.New("--history-encryption-config is for --history-dir")
	}
	if o.logFormat != "text" && o.logFormat != "json" {
		return fmt.Errorf("--log-format must be text or json, not %q", o.logFormat)
	}
	for _, origin := range o.server.CORSAllowedOrigins {
		if err := validateOrigin(origin); err != nil {
			return fmt.Errorf("--cors-allowed-origins: %w", err)
		}
	}
	if (o.tlsCert == "") != (o.tlsKey == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	switch o.auth {
	case "kubernetes", "none":
		if o.clientCA != "" {
			return errors.New("--client-ca is for --auth=mtls")
		}
	case "mtls":
		if o.tlsCert == "" || o.clientCA == "" {
			return errors.New("--auth=mtls needs --tls-cert, --tls-key and --client-ca")
		}
	default:
		return fmt.Errorf("--auth must be kubernetes, mtls or none, not %q", o.auth)
	}
	if o.tokenAudience != "" && o.auth != "kubernetes" {
		return errors.New("--token-audience is for --auth=kubernetes")
	}
	if o.auth == "none" {
		for _, origin := range o.server.CORSAllowedOrigins {
			// rs/cors reads * anywhere as a wildcard; null is any
			// sandboxed page's.
			if strings.Contains(origin, "*") || origin == "null" {
				return fmt.Errorf("--cors-allowed-origins=%s with --auth=none would let pages of any site read what the hub can: name the origins", origin)
			}
		}
	}
	if o.insecureAllowRemote {
		o.allowRemoteUnauthenticated, o.allowRemotePlaintext, o.allowRemoteDebug = true, true, true
	}
	loopback, err := isLoopback(o.listen)
	if err != nil {
		return err
	}
	if !loopback {
		if o.auth == "none" && !o.allowRemoteUnauthenticated {
			return fmt.Errorf("--auth=none would let anyone who reaches %s read the cluster: listen on loopback, or pass --insecure-allow-remote-unauthenticated", o.listen)
		}
		if o.tlsCert == "" && !o.allowRemotePlaintext {
			return fmt.Errorf("without TLS, bearer tokens would cross the network in the clear: pass --tls-cert and --tls-key, listen on loopback, or pass --insecure-allow-remote-plaintext")
		}
	}
	return nil
}

// validateOrigin accepts "*" and origins as browsers send them:
// scheme://host[:port], without a path.
func validateOrigin(origin string) error {
	if origin == "*" {
		return nil
	}
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return fmt.Errorf("%q is not an origin: write it as a browser sends it, scheme://host[:port], such as https://portal.example.com", origin)
	}
	return nil
}

// isLoopback tells whether a listen address only accepts local connections.
func isLoopback(listen string) (bool, error) {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false, fmt.Errorf("--listen %q: %w", listen, err)
	}
	if host == "localhost" {
		return true, nil
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback(), nil
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
	if o.printVersion {
		fmt.Println(versionString())
		return
	}
	log := newLogger(o)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var lis listeners
	if lis.grpc, err = net.Listen("tcp", o.listen); err != nil {
		log.Error("cannot listen", "address", o.listen, "error", err)
		os.Exit(1)
	}
	if o.metricsListen != "" {
		if lis.metrics, err = net.Listen("tcp", o.metricsListen); err != nil {
			log.Error("cannot serve metrics", "address", o.metricsListen, "error", err)
			os.Exit(1)
		}
	}
	if o.debugListen != "" {
		if lis.debug, err = listenDebug(o); err != nil {
			log.Error("cannot serve debug endpoints", "error", err)
			os.Exit(1)
		}
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

// listeners are where the hub serves: gRPC, and unless nil, metrics and
// probes, and debug endpoints.
type listeners struct {
	grpc, metrics, debug net.Listener
}

// run serves on lis until ctx ends, then shuts down gracefully.
func run(ctx context.Context, o *options, log *slog.Logger, lis listeners) error {
	// validate trusted the name in --listen; trust only the address bound
	// ("localhost" could resolve to anything).
	needsLoopback := o.auth == "none" && !o.allowRemoteUnauthenticated || o.tlsCert == "" && !o.allowRemotePlaintext
	if needsLoopback {
		if addr, ok := lis.grpc.Addr().(*net.TCPAddr); !ok || !addr.IP.IsLoopback() {
			return fmt.Errorf("listening on %s, which is not loopback: without authentication or TLS the hub serves only loopback (see --insecure-allow-remote-unauthenticated and --insecure-allow-remote-plaintext)", lis.grpc.Addr())
		}
	}
	if o.insecureAllowRemote {
		log.Warn("--insecure-allow-remote is deprecated: it allows --auth=none, plaintext and debug endpoints off loopback at once; pass only the --insecure-allow-remote-* flags you need")
	}
	info := buildInfo()
	log.Info("starting informerhub", "version", info.Version, "revision", info.Revision)
	if queues := informerhub.QueueBytes(o.hub.QueueSize) * int64(o.server.MaxSubscriptions); queues > o.hub.MemoryBudget/2 {
		// Queues are never evicted: at the stream cap they would leave the
		// histories little or nothing of the budget.
		log.Warn("the queues of --max-subscriptions streams (--queue-size each) may take more than half of --memory-budget, and queues are never evicted",
			"queueBytesAtMaxSubscriptions", queues, "memoryBudget", o.hub.MemoryBudget)
	}
	restConfig, source, err := loadKubeconfig(o.kubeconfig)
	if err != nil {
		return err
	}
	restConfig.QPS, restConfig.Burst = float32(o.kubeQPS), o.kubeBurst
	log.Info("using Kubernetes API server", "host", restConfig.Host, "config", source)

	o.hub.Logger = log
	o.hub.EncodeEvent = server.EncodeEvent
	if o.historyEncryption != "" {
		// Before the store opens: a configuration that does not load
		// touches nothing on disk.
		encryptionCtx, stopEncryption := context.WithCancel(context.Background())
		defer stopEncryption() // after the hub, whose close writes what is left
		if o.hub.HistoryTransformers, err = loadHistoryEncryption(encryptionCtx, o.historyEncryption, log); err != nil {
			return err
		}
	}
	if o.historyDir != "" {
		store, err := historystore.Open(historystore.Options{Dir: o.historyDir, Logger: log})
		if err != nil {
			return err
		}
		defer store.Close() // after the hub, whose close writes what is left
		if err := claimHistory(ctx, restConfig, store, log); err != nil {
			return err
		}
		o.hub.HistoryStore = store
		log.Info("keeping the history on disk", "dir", o.historyDir, "retention", o.hub.HistoryRetention, "diskBytes", o.hub.HistoryDiskBytes)
	}
	hub, err := informerhub.NewForConfig(restConfig, o.hub)
	if err != nil {
		return err
	}
	defer hub.Close()

	tlsConfig, err := o.authenticate(restConfig, log)
	if err != nil {
		return err
	}
	o.server.Logger = log
	if lis.metrics != nil {
		o.server.Metrics = metrics.New(hub, info)
		o.server.Authenticator = o.server.Metrics.Authenticator(o.server.Authenticator)
		o.server.Authorizer = o.server.Metrics.Authorizer(o.server.Authorizer)
	}
	healthServer := health.NewServer()
	ready := newReadiness(healthServer)
	if lis.metrics != nil {
		o.server.Metrics.Registry.MustRegister(ready.collector())
	}
	srv := server.New(hub, o.server)
	// A connection's streams share its writes (package cork), on both
	// sides of the port.
	var corked cork.Config
	g := grpc.NewServer(append(srv.ServerOptions(), grpc.Creds(cork.Credentials(oneport.Credentials(), corked)))...)
	srv.Register(g)
	healthpb.RegisterHealthServer(g, srv.HealthService(healthServer))
	reflection.Register(g)
	httpServices := server.HTTPServices{Health: healthServer}
	if o.console {
		httpServices.Other = console.Handler()
	}
	httpHandler := srv.HTTPHandler(httpServices)
	if o.auth == "none" && !o.allowRemoteUnauthenticated {
		httpHandler = loopbackHostsOnly(httpHandler)
	}
	web := oneport.New(oneport.Config{GRPC: g, HTTP: httpHandler, TLS: tlsConfig,
		MaxConcurrentStreams: o.server.MaxConcurrentStreams, KeepaliveTime: o.server.KeepaliveTime,
		KeepaliveTimeout: o.server.KeepaliveTimeout, Logger: log,
		HTTPConn: func(c net.Conn) net.Conn { return cork.Wrap(c, corked) }, ConnContext: cork.NewContext})

	// The HTTP endpoints and the API server check run until run returns.
	bgCtx, stopBackground := context.WithCancel(ctx)
	var background sync.WaitGroup
	defer func() {
		stopBackground()
		background.Wait()
	}()
	if lis.metrics != nil {
		background.Go(func() {
			serveHTTP(bgCtx, lis.metrics, observabilityHandler(o.server.Metrics, ready), "metrics and probes", log)
		})
	}
	if lis.debug != nil {
		background.Go(func() { serveHTTP(bgCtx, lis.debug, debugHandler(), "debug endpoints", log) })
	}
	background.Go(func() { checkAPIServer(bgCtx, restConfig, o.apiServerCheck, ready, log) })
	background.Go(func() {
		checkFeeds(bgCtx, hub.Stats, o.apiServerCheck, apiServerFailureThreshold*o.apiServerCheck, ready, log)
	})

	serveErr := make(chan error, 1)
	go func() { serveErr <- web.Serve(lis.grpc) }()
	ready.setServing()
	log.Info("serving gRPC, gRPC-Web and the Connect protocol", "address", lis.grpc.Addr().String(), "console", o.console)

	select {
	case err := <-serveErr:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down")
	ready.shutDown()
	// Streams end a few at a time; clients resume elsewhere. Everything
	// is over by the drain and the timeout together, which the pod's
	// grace period allows for.
	deadline := time.Now().Add(o.shutdownDrain + o.shutdownTimeout)
	drainCtx, cancelDrain := context.WithDeadline(context.Background(), deadline)
	if err := srv.Drain(drainCtx, o.shutdownDrain); err != nil {
		log.Warn("streams did not end in time", "error", err)
	}
	cancelDrain()
	hub.Close() // what is left (snapshots) ends with UNAVAILABLE
	stopCtx, cancelStop := context.WithDeadline(context.Background(), deadline)
	defer cancelStop()
	if err := web.Shutdown(stopCtx); err != nil {
		log.Warn("streams did not end in time; closed them", "timeout", o.shutdownTimeout, "error", err)
	}
	if err := <-serveErr; err != nil {
		log.Warn("serving ended with an error", "error", err)
	}
	return nil
}

// loopbackHostsOnly answers the requests for localhost or a loopback
// address only, and refuses others with 403. A hub without authentication
// listens on loopback, but a web page can still reach it: its site's name,
// rebound to 127.0.0.1 (DNS rebinding), makes its requests same-origin,
// and they then carry that name as their Host.
func loopbackHostsOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if name, _, err := net.SplitHostPort(host); err == nil {
			host = name
		}
		ip, err := netip.ParseAddr(strings.Trim(host, "[]"))
		if !strings.EqualFold(host, "localhost") && (err != nil || !ip.IsLoopback()) {
			http.Error(w, fmt.Sprintf("this hub runs without authentication (--auth=none) and answers only requests for localhost or a loopback address, not for %q", r.Host), http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// authenticate sets up who may call, and returns the TLS configuration
// (client certificates for mtls) to serve with; nil: plaintext.
func (o *options) authenticate(restConfig *rest.Config, log *slog.Logger) (*tls.Config, error) {
	// A client of its own: reviews do not queue behind the informers'
	// requests, nor the informers behind a flood of reviews.
	// And one for each purpose: a flood of tokens to review cannot delay
	// the admission of new calls, nor new calls the rechecks that keep
	// running streams open.
	var clients [3]*kubernetes.Clientset // TokenReviews, admissions, rechecks
	for i := range clients {
		authConfig := rest.CopyConfig(restConfig)
		authConfig.QPS, authConfig.Burst = float32(o.authQPS), o.authBurst
		var err error
		if clients[i], err = kubernetes.NewForConfig(authConfig); err != nil {
			return nil, err
		}
	}
	authn, admissions, rechecks := clients[0], clients[1], clients[2]
	authz := auth.NewSubjectAccessReview(admissions.AuthorizationV1().SubjectAccessReviews(),
		auth.SubjectAccessReviewConfig{AllowTTL: o.authzAllowTTL, DenyTTL: o.authzDenyTTL, MaxStale: o.authMaxStale,
			RecheckClient: rechecks.AuthorizationV1().SubjectAccessReviews()})
	switch o.auth {
	case "kubernetes":
		var audiences []string
		if o.tokenAudience != "" {
			audiences = []string{o.tokenAudience}
		}
		o.server.Authenticator = auth.NewTokenReview(authn.AuthenticationV1().TokenReviews(),
			auth.TokenReviewConfig{Audiences: audiences, CacheTTL: o.authnCacheTTL, MaxStale: o.authMaxStale,
				ReviewsPerPeer: o.reviewsPerPeer, RejectedReviews: o.rejectedReviews,
				RecheckClient: rechecks.AuthenticationV1().TokenReviews()})
		o.server.Authorizer = authz
	case "mtls":
		o.server.Authenticator, o.server.Authorizer = auth.ClientCertificate{}, authz
	case "none":
		o.server.Authenticator, o.server.Authorizer = auth.Anonymous{}, auth.AlwaysAllow{}
		log.Warn("--auth=none: every caller may read everything the hub can; for local development only", "listen", o.listen)
	}
	if o.tlsCert == "" {
		if o.auth != "none" {
			log.Warn("serving without TLS: credentials cross the connection in the clear", "listen", o.listen)
		}
		return nil, nil
	}
	reloader, err := auth.NewCertificateReloader(o.tlsCert, o.tlsKey, log)
	if err != nil {
		return nil, err
	}
	tlsConfig := &tls.Config{GetCertificate: reloader.GetCertificate, MinVersion: tls.VersionTLS12}
	if o.auth == "mtls" {
		pem, err := os.ReadFile(o.clientCA)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("no certificates in --client-ca %s", o.clientCA)
		}
		tlsConfig.ClientCAs, tlsConfig.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return tlsConfig, nil
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

// claimHistory makes the history in --history-dir the current cluster's,
// named by its kube-system namespace's UID (read with the list the hub may
// do anyway): a history of another cluster is dropped, as its resource
// versions mean nothing here.
func claimHistory(ctx context.Context, restConfig *rest.Config, store *historystore.Store, log *slog.Logger) error {
	kube, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	list, err := kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=kube-system"})
	if err != nil {
		return fmt.Errorf("identifying the cluster for --history-dir (listing namespace kube-system): %w", err)
	}
	if len(list.Items) != 1 {
		return errors.New("identifying the cluster for --history-dir: the cluster has no namespace kube-system")
	}
	reset, err := store.ClaimCluster(string(list.Items[0].UID))
	if err != nil {
		return fmt.Errorf("--history-dir: %w", err)
	}
	if reset {
		log.Warn("--history-dir held the history of another cluster; dropped it", "cluster", list.Items[0].UID)
	}
	return nil
}
