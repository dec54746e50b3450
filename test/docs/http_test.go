package docs

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/internal/testhub"
)

// httpRecipesHubFlags are the flags the hub of docs/http.md runs with, as
// the document says: snapshot pages small enough that three objects take
// two.
var httpRecipesHubFlags = []string{"--auth", "kubernetes", "--snapshot-page-size", "2"}

// TestHTTPRecipes runs every command of docs/http.md (curl speaking the
// Connect protocol, buf curl speaking Connect and gRPC-Web) against a hub
// that authenticates its callers with the API server, and checks each
// one's exit status and output, as TestGRPCurlCookbook does for
// docs/grpcurl.md, with the same variables (HUB, TOKEN, NS, KUBECONFIG; buf
// and kubectl from .cache/tools/bin first on the PATH, curl the system's).
//
// One difference in matching: a space after a comma is ignored, in the
// output and in the expected output alike. The hub's Connect side writes
// compact JSON with Go's protojson, which adds such a space at random (per
// binary) so that no one relies on its exact bytes; the multi-line JSON of
// buf curl only varies in runs of spaces, which Match ignores already.
func TestHTTPRecipes(t *testing.T) {
	root := repoRoot(t)
	doc := filepath.Join("docs", "http.md")
	src, err := os.ReadFile(filepath.Join(root, doc))
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := Parse(src)
	if err != nil {
		t.Fatalf("%s: %v", doc, err)
	}
	tools := filepath.Join(root, ".cache", "tools", "bin")
	for _, tool := range []struct{ name, make string }{
		{"buf", "make tools"},
		{"kubectl", "make .cache/tools/bin/kubectl (make run builds it too)"},
	} {
		if _, err := os.Stat(filepath.Join(tools, tool.name)); err != nil {
			t.Fatalf("%s runs %s from %s, which is not there: run `%s`", doc, tool.name, tools, tool.make)
		}
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatalf("%s runs curl, which is not on the PATH: install it (Debian: apt-get install curl)", doc)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ns, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "recipes-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	token := reader(ctx, t, ns.Name, "reader")
	hub := testhub.Start(t, cluster.KubeConfig, httpRecipesHubFlags...)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, cluster.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(hub.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hubClient := informerhubv1.NewInformerHubServiceClient(conn)

	env := environ(map[string]string{
		"PATH":       tools + string(os.PathListSeparator) + os.Getenv("PATH"),
		"HUB":        hub.Addr,
		"TOKEN":      token,
		"NS":         ns.Name,
		"KUBECONFIG": kubeconfig,
		"HOME":       t.TempDir(), // kubectl's and buf's caches
		"LC_ALL":     "C",
	})
	sh, err := NewShell(t.TempDir(), t.TempDir(), env)
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"NS": ns.Name}
	for _, b := range blocks {
		start := time.Now()
		out, status, err := sh.Run(ctx, b.Script, 2*time.Minute)
		where := doc + ":" + strconv.Itoa(b.Line)
		if err != nil {
			t.Fatalf("%s: %v\n%s\noutput:\n%s", where, err, b.Script, out)
		}
		if status != b.Exit {
			t.Fatalf("%s: exit status %d, want %d\n%s\noutput:\n%s", where, status, b.Exit, b.Script, out)
		}
		if b.Output != nil {
			expected := make([]string, len(b.Output))
			for i, l := range b.Output {
				expected[i] = withoutSpaceAfterCommas(l)
			}
			if err := Match(expected, withoutSpaceAfterCommas(out), vars); err != nil {
				t.Fatalf("%s: %v (expected output at %s:%d)\n%s\noutput:\n%s", where, err, doc, b.OutputLine, b.Script, out)
			}
		}
		t.Logf("%s: exit status %d in %v", where, status, time.Since(start).Round(time.Millisecond))
		if err := waitForHub(ctx, hubClient, token, ns.Name); err != nil {
			t.Fatalf("after %s: %v", where, err)
		}
	}
	t.Logf("%s: %d blocks ran as documented", doc, len(blocks))
}

// withoutSpaceAfterCommas drops the spaces that follow commas.
func withoutSpaceAfterCommas(s string) string {
	for strings.Contains(s, ", ") {
		s = strings.ReplaceAll(s, ", ", ",")
	}
	return s
}
