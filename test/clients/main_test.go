// Package clients runs the example clients in other languages
// (clients/node, clients/python) against a real kube-apiserver and etcd and
// the informerhub binary. Each client's own test suite does the checking;
// these tests give it a cluster, a hub, and identities for both.
package clients

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/informerhub/informerhub/internal/controlplane"
	"github.com/informerhub/informerhub/internal/testhub"
)

var (
	cluster *controlplane.ControlPlane
	kube    kubernetes.Interface
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	klog.SetSlogLogger(slog.New(slog.DiscardHandler))
	var err error
	if cluster, err = controlplane.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	kube = kubernetes.NewForConfigOrDie(cluster.Config)
	code := m.Run()
	if err := cluster.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
		return 1
	}
	if code != 0 {
		return code
	}
	if err := goleak.Find(controlplane.IgnoredGoroutines()...); err != nil {
		fmt.Fprintln(os.Stderr, "goroutines leaked:", err)
		return 1
	}
	return 0
}

// clientEnv starts a hub that authenticates callers with the API server
// (--auth kubernetes), makes a fresh namespace with two service accounts,
// and returns what a client's test suite needs, as environment variables
// (after the test process's own):
//
//	INFORMERHUB_ADDR   the hub's host:port (loopback, plaintext)
//	INFORMERHUB_TOKEN  a bearer token that may list and watch configmaps in TEST_NAMESPACE
//	KUBE_SERVER        the API server's URL
//	KUBE_CA_FILE       the CA of the API server's serving certificate (PEM)
//	KUBE_TOKEN         a bearer token that may create, update and delete configmaps in TEST_NAMESPACE
//	TEST_NAMESPACE     the namespace
//
// The suite writes configmaps with KUBE_TOKEN through the API server's
// REST API, and reads them through the hub with INFORMERHUB_TOKEN.
func clientEnv(t *testing.T) []string {
	t.Helper()
	ctx := context.Background()
	ns, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "clients-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reader := serviceAccountToken(t, ns.Name, "reader", "list", "watch")
	writer := serviceAccountToken(t, ns.Name, "writer", "get", "create", "update", "patch", "delete")
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, cluster.Config.CAData, 0o600); err != nil {
		t.Fatal(err)
	}
	hub := testhub.Start(t, cluster.KubeConfig, "--auth", "kubernetes")
	return append(os.Environ(),
		"INFORMERHUB_ADDR="+hub.Addr,
		"INFORMERHUB_TOKEN="+reader,
		"KUBE_SERVER="+cluster.Config.Host,
		"KUBE_CA_FILE="+caFile,
		"KUBE_TOKEN="+writer,
		"TEST_NAMESPACE="+ns.Name,
	)
}

// serviceAccountToken makes a service account in ns that may do verbs on
// configmaps there, and returns a token for it.
func serviceAccountToken(t *testing.T, ns, name string, verbs ...string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: verbs}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}
