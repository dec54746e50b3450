package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/informerhub/hubtest"
	"github.com/informerhub/informerhub/server/auth"
)

// nameAuthenticator takes "authorization: Bearer <name>" as user <name>,
// unless the name was rejected. It cannot tell who "unreachable" is.
type nameAuthenticator struct {
	rejected sync.Map // name -> true
}

func (a *nameAuthenticator) Authenticate(ctx context.Context) (auth.User, error) {
	values := metadata.ValueFromIncomingContext(ctx, "authorization")
	if len(values) != 1 || !strings.HasPrefix(values[0], "Bearer ") {
		return auth.User{}, fmt.Errorf("%w: no token", auth.ErrUnauthenticated)
	}
	name := strings.TrimPrefix(values[0], "Bearer ")
	if name == "panic-authn" {
		panic("the authenticator broke")
	}
	switch _, rejected := a.rejected.Load(name); {
	case rejected:
		return auth.User{}, fmt.Errorf("%w: the token has expired", auth.ErrUnauthenticated)
	case name == "unreachable":
		return auth.User{}, errors.New("dial tcp: connection refused")
	}
	return auth.User{Name: name}, nil
}

// tableAuthorizer allows what its table says: user -> namespaces ("*" is
// cluster-wide). "panic" makes it panic; for "unreachable" it cannot tell.
type tableAuthorizer struct {
	mu      sync.Mutex // guards allowed
	allowed map[string][]string
}

func (a *tableAuthorizer) Authorize(_ context.Context, user auth.User, attrs auth.Attributes, _ time.Duration) (bool, error) {
	switch user.Name {
	case "panic":
		panic("the authorizer broke")
	case "unreachable-authz":
		return false, errors.New("dial tcp: connection refused")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, ns := range a.allowed[user.Name] {
		if ns == "*" || (ns == attrs.Namespace && attrs.Namespace != "") {
			return true, nil
		}
	}
	return false, nil
}

func (a *tableAuthorizer) set(user string, namespaces ...string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.allowed[user] = namespaces
}

// serveWithAuth serves hub with cfg (plus the fake authentication), health
// and reflection, and returns a connection to it.
func serveWithAuth(t *testing.T, hub *informerhub.Hub, cfg Config) *grpc.ClientConn {
	t.Helper()
	if cfg.Authenticator == nil {
		cfg.Authenticator = &nameAuthenticator{}
	}
	cfg.Logger = discard
	return dial(t, hub, cfg)
}

func as(user string) context.Context {
	ctx := context.Background()
	if user != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+user)
	}
	return ctx
}

func firstResponse(t *testing.T, client informerhubv1.InformerHubServiceClient, ctx context.Context, req *informerhubv1.WatchRequest) (*informerhubv1.WatchResponse, error) {
	t.Helper()
	stream, err := client.Watch(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	return stream.Recv()
}

func errorInfoOf(err error) *errdetails.ErrorInfo {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info
		}
	}
	return nil
}

var (
	cmSelector = &informerhubv1.ResourceSelector{Version: "v1", Resource: "configmaps", Namespace: "a"}
	cmInitial  = &informerhubv1.WatchRequest{Selector: cmSelector, SendInitialEvents: true}
)

func TestCallersMustAuthenticateExceptForHealthAndReflection(t *testing.T) {
	cluster := hubtest.NewCluster(t)
	conn := serveWithAuth(t, informerhub.New(informerhub.Config{Logger: discard}, cluster, cluster), Config{Authorizer: &tableAuthorizer{allowed: map[string][]string{"alice": {"*"}}}})
	client := informerhubv1.NewInformerHubServiceClient(conn)

	if _, err := firstResponse(t, client, as(""), cmInitial); status.Code(err) != codes.Unauthenticated {
		t.Errorf("Watch without credentials: %v", err)
	}
	snap, err := client.Snapshot(as(""), &informerhubv1.SnapshotRequest{Selector: cmSelector})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := snap.Recv(); status.Code(err) != codes.Unauthenticated {
		t.Errorf("Snapshot without credentials: %v", err)
	}
	if _, err := client.ListResources(as(""), &informerhubv1.ListResourcesRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("ListResources without credentials: %v", err)
	}
	if resp, err := firstResponse(t, client, as("alice"), cmInitial); err != nil || !resp.InitialEventsEnd {
		t.Errorf("Watch with credentials: %v %v", resp, err)
	}

	if _, err := healthpb.NewHealthClient(conn).Check(as(""), &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("health check without credentials: %v", err)
	}
	refl, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(as(""))
	if err != nil {
		t.Fatal(err)
	}
	if err := refl.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	if _, err := refl.Recv(); err != nil {
		t.Errorf("reflection without credentials: %v", err)
	}
	_ = refl.CloseSend()
}

func TestWatchAndSnapshotAreAuthorized(t *testing.T) {
	cluster := hubtest.NewCluster(t)
	authz := &tableAuthorizer{allowed: map[string][]string{"alice": {"a"}}}
	conn := serveWithAuth(t, informerhub.New(informerhub.Config{Logger: discard}, cluster, cluster), Config{Authorizer: authz})
	client := informerhubv1.NewInformerHubServiceClient(conn)

	if resp, err := firstResponse(t, client, as("alice"), cmInitial); err != nil || !resp.InitialEventsEnd {
		t.Fatalf("alice in namespace a: %v %v", resp, err)
	}
	for name, sel := range map[string]*informerhubv1.ResourceSelector{
		"another namespace": {Version: "v1", Resource: "configmaps", Namespace: "b"},
		"all namespaces":    {Version: "v1", Resource: "configmaps"},
	} {
		_, err := firstResponse(t, client, as("alice"), &informerhubv1.WatchRequest{Selector: sel})
		if status.Code(err) != codes.PermissionDenied {
			t.Fatalf("%s: %v, want PERMISSION_DENIED", name, err)
		}
		info := errorInfoOf(err)
		if info == nil || info.Reason != ReasonForbidden || info.Metadata["user"] != "alice" || info.Metadata["verb"] != "list" ||
			info.Metadata["resource"] != "configmaps" || info.Metadata["namespace"] != sel.Namespace {
			t.Fatalf("%s: ErrorInfo %v does not name the user, verb, resource and namespace", name, info)
		}
		snap, err := client.Snapshot(as("alice"), &informerhubv1.SnapshotRequest{Selector: sel})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := snap.Recv(); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("Snapshot in %s: %v, want PERMISSION_DENIED", name, err)
		}
	}
}

// countingAuthorizer counts the questions it is asked, and allows all.
type countingAuthorizer struct{ asked atomic.Int64 }

func (a *countingAuthorizer) Authorize(context.Context, auth.User, auth.Attributes, time.Duration) (bool, error) {
	a.asked.Add(1)
	return true, nil
}

// TestMalformedSelectorsAreRefusedBeforeAnyReview: names that cannot be
// names and selectors past the hub's limits are INVALID_ARGUMENT on their
// field, without one authorization question (each would be a
// SubjectAccessReview and a cache key of the attacker's size).
func TestMalformedSelectorsAreRefusedBeforeAnyReview(t *testing.T) {
	cluster := hubtest.NewCluster(t)
	authz := &countingAuthorizer{}
	conn := serveWithAuth(t, informerhub.New(informerhub.Config{Logger: discard}, cluster, cluster), Config{Authorizer: authz})
	client := informerhubv1.NewInformerHubServiceClient(conn)
	huge := strings.Repeat("a", 60<<10)
	for name, tt := range map[string]struct {
		sel   *informerhubv1.ResourceSelector
		field string
	}{
		"60 KiB resource":       {&informerhubv1.ResourceSelector{Version: "v1", Resource: huge}, "selector.resource"},
		"resource with a slash": {&informerhubv1.ResourceSelector{Version: "v1", Resource: "configmaps/../secrets"}, "selector.resource"},
		"60 KiB group":          {&informerhubv1.ResourceSelector{Group: huge, Version: "v1", Resource: "configmaps"}, "selector.group"},
		"bad version":           {&informerhubv1.ResourceSelector{Version: "V1!", Resource: "configmaps"}, "selector.version"},
		"60 KiB namespace":      {&informerhubv1.ResourceSelector{Version: "v1", Resource: "configmaps", Namespace: huge}, "selector.namespace"},
		"namespace not a name":  {&informerhubv1.ResourceSelector{Version: "v1", Resource: "configmaps", Namespace: "A_B"}, "selector.namespace"},
		"long label selector":   {&informerhubv1.ResourceSelector{Version: "v1", Resource: "configmaps", LabelSelector: huge}, "selector.label_selector"},
		"long field selector":   {&informerhubv1.ResourceSelector{Version: "v1", Resource: "configmaps", FieldSelector: huge}, "selector.field_selector"},
		"long filter":           {&informerhubv1.ResourceSelector{Version: "v1", Resource: "configmaps", Filter: huge}, "selector.filter"},
	} {
		_, err := firstResponse(t, client, as("alice"), &informerhubv1.WatchRequest{Selector: tt.sel})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(fieldViolationsOf(err), tt.field) {
			t.Errorf("%s: %v, want INVALID_ARGUMENT on %s", name, err, tt.field)
		}
		snap, err := client.Snapshot(as("alice"), &informerhubv1.SnapshotRequest{Selector: tt.sel})
		if err == nil {
			_, err = snap.Recv()
		}
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("Snapshot with %s: %v, want INVALID_ARGUMENT", name, err)
		}
		if len(status.Convert(err).Message()) > 1024 {
			t.Errorf("%s: a message of %d bytes repeats the input", name, len(status.Convert(err).Message()))
		}
	}
	if n := authz.asked.Load(); n != 0 {
		t.Fatalf("the authorizer was asked %d questions, want none", n)
	}
}

// TestListResourcesAsksOnceForACallerAllowedEverything: a caller whose
// RBAC allows every resource costs ListResources two questions (list and
// watch of "*"), not two per resource type.
func TestListResourcesAsksOnceForACallerAllowedEverything(t *testing.T) {
	cluster := hubtest.NewCluster(t)
	authz := &countingAuthorizer{}
	conn := serveWithAuth(t, informerhub.New(informerhub.Config{Logger: discard}, cluster, cluster), Config{Authorizer: authz})
	resp, err := informerhubv1.NewInformerHubServiceClient(conn).ListResources(as("root"), &informerhubv1.ListResourcesRequest{Namespace: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Resources) < 2 || authz.asked.Load() != 2 {
		t.Fatalf("%d resource types listed after %d questions, want them all after 2", len(resp.Resources), authz.asked.Load())
	}
}

// fieldViolationsOf lists the fields of err's BadRequest.
func fieldViolationsOf(err error) string {
	var fields []string
	for _, d := range status.Convert(err).Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				fields = append(fields, v.GetField())
			}
		}
	}
	return strings.Join(fields, ",")
}

func TestRevokedAccessEndsARunningWatch(t *testing.T) {
	cluster := hubtest.NewCluster(t)
	authz := &tableAuthorizer{allowed: map[string][]string{"alice": {"a"}}}
	conn := serveWithAuth(t, informerhub.New(informerhub.Config{Logger: discard}, cluster, cluster),
		Config{Authorizer: authz, AuthzRecheckInterval: 20 * time.Millisecond})
	client := informerhubv1.NewInformerHubServiceClient(conn)
	stream, err := client.Watch(as("alice"), cmInitial)
	if err != nil {
		t.Fatal(err)
	}
	end, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	authz.set("alice")
	_, err = stream.Recv()
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("after revocation the stream ended with %v, want PERMISSION_DENIED", err)
	}
	if info := errorInfoOf(err); info == nil || info.Metadata["resume_token"] != end.ResumeToken {
		t.Fatalf("ErrorInfo %v does not carry the token of the last response sent", info)
	}
}

// TestRejectedCredentialsEndARunningWatch: a recheck authenticates the
// caller again; credentials no longer accepted end the stream with
// UNAUTHENTICATED and the token to resume from.
func TestRejectedCredentialsEndARunningWatch(t *testing.T) {
	cluster := hubtest.NewCluster(t)
	authn := &nameAuthenticator{}
	conn := serveWithAuth(t, informerhub.New(informerhub.Config{Logger: discard}, cluster, cluster),
		Config{Authenticator: authn, Authorizer: &tableAuthorizer{allowed: map[string][]string{"alice": {"a"}}}, AuthzRecheckInterval: 20 * time.Millisecond})
	client := informerhubv1.NewInformerHubServiceClient(conn)
	stream, err := client.Watch(as("alice"), cmInitial)
	if err != nil {
		t.Fatal(err)
	}
	end, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	authn.rejected.Store("alice", true)
	_, err = stream.Recv()
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(status.Convert(err).Message(), "has expired") {
		t.Fatalf("after the token's rejection the stream ended with %v, want UNAUTHENTICATED saying why", err)
	}
	if info := errorInfoOf(err); info.GetReason() != ReasonUnauthenticated || info.GetMetadata()["resume_token"] != end.ResumeToken {
		t.Fatalf("ErrorInfo %v does not carry the token of the last response sent", info)
	}
}

// TestAnAPIServerThatCannotAnswerIsUnavailable: when the hub cannot check
// credentials or access, calls get UNAVAILABLE (retry), not INTERNAL.
func TestAnAPIServerThatCannotAnswerIsUnavailable(t *testing.T) {
	cluster := hubtest.NewCluster(t)
	conn := serveWithAuth(t, informerhub.New(informerhub.Config{Logger: discard}, cluster, cluster),
		Config{Authorizer: &tableAuthorizer{allowed: map[string][]string{}}})
	client := informerhubv1.NewInformerHubServiceClient(conn)
	for _, user := range []string{"unreachable", "unreachable-authz"} {
		_, err := firstResponse(t, client, as(user), cmInitial)
		if status.Code(err) != codes.Unavailable || errorInfoOf(err).GetReason() != ReasonUpstreamUnavailable || strings.Contains(err.Error(), "refused") {
			t.Errorf("Watch as %s: %v, want UNAVAILABLE without the cause", user, err)
		}
		if _, err := client.ListResources(as(user), &informerhubv1.ListResourcesRequest{}); status.Code(err) != codes.Unavailable {
			t.Errorf("ListResources as %s: %v, want UNAVAILABLE", user, err)
		}
	}
}

func TestListResourcesShowsWhatTheCallerMayWatch(t *testing.T) {
	cluster := hubtest.NewCluster(t)
	authz := &tableAuthorizer{allowed: map[string][]string{"admin": {"*"}, "alice": {"a"}}}
	conn := serveWithAuth(t, informerhub.New(informerhub.Config{Logger: discard}, cluster, cluster), Config{Authorizer: authz})
	client := informerhubv1.NewInformerHubServiceClient(conn)
	names := func(user, namespace string) []string {
		t.Helper()
		resp, err := client.ListResources(as(user), &informerhubv1.ListResourcesRequest{Namespace: namespace})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range resp.Resources {
			out = append(out, r.Resource)
		}
		return out
	}
	for _, tt := range []struct {
		user, namespace string
		want            string
	}{
		{"admin", "", "configmaps namespaces pods"},
		{"admin", "a", "configmaps pods"}, // in a namespace, only namespaced types
		{"alice", "a", "configmaps pods"},
		{"alice", "", ""},
		{"nobody", "a", ""},
	} {
		if got := strings.Join(names(tt.user, tt.namespace), " "); got != tt.want {
			t.Errorf("ListResources for %s in %q = %q, want %q", tt.user, tt.namespace, got, tt.want)
		}
	}

	// The hub's activity spans all namespaces: a caller who asks about
	// one does not see it.
	if resp, err := firstResponse(t, client, as("admin"), cmInitial); err != nil || !resp.InitialEventsEnd {
		t.Fatal(resp, err)
	}
	for _, tt := range []struct {
		namespace string
		active    bool
	}{{"", true}, {"a", false}} {
		resp, err := client.ListResources(as("admin"), &informerhubv1.ListResourcesRequest{Namespace: tt.namespace})
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.Resources[0]; got.Resource != "configmaps" || got.InformerActive != tt.active || (got.Subscribers > 0) != tt.active {
			t.Errorf("ListResources in %q: %v, want the informer's activity shown: %v", tt.namespace, got, tt.active)
		}
	}

	_, err := client.ListResources(as("admin"), &informerhubv1.ListResourcesRequest{Namespace: "Not_A_Namespace"})
	if status.Code(err) != codes.InvalidArgument || errorInfoOf(err).GetMetadata()["field"] != "namespace" {
		t.Errorf("an invalid namespace: %v, want INVALID_ARGUMENT on the namespace field", err)
	}
}

func TestLimitsPerIdentity(t *testing.T) {
	cluster := hubtest.NewCluster(t)
	authz := &tableAuthorizer{allowed: map[string][]string{"alice": {"*"}, "bob": {"*"}, "carol": {"*"}}}
	conn := serveWithAuth(t, informerhub.New(informerhub.Config{Logger: discard}, cluster, cluster),
		Config{Authorizer: authz, MaxSubscriptionsPerIdentity: 2, RatePerIdentity: 0.001, RateBurstPerIdentity: 4})
	client := informerhubv1.NewInformerHubServiceClient(conn)

	for range 2 {
		if resp, err := firstResponse(t, client, as("alice"), cmInitial); err != nil || !resp.InitialEventsEnd {
			t.Fatal(err)
		}
	}
	_, err := firstResponse(t, client, as("alice"), cmInitial)
	if status.Code(err) != codes.ResourceExhausted || errorInfoOf(err).GetReason() != ReasonTooManySubscriptions {
		t.Fatalf("a third stream: %v, want RESOURCE_EXHAUSTED with TOO_MANY_SUBSCRIPTIONS", err)
	}
	if _, err := firstResponse(t, client, as("bob"), cmInitial); err != nil {
		t.Fatalf("bob is limited by alice's streams: %v", err)
	}
	// Streams that fail after admission give their place back: with one
	// stream open, bob fails two in a row (a leak would make the second
	// TOO_MANY_SUBSCRIPTIONS), then opens his second.
	for range 2 {
		_, err := firstResponse(t, client, as("bob"), &informerhubv1.WatchRequest{Selector: cmSelector, ResumeToken: "garbage"})
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("a bad token: %v, want INVALID_ARGUMENT", err)
		}
	}
	if _, err := firstResponse(t, client, as("bob"), cmInitial); err != nil {
		t.Fatalf("bob's second stream: %v", err)
	}

	for i := range 5 { // a burst of 4 calls, then the rate limit
		_, err := client.ListResources(as("carol"), &informerhubv1.ListResourcesRequest{})
		if want := codes.OK; i == 4 {
			want = codes.ResourceExhausted
			if status.Code(err) != want {
				t.Fatalf("call %d: %v, want %v", i+1, err, want)
			}
		} else if err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
	}
}

func TestPanicsBecomeInternalErrors(t *testing.T) {
	cluster := hubtest.NewCluster(t)
	cluster.ConfigMaps().Add(hubtest.ConfigMap("a", "x", nil, ""))
	authz := &tableAuthorizer{allowed: map[string][]string{"alice": {"*"}}}
	hub := informerhub.New(informerhub.Config{Logger: discard, EncodeEvent: func(ev *informerhub.Event) informerhub.Encoded {
		if strings.Contains(ev.Object, `"name":"boom"`) {
			panic("an encoder broke")
		}
		return EncodeEvent(ev)
	}}, cluster, cluster)
	conn := serveWithAuth(t, hub, Config{Authorizer: authz})
	client := informerhubv1.NewInformerHubServiceClient(conn)

	// A panic in the handler's goroutine (here, the authorizer's).
	if _, err := firstResponse(t, client, as("panic"), cmInitial); status.Code(err) != codes.Internal {
		t.Fatalf("a panicking authorizer gave %v, want INTERNAL", err)
	}
	// A panic in an interceptor (here, the authenticator's).
	if _, err := firstResponse(t, client, as("panic-authn"), cmInitial); status.Code(err) != codes.Internal {
		t.Fatalf("a panicking authenticator gave %v, want INTERNAL", err)
	}
	if _, err := client.ListResources(as("panic-authn"), &informerhubv1.ListResourcesRequest{}); status.Code(err) != codes.Internal {
		t.Fatalf("a panicking authenticator gave %v, want INTERNAL", err)
	}
	// A panic in a stream's handler as it sends (here, the event encoder's).
	stream, err := client.Watch(as("alice"), &informerhubv1.WatchRequest{Selector: cmSelector})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Header(); err != nil {
		t.Fatal(err)
	}
	cluster.ConfigMaps().Add(hubtest.ConfigMap("a", "boom", nil, ""))
	if _, err := stream.Recv(); status.Code(err) != codes.Internal {
		t.Fatalf("a panicking encoder gave %v, want INTERNAL", err)
	}
	// The server lives on (boom stays unencodable: watch another namespace).
	other := &informerhubv1.WatchRequest{Selector: &informerhubv1.ResourceSelector{Version: "v1", Resource: "configmaps", Namespace: "c"}, SendInitialEvents: true}
	if resp, err := firstResponse(t, client, as("alice"), other); err != nil || !resp.InitialEventsEnd {
		t.Fatalf("after the panics: %v %v", resp, err)
	}
}
