package deploy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/internal/controlplane"
	"github.com/informerhub/informerhub/internal/testhub"
)

// The ClusterRole grants list and watch, and the two reviews, and nothing
// else: a change to it is a change to the hub's privileges, made here on
// purpose.
func TestClusterRoleRules(t *testing.T) {
	k := newKubectl(t)
	var role rbacv1.ClusterRole
	fromUnstructured(t, only(t, k.render(t, filepath.Join(repoRoot(t), "deploy")), "ClusterRole")[0], &role)
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
		{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
	}
	if diff := cmp.Diff(want, role.Rules); diff != "" {
		t.Errorf("ClusterRole %s rules (-want +got):\n%s", role.Name, diff)
	}
}

// The hub finds resource types through discovery and checks that the API
// server answers with /version; neither needs a rule of its ClusterRole,
// because the cluster's default RBAC allows them to every authenticated
// user (ClusterRoles system:discovery and system:public-info-viewer).
func TestDiscoveryNeedsNoRule(t *testing.T) {
	user := "system:serviceaccount:informerhub:informerhub"
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:informerhub", "system:authenticated"}
	for _, tt := range []struct {
		path  string
		allow bool
	}{
		{"/api", true},
		{"/api/v1", true},
		{"/apis", true},
		{"/apis/apps/v1", true},
		{"/version", true},
		{"/metrics", false}, // a non-resource URL the defaults do not open: the review can say no
	} {
		review, err := kube.AuthorizationV1().SubjectAccessReviews().Create(ctxFor(t), &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{
				User: user, Groups: groups,
				NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: tt.path, Verb: "get"},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if review.Status.Allowed != tt.allow {
			t.Errorf("GET %s by %s without the hub's ClusterRole: allowed %v, want %v (%s)", tt.path, user, review.Status.Allowed, tt.allow, review.Status.Reason)
			continue
		}
		if tt.allow && !strings.Contains(review.Status.Reason, `"system:discovery"`) && !strings.Contains(review.Status.Reason, `"system:public-info-viewer"`) {
			t.Errorf("GET %s allowed by %q, not by system:discovery or system:public-info-viewer", tt.path, review.Status.Reason)
		}
		t.Logf("GET %s: allowed %v: %s", tt.path, review.Status.Allowed, review.Status.Reason)
	}
}

// The hub, run with the Deployment's flags as the ServiceAccount bound to
// the ClusterRole and nothing else, serves a caller who brings its own
// token: it authenticates the caller (TokenReview), authorizes it
// (SubjectAccessReview), finds configmaps (discovery), and lists and
// watches them for it. The flags the test cannot use as they are: --listen
// and --metrics-listen move to loopback ports, and the hub serves without
// TLS (internal/testhub talks plaintext).
//
// Its informers fill their caches with a streamed list (a watch with
// sendInitialEvents, client-go's WatchListClient) where the API server
// supports it, and with a list then a watch where it does not, or when
// the feature is off: both are tried.
func TestClusterRoleIsEnough(t *testing.T) {
	k := newKubectl(t)
	objs := k.render(t, filepath.Join(repoRoot(t), "deploy"))
	k.applyForReal(t, only(t, objs, "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding")...)
	var sa corev1.ServiceAccount
	fromUnstructured(t, only(t, objs, "ServiceAccount")[0], &sa)
	var deployment appsv1.Deployment
	fromUnstructured(t, only(t, objs, "Deployment")[0], &deployment)
	if deployment.Spec.Template.Spec.ServiceAccountName != sa.Name {
		t.Fatalf("the Deployment runs as service account %q, not deploy/'s %q", deployment.Spec.Template.Spec.ServiceAccountName, sa.Name)
	}
	hubToken, err := kube.CoreV1().ServiceAccounts(sa.Namespace).CreateToken(ctxFor(t), sa.Name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := kubeconfigFor(t, sa.Namespace+"/"+sa.Name, hubToken.Status.Token)

	for _, tt := range []struct {
		name      string
		watchList string // the hub's KUBE_FEATURE_WatchListClient
	}{
		{"streamed list", "true"},
		{"list then watch", "false"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("KUBE_FEATURE_WatchListClient", tt.watchList) // the hub process inherits it
			hubServesCaller(t, kubeconfig, deployment)
		})
	}
}

// hubServesCaller starts the hub as the Deployment would run it, with
// kubeconfig, and checks its probes and that it serves a caller
// configmaps, and only what the caller may see.
func hubServesCaller(t *testing.T, kubeconfig []byte, deployment appsv1.Deployment) {
	ctx := ctxFor(t)
	args, metricsAddr := hubArgs(t, deployment)
	hub := testhub.Start(t, kubeconfig, args...)

	// Probes, metrics: the paths of the Deployment's probes answer OK once
	// the hub serves (testhub waited for grpc.health.v1 to say SERVING,
	// which /readyz agrees with).
	container := deployment.Spec.Template.Spec.Containers[0]
	for name, probe := range map[string]*corev1.Probe{"readiness": container.ReadinessProbe, "liveness": container.LivenessProbe} {
		if probe == nil || probe.HTTPGet == nil {
			t.Errorf("the container has no HTTP %s probe", name)
			continue
		}
		if port := probe.HTTPGet.Port.String(); port != "metrics" {
			t.Errorf("the %s probe asks port %s, not the metrics port (--metrics-listen)", name, port)
		}
		if code, body := httpGet(t, "http://"+metricsAddr+probe.HTTPGet.Path); code != http.StatusOK {
			t.Errorf("%s probe GET %s: %d %s", name, probe.HTTPGet.Path, code, body)
		}
	}
	if code, body := httpGet(t, "http://"+metricsAddr+"/metrics"); code != http.StatusOK || !strings.Contains(body, "informerhub_build_info") {
		t.Errorf("GET /metrics: %d, want 200 with informerhub_build_info:\n%s", code, body)
	}

	// A caller with its own identity: list and watch on configmaps of one
	// namespace, nothing else.
	ns := callerNamespace(t)
	callerToken := serviceAccountToken(t, ns, "reader", "configmaps", "list", "watch")
	// The Deployment's hub accepts only tokens bound to its audience, which
	// are worthless against the API server: a hub that can read Secrets
	// is handed no token that could.
	audience := flagValue(args, "--token-audience")
	if audience == "" {
		t.Fatal("the Deployment passes no --token-audience: callers would hand the hub tokens valid against the API server")
	}
	apiServerToken := callerToken
	bound, err := kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "reader",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{Audiences: []string{audience}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	callerToken = bound.Status.Token
	asBound := rest.AnonymousClientConfig(cluster.Config)
	asBound.BearerToken = callerToken
	if _, err := kubernetes.NewForConfigOrDie(asBound).CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsUnauthorized(err) {
		t.Errorf("the API server answered a token bound to the hub's audience with %v, want 401 Unauthorized", err)
	}
	createConfigMap(t, ns, "first")
	createConfigMap(t, ns, "second")

	conn, err := grpc.NewClient(hub.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := informerhubv1.NewInformerHubServiceClient(conn)
	caller := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+callerToken)
	configMaps := &informerhubv1.ResourceSelector{Version: "v1", Resource: "configmaps", Namespace: ns}

	resources, err := client.ListResources(caller, &informerhubv1.ListResourcesRequest{Namespace: ns})
	if err != nil {
		t.Fatalf("ListResources: %v", err)
	}
	if !slices.ContainsFunc(resources.GetResources(), func(r *informerhubv1.Resource) bool {
		return r.GetGroup() == "" && r.GetVersion() == "v1" && r.GetResource() == "configmaps"
	}) {
		t.Errorf("ListResources in %s does not list configmaps: %v", ns, resources.GetResources())
	}

	if got, want := snapshotNames(t, client, caller, configMaps), []string{"first", "second"}; !slices.Equal(got, want) {
		t.Errorf("Snapshot of configmaps in %s: %v, want %v", ns, got, want)
	}

	watchCtx, stopWatch := context.WithCancel(caller)
	defer stopWatch()
	stream, err := client.Watch(watchCtx, &informerhubv1.WatchRequest{Selector: configMaps, SendInitialEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	var initial []string
	for {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("Watch, after %v: %v", initial, err)
		}
		if resp.GetInitialEventsEnd() {
			break
		}
		if resp.GetType() != informerhubv1.EventType_EVENT_TYPE_ADDED {
			t.Fatalf("Watch: initial event %v, want ADDED", resp.GetType())
		}
		initial = append(initial, objectName(t, resp.GetObject()))
	}
	slices.Sort(initial)
	if want := []string{"first", "second"}; !slices.Equal(initial, want) {
		t.Errorf("Watch: initial events for %v, want %v", initial, want)
	}
	createConfigMap(t, ns, "third")
	for {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("Watch: waiting for third: %v", err)
		}
		if resp.GetType() == informerhubv1.EventType_EVENT_TYPE_BOOKMARK {
			continue
		}
		if name := objectName(t, resp.GetObject()); resp.GetType() != informerhubv1.EventType_EVENT_TYPE_ADDED || name != "third" {
			t.Fatalf("Watch: got %v of %s, want ADDED of third", resp.GetType(), name)
		}
		break
	}
	stopWatch()

	// What the caller's RBAC does not allow, it does not get, though the
	// hub may list and watch everything; a token the API server does not
	// know gets nothing.
	_, err = firstSnapshot(client, caller, &informerhubv1.ResourceSelector{Version: "v1", Resource: "secrets", Namespace: ns})
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("Snapshot of secrets as the caller: %v, want PermissionDenied", err)
	}
	stranger := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer not-a-token")
	_, err = firstSnapshot(client, stranger, configMaps)
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("Snapshot with a token the API server does not know: %v, want Unauthenticated", err)
	}
	forAPIServer := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+apiServerToken)
	_, err = firstSnapshot(client, forAPIServer, configMaps)
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("Snapshot with the caller's token for the API server's audience: %v, want Unauthenticated", err)
	}
}

// hubArgs returns the Deployment's container arguments for a hub on
// loopback: without --listen (internal/testhub picks the address), without
// --tls-cert and --tls-key (testhub talks plaintext), with --metrics-listen
// on a free loopback port, which it returns.
func hubArgs(t *testing.T, d appsv1.Deployment) (args []string, metricsAddr string) {
	t.Helper()
	if n := len(d.Spec.Template.Spec.Containers); n != 1 {
		t.Fatalf("the Deployment has %d containers, want 1", n)
	}
	metricsAddr = testhub.FreeAddr(t)
	seen := map[string]bool{}
	for _, arg := range d.Spec.Template.Spec.Containers[0].Args {
		name, _, ok := strings.Cut(arg, "=")
		if !ok || !strings.HasPrefix(name, "--") {
			t.Fatalf("container argument %q is not --flag=value", arg)
		}
		seen[name] = true
		switch name {
		case "--listen", "--tls-cert", "--tls-key":
		case "--metrics-listen":
			args = append(args, "--metrics-listen="+metricsAddr)
		default:
			args = append(args, arg)
		}
	}
	for _, name := range []string{"--listen", "--tls-cert", "--tls-key", "--metrics-listen", "--auth"} {
		if !seen[name] {
			t.Errorf("the Deployment does not pass %s", name)
		}
	}
	if !slices.Contains(args, "--auth=kubernetes") {
		t.Errorf("the Deployment's hub does not authenticate callers with --auth=kubernetes: %v", args)
	}
	return args, metricsAddr
}

// kubeconfigFor is a kubeconfig for the control plane as the bearer of
// token.
func kubeconfigFor(t *testing.T, user, token string) []byte {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["controlplane"] = &clientcmdapi.Cluster{Server: cluster.Config.Host, CertificateAuthorityData: cluster.Config.CAData}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["hub"] = &clientcmdapi.Context{Cluster: "controlplane", AuthInfo: user}
	cfg.CurrentContext = "hub"
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func callerNamespace(t *testing.T) string {
	t.Helper()
	ns, err := kube.CoreV1().Namespaces().Create(ctxFor(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "caller-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// serviceAccountToken makes a service account in ns that may do verbs on
// resource there, and returns a token for it.
func serviceAccountToken(t *testing.T, ns, name, resource string, verbs ...string) string {
	t.Helper()
	token, err := controlplane.ServiceAccountToken(ctxFor(t), kube, ns, name,
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{resource}, Verbs: verbs})
	if err != nil {
		t.Fatal(err)
	}
	return token
}

func createConfigMap(t *testing.T, ns, name string) {
	t.Helper()
	if _, err := kube.CoreV1().ConfigMaps(ns).Create(ctxFor(t), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// snapshotNames returns the sorted names of a Snapshot's objects, every
// page read.
func snapshotNames(t *testing.T, client informerhubv1.InformerHubServiceClient, ctx context.Context, sel *informerhubv1.ResourceSelector) []string {
	t.Helper()
	stream, err := client.Snapshot(ctx, &informerhubv1.SnapshotRequest{Selector: sel})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("Snapshot, after %v: %v", names, err)
		}
		for _, obj := range resp.GetObjects() {
			names = append(names, objectName(t, obj))
		}
		if resp.GetLast() {
			break
		}
	}
	slices.Sort(names)
	return names
}

// firstSnapshot returns a Snapshot's first page, or the error that ended
// it.
func firstSnapshot(client informerhubv1.InformerHubServiceClient, ctx context.Context, sel *informerhubv1.ResourceSelector) (*informerhubv1.SnapshotResponse, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := client.Snapshot(ctx, &informerhubv1.SnapshotRequest{Selector: sel})
	if err != nil {
		return nil, err
	}
	return stream.Recv()
}

func objectName(t *testing.T, object string) string {
	t.Helper()
	var obj struct {
		Metadata struct{ Name string } `json:"metadata"`
	}
	if err := json.Unmarshal([]byte(object), &obj); err != nil {
		t.Fatalf("object %q: %v", object, err)
	}
	return obj.Metadata.Name
}

func fromUnstructured(t *testing.T, obj *unstructured.Unstructured, into any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, into); err != nil {
		t.Fatalf("%s: %v", resourceName(obj), err)
	}
}

// httpGet returns the status code and body of a GET of url.
func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctxFor(t), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("GET %s: %v", url, fmt.Errorf("reading the body: %w", err))
	}
	return resp.StatusCode, string(body)
}

// flagValue returns the value of --name=value in args, or "".
func flagValue(args []string, name string) string {
	for _, arg := range args {
		if v, ok := strings.CutPrefix(arg, name+"="); ok {
			return v
		}
	}
	return ""
}
