package controlplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"

	"go.uber.org/goleak"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// Main is a TestMain's body for a package whose tests share one control
// plane: it starts it, hands it to started, runs the tests, stops it, and
// fails the run if goroutines leaked. It returns the exit code:
//
//	func TestMain(m *testing.M) {
//		os.Exit(controlplane.Main(m, func(c *controlplane.ControlPlane) { cluster = c }))
//	}
func Main(m *testing.M, started func(*ControlPlane)) int {
	klog.SetSlogLogger(slog.New(slog.DiscardHandler))
	cluster, err := Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	started(cluster)
	return cluster.Finish(m.Run())
}

// Finish ends a test binary whose tests exited with code: it stops c, and
// when the tests passed, fails the run if goroutines leaked. It returns
// the binary's exit code. Close the API servers the tests started before.
func (c *ControlPlane) Finish(code int) int {
	if err := c.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
		return 1
	}
	if code != 0 {
		return code
	}
	if err := goleak.Find(IgnoredGoroutines()...); err != nil {
		fmt.Fprintln(os.Stderr, "goroutines leaked:", err)
		return 1
	}
	return 0
}

// LazyAPIServer is a second API server on a control plane's etcd (see
// StartAPIServer) that the tests of a package share, started when the
// first of them needs it: most runs of a package's tests start none.
type LazyAPIServer struct {
	cluster *ControlPlane
	args    []string

	once   sync.Once
	server *APIServer // set by once
	err    error      // set by once
}

// LazyAPIServer returns a second API server with extraArgs (as
// StartAPIServer takes them), not started yet. Close it when done.
func (c *ControlPlane) LazyAPIServer(extraArgs ...string) *LazyAPIServer {
	return &LazyAPIServer{cluster: c, args: extraArgs}
}

// Get returns the API server, started on the first call; it fails t when
// the API server could not start. Tests may kill and start it; they leave
// it running.
func (l *LazyAPIServer) Get(t testing.TB) *APIServer {
	t.Helper()
	l.once.Do(func() { l.server, l.err = l.cluster.StartAPIServer(l.args...) })
	if l.err != nil {
		t.Fatal(l.err)
	}
	return l.server
}

// Close closes the API server if a test started it; once closed, it does
// not start (Get fails).
func (l *LazyAPIServer) Close() error {
	l.once.Do(func() { l.err = errors.New("the second API server was closed before a test needed it") })
	if l.server == nil {
		return nil
	}
	return l.server.Close()
}

// ServiceAccountToken makes a service account in ns that may do what rules
// say there (a Role and its RoleBinding, both named name), and returns a
// token for it.
func ServiceAccountToken(ctx context.Context, kube kubernetes.Interface, ns, name string, rules ...rbacv1.PolicyRule) (string, error) {
	if _, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		return "", err
	}
	if _, err := kube.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		return "", err
	}
	if _, err := kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}},
	}, metav1.CreateOptions{}); err != nil {
		return "", err
	}
	tr, err := kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return tr.Status.Token, nil
}
