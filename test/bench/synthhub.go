package bench

import (
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/informerhub/hubtest"
	"github.com/informerhub/informerhub/server"
	"github.com/informerhub/informerhub/server/cork"
)

// synthHub is a hub whose changes come from a synthetic source rather than
// an API server, for rates the control plane cannot take on this machine
// (the export scenario): the hub's core (package informerhub) on
// informerhub/hubtest's in-memory cluster, in the harness's process, served
// over gRPC on loopback by package server as cmd/informerhub serves it
// (server.EncodeEvent, package cork under grpc-go's writer, every caller
// anonymous as with --auth none). Only the API server, its informer's
// reading of JSON and the binary's flags are missing.
type synthHub struct {
	addr     string
	ns       string
	names    []string
	pad      string
	cluster  *hubtest.Cluster
	hub      *informerhub.Hub
	grpc     *grpc.Server
	served   chan struct{}
	cleanups *cleanups

	mu  sync.Mutex // serializes changes, so that their numbers follow their order
	seq int64      // the last change's number
}

// startSynthHub serves objects ConfigMaps in namespace ns, each with
// objectBytes of data, not yet changed (seq and sentAt 0).
func startSynthHub(ns string, objects, objectBytes int) (*synthHub, error) {
	h := &synthHub{ns: ns, pad: strings.Repeat("x", objectBytes), cleanups: &cleanups{}, served: make(chan struct{})}
	h.cluster = hubtest.NewCluster(h.cleanups)
	for i := range objects {
		h.names = append(h.names, fmt.Sprintf("export-%04d", i))
		h.cluster.ConfigMaps().Add(h.configMap(i, 0, 0))
	}
	discard := slog.New(slog.DiscardHandler)
	h.hub = informerhub.New(informerhub.Config{Logger: discard, EncodeEvent: server.EncodeEvent}, h.cluster, h.cluster)
	srv := server.New(h.hub, server.Config{
		Logger:                      discard,
		MaxSubscriptionsPerIdentity: 1000,
		MaxSubscriptions:            1000,
		RatePerIdentity:             1e9,
		RateBurstPerIdentity:        1000,
		MaxConcurrentStreams:        1000,
		AuthzRecheckInterval:        time.Hour,
	})
	h.grpc = grpc.NewServer(append(srv.ServerOptions(), grpc.Creds(cork.Credentials(insecure.NewCredentials(), cork.Config{})))...)
	srv.Register(h.grpc)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		h.stop()
		return nil, err
	}
	h.addr = lis.Addr().String()
	go func() {
		defer close(h.served)
		_ = h.grpc.Serve(lis)
	}()
	return h, nil
}

func (h *synthHub) configMap(i int, seq, sentAt int64) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: h.names[i], UID: types.UID(h.ns + "/" + h.names[i])},
		Data:       map[string]string{"pad": h.pad, "seq": strconv.FormatInt(seq, 10), "sentAt": strconv.FormatInt(sentAt, 10)},
	}
}

// touch changes the i-th object (modulo their number): the next change's
// number, and the time, taken just before the change is made.
func (h *synthHub) touch(i int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	h.cluster.ConfigMaps().Modify(h.configMap(i%len(h.names), h.seq, time.Now().UnixNano()))
}

// last is the number of the last change made.
func (h *synthHub) last() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.seq
}

// stop ends the server, the hub and the cluster.
func (h *synthHub) stop() {
	if h.grpc != nil {
		h.grpc.Stop()
	}
	if h.addr != "" { // it served
		<-h.served
	}
	if h.hub != nil {
		h.hub.Close()
	}
	h.cleanups.run()
}

// cleanups is the testing.TB that informerhub/hubtest asks for, outside a
// test: hubtest only registers cleanups with it (its fake sources'
// shutdown), which run calls, the last registered first. Any other method
// would panic on the embedded nil TB.
type cleanups struct {
	testing.TB
	funcs []func()
}

func (c *cleanups) Helper()          {}
func (c *cleanups) Cleanup(f func()) { c.funcs = append(c.funcs, f) }

func (c *cleanups) run() {
	for i := len(c.funcs) - 1; i >= 0; i-- {
		c.funcs[i]()
	}
	c.funcs = nil
}
