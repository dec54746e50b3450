package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	dto "github.com/prometheus/client_model/go"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/gen/informerhub/v1/informerhubv1connect"
	"github.com/informerhub/informerhub/informerhub"
)

// TestMetricsAndProbes: --metrics-listen serves the probes and the metrics
// of what the hub does, against a real API server.
func TestMetricsAndProbes(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + lis.Addr().String()
	addr := serveWith(t, listeners{metrics: lis}, "--auth=none")
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	waitForHealth(t, ctx, conn, healthpb.HealthCheckResponse_SERVING)
	// Health and /readyz say the same, from one state.
	if code, body := get(t, base+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz: %d %s while health says SERVING", code, body)
	}
	if code, body := get(t, base+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz: %d %s", code, body)
	}

	kube := kubernetes.NewForConfigOrDie(cp.Config)
	created, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "metrics-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns := created.Name
	client := informerhubv1.NewInformerHubServiceClient(conn)
	sel := &informerhubv1.ResourceSelector{Version: "v1", Resource: "configmaps", Namespace: ns}
	watch, err := client.Watch(ctx, &informerhubv1.WatchRequest{Selector: sel, SendInitialEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	for resp, err := watch.Recv(); !resp.GetInitialEventsEnd(); resp, err = watch.Recv() {
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if resp, err := watch.Recv(); err != nil || resp.Type != informerhubv1.EventType_EVENT_TYPE_ADDED {
		t.Fatalf("watch: %v %v", resp, err)
	}
	snap, err := client.Snapshot(ctx, &informerhubv1.SnapshotRequest{Selector: sel})
	if err != nil {
		t.Fatal(err)
	}
	// Read to the end of the stream: its handler has returned, and
	// released the snapshot.
	for _, err := snap.Recv(); err != io.EOF; _, err = snap.Recv() {
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := client.ListResources(ctx, &informerhubv1.ListResourcesRequest{}); err != nil {
		t.Fatal(err)
	}
	// The same call over the Connect protocol and gRPC-Web counts apart.
	httpClient := &http.Client{}
	defer httpClient.CloseIdleConnections()
	for _, opts := range [][]connect.ClientOption{nil, {connect.WithGRPCWeb()}} {
		c := informerhubv1connect.NewInformerHubServiceClient(httpClient, "http://"+addr, opts...)
		if _, err := c.ListResources(ctx, connect.NewRequest(&informerhubv1.ListResourcesRequest{})); err != nil {
			t.Fatal(err)
		}
	}

	code, body := get(t, base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	configMaps := map[string]string{"group": "", "version": "v1", "resource": "configmaps"}
	for _, c := range []struct {
		name   string
		labels map[string]string
		check  func(float64) bool
		want   string
	}{
		{"informerhub_informers_active", nil, eq(1), "1"},
		{"informerhub_subscribers", configMaps, eq(1), "1 (the watch; the snapshot has ended)"},
		{"informerhub_events_received_total", configMaps, atLeast(1), "at least 1"},
		{"informerhub_events_sent_total", configMaps, atLeast(2), "at least 2 (the bookmark ending initial events, and the change)"},
		{"informerhub_subscriber_queue_depth_max", configMaps, atLeast(0), "reported"},
		{"informerhub_history_oldest_age_seconds", configMaps, atLeast(0), "reported"},
		{"informerhub_snapshot_duration_seconds", configMaps, eq(1), "1 observation"},
		{"informerhub_memory_bytes", map[string]string{"kind": "history"}, atLeast(1), "the change, counted"},
		{"informerhub_memory_bytes", map[string]string{"kind": "queues"}, atLeast(1), "the live watch's queue, counted"},
		{"informerhub_memory_bytes", map[string]string{"kind": "state"}, atLeast(1), "the cached ConfigMaps, counted"},
		{"informerhub_memory_budget_bytes", nil, eq(1 << 30), "the default, 1 GiB"},
		{"informerhub_memory_over_budget_total", nil, eq(0), "0: within the budget"},
		{"informerhub_ready", nil, eq(1), "1, as /readyz says"},
		{"informerhub_authentications_total", map[string]string{"check": "call", "result": "accepted"}, atLeast(5), "at least the 5 calls"},
		{"informerhub_authentications_total", map[string]string{"check": "call", "result": "rejected"}, eq(0), "0"},
		{"informerhub_token_reviews_refused_total", map[string]string{"limit": "client_address"}, eq(0), "0"},
		{"informerhub_authorizations_total", map[string]string{"check": "call", "result": "allowed"}, atLeast(2), "at least the watch's and the snapshot's"},
		{"informerhub_authorizations_total", map[string]string{"check": "call", "result": "denied"}, eq(0), "0"},
		{"informerhub_build_info", map[string]string{"version": "dev"}, eq(1), "1"},
		{"grpc_server_handled_total", map[string]string{"grpc_method": "ListResources", "grpc_code": "OK", "protocol": "grpc"}, eq(1), "1"},
		{"grpc_server_handled_total", map[string]string{"grpc_method": "ListResources", "grpc_code": "OK", "protocol": "connect"}, eq(1), "1"},
		{"grpc_server_handled_total", map[string]string{"grpc_method": "ListResources", "grpc_code": "OK", "protocol": "grpcweb"}, eq(1), "1"},
		{"grpc_server_handling_seconds", map[string]string{"grpc_method": "ListResources", "protocol": "connect"}, eq(1), "1 observation"},
		{"grpc_server_started_total", map[string]string{"grpc_method": "Watch", "protocol": "grpc"}, eq(1), "1"},
		// Counted once a send returns: the second may not have been yet,
		// the first has (a stream's sends follow one another).
		{"grpc_server_msg_sent_total", map[string]string{"grpc_method": "Watch", "protocol": "grpc"}, atLeast(1), "at least 1"},
	} {
		v, ok := find(families[c.name], c.labels)
		if !ok || !c.check(v) {
			t.Errorf("%s%v = %v (found %v), want %s", c.name, c.labels, v, ok, c.want)
		}
	}
}

func eq(want float64) func(float64) bool      { return func(v float64) bool { return v == want } }
func atLeast(want float64) func(float64) bool { return func(v float64) bool { return v >= want } }

// find returns the value of the metric of f whose labels include labels: a
// counter's or gauge's value, a histogram's count.
func find(f *dto.MetricFamily, labels map[string]string) (float64, bool) {
	for _, m := range f.GetMetric() {
		matches := 0
		for _, l := range m.GetLabel() {
			if want, ok := labels[l.GetName()]; ok && want == l.GetValue() {
				matches++
			}
		}
		if matches != len(labels) {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

func waitForHealth(t *testing.T, ctx context.Context, conn *grpc.ClientConn, want healthpb.HealthCheckResponse_ServingStatus) {
	t.Helper()
	stream, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{Service: "informerhub.v1.InformerHubService"})
	if err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("waiting for %v: %v", want, err)
		}
		if resp.Status == want {
			return
		}
	}
}

// TestReadinessFollowsTheAPIServer: the hub is ready while the API server
// answers, not ready after apiServerFailureThreshold failed checks in a
// row, ready again when it answers, and unready for good once shutting
// down; gRPC health and /readyz agree throughout.
func TestReadinessFollowsTheAPIServer(t *testing.T) {
	var failing atomic.Bool
	apiServer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/version" || failing.Load() {
			http.Error(w, "unavailable", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, `{"gitVersion":"v1.37.1"}`)
	}))
	defer apiServer.Close()

	healthServer := health.NewServer()
	ready := newReadiness(healthServer)
	updates := make(chan healthpb.HealthCheckResponse_ServingStatus, 100)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		_ = healthServer.Watch(&healthpb.HealthCheckRequest{}, &healthUpdates{ctx: ctx, ch: updates})
	}()
	checkDone := make(chan struct{})
	go func() {
		defer close(checkDone)
		checkAPIServer(ctx, &rest.Config{Host: apiServer.URL}, time.Millisecond, ready, slog.New(slog.DiscardHandler))
	}()
	defer func() {
		cancel()
		<-checkDone
		<-watchDone
	}()

	expect := func(want healthpb.HealthCheckResponse_ServingStatus, readyz int) {
		t.Helper()
		// The bound turns a bug into a failure, not a hang.
		timeout := time.After(30 * time.Second)
		for got := healthpb.HealthCheckResponse_UNKNOWN; got != want; {
			select {
			case got = <-updates:
			case <-timeout:
				t.Fatalf("health never said %v", want)
			}
		}
		rec := httptest.NewRecorder()
		ready.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		if rec.Code != readyz {
			t.Fatalf("/readyz %d (%s) while health says %v, want %d", rec.Code, rec.Body, want, readyz)
		}
		// And informerhub_ready, which alerts read, says the same.
		metric := 0.0
		if readyz == http.StatusOK {
			metric = 1
		}
		if got := testutil.ToFloat64(ready.collector()); got != metric {
			t.Fatalf("informerhub_ready %v while /readyz says %d, want %v", got, readyz, metric)
		}
	}
	expect(healthpb.HealthCheckResponse_NOT_SERVING, http.StatusServiceUnavailable) // not serving gRPC yet
	ready.setServing()
	expect(healthpb.HealthCheckResponse_SERVING, http.StatusOK)
	failing.Store(true)
	expect(healthpb.HealthCheckResponse_NOT_SERVING, http.StatusServiceUnavailable)
	failing.Store(false)
	expect(healthpb.HealthCheckResponse_SERVING, http.StatusOK)
	ready.shutDown()
	expect(healthpb.HealthCheckResponse_NOT_SERVING, http.StatusServiceUnavailable)
	if _, why := ready.ready(); why != "shutting down" {
		t.Fatalf("after shutdown, not ready because %q", why)
	}
}

// healthUpdates is the stream of a health Watch, delivering its statuses
// to a channel.
type healthUpdates struct {
	grpc.ServerStream
	ctx context.Context
	ch  chan healthpb.HealthCheckResponse_ServingStatus
}

func (h *healthUpdates) Context() context.Context { return h.ctx }
func (h *healthUpdates) Send(resp *healthpb.HealthCheckResponse) error {
	select {
	case h.ch <- resp.Status:
		return nil
	case <-h.ctx.Done():
		return h.ctx.Err()
	}
}

func TestVersion(t *testing.T) {
	o, err := parseFlags([]string{"--version"})
	if err != nil || !o.printVersion {
		t.Fatalf("--version: %+v %v", o, err)
	}
	if _, err := parseFlags([]string{"--version", "--auth=bogus"}); err == nil {
		t.Fatal("--version with an invalid flag: no error, want the flag checked")
	}
	if v := versionString(); !strings.HasPrefix(v, "informerhub dev (revision ") {
		t.Fatalf("version %q", v)
	}
}

// TestReadinessFollowsStaleFeeds: while an informer's lists and watches
// have been failing for staleAfter, the hub is not ready, and says which;
// once it delivers again, it is ready.
func TestReadinessFollowsStaleFeeds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newReadiness(health.NewServer())
		r.setServing()
		r.setAPIServer(nil)
		var failingSince atomic.Pointer[time.Time]
		failingSince.Store(&time.Time{})
		stats := func() []informerhub.ResourceStats {
			return []informerhub.ResourceStats{{Resource: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"},
				InformerActive: true, UpstreamFailingSince: *failingSince.Load()}}
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go checkFeeds(ctx, stats, time.Second, time.Minute, r, slog.New(slog.DiscardHandler))
		synctest.Wait()
		if ok, why := r.ready(); !ok {
			t.Fatalf("not ready with a healthy informer: %s", why)
		}
		// readyAfter reports readiness once the next check has seen the
		// informer failing since since (zero: not failing).
		readyAfter := func(since time.Time) (bool, string) {
			failingSince.Store(&since)
			time.Sleep(time.Second) // one check interval, on synctest's clock
			synctest.Wait()
			return r.ready()
		}
		if ok, why := readyAfter(time.Now().Add(-30 * time.Second)); !ok {
			t.Fatalf("not ready with an informer failing for 30s, less than staleAfter: %s", why)
		}
		if ok, why := readyAfter(time.Now().Add(-2 * time.Minute)); ok || !strings.Contains(why, "configmaps.v1") {
			t.Fatalf("ready %v (%s) with an informer failing for 2m, want not ready, naming it", ok, why)
		}
		if ok, why := readyAfter(time.Time{}); !ok {
			t.Fatalf("not ready once the informer delivers again: %s", why)
		}
	})
}
