// Package integration tests informerhub against a real kube-apiserver and
// etcd (see internal/controlplane): every claim about resume, expiry,
// snapshots and upstream watches is checked here against the API server's
// own answers, never against fakes.
package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/internal/controlplane"
	"github.com/informerhub/informerhub/internal/testhub"
	"github.com/informerhub/informerhub/server"
)

var (
	cluster *controlplane.ControlPlane
	kube    kubernetes.Interface
	dyn     dynamic.Interface

	configMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	klog.SetSlogLogger(slog.New(slog.DiscardHandler))
	var err error
	// The API server shards as the hub does (ShardedListAndWatch, alpha),
	// to compare the two (shard_test.go).
	if cluster, err = controlplane.StartWith(controlplane.Options{FeatureGates: []string{"ShardedListAndWatch=true"}}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	etcdServer = cluster.LazyAPIServer("--watch-cache=false")
	cfg := rest.CopyConfig(cluster.Config)
	cfg.QPS, cfg.Burst = 1000, 1000 // the tests write fast
	kube = kubernetes.NewForConfigOrDie(cfg)
	dyn = dynamic.NewForConfigOrDie(cfg)
	code := m.Run()
	if err := etcdServer.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the second API server:", err)
		code = 1
	}
	return cluster.Finish(code)
}

// etcdServer is started by etcdAPIServer.
var etcdServer *controlplane.LazyAPIServer

// etcdAPIServer returns a second kube-apiserver on the shared etcd, started
// on first use, without a watch cache: it serves every watch and LIST from
// etcd, so it answers 410 Gone as soon as etcd compacts a version (the
// shared one serves recent versions from its cache whatever etcd holds),
// and its watches resume across its own restarts. Tests may kill and start
// it; they leave it running.
func etcdAPIServer(t *testing.T) *controlplane.APIServer {
	t.Helper()
	return etcdServer.Get(t)
}

// hub is an informerhub served over loopback gRPC.
type hub struct {
	*informerhub.Hub
	srv    *server.Server
	client informerhubv1.InformerHubServiceClient
	conn   *grpc.ClientConn
	addr   string
	// stop stops the hub and its server before the test ends (and is
	// called again, to no effect, when it does).
	stop func()
}

// current returns the hub's client, for subscribers that always use it.
func (h *hub) current() informerhubv1.InformerHubServiceClient { return h.client }

// startHub runs a hub with cfg against the control plane, and a client
// connected to it. Both stop when the test ends. Callers are anonymous and
// allowed everything; limits are out of the way (the tests open many
// streams as one identity).
func startHub(t *testing.T, cfg informerhub.Config) *hub {
	t.Helper()
	return startHubWith(t, cfg, server.Config{StalledSendGrace: 100 * time.Millisecond})
}

// startHubAt is startHub on the API server restConfig reaches.
func startHubAt(t *testing.T, restConfig *rest.Config, cfg informerhub.Config) *hub {
	t.Helper()
	return startHubOn(t, restConfig, cfg, server.Config{StalledSendGrace: 100 * time.Millisecond})
}

// startHubWith is startHub with a server configuration (authentication,
// authorization, limits) and options of its listener (TLS). Without TLS,
// the returned client connects in plaintext.
func startHubWith(t *testing.T, cfg informerhub.Config, serverCfg server.Config, opts ...listenerOption) *hub {
	t.Helper()
	return startHubOn(t, cluster.Config, cfg, serverCfg, opts...)
}

// A listenerOption configures the hub's listener.
type listenerOption = testhub.ServeOption

// withTLS serves with TLS; withAddr on addr: a hub restarted there is the
// same hub to its clients.
var withTLS, withAddr = testhub.WithTLS, testhub.WithAddr

// startHubOn is startHubWith on the API server restConfig reaches. The hub
// serves gRPC, gRPC-Web and the Connect protocol on one port, as the
// binary does.
func startHubOn(t *testing.T, restConfig *rest.Config, cfg informerhub.Config, serverCfg server.Config, opts ...listenerOption) *hub {
	t.Helper()
	s := testhub.Serve(t, restConfig, cfg, serverCfg, opts...)
	return &hub{Hub: s.Hub, srv: s.Server, client: s.Client, conn: s.Conn, addr: s.Addr, stop: s.Stop}
}

// newTestWriter sends log lines to the test's log (see testhub.TestWriter).
func newTestWriter(t *testing.T) *testhub.TestWriter { return testhub.NewTestWriter(t) }

// namespaces numbers the namespaces the tests create, which the control
// plane of this process holds alone.
var namespaces atomic.Uint64

// namespace creates a namespace for one test. Namespaces are never deleted:
// without a controller manager they would stay Terminating anyway. Its
// name is the test's, cut to 50 bytes, and a number unique in the process
// (subtests whose names share those 50 bytes, and -count or -cpu runs of
// one test, each get their own).
func namespace(t *testing.T) string {
	t.Helper()
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-", ".", "-").Replace(t.Name()))
	if len(name) > 50 {
		name = name[:50]
	}
	name = strings.Trim(name, "-") + fmt.Sprintf("-%d", namespaces.Add(1))
	_, err := kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return name
}

// ctxFor bounds a step of a test (a call, a wait), so that a hang fails
// the test with where it hung rather than ending the binary at -timeout.
// A test's whole life is t.Context(): under load, a test that takes 20 s
// alone takes minutes.
func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// canonicalJSON re-encodes a JSON object with sorted keys and exact
// numbers, so that two encodings of the same object compare equal.
func canonicalJSON(t *testing.T, data []byte) string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("invalid JSON %q: %v", data, err)
	}
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// streamReader reads a gRPC stream in the background, so a test can wait
// for responses with a bound instead of blocking forever on a bug.
type streamReader[T any] struct {
	responses chan *T
	err       chan error
}

func readStream[T any](recv func() (*T, error)) *streamReader[T] {
	r := &streamReader[T]{responses: make(chan *T, 1<<16), err: make(chan error, 1)}
	go func() {
		for {
			resp, err := recv()
			if err != nil {
				if err == io.EOF {
					err = nil
				}
				r.err <- err
				close(r.responses)
				return
			}
			r.responses <- resp
		}
	}()
	return r
}

// next returns the next response, or fails the test if none comes within a
// generous bound (a hang is a bug; the bound only turns it into a failure).
func (r *streamReader[T]) next(t *testing.T) *T {
	t.Helper()
	select {
	case resp, ok := <-r.responses:
		if !ok {
			t.Fatalf("stream ended: %v", <-r.err)
		}
		return resp
	case <-time.After(30 * time.Second):
		t.Fatal("no response within 30s")
	}
	return nil
}

// end waits for the stream's final error.
func (r *streamReader[T]) end(t *testing.T) error {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case _, ok := <-r.responses:
			if !ok {
				return <-r.err
			}
		case <-timeout:
			t.Fatal("stream did not end within 30s")
		}
	}
}
