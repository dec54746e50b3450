package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/internal/controlplane"
	"github.com/informerhub/informerhub/internal/testpki"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if cp != nil {
		if err := cp.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
			code = 1
		}
	}
	if code == 0 {
		if err := goleak.Find(
			goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
			goleak.IgnoreAnyFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
		); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

var (
	cpOnce sync.Once
	cp     *controlplane.ControlPlane
	cpErr  error
)

// kubeconfig starts the control plane the tests share (once) and returns a
// kubeconfig file for it.
func kubeconfig(t *testing.T) string {
	t.Helper()
	cpOnce.Do(func() { cp, cpErr = controlplane.Start() })
	if cpErr != nil {
		t.Fatal(cpErr)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, cp.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// serve runs the command with args against the shared control plane until
// the test ends, on a loopback port, and returns its address.
func serve(t *testing.T, args ...string) string {
	t.Helper()
	return serveWith(t, listeners{}, args...)
}

// serveWith is serve, with metrics and debug endpoints on lis's listeners
// of them, unless nil.
func serveWith(t *testing.T, lis listeners, args ...string) string {
	t.Helper()
	o, err := parseFlags(append([]string{"--kubeconfig", kubeconfig(t)}, args...))
	if err != nil {
		t.Fatal(err)
	}
	if lis.grpc, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	ctx, shutdown := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, o, slog.New(slog.DiscardHandler), lis) }()
	t.Cleanup(func() {
		shutdown()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	return lis.grpc.Addr().String()
}

func TestParseFlags(t *testing.T) {
	o, err := parseFlags([]string{"--listen", "127.0.0.1:9000", "--history-size", "5", "--bookmark-interval", "10s", "--log-level", "debug",
		"--max-concurrent-streams", "7", "--authz-recheck-interval", "30s", "--count-interval", "250ms"})
	if err != nil {
		t.Fatal(err)
	}
	if o.listen != "127.0.0.1:9000" || o.hub.HistorySize != 5 || o.hub.BookmarkInterval != 10*time.Second || o.logLevel != slog.LevelDebug ||
		o.server.MaxConcurrentStreams != 7 || o.server.AuthzRecheckInterval != 30*time.Second || o.auth != "kubernetes" ||
		o.hub.CountInterval != 250*time.Millisecond {
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
		// Each flag unlocks its own thing only.
		{[]string{"--auth=none", "--listen", ":8080", "--insecure-allow-remote-unauthenticated"}, false}, // still plaintext
		{[]string{"--auth=none", "--listen", ":8080", "--insecure-allow-remote-unauthenticated", "--insecure-allow-remote-plaintext"}, true},
		{[]string{"--auth=none", "--listen", ":8080", "--insecure-allow-remote-plaintext"}, false},
		{[]string{"--listen", ":8080", "--insecure-allow-remote-plaintext"}, true},
		{[]string{"--auth=none", "--listen", ":8080", "--tls-cert", "c", "--tls-key", "k", "--insecure-allow-remote-plaintext"}, false},
		{[]string{"--auth=none", "--listen", ":8080", "--tls-cert", "c", "--tls-key", "k", "--insecure-allow-remote-unauthenticated"}, true},
		{[]string{"--listen", ":8080"}, false}, // tokens in plaintext
		{[]string{"--listen", ":8080", "--tls-cert", "c", "--tls-key", "k"}, true},
		{[]string{"--auth=mtls", "--tls-cert", "c", "--tls-key", "k"}, false}, // no --client-ca
		{[]string{"--auth=mtls", "--tls-cert", "c", "--tls-key", "k", "--client-ca", "ca"}, true},
		{[]string{"--tls-cert", "c"}, false},
		{[]string{"--client-ca", "ca"}, false},
		{[]string{"--auth=mtls", "--token-audience", "hub", "--tls-cert", "c", "--tls-key", "k", "--client-ca", "ca"}, false},
		{[]string{"--auth=magic"}, false},
		{[]string{"--auth=none", "--cors-allowed-origins=*"}, false},
		{[]string{"--auth=none", "--cors-allowed-origins=https://*"}, false},
		{[]string{"--auth=none", "--cors-allowed-origins=http://localhost:3000,null"}, false},
		{[]string{"--auth=none", "--cors-allowed-origins=http://localhost:3000"}, true},
		{[]string{"--cors-allowed-origins=*"}, true},
	}
	for _, tt := range tests {
		_, err := parseFlags(tt.args)
		if (err == nil) != tt.ok {
			t.Errorf("parseFlags(%q): %v, want ok=%v", tt.args, err, tt.ok)
		}
	}
}

// TestServeAndShutDown runs the command against a real control plane: it
// reports SERVING once the API server answers, over gRPC and HTTP, serves
// reflection, and on
// shutdown ends open streams with UNAVAILABLE so clients resume elsewhere.
func TestServeAndShutDown(t *testing.T) {
	o, err := parseFlags([]string{"--kubeconfig", kubeconfig(t), "--auth=none"})
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
	go func() { done <- run(ctx, o, slog.New(slog.DiscardHandler), listeners{grpc: lis}) }()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	callCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	waitForHealth(t, callCtx, conn, healthpb.HealthCheckResponse_SERVING)

	// grpc.health.v1 over HTTP says what the same health.Server says.
	httpClient := &http.Client{}
	defer httpClient.CloseIdleConnections()
	healthURL := "http://" + lis.Addr().String()
	hubService := &healthpb.HealthCheckRequest{Service: "informerhub.v1.InformerHubService"}
	for _, opts := range [][]connect.ClientOption{{connect.WithProtoJSON()}, {connect.WithGRPCWeb()}} {
		check := connect.NewClient[healthpb.HealthCheckRequest, healthpb.HealthCheckResponse](httpClient, healthURL+healthpb.Health_Check_FullMethodName, opts...)
		resp, err := check.CallUnary(callCtx, connect.NewRequest(hubService))
		if err != nil || resp.Msg.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("Health.Check over HTTP: %v, %v; want SERVING", resp, err)
		}
		if _, err := check.CallUnary(callCtx, connect.NewRequest(&healthpb.HealthCheckRequest{Service: "nope"})); connect.CodeOf(err) != connect.CodeNotFound {
			t.Fatalf("Health.Check of an unknown service over HTTP: %v, want NOT_FOUND", err)
		}
	}
	healthCtx, stopHealth := context.WithCancel(callCtx)
	defer stopHealth()
	healthWatch, err := connect.NewClient[healthpb.HealthCheckRequest, healthpb.HealthCheckResponse](httpClient, healthURL+healthpb.Health_Watch_FullMethodName).
		CallServerStream(healthCtx, connect.NewRequest(hubService))
	if err != nil {
		t.Fatal(err)
	}
	if !healthWatch.Receive() || healthWatch.Msg().Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Health.Watch over HTTP: %v, %v; want SERVING", healthWatch.Msg(), healthWatch.Err())
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
	if !healthWatch.Receive() || healthWatch.Msg().Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("Health.Watch over HTTP after shutdown: %v, %v; want NOT_SERVING", healthWatch.Msg(), healthWatch.Err())
	}
	// It ends once the streams have drained, rather than hold the shutdown.
	if healthWatch.Receive() || connect.CodeOf(healthWatch.Err()) != connect.CodeUnavailable {
		t.Fatalf("Health.Watch over HTTP after the drain: %v, want UNAVAILABLE", healthWatch.Err())
	}
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

// TestRefusesANonLoopbackListener: the address bound decides, not the
// name given to --listen.
func TestRefusesANonLoopbackListener(t *testing.T) {
	o, err := parseFlags([]string{"--auth=none", "--listen", "localhost:0"})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", ":0") // what a "localhost" resolving elsewhere would give
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	if err := run(context.Background(), o, slog.New(slog.DiscardHandler), listeners{grpc: lis}); err == nil || !strings.Contains(err.Error(), "not loopback") {
		t.Fatalf("run: %v, want a refusal", err)
	}
}

// TestAuthenticationModes runs the command with each way of authenticating
// callers against the real control plane: what a caller may do follows its
// own identity and RBAC, through the command's own wiring of TLS, client
// CAs, TokenReviews and SubjectAccessReviews.
func TestAuthenticationModes(t *testing.T) {
	watchCode := func(t *testing.T, conn *grpc.ClientConn, ctx context.Context, namespace string) codes.Code {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		sel := &informerhubv1.ResourceSelector{Version: "v1", Resource: "configmaps", Namespace: namespace}
		stream, err := informerhubv1.NewInformerHubServiceClient(conn).Watch(ctx, &informerhubv1.WatchRequest{Selector: sel, SendInitialEvents: true})
		if err == nil {
			_, err = stream.Recv()
		}
		return status.Code(err)
	}

	t.Run("mtls", func(t *testing.T) {
		dir := t.TempDir()
		ca := testpki.NewCA(t, "test-ca")
		certFile, keyFile := testpki.WritePair(t, dir, "server", ca.Server(t))
		addr := serve(t, "--auth=mtls", "--tls-cert", certFile, "--tls-key", keyFile, "--client-ca", ca.WriteCA(t, dir, "ca.pem"))
		dial := func(certs ...tls.Certificate) *grpc.ClientConn {
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
				RootCAs: ca.Pool, Certificates: certs, MinVersion: tls.VersionTLS12})))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			return conn
		}
		for _, tt := range []struct {
			name  string
			certs []tls.Certificate
			want  codes.Code
		}{
			{"an administrator", []tls.Certificate{ca.Client(t, "root", "system:masters")}, codes.OK},
			{"a user RBAC does not know", []tls.Certificate{ca.Client(t, "mallory")}, codes.PermissionDenied},
			{"no certificate", nil, codes.Unavailable},
		} {
			if got := watchCode(t, dial(tt.certs...), context.Background(), "kube-system"); got != tt.want {
				t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
			}
		}
	})

	t.Run("kubernetes", func(t *testing.T) {
		kube, err := kubernetes.NewForConfig(cp.Config)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		ns, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "hub-client-"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kube.CoreV1().ServiceAccounts(ns.Name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "hub-client"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		token := func(audiences ...string) string {
			tr, err := kube.CoreV1().ServiceAccounts(ns.Name).CreateToken(ctx, "hub-client",
				&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{Audiences: audiences}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return tr.Status.Token
		}
		if _, err := kube.RbacV1().RoleBindings(ns.Name).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "hub-client-view"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:aggregate-to-view"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns.Name, Name: "hub-client"}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		addr := serve(t, "--token-audience", "informerhub")
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		bearer := func(token string) context.Context {
			return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
		}
		for _, tt := range []struct {
			name string
			ctx  context.Context
			want codes.Code
		}{
			{"a token for the hub", bearer(token("informerhub")), codes.OK},
			{"a token for the API server", bearer(token()), codes.Unauthenticated},
			{"no token", context.Background(), codes.Unauthenticated},
		} {
			// RBAC follows the new binding within moments.
			var got codes.Code
			for deadline := time.Now().Add(30 * time.Second); ; {
				if got = watchCode(t, conn, tt.ctx, ns.Name); got == tt.want || got != codes.PermissionDenied || time.Now().After(deadline) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if got != tt.want {
				t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
			}
		}
	})
}

// TestLoopbackHostsOnly: without authentication, the HTTP side answers
// requests for localhost and loopback addresses only, so that a page whose
// name an attacker rebinds to 127.0.0.1 reads nothing.
func TestLoopbackHostsOnly(t *testing.T) {
	h := loopbackHostsOnly(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	for host, ok := range map[string]bool{
		"localhost":          true,
		"LocalHost:8080":     true,
		"127.0.0.1:8080":     true,
		"127.1.2.3":          true,
		"[::1]:8080":         true,
		"evil.example:8080":  false,
		"evil.example":       false,
		"localhost.evil.com": false,
		"10.0.0.1:8080":      false,
		"[::2]:8080":         false,
		"":                   false,
	} {
		req := httptest.NewRequest(http.MethodPost, "/informerhub.v1.InformerHubService/ListResources", nil)
		req.Host = host
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if got := rec.Code == http.StatusOK; got != ok {
			t.Errorf("Host %q: %d, want answered %v", host, rec.Code, ok)
		}
	}
}
