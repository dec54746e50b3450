package integration

import (
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hubclient "github.com/informerhub/informerhub/clients/go"
	"github.com/informerhub/informerhub/informerhub"
)

// apiDigestLine is the line hubctl verify prints when its copy matches:
// the one the API server's LIST of the selection gives.
func apiDigestLine(t *testing.T, ns, labelSelector string) string {
	t.Helper()
	list, err := kube.CoreV1().ConfigMaps(ns).List(ctxFor(t), metav1.ListOptions{LabelSelector: labelSelector})
	if err != nil {
		t.Fatal(err)
	}
	var d hubclient.Digest
	for i := range list.Items {
		d.AddObject(&list.Items[i])
	}
	return fmt.Sprintf("consistent at resourceVersion %s: %d objects, digest %s", list.ResourceVersion, d.Count(), d)
}

// TestHubctlVerify runs hubctl verify once, with a label selector, and
// following with a watch: each comparison it prints is the digest of the
// API server's LIST of the selection at that resourceVersion.
func TestHubctlVerify(t *testing.T) {
	bin := hubctl(t)
	ns := namespace(t)
	createConfigMap(t, ns, "alpha", map[string]string{"app": "web"}, "1")
	createConfigMap(t, ns, "beta", map[string]string{"app": "db"}, "1")
	createConfigMap(t, ns, "gamma", map[string]string{"app": "web"}, "1")
	h := startHub(t, informerhub.Config{})
	global := []string{"--insecure", "--hub", h.addr}

	stdout, stderr, code := runHubctl(t, bin, append(global, "verify", "cm", "-n", ns, "-l", "app=web")...)
	if want := apiDigestLine(t, ns, "app=web") + "\n"; code != 0 || stdout != want {
		t.Fatalf("hubctl verify -l app=web: exit %d, %q (stderr %q); want exit 0, %q", code, stdout, stderr, want)
	}

	follow := startHubctlWatch(t, bin, append(global, "verify", "cm", "-n", ns, "-w", "--interval", "100ms")...)
	if got, want := follow.read(t, 1)[0], apiDigestLine(t, ns, ""); got != want {
		t.Fatalf("hubctl verify -w first printed %q, want %q", got, want)
	}
	createConfigMap(t, ns, "delta", nil, "1")
	updateConfigMap(t, ns, "alpha", nil, "2")
	deleteConfigMap(t, ns, "beta")
	want := apiDigestLine(t, ns, "")
	for {
		line := follow.read(t, 1)[0]
		if !strings.HasPrefix(line, "consistent at resourceVersion ") {
			t.Fatalf("hubctl verify -w printed %q", line)
		}
		if line == want {
			break
		}
	}

	for _, args := range [][]string{
		{"verify", "cm", "-n", ns, "--field", "data"},
		{"verify", "cm", "-n", ns, "-o", "json"},
		{"verify", "cm", "-n", ns, "-w", "--interval", "0s"},
	} {
		if _, stderr, code := runHubctl(t, bin, append(global, args...)...); code != 2 || !strings.Contains(stderr, "hubctl: ") {
			t.Errorf("hubctl %s: exit %d, %q; want the usage error's exit 2", strings.Join(args, " "), code, stderr)
		}
	}
}
