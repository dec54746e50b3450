// Package clients runs the example clients in other languages
// (clients/node, clients/python) against a real kube-apiserver and etcd and
// the informerhub binary. Each client's own test suite does the checking;
// these tests give it a cluster, a hub, and identities for both.
package clients

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/informerhub/informerhub/internal/controlplane"
	"github.com/informerhub/informerhub/internal/testhub"
)

var (
	cluster *controlplane.ControlPlane
	kube    kubernetes.Interface
)

func TestMain(m *testing.M) {
	os.Exit(controlplane.Main(m, func(c *controlplane.ControlPlane) {
		cluster, kube = c, kubernetes.NewForConfigOrDie(c.Config)
	}))
}

// shortHistory is the history (--history-size) of the hub at
// INFORMERHUB_SHORT_HISTORY_ADDR: a token issued during initial events
// expires (OUT_OF_RANGE) once that many changes of configmaps follow it.
const shortHistory = 8

// clientEnv starts the hubs a client's suite runs against, all of which
// authenticate callers with the API server (--auth kubernetes), makes a
// fresh namespace with two service accounts, and returns what the suite
// needs, as environment variables (after the test process's own):
//
//	INFORMERHUB_ADDR                the hub's host:port (loopback, plaintext), with default settings
//	INFORMERHUB_SHORT_HISTORY_ADDR  a hub whose history holds only INFORMERHUB_SHORT_HISTORY_SIZE
//	                                changes, so that tests can make it answer OUT_OF_RANGE
//	INFORMERHUB_SHORT_HISTORY_SIZE  that hub's --history-size
//	INFORMERHUB_LIMITED_ADDR        a hub that allows one distinct filter and one distinct
//	                                projection per resource type at once (TOO_MANY_DISTINCT)
//	INFORMERHUB_TOKEN               a bearer token that may list and watch configmaps in TEST_NAMESPACE
//	KUBE_SERVER                     the API server's URL
//	KUBE_CA_FILE                    the CA of the API server's serving certificate (PEM)
//	KUBE_TOKEN                      a bearer token that may create, update and delete configmaps in TEST_NAMESPACE
//	TEST_NAMESPACE                  the namespace
//
// The suite writes configmaps with KUBE_TOKEN through the API server's
// REST API, and reads them through the hubs with INFORMERHUB_TOKEN. The
// hubs other than INFORMERHUB_ADDR each serve one test, so that what one
// test leaves on them (a history moved on, filters in use) cannot change
// what another sees.
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
	short := testhub.Start(t, cluster.KubeConfig, "--auth", "kubernetes", "--history-size", strconv.Itoa(shortHistory))
	limited := testhub.Start(t, cluster.KubeConfig, "--auth", "kubernetes",
		"--max-filters-per-resource", "1", "--max-projections-per-resource", "1")
	return append(os.Environ(),
		"INFORMERHUB_ADDR="+hub.Addr,
		"INFORMERHUB_SHORT_HISTORY_ADDR="+short.Addr,
		"INFORMERHUB_SHORT_HISTORY_SIZE="+strconv.Itoa(shortHistory),
		"INFORMERHUB_LIMITED_ADDR="+limited.Addr,
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
	token, err := controlplane.ServiceAccountToken(t.Context(), kube, ns, name,
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: verbs})
	if err != nil {
		t.Fatal(err)
	}
	return token
}
