package integration

import (
	"context"
	"crypto/tls"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/internal/testpki"
	"github.com/informerhub/informerhub/server"
	"github.com/informerhub/informerhub/server/auth"
)

// These tests use real identities: service account tokens issued by the API
// server, client certificates, and RBAC Roles and bindings.

// serviceAccountToken creates a service account and returns a token for it.
func serviceAccountToken(t *testing.T, ns, name string) string {
	t.Helper()
	if _, err := kube.CoreV1().ServiceAccounts(ns).Create(bgCtx(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := kube.CoreV1().ServiceAccounts(ns).CreateToken(bgCtx(), name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// grant lets subject list and watch resources in ns, and returns the name of
// the binding.
func grant(t *testing.T, ns string, subject rbacv1.Subject, resources ...string) string {
	t.Helper()
	name := "watch-" + subject.Name
	if _, err := kube.RbacV1().Roles(ns).Create(bgCtx(), &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: resources, Verbs: []string{"list", "watch"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bind(t, ns, name, subject)
	return name
}

func bind(t *testing.T, ns, role string, subject rbacv1.Subject) {
	t.Helper()
	if _, err := kube.RbacV1().RoleBindings(ns).Create(bgCtx(), &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role},
		Subjects:   []rbacv1.Subject{subject},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func serviceAccount(ns, name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}
}

// startAuthHub runs a hub that authenticates bearer tokens with TokenReview
// and authorizes with SubjectAccessReview, as --auth=kubernetes does.
func startAuthHub(t *testing.T, serverCfg server.Config, opts ...listenerOption) *hub {
	t.Helper()
	if serverCfg.Authenticator == nil {
		serverCfg.Authenticator = auth.NewTokenReview(kube.AuthenticationV1().TokenReviews(), auth.TokenReviewConfig{})
	}
	serverCfg.Authorizer = auth.NewSubjectAccessReview(kube.AuthorizationV1().SubjectAccessReviews(), auth.SubjectAccessReviewConfig{})
	return startHubWith(t, informerhub.Config{}, serverCfg, opts...)
}

// withBearer returns a context for a call that presents token (none if
// empty).
func withBearer(t *testing.T, token string) context.Context {
	ctx := ctxFor(t)
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	return ctx
}

// firstWatchResponse opens a Watch with initial events and returns its
// first response, or the error that ended it.
func firstWatchResponse(client informerhubv1.InformerHubServiceClient, ctx context.Context, sel *informerhubv1.ResourceSelector) (*informerhubv1.WatchResponse, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := client.Watch(ctx, &informerhubv1.WatchRequest{Selector: sel, SendInitialEvents: true})
	if err != nil {
		return nil, err
	}
	return stream.Recv()
}

func TestRBACDecidesWhatEachCallerSees(t *testing.T) {
	a, b := namespace(t), namespace(t)
	createConfigMap(t, a, "in-a", nil, "")
	createConfigMap(t, b, "in-b", nil, "")
	if _, err := kube.CoreV1().Secrets(a).Create(bgCtx(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	reader := serviceAccountToken(t, a, "reader")
	grant(t, a, serviceAccount(a, "reader"), "configmaps")
	nobody := serviceAccountToken(t, a, "nobody")
	admin := serviceAccountToken(t, a, "admin")
	if _, err := kube.RbacV1().ClusterRoleBindings().Create(bgCtx(), &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "hub-test-admin-" + a},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{serviceAccount(a, "admin")},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h := startAuthHub(t, server.Config{})
	cms := func(ns string) *informerhubv1.ResourceSelector {
		return &informerhubv1.ResourceSelector{Version: "v1", Resource: "configmaps", Namespace: ns}
	}

	tests := []struct {
		name   string
		token  string
		sel    *informerhubv1.ResourceSelector
		code   codes.Code
		detail string
	}{
		{"reader in its namespace", reader, cms(a), codes.OK, ""},
		{"reader in another namespace", reader, cms(b), codes.PermissionDenied, "list configmaps in namespace " + b},
		{"reader on secrets", reader, &informerhubv1.ResourceSelector{Version: "v1", Resource: "secrets", Namespace: a}, codes.PermissionDenied, "list secrets"},
		{"reader cluster-wide", reader, cms(""), codes.PermissionDenied, "list configmaps cluster-wide"},
		{"nobody", nobody, cms(a), codes.PermissionDenied, "list configmaps"},
		{"admin cluster-wide", admin, cms(""), codes.OK, ""},
		{"no token", "", cms(a), codes.Unauthenticated, "no credentials"},
		{"a forged token", "eyJhbGciOiJSUzI1NiJ9.e30.c2lnbmF0dXJl", cms(a), codes.Unauthenticated, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := firstWatchResponse(h.client, withBearer(t, tt.token), tt.sel)
			if status.Code(err) != tt.code {
				t.Fatalf("Watch: %v, want %v", err, tt.code)
			}
			if tt.code == codes.OK && resp.Type != informerhubv1.EventType_EVENT_TYPE_ADDED {
				t.Fatalf("first response %v, want an object", resp)
			}
			if st := status.Convert(err); tt.detail != "" && !strings.Contains(st.Message(), tt.detail) {
				t.Errorf("message %q does not say %q", st.Message(), tt.detail)
			}
			if tt.code == codes.PermissionDenied && errorInfo(t, err).Reason != "FORBIDDEN" {
				t.Errorf("ErrorInfo %v, want FORBIDDEN", errorInfo(t, err))
			}
			snap, err := h.client.Snapshot(withBearer(t, tt.token), &informerhubv1.SnapshotRequest{Selector: tt.sel})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := snap.Recv(); status.Code(err) != tt.code {
				t.Fatalf("Snapshot: %v, want %v", err, tt.code)
			}
		})
	}

	t.Run("ListResources", func(t *testing.T) {
		list := func(token, ns string) []string {
			t.Helper()
			resp, err := h.client.ListResources(withBearer(t, token), &informerhubv1.ListResourcesRequest{Namespace: ns})
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, r := range resp.Resources {
				if r.Group == "" {
					out = append(out, r.Resource)
				}
			}
			return out
		}
		if got := list(admin, ""); !slices.Contains(got, "configmaps") || !slices.Contains(got, "secrets") || !slices.Contains(got, "namespaces") {
			t.Errorf("admin sees %v", got)
		}
		if got := list(reader, a); !slices.Equal(got, []string{"configmaps"}) {
			t.Errorf("reader in its namespace sees %v, want only configmaps", got)
		}
		if got := list(reader, ""); len(got) != 0 {
			t.Errorf("reader cluster-wide sees %v, want nothing", got)
		}
		if got := list(nobody, a); len(got) != 0 {
			t.Errorf("nobody sees %v, want nothing", got)
		}

		// With include_forbidden, the rest too, by name only, marked.
		resp, err := h.client.ListResources(withBearer(t, reader), &informerhubv1.ListResourcesRequest{Namespace: a, IncludeForbidden: true})
		if err != nil {
			t.Fatal(err)
		}
		byName := map[string]*informerhubv1.Resource{}
		for _, r := range resp.Resources {
			if r.Group == "" {
				byName[r.Resource] = r
			}
		}
		cm, secrets := byName["configmaps"], byName["secrets"]
		switch {
		case cm == nil || cm.Forbidden || cm.SingularName != "configmap" || !slices.Equal(cm.ShortNames, []string{"cm"}):
			t.Errorf("configmaps, which reader may read in %s: %v", a, cm)
		case secrets == nil || !secrets.Forbidden || secrets.Kind != "Secret" || secrets.SingularName != "secret" || len(secrets.SelectableFields) != 0:
			t.Errorf("secrets, which reader may not read: %v, want it forbidden, by name only", secrets)
		case byName["namespaces"] != nil:
			t.Errorf("a cluster-scoped type in a namespace's list: %v", byName["namespaces"])
		}
	})
}

// TestRevokedAccessEndsARunningStream removes a RoleBinding while its
// subject watches: the stream ends with PERMISSION_DENIED and a resume token
// once the hub authorizes it again, and resumes exactly once access is back.
func TestRevokedAccessEndsARunningStream(t *testing.T) {
	a := namespace(t)
	createConfigMap(t, a, "before", nil, "")
	reader := serviceAccountToken(t, a, "reader")
	binding := grant(t, a, serviceAccount(a, "reader"), "configmaps")
	h := startAuthHub(t, server.Config{AuthzRecheckInterval: time.Second})

	stream, err := h.client.Watch(withBearer(t, reader), &informerhubv1.WatchRequest{Selector: watchSelector(a), SendInitialEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	r := readStream(stream.Recv)
	_, end := initialEvents(t, r)

	if err := kube.RbacV1().RoleBindings(a).Delete(bgCtx(), binding, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = r.end(t)
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("after the binding's removal the stream ended with %v, want PERMISSION_DENIED", err)
	}
	token := errorInfo(t, err).Metadata["resume_token"]
	if token != end.ResumeToken {
		t.Fatal("the status does not carry the token of the last response sent")
	}
	createConfigMap(t, a, "while-revoked", nil, "")
	if _, err := firstWatchResponse(h.client, withBearer(t, reader), watchSelector(a)); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a new watch without access: %v, want PERMISSION_DENIED", err)
	}

	bind(t, a, binding, serviceAccount(a, "reader"))
	// The API server's RBAC follows the binding within moments, and the hub
	// reuses a decision for at most the recheck interval. A client retries.
	var resumed *streamReader[informerhubv1.WatchResponse]
	eventually(t, "the regranted reader may watch again", func() bool {
		stream, err := h.client.Watch(withBearer(t, reader), &informerhubv1.WatchRequest{Selector: watchSelector(a), ResumeToken: token})
		if err != nil {
			t.Fatal(err)
		}
		if md, err := stream.Header(); err != nil || len(md.Get("resume-token")) == 0 {
			return false // denied: the stream ended without headers
		}
		resumed = readStream(stream.Recv)
		return true
	})
	createConfigMap(t, a, "marker", nil, "")
	if got := hubChangesUntil(t, resumed, "marker"); len(got) != 1 || got[0].Name != "while-revoked" {
		t.Fatalf("after resuming got %v, want exactly the change made while access was revoked", got)
	}
}

// TestDeletedServiceAccountEndsItsStreams: a recheck authenticates the
// caller again; the token of a deleted service account no longer passes a
// TokenReview, and the stream ends with UNAUTHENTICATED and its token.
func TestDeletedServiceAccountEndsItsStreams(t *testing.T) {
	a := namespace(t)
	createConfigMap(t, a, "x", nil, "")
	token := serviceAccountToken(t, a, "short-lived")
	grant(t, a, serviceAccount(a, "short-lived"), "configmaps")
	h := startAuthHub(t, server.Config{AuthzRecheckInterval: time.Second,
		Authenticator: auth.NewTokenReview(kube.AuthenticationV1().TokenReviews(), auth.TokenReviewConfig{CacheTTL: time.Second})})
	stream, err := h.client.Watch(withBearer(t, token), &informerhubv1.WatchRequest{Selector: watchSelector(a), SendInitialEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	r := readStream(stream.Recv)
	_, end := initialEvents(t, r)

	if err := kube.CoreV1().ServiceAccounts(a).Delete(bgCtx(), "short-lived", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = r.end(t)
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("after the service account's deletion the stream ended with %v, want UNAUTHENTICATED", err)
	}
	if info := errorInfo(t, err); info.Reason != "UNAUTHENTICATED" || info.Metadata["resume_token"] != end.ResumeToken {
		t.Fatalf("ErrorInfo %v, want the token of the last response sent", info)
	}
}

// TestMutualTLS serves with --auth=mtls: a client certificate signed by the
// client CA is the identity (CN the user, O the groups), which RBAC
// authorizes; without one, or with one from another CA, nothing connects.
// The same over native gRPC, and the Connect protocol and gRPC-Web over
// ALPN h2 and HTTP/1.1.
func TestMutualTLS(t *testing.T) {
	a := namespace(t)
	createConfigMap(t, a, "x", nil, "")
	grant(t, a, rbacv1.Subject{Kind: rbacv1.UserKind, Name: "carol"}, "configmaps")
	grant(t, a, rbacv1.Subject{Kind: rbacv1.GroupKind, Name: "auditors"}, "configmaps")
	ca, otherCA := testpki.NewCA(t, "test-ca"), testpki.NewCA(t, "other-ca")
	h := startAuthHub(t, server.Config{Authenticator: auth.ClientCertificate{}}, withTLS(&tls.Config{
		Certificates: []tls.Certificate{ca.Server(t)}, ClientCAs: ca.Pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12,
	}))
	clientTLS := func(certs []tls.Certificate) *tls.Config {
		return &tls.Config{RootCAs: ca.Pool, Certificates: certs, MinVersion: tls.VersionTLS12}
	}
	// Every protocol, with ALPN h2 and HTTP/1.1: the certificate reaches
	// authentication the same way on each.
	tlsProtocols := []struct {
		name string
		dial func(t *testing.T, certs []tls.Certificate) informerhubv1.InformerHubServiceClient
	}{
		{"grpc", func(t *testing.T, certs []tls.Certificate) informerhubv1.InformerHubServiceClient {
			conn, err := grpc.NewClient(h.addr, grpc.WithTransportCredentials(credentials.NewTLS(clientTLS(certs))))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			return informerhubv1.NewInformerHubServiceClient(conn)
		}},
		{"connect+proto/h2", func(t *testing.T, certs []tls.Certificate) informerhubv1.InformerHubServiceClient {
			return connectOverTLS(t, h.addr, clientTLS(certs), false)
		}},
		{"grpcweb+json/http1.1", func(t *testing.T, certs []tls.Certificate) informerhubv1.InformerHubServiceClient {
			return connectOverTLS(t, h.addr, clientTLS(certs), true, connect.WithGRPCWeb(), connect.WithProtoJSON())
		}},
	}
	tests := []struct {
		name string
		cert []tls.Certificate
		code codes.Code
	}{
		{"carol, bound as a user", []tls.Certificate{ca.Client(t, "carol")}, codes.OK},
		{"eve, bound through her group", []tls.Certificate{ca.Client(t, "eve", "auditors")}, codes.OK},
		{"dave, not bound", []tls.Certificate{ca.Client(t, "dave")}, codes.PermissionDenied},
		{"no certificate", nil, codes.Unavailable},
		{"carol, signed by another CA", []tls.Certificate{otherCA.Client(t, "carol")}, codes.Unavailable},
	}
	for _, tt := range tests {
		for _, p := range tlsProtocols {
			t.Run(tt.name+"/"+p.name, func(t *testing.T) {
				_, err := firstWatchResponse(p.dial(t, tt.cert), ctxFor(t), watchSelector(a))
				if status.Code(err) != tt.code {
					t.Fatalf("Watch: %v, want %v", err, tt.code)
				}
			})
		}
	}

	t.Run("hubctl", func(t *testing.T) {
		dir := t.TempDir()
		caFile := ca.WriteCA(t, dir, "ca.pem")
		hubctlAs := func(user string, args ...string) (stdout, stderr string, code int) {
			certFile, keyFile := testpki.WritePair(t, dir, user, ca.Client(t, user))
			return runHubctl(t, hubctl(t), append([]string{"--hub", h.addr, "--ca-file", caFile,
				"--cert-file", certFile, "--key-file", keyFile}, args...)...)
		}
		if stdout, stderr, code := hubctlAs("carol", "snapshot", "configmaps", "-n", a); code != 0 || !strings.Contains(stdout, "x ") {
			t.Errorf("carol: exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
		// hubctl resolves the name among every type the cluster serves, and
		// passes the hub's refusal on, which says why.
		if _, stderr, code := hubctlAs("dave", "snapshot", "configmaps", "-n", a); code != 1 || !strings.Contains(stderr, `PermissionDenied: user "dave" may not list configmaps in namespace `+a+`: its Kubernetes RBAC does not allow it`) {
			t.Errorf("dave: exit %d, stderr %q", code, stderr)
		}
		if _, stderr, code := hubctlAs("dave", "snapshot", "--version", "v1", "--resource", "configmaps", "-n", a); code != 1 || !strings.Contains(stderr, `"dave" may not list configmaps`) {
			t.Errorf("dave, naming the version: exit %d, stderr %q", code, stderr)
		}
	})
}

// authenticatedStreams is n Watch streams, stream i presenting token(i),
// each read until it ends.
type authenticatedStreams struct {
	// ended receives each stream that ended while the context was live:
	// its index and the error that ended it.
	ended chan streamEnd
	wg    sync.WaitGroup
}

type streamEnd struct {
	i   int
	err error
}

// openAuthenticatedStreams opens n streams of sel with initial events, and
// returns once each was admitted (or refused) and has read its first
// response. They run until ctx ends; wait waits for them then.
func openAuthenticatedStreams(ctx context.Context, client informerhubv1.InformerHubServiceClient, sel *informerhubv1.ResourceSelector, n int, token func(i int) string) *authenticatedStreams {
	s := &authenticatedStreams{ended: make(chan streamEnd, n)}
	opened := make(chan struct{}, n)
	for i := range n {
		s.wg.Go(func() {
			stream, err := client.Watch(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token(i)),
				&informerhubv1.WatchRequest{Selector: sel, SendInitialEvents: true})
			if err == nil {
				_, err = stream.Recv() // the first initial event: admitted
			}
			opened <- struct{}{}
			for err == nil {
				_, err = stream.Recv()
			}
			if ctx.Err() == nil {
				s.ended <- streamEnd{i: i, err: err}
			}
		})
	}
	for range n {
		<-opened
	}
	return s
}

// wait waits for the streams, once their context has ended, and returns
// those that ended before.
func (s *authenticatedStreams) wait() []streamEnd {
	s.wg.Wait()
	close(s.ended)
	var ended []streamEnd
	for e := range s.ended {
		ended = append(ended, e)
	}
	return ended
}
