package main

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/internal/controlplane"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
	)
}

func TestParseFlags(t *testing.T) {
	o, err := parseFlags([]string{"--listen", "127.0.0.1:9000", "--history-size", "5", "--bookmark-interval", "10s", "--log-level", "debug",
		"--max-concurrent-streams", "7", "--authz-recheck-interval", "30s"})
	if err != nil {
		t.Fatal(err)
	}
	if o.listen != "127.0.0.1:9000" || o.hub.HistorySize != 5 || o.hub.BookmarkInterval != 10*time.Second || o.logLevel != slog.LevelDebug ||
		o.server.MaxConcurrentStreams != 7 || o.server.AuthzRecheckInterval != 30*time.Second || o.auth != "kubernetes" {
		t.Errorf("parsed %+v", o)
	}
	for _, bad := range [][]string{{"--log-format", "xml"}, {"extra"}, {"--history-size", "x"}} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("parseFlags(%q) succeeded", bad)
		}
	}
}

// TestRefusesToExposeTheCluster: without authentication, or with bearer
// tokens in plaintext, the hub serves only loopback unless told otherwise.
func TestRefusesToExposeTheCluster(t *testing.T) {
	tests := []struct {
		args []string
		ok   bool
	}{
		{[]string{"--auth=none"}, true}, // the default --listen is loopback
		{[]string{"--auth=none", "--listen", "localhost:8080"}, true},
		{[]string{"--auth=none", "--listen", "[::1]:8080"}, true},
		{[]string{"--auth=none", "--listen", ":8080"}, false},
		{[]string{"--auth=none", "--listen", "0.0.0.0:8080"}, false},
		{[]string{"--auth=none", "--listen", ":8080", "--insecure-allow-remote"}, true},
		{[]string{"--listen", ":8080"}, false}, // tokens in plaintext
		{[]string{"--listen", ":8080", "--tls-cert", "c", "--tls-key", "k"}, true},
		{[]string{"--auth=mtls", "--tls-cert", "c", "--tls-key", "k"}, false}, // no --client-ca
		{[]string{"--auth=mtls", "--tls-cert", "c", "--tls-key", "k", "--client-ca", "ca"}, true},
		{[]string{"--tls-cert", "c"}, false},
		{[]string{"--client-ca", "ca"}, false},
		{[]string{"--auth=mtls", "--token-audience", "hub", "--tls-cert", "c", "--tls-key", "k", "--client-ca", "ca"}, false},
		{[]string{"--auth=magic"}, false},
	}
	for _, tt := range tests {
		_, err := parseFlags(tt.args)
		if (err == nil) != tt.ok {
			t.Errorf("parseFlags(%q): %v, want ok=%v", tt.args, err, tt.ok)
		}
	}
}

// TestServeAndShutDown runs the command against a real control plane: it
// reports SERVING once the API server answers, serves reflection, and on
// shutdown ends open streams with UNAVAILABLE so clients resume elsewhere.
func TestServeAndShutDown(t *testing.T) {
	cp, err := controlplane.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := cp.Stop(); err != nil {
			t.Error(err)
		}
	}()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, cp.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	o, err := parseFlags([]string{"--kubeconfig", kubeconfig, "--auth=none"})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, shutdown := context.WithCancel(context.Background())
	defer shutdown()
	done := make(chan error, 1)
	go func() { done <- run(ctx, o, slog.New(slog.DiscardHandler), lis) }()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	callCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	health, err := healthpb.NewHealthClient(conn).Watch(callCtx, &healthpb.HealthCheckRequest{Service: "informerhub.v1.InformerHubService"})
	if err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := health.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status == healthpb.HealthCheckResponse_SERVING {
			break
		}
	}

	reflection, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(callCtx)
	if err != nil {
		t.Fatal(err)
	}
	if err := reflection.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := reflection.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var services []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		services = append(services, s.Name)
	}
	for _, want := range []string{"informerhub.v1.InformerHubService", "grpc.health.v1.Health"} {
		if !slices.Contains(services, want) {
			t.Errorf("reflection lists %v, not %s", services, want)
		}
	}
	_ = reflection.CloseSend()

	watch, err := informerhubv1.NewInformerHubServiceClient(conn).Watch(callCtx, &informerhubv1.WatchRequest{
		Selector: &informerhubv1.ResourceSelector{Version: "v1", Resource: "configmaps"}, SendInitialEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := watch.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if resp.InitialEventsEnd {
			break
		}
	}

	shutdown() // what SIGTERM does
	if _, err := watch.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("open stream ended with %v, want UNAVAILABLE", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("run did not return after shutdown")
	}
}
