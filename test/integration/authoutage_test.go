package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/server"
	"github.com/informerhub/informerhub/server/auth"
)

// TestAnAuthOutageEndsNoStream: the API server the hub asks about
// identities and access goes down (its informers use another) while 20
// streams of two service accounts are rechecked every 500ms and their
// identities are cached for only a second. Rechecks run through the outage
// (well past the three unconfirmed intervals that used to end a stream),
// and no stream ends: nobody can change RBAC there meanwhile. One account's
// RoleBinding is removed during the outage (through another API server);
// once the hub's is back, that account's streams end with
// PERMISSION_DENIED and the other's go on.
func TestAnAuthOutageEndsNoStream(t *testing.T) {
	const interval = 500 * time.Millisecond
	ns := namespace(t)
	createConfigMap(t, ns, "cm", nil, "v0")
	upstream := etcdAPIServer(t)
	authKube, err := kubernetes.NewForConfig(upstream.Config)
	if err != nil {
		t.Fatal(err)
	}
	tokens := map[string]string{}
	bindings := map[string]string{}
	for _, name := range []string{"keeps", "loses"} {
		serviceAccountToken(t, ns, name)
		// The two API servers do not share signing keys: tokens for the
		// hub's come from it.
		tr, err := authKube.CoreV1().ServiceAccounts(ns).CreateToken(bgCtx(), name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		tokens[name] = tr.Status.Token
		bindings[name] = grant(t, ns, serviceAccount(ns, name), "configmaps")
	}
	asked := &countingAuthorizer{Authorizer: auth.NewSubjectAccessReview(authKube.AuthorizationV1().SubjectAccessReviews(), auth.SubjectAccessReviewConfig{}),
		calls: make(chan struct{}, 1<<16)}
	h := startHubWith(t, informerhub.Config{}, server.Config{
		AuthzRecheckInterval: interval,
		Authenticator:        auth.NewTokenReview(authKube.AuthenticationV1().TokenReviews(), auth.TokenReviewConfig{CacheTTL: time.Second}),
		Authorizer:           asked,
	})
	sel := &informerhubv1.ResourceSelector{Version: "v1", Resource: "configmaps", Namespace: ns}

	ctx, stopStreams := context.WithCancel(ctxFor(t))
	defer stopStreams()
	names := []string{"keeps", "loses"} // stream i is names[i%2]'s
	streams := openAuthenticatedStreams(ctx, h.client, sel, 20, func(i int) string { return tokens[names[i%2]] })

	if err := upstream.Kill(); err != nil {
		t.Fatal(err)
	}
	deleteRoleBinding(t, ns, bindings["loses"])
	// Every stream's access is rechecked (list and watch) at least eight
	// times, four seconds, while the API server is down.
	asked.drain()
	for range 20 * 2 * 8 {
		select {
		case <-asked.calls:
		case e := <-streams.ended:
			t.Fatalf("a stream of %s ended during the outage: %v", names[e.i%2], e.err)
		case <-ctx.Done():
			t.Fatal("rechecks stopped during the outage")
		}
	}
	if err := upstream.Start(); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		select {
		case e := <-streams.ended:
			if names[e.i%2] != "loses" {
				t.Fatalf("a stream whose access stands ended: %v", e.err)
			}
			if status.Code(e.err) != codes.PermissionDenied {
				t.Fatalf("a stream whose binding was removed ended with %v, want PERMISSION_DENIED", e.err)
			}
		case <-ctx.Done():
			t.Fatal("the streams whose binding was removed did not end once the API server was back")
		}
	}
	// The others went through those same rechecks, and more.
	asked.drain()
	for range 10 * 2 * 4 {
		select {
		case <-asked.calls:
		case e := <-streams.ended:
			t.Fatalf("a stream whose access stands ended: %v", e.err)
		case <-ctx.Done():
			t.Fatal("rechecks stopped")
		}
	}
	stopStreams()
	for _, e := range streams.wait() {
		t.Errorf("a stream of %s ended after the test: %v", names[e.i%2], e.err)
	}
}

// countingAuthorizer signals each question it passes on.
type countingAuthorizer struct {
	auth.Authorizer
	calls chan struct{}
}

func (a *countingAuthorizer) Authorize(ctx context.Context, user auth.User, attrs auth.Attributes, maxAge time.Duration) (bool, error) {
	select {
	case a.calls <- struct{}{}:
	default:
	}
	return a.Authorizer.Authorize(ctx, user, attrs, maxAge)
}

// drain forgets the questions asked so far.
func (a *countingAuthorizer) drain() {
	for {
		select {
		case <-a.calls:
		default:
			return
		}
	}
}

func deleteRoleBinding(t *testing.T, ns, name string) {
	t.Helper()
	if err := kube.RbacV1().RoleBindings(ns).Delete(bgCtx(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(fmt.Errorf("deleting RoleBinding %s: %w", name, err))
	}
}
