package hubclient

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/runtime/schema"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
)

// Client talks to one or more informerhub replicas. It is safe for
// concurrent use; create one and share it. Close it when done.
type Client struct {
	cfg       config
	endpoints []*endpoint

	mu      sync.Mutex // guards current, closed, and each endpoint's conn
	current int        // the endpoint calls go to; moves on failures
	closed  bool
}

// endpoint is one hub replica and its connection, made on first use.
type endpoint struct {
	target string
	conn   *grpc.ClientConn
}

// ErrClientClosed is returned by calls on a closed Client.
var ErrClientClosed = errors.New("hubclient: client closed")

// Selector chooses objects of one resource type, as a Kubernetes LIST or
// WATCH request does.
type Selector struct {
	// Resource is the resource type, e.g. {Version: "v1", Resource: "pods"}
	// or {Group: "apps", Version: "v1", Resource: "deployments"}.
	Resource schema.GroupVersionResource
	// Namespace restricts to one namespace; "" means all.
	Namespace string
	// LabelSelector and FieldSelector use Kubernetes syntax, with the
	// meaning the API server gives them. FieldSelector may name any field
	// the API server supports for the resource type: metadata.name, and
	// metadata.namespace for namespaced types, for every type; per type
	// fields such as pods' spec.nodeName and status.phase, events'
	// involvedObject.*, secrets' type; a custom resource's
	// selectableFields. [Resource.SelectableFields] lists them.
	LabelSelector string
	FieldSelector string
	// Filter is a CEL expression over `object` (the object as the API
	// server serves it, as JSON values), in the dialect and with the
	// libraries of Kubernetes' own CEL (as in ValidatingAdmissionPolicy):
	// an object is selected when it evaluates to true, e.g.
	//
	//	object.status.phase == "Running" && object.spec.containers.exists(c, c.image.startsWith("nginx"))
	//
	// "" selects everything. As with labels, an object whose change makes
	// the expression true arrives as ADDED, one whose change makes it
	// false as DELETED. An evaluation that fails (a missing field: guard
	// it with has()) does not select the object. An expression that does
	// not compile, or may cost more than the hub allows, fails the call
	// with INVALID_ARGUMENT (a google.rpc.BadRequest names
	// "selector.filter" and says where the error is).
	Filter string
	// ShardSelector is a Kubernetes shard selector (KEP-5866), such as
	//
	//	shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')
	//
	// selecting the objects whose field's hash is in one of its ranges,
	// exactly as an API server with the ShardedListAndWatch gate does: so
	// that the replicas of a controller each receive their share. ""
	// selects everything.
	ShardSelector string
}

func (s Selector) proto() *informerhubv1.ResourceSelector {
	return &informerhubv1.ResourceSelector{
		Group:         s.Resource.Group,
		Version:       s.Resource.Version,
		Resource:      s.Resource.Resource,
		Namespace:     s.Namespace,
		LabelSelector: s.LabelSelector,
		FieldSelector: s.FieldSelector,
		Filter:        s.Filter,
		ShardSelector: s.ShardSelector,
	}
}

// Option configures a Client.
type Option func(*config)

type config struct {
	tls              *tls.Config
	insecure         bool
	tokensWithoutTLS bool
	token            func(context.Context) (string, error)
	tokenErr         error // why WithBearerToken's token cannot be sent
	backoff          Backoff
	dialOptions      []grpc.DialOption
	log              *slog.Logger
}

// WithTLS sets the TLS configuration for connections to the hub. Without
// it, and without WithInsecure, the client uses TLS with the system's roots.
func WithTLS(cfg *tls.Config) Option { return func(c *config) { c.tls = cfg } }

// WithInsecure connects without TLS. Only for a hub on a trusted network or
// loopback, such as `make run`'s. Bearer tokens are then sent only to
// loopback endpoints, unless AllowTokensWithoutTLS.
func WithInsecure() Option { return func(c *config) { c.insecure = true } }

// AllowTokensWithoutTLS lets WithInsecure send bearer tokens to endpoints
// that are not loopback, in the clear. Anyone on the path can then reuse
// them.
func AllowTokensWithoutTLS() Option { return func(c *config) { c.tokensWithoutTLS = true } }

// WithBearerToken sends token as "authorization: Bearer <token>" on every
// call. Spaces and line breaks around it are trimmed, as kubectl trims a
// token file's, so the content of a token file can be passed as read; an
// empty token sends none (as kubectl's empty --token). New refuses a token
// that cannot be sent in a header. See WithTokenFile and WithTokenSource
// for tokens that change.
func WithBearerToken(token string) Option {
	token = strings.TrimSpace(token)
	return func(c *config) {
		if token == "" {
			c.token, c.tokenErr = nil, nil
			return
		}
		c.token = func(context.Context) (string, error) { return token, nil }
		c.tokenErr = checkToken(token)
	}
}

// maxTokenFileSize bounds what WithTokenFile reads: a service account
// token is a few KiB; a path to something else (a device, a log) must not
// be read whole at every call.
const maxTokenFileSize = 64 << 10

// WithTokenFile reads the bearer token from the file at path before every
// call, so that a projected service account token, which the kubelet
// rotates, is always current (client-go's file token source re-reads at
// most once a minute; a call here is rare enough to read it each time).
// Spaces and line breaks around it are trimmed. A file that cannot be
// read, or is larger than 64 KiB, fails that call as UNAVAILABLE, which a
// Watch retries (a file in the middle of its rotation); one whose token is
// empty or cannot be sent, as UNAUTHENTICATED, which ends it.
func WithTokenFile(path string) Option {
	return WithTokenSource(func(context.Context) (string, error) {
		f, err := os.Open(path)
		if err != nil {
			return "", err
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, maxTokenFileSize+1))
		switch {
		case err != nil:
			return "", err
		case len(b) > maxTokenFileSize:
			return "", fmt.Errorf("%s is larger than %d bytes: not a token", path, maxTokenFileSize)
		}
		return string(b), nil
	})
}

// WithTokenSource calls source before every call for the bearer token to
// send, so that rotated tokens (such as projected service account tokens,
// re-read from their file) are picked up; spaces and line breaks around
// what it returns are trimmed. An error of source fails that call as
// UNAVAILABLE, which a Watch retries; a token that cannot be sent in a
// header (empty, or with a character other than printable ASCII), as
// UNAUTHENTICATED, which ends it. Tokens are only sent over TLS, or to
// loopback endpoints (see WithInsecure).
func WithTokenSource(source func(context.Context) (string, error)) Option {
	return func(c *config) { c.token, c.tokenErr = source, nil }
}

// checkToken tells why token cannot be sent as a bearer token, if it
// cannot: gRPC refuses a header value with other than printable ASCII, an
// error that no retry would mend.
func checkToken(token string) error {
	if token == "" {
		return errors.New("the bearer token is empty")
	}
	for i := range len(token) {
		if b := token[i]; b < 0x21 || b > 0x7e {
			return fmt.Errorf("the bearer token has a character that cannot be sent in a header (byte %#02x at offset %d of %d)", b, i, len(token))
		}
	}
	return nil
}

// WithBackoff sets how Watch waits between reconnection attempts.
func WithBackoff(b Backoff) Option { return func(c *config) { c.backoff = b } }

// WithDialOptions adds gRPC dial options, applied after the client's own.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(c *config) { c.dialOptions = append(c.dialOptions, opts...) }
}

// WithLogger sets where the client logs. A stream that reconnects by
// itself (a Watcher's, a ManyWatcher's, a Counter's, and a ListerWatcher's
// watches) logs its interruption at info, then every attempt that fails at
// warn, with the attempt's number, the gRPC code and message, and the
// backoff, and "reconnected to the hub" at info with the number of failed
// attempts; re-syncs are logged at info, and disconnections for slowness at
// warn. Nothing is logged while the streams are healthy. Default:
// slog.Default(). Programs that log with klog, as client-go does, can send
// these there: WithLogger(slog.New(logr.ToSlogHandler(klog.Background()))).
func WithLogger(log *slog.Logger) Option { return func(c *config) { c.log = log } }

// Backoff is an exponential backoff with jitter.
type Backoff struct {
	// Initial is the first wait. Default: 100ms.
	Initial time.Duration
	// Max bounds every wait. Default: 30s.
	Max time.Duration
	// Multiplier grows the wait after each failure. Default: 2.
	Multiplier float64
	// Jitter spreads each wait randomly by this fraction up or down, so
	// that clients disconnected together do not reconnect together.
	// Default: 0.2; negative: none.
	Jitter float64
}

func (b *Backoff) setDefaults() {
	if b.Initial <= 0 {
		b.Initial = 100 * time.Millisecond
	}
	if b.Max <= 0 {
		b.Max = 30 * time.Second
	}
	if b.Multiplier < 1 {
		b.Multiplier = 2
	}
	switch {
	case b.Jitter < 0:
		b.Jitter = 0
	case b.Jitter == 0 || b.Jitter > 1:
		b.Jitter = 0.2
	}
}

// delay returns the wait before the attempt that follows failures
// consecutive failures.
func (b Backoff) delay(failures int) time.Duration {
	d := float64(b.Initial)
	for range failures - 1 {
		d *= b.Multiplier
		if d >= float64(b.Max) {
			break
		}
	}
	d = min(d, float64(b.Max))
	d *= 1 + b.Jitter*(2*rand.Float64()-1)
	return time.Duration(d)
}

// New returns a Client for the hub replicas at endpoints (host:port, or any
// gRPC target). Calls go to one of them and move to the next when it fails.
// New does not connect; connections are made on first use.
func New(endpoints []string, opts ...Option) (*Client, error) {
	if len(endpoints) == 0 {
		return nil, errors.New("hubclient: no endpoints")
	}
	c := &Client{}
	for _, o := range opts {
		o(&c.cfg)
	}
	if c.cfg.insecure && c.cfg.tls != nil {
		return nil, errors.New("hubclient: WithInsecure and WithTLS contradict each other")
	}
	if c.cfg.tokenErr != nil {
		return nil, fmt.Errorf("hubclient: %w", c.cfg.tokenErr)
	}
	c.cfg.backoff.setDefaults()
	if c.cfg.log == nil {
		c.cfg.log = slog.Default()
	}
	for _, target := range endpoints {
		if target == "" {
			return nil, errors.New("hubclient: an empty endpoint")
		}
		if c.cfg.token != nil && c.cfg.insecure && !c.cfg.tokensWithoutTLS && !isLoopback(target) {
			return nil, fmt.Errorf("hubclient: a bearer token would cross the network to %s in the clear: use WithTLS (or AllowTokensWithoutTLS)", target)
		}
		c.endpoints = append(c.endpoints, &endpoint{target: target})
	}
	// Start at a random replica, so that many clients spread over them.
	c.current = rand.IntN(len(endpoints))
	return c, nil
}

// Close closes the client's connections; watches in progress end. Closing
// a closed client does nothing.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	var errs []error
	for _, e := range c.endpoints {
		if e.conn != nil {
			errs = append(errs, e.conn.Close())
		}
	}
	return errors.Join(errs...)
}

// service returns the API of the current endpoint, and the endpoint's index
// for failover. grpc.NewClient does not connect, so making the connection
// under the lock is cheap, and Close cannot miss it.
func (c *Client) service() (informerhubv1.InformerHubServiceClient, int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, 0, ErrClientClosed
	}
	i := c.current
	e := c.endpoints[i]
	if e.conn == nil {
		conn, err := grpc.NewClient(e.target, c.dialOptions()...)
		if err != nil {
			return nil, i, fmt.Errorf("hubclient: connecting to %s: %w", e.target, err)
		}
		e.conn = conn
	}
	return informerhubv1.NewInformerHubServiceClient(e.conn), i, nil
}

// attempt waits for wait (a stream's backoff), then returns the API to
// open it on and the endpoint's index. err ends the stream: ctx ended, or
// the client was closed. With neither, a nil API means that the endpoint
// could not be reached, and it was marked failed: count a failure and
// attempt again.
func (c *Client) attempt(ctx context.Context, wait time.Duration) (informerhubv1.InformerHubServiceClient, int, error) {
	if wait > 0 {
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return nil, 0, ctx.Err()
		}
	}
	svc, endpoint, err := c.service()
	switch {
	case errors.Is(err, ErrClientClosed):
		return nil, endpoint, err
	case err != nil:
		c.failed(endpoint)
		return nil, endpoint, nil
	}
	return svc, endpoint, nil
}

// currentEndpoint returns the index of the endpoint calls go to.
func (c *Client) currentEndpoint() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.current
}

// failed moves calls away from endpoint i after it failed, to another
// replica picked at random (so that the clients of a replica that failed do
// not all pile onto the same next one), unless another caller has moved
// them already.
func (c *Client) failed(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.current == i && len(c.endpoints) > 1 {
		c.current = (i + 1 + rand.IntN(len(c.endpoints)-1)) % len(c.endpoints)
	}
}

func (c *Client) dialOptions() []grpc.DialOption {
	var opts []grpc.DialOption
	switch {
	case c.cfg.insecure:
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	case c.cfg.tls != nil:
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(c.cfg.tls)))
	default:
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})))
	}
	if c.cfg.token != nil {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer{source: c.cfg.token, requireTLS: !c.cfg.insecure}))
	}
	opts = append(opts,
		// Notice a replica that died without closing the connection: a
		// watch only reads, so without pings it would wait forever. The
		// hub allows pings every 10s.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		// Objects are at most 1.5 MiB in etcd and snapshot pages about 1
		// MiB: never refuse what a hub sends.
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)),
	)
	return append(opts, c.cfg.dialOptions...)
}

// isLoopback tells whether a target is on this machine: "localhost:port",
// a loopback IP, or a Unix socket.
func isLoopback(target string) bool {
	if strings.HasPrefix(target, "unix:") {
		return true
	}
	host, _, err := net.SplitHostPort(strings.TrimPrefix(target, "dns:///"))
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// bearer sends a bearer token with every call.
type bearer struct {
	source     func(context.Context) (string, error)
	requireTLS bool
}

func (b bearer) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	token, err := b.source(ctx)
	if err != nil {
		// A status error, so gRPC keeps it: a token file in the middle of
		// its rotation is worth retrying, not a reason to give up.
		return nil, status.Errorf(codes.Unavailable, "hubclient: getting the bearer token: %v", err)
	}
	token = strings.TrimSpace(token)
	if err := checkToken(token); err != nil {
		// Refused here rather than by gRPC, as INTERNAL, which a Watch
		// would retry for ever: no retry sends such a token.
		return nil, status.Errorf(codes.Unauthenticated, "hubclient: %v", err)
	}
	return map[string]string{"authorization": "Bearer " + token}, nil
}

func (b bearer) RequireTransportSecurity() bool { return b.requireTLS }
