package integration

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/server"
)

// TestAFeedThatLostItsRBACEndsItsStreams: the hub's identity loses its
// permission to list and watch ConfigMaps, and its watch breaks, so its
// informer's lists and watches fail with 403. Within MaxUpstreamFailure its
// streams end with UNAVAILABLE, UPSTREAM_UNAVAILABLE and their tokens (not
// left open at a position that no longer moves). Changes go on meanwhile;
// once the permission is back, the subscribers, which kept retrying,
// resume from their tokens and miss nothing: their streams equal the API
// server's watch.
func TestAFeedThatLostItsRBACEndsItsStreams(t *testing.T) {
	ns := namespace(t)
	w := newWorkload(t, ns, 5)
	ref := startReference(t, ns)
	user := "hub-" + ns
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"list", "watch"}}},
	}
	if _, err := kube.RbacV1().ClusterRoles().Create(bgCtx(), role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: user},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: "rbac.authorization.k8s.io", Name: user}},
	}
	bindHub := func() {
		t.Helper()
		if _, err := kube.RbacV1().ClusterRoleBindings().Create(bgCtx(), binding, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	bindHub()
	t.Cleanup(func() {
		kube.RbacV1().ClusterRoleBindings().Delete(bgCtx(), user, metav1.DeleteOptions{}) //nolint:errcheck // may be gone
		kube.RbacV1().ClusterRoles().Delete(bgCtx(), user, metav1.DeleteOptions{})        //nolint:errcheck // best effort
	})
	// The hub, as that user, through a proxy that can break its watch.
	asHub := rest.CopyConfig(cluster.Config)
	asHub.Impersonate = rest.ImpersonationConfig{UserName: user}
	restConfig, proxy := throughProxy(t, asHub)
	h := startHubOn(t, restConfig, informerhub.Config{MaxUpstreamFailure: 2 * time.Second},
		server.Config{StalledSendGrace: 100 * time.Millisecond})
	subs := []*subscriber{subscribe(t, h.current, ns, ""), subscribe(t, h.current, ns, "team=a")}
	m := w.marker()
	for _, s := range subs {
		s.waitFor(t, m)
	}
	// One stream the test reads itself, to see how it ends.
	watched, _ := openWatch(t, h.client, &informerhubv1.WatchRequest{Selector: watchSelector(ns), SendInitialEvents: true})
	var last string
	for {
		resp := watched.next(t)
		last = resp.ResumeToken
		if resp.InitialEventsEnd {
			break
		}
	}

	if err := kube.RbacV1().ClusterRoleBindings().Delete(bgCtx(), user, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	proxy.cut() // the open watch breaks; the next ones are refused
	proxy.restore()
	w.step(10) // unseen by the hub
	// Bookmarks may come first; then the status.
	for resp := range watched.responses {
		last = resp.ResumeToken
	}
	err := <-watched.err
	info := errorInfo(t, err)
	if status.Code(err) != codes.Unavailable || info.Reason != server.ReasonUpstreamUnavailable || info.Metadata["resume_token"] != last {
		t.Fatalf("the stale informer's stream ended with %v (%v), want UNAVAILABLE, UPSTREAM_UNAVAILABLE and its last token", err, info)
	}

	bindHub()
	w.step(5)
	w.settle(subs)
	for _, s := range subs {
		if s.resumed() == 0 {
			t.Errorf("subscriber %v was never ended", s.sel)
		}
		s.check(t, ref, false)
	}
}
