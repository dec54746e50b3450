package docs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/internal/controlplane"
	"github.com/informerhub/informerhub/internal/testhub"
)

// cookbookHubFlags are the flags the hub of docs/grpcurl.md runs with, as
// the document says: small enough a history and snapshot pages that its
// examples of an expired token and of pages take a few objects.
var cookbookHubFlags = []string{"--auth", "kubernetes", "--history-size", "5", "--snapshot-page-size", "2"}

// TestGRPCurlCookbook runs every command of docs/grpcurl.md (see
// runDocument), with grpcurl and kubectl from .cache/tools/bin, twice: the
// page from the top, then each recipe on its own, again.
func TestGRPCurlCookbook(t *testing.T) {
	runDocument(t, document{
		path:            filepath.Join("docs", "grpcurl.md"),
		namespacePrefix: "cookbook-",
		hubFlags:        cookbookHubFlags,
		recipes:         true,
		tools: []tool{
			{"grpcurl", "make tools"},
			{"kubectl", "make .cache/tools/bin/kubectl (make run builds it too)"},
		},
		commands: []string{"python3"}, // the Digest recipe works the digest through
	})
}

// document is a page of docs/ whose blocks a test runs.
type document struct {
	path            string // from the repository's root
	namespacePrefix string // of NS
	hubFlags        []string
	// tools are what its blocks run from .cache/tools/bin; commands what
	// they run from the system's PATH.
	tools    []tool
	commands []string
	// normalize, when set, is applied to each block's output and to its
	// expected output alike before they are matched.
	normalize func(string) string
	// recipes says that each section of the document (the blocks under a
	// heading) is a recipe that runs on its own, and again: after the
	// document has run, runDocument runs it a second time, against the
	// same hub and namespace, a section at a time, the last one first,
	// each in a fresh shell and working directory.
	recipes bool
}

// tool is a command of .cache/tools/bin, and the make target that builds it.
type tool struct{ name, make string }

// runDocument runs every block of d against a hub that authenticates its
// callers with the API server, and checks each one's exit status and
// output. The blocks get:
//
//	HUB         the hub's loopback host:port (plaintext)
//	TOKEN       a service account token that may list and watch configmaps and pods in NS
//	NS          a fresh namespace
//	KUBECONFIG  an administrator's kubeconfig, for kubectl
//	PATH        with .cache/tools/bin first
//
// After each block, it waits until the hub's cache of NS's configmaps and
// pods holds what the API server does, so that the next block sees every
// change the one before made (the hub's informer learns of changes a moment
// later).
//
// The blocks run in order, as in one shell. With d.recipes, they then run
// a second time, with the same variables (the same hub and namespace), a
// section at a time in a fresh shell, the last section first: so each
// section must make what it needs itself, from nothing but those
// variables, whatever the others left, and must be able to run again.
func runDocument(t *testing.T, d document) {
	t.Helper()
	root := repoRoot(t)
	doc := d.path
	src, err := os.ReadFile(filepath.Join(root, doc))
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := Parse(src)
	if err != nil {
		t.Fatalf("%s: %v", doc, err)
	}
	tools := filepath.Join(root, ".cache", "tools", "bin")
	for _, tool := range d.tools {
		if _, err := os.Stat(filepath.Join(tools, tool.name)); err != nil {
			t.Fatalf("%s runs %s from %s, which is not there: run `%s`", doc, tool.name, tools, tool.make)
		}
	}
	for _, command := range d.commands {
		if _, err := exec.LookPath(command); err != nil {
			t.Fatalf("%s runs %s, which is not on the PATH: run make browser-deps (Debian: apt-get install %s)", doc, command, command)
		}
	}
	normalize := d.normalize
	if normalize == nil {
		normalize = func(s string) string { return s }
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ns, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: d.namespacePrefix}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	token := reader(ctx, t, ns.Name, "reader")
	hub := testhub.Start(t, cluster.KubeConfig, d.hubFlags...)
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
	newShell := func() *Shell {
		sh, err := NewShell(t.TempDir(), t.TempDir(), env)
		if err != nil {
			t.Fatal(err)
		}
		return sh
	}
	vars := map[string]string{"NS": ns.Name}
	run := func(sh *Shell, b Block, pass string) {
		start := time.Now()
		out, status, err := sh.Run(ctx, b.Script, 2*time.Minute)
		where := doc + ":" + strconv.Itoa(b.Line) + pass
		if err != nil {
			t.Fatalf("%s: %v\n%s\noutput:\n%s", where, err, b.Script, out)
		}
		if status != b.Exit {
			t.Fatalf("%s: exit status %d, want %d\n%s\noutput:\n%s", where, status, b.Exit, b.Script, out)
		}
		if b.Output != nil {
			expected := make([]string, len(b.Output))
			for i, l := range b.Output {
				expected[i] = normalize(l)
			}
			if err := Match(expected, normalize(out), vars); err != nil {
				t.Fatalf("%s: %v (expected output at %s:%d)\n%s\noutput:\n%s", where, err, doc, b.OutputLine, b.Script, out)
			}
		}
		t.Logf("%s: exit status %d in %v", where, status, time.Since(start).Round(time.Millisecond))
		if err := waitForHub(ctx, hubClient, token, ns.Name); err != nil {
			t.Fatalf("after %s: %v", where, err)
		}
	}

	sh := newShell()
	for _, b := range blocks {
		run(sh, b, "")
	}
	t.Logf("%s: %d blocks ran as documented", doc, len(blocks))
	if !d.recipes {
		return
	}
	sections := Sections(blocks)
	for i := len(sections) - 1; i >= 0; i-- {
		sh := newShell()
		for _, b := range sections[i] {
			run(sh, b, fmt.Sprintf(" (again, %q on its own)", b.Section))
		}
	}
	t.Logf("%s: its %d sections ran again, each on its own, as documented", doc, len(sections))
}

// repoRoot returns the repository's root, two levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no repository root at %s: %v", root, err)
	}
	return root
}

// environ returns the test process's environment with set applied.
func environ(set map[string]string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); set[k] == "" {
			env = append(env, kv)
		}
	}
	for _, k := range sortedKeys(set) {
		env = append(env, k+"="+set[k])
	}
	return env
}

func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }

// reader makes a service account in ns that may list and watch configmaps
// and pods there, and nothing else, and returns a token for it.
func reader(ctx context.Context, t *testing.T, ns, name string) string {
	t.Helper()
	token, err := controlplane.ServiceAccountToken(ctx, kube, ns, name,
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps", "pods"}, Verbs: []string{"list", "watch"}})
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// cookbookResources are the resources of NS that docs/grpcurl.md changes,
// which waitForHub compares.
var cookbookResources = []string{"configmaps", "pods"}

// waitForHub waits until, for each of cookbookResources, a Snapshot of ns
// holds the objects a LIST from the API server does, at the same
// resourceVersions: then the hub has received every change made to them so
// far.
func waitForHub(ctx context.Context, client informerhubv1.InformerHubServiceClient, token, ns string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for _, resource := range cookbookResources {
		for {
			apiServer, err := list(ctx, resource, ns)
			if err != nil {
				return err
			}
			hub, err := snapshot(ctx, client, resource, ns)
			if err != nil {
				return err
			}
			if maps.Equal(apiServer, hub) {
				break
			}
			select {
			case <-ctx.Done():
				return errors.New("the hub did not catch up with the API server within 30s: for " + resource + ", the API server has " +
					formatVersions(apiServer) + ", the hub " + formatVersions(hub))
			case <-tick.C:
			}
		}
	}
	return nil
}

// objectMeta is what waitForHub reads of an object.
type objectMeta struct {
	Metadata struct{ Name, ResourceVersion string }
}

// list returns the name and resourceVersion of every object of a core (v1)
// resource in ns, as the API server lists them.
func list(ctx context.Context, resource, ns string) (map[string]string, error) {
	raw, err := kube.CoreV1().RESTClient().Get().Namespace(ns).Resource(resource).DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	var l struct{ Items []objectMeta }
	if err := json.Unmarshal(raw, &l); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, o := range l.Items {
		out[o.Metadata.Name] = o.Metadata.ResourceVersion
	}
	return out, nil
}

// snapshot returns the name and resourceVersion of every object of a core
// (v1) resource in ns, in a Snapshot of the hub.
func snapshot(ctx context.Context, client informerhubv1.InformerHubServiceClient, resource, ns string) (map[string]string, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := client.Snapshot(ctx, &informerhubv1.SnapshotRequest{Selector: &informerhubv1.ResourceSelector{Version: "v1", Resource: resource, Namespace: ns}})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for {
		page, err := stream.Recv()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		for _, o := range page.Objects {
			var obj objectMeta
			if err := json.Unmarshal([]byte(o), &obj); err != nil {
				return nil, err
			}
			out[obj.Metadata.Name] = obj.Metadata.ResourceVersion
		}
	}
}

func formatVersions(m map[string]string) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, k+"@"+m[k])
	}
	return "{" + strings.Join(parts, " ") + "}"
}
