// Package chart checks charts/informerhub for real: helm lint --strict;
// helm template of each mode (its ci/ values files) applied to a real
// kube-apiserver with a server-side dry run, the Prometheus Operator's
// CRDs installed there; the chart's pod against deploy/'s; every flag of
// the hub reachable from its values; promtool check rules and test rules
// on its alerts; and every PromQL expression of the alerts and the
// dashboard parsed by Prometheus' own parser and naming only metrics that
// a running hub exports. It runs the helm, promtool, promql-metrics and
// kubectl that `make test` builds into .cache/tools/bin.
package chart

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"

	"github.com/informerhub/informerhub/internal/controlplane"
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

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// repoRoot is the repository's top directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// chartDir is charts/informerhub.
func chartDir(t *testing.T) string { return filepath.Join(repoRoot(t), "charts", "informerhub") }

// tool returns the path of a tool `make` builds into .cache/tools/bin.
func tool(t *testing.T, name string) string {
	t.Helper()
	bin := filepath.Join(repoRoot(t), ".cache", "tools", "bin", name)
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("no %s at %s: build it with `make %s` (or `make chart-tools`): %v", name, bin, bin, err)
	}
	return bin
}

// run runs a command and returns its stdout; err has its output.
func run(t *testing.T, stdin io.Reader, bin string, args ...string) (string, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctxFor(t), bin, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), stderr.String(), fmt.Errorf("%s %s: %w\nstdout:\n%s\nstderr:\n%s", filepath.Base(bin), strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), stderr.String(), nil
}

// The release the tests render: its name and namespace.
const (
	release   = "informerhub"
	namespace = "informerhub"
)

// monitoringAPIs are the --api-versions that tell helm template the
// cluster serves the Prometheus Operator's kinds, as the control plane
// does once installMonitoringCRDs ran (helm install finds them itself).
var monitoringAPIs = []string{
	"--api-versions", "monitoring.coreos.com/v1/ServiceMonitor",
	"--api-versions", "monitoring.coreos.com/v1/PodMonitor",
	"--api-versions", "monitoring.coreos.com/v1/PrometheusRule",
}

// helmTemplate renders the chart with args (-f, --set) as the release, for
// the control plane's Kubernetes version with the Prometheus Operator's
// kinds served (monitoringAPIs), and returns the manifest.
func helmTemplate(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, _, err := run(t, nil, tool(t, "helm"), slices.Concat([]string{"template", release, chartDir(t),
		"--namespace", namespace, "--kube-version", controlplane.Version}, monitoringAPIs, args)...)
	return out, err
}

// mustTemplate is helmTemplate that fails the test on an error, and
// returns the objects.
func mustTemplate(t *testing.T, args ...string) (string, []*unstructured.Unstructured) {
	t.Helper()
	out, err := helmTemplate(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out, decode(t, out)
}

// decode returns the objects of a YAML stream, in order.
func decode(t *testing.T, manifest string) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	dec := yaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	for {
		obj := &unstructured.Unstructured{}
		err := dec.Decode(&obj.Object)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("decoding the manifest: %v", err)
		}
		if len(obj.Object) > 0 {
			objs = append(objs, obj)
		}
	}
	if len(objs) == 0 {
		t.Fatal("the manifest holds no objects")
	}
	return objs
}

// only returns the one object of kind (and name, if given) of objs.
func only(t *testing.T, objs []*unstructured.Unstructured, kind string) *unstructured.Unstructured {
	t.Helper()
	var found []*unstructured.Unstructured
	for _, obj := range objs {
		if obj.GetKind() == kind {
			found = append(found, obj)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d objects of kind %s, want 1", len(found), kind)
	}
	return found[0]
}

func kinds(objs []*unstructured.Unstructured) []string {
	var ks []string
	for _, obj := range objs {
		ks = append(ks, obj.GetKind())
	}
	slices.Sort(ks)
	return ks
}

func fromUnstructured(t *testing.T, obj *unstructured.Unstructured, into any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(obj.Object, into, true); err != nil {
		t.Fatalf("%s %s: %v", obj.GetKind(), obj.GetName(), err)
	}
}

// kubectl runs the kubectl `make` builds, as the control plane's
// administrator.
type kubectl struct{ bin, kubeconfig, cacheDir string }

func newKubectl(t *testing.T) *kubectl {
	t.Helper()
	return kubectlFor(t, cluster.KubeConfig)
}

// kubectlFor is newKubectl for another control plane, by its kubeconfig.
func kubectlFor(t *testing.T, kubeconfig []byte) *kubectl {
	t.Helper()
	dir := t.TempDir()
	k := &kubectl{bin: tool(t, "kubectl"), kubeconfig: filepath.Join(dir, "kubeconfig"), cacheDir: filepath.Join(dir, "cache")}
	if err := os.WriteFile(k.kubeconfig, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, err := k.run(t, nil, "version", "--client", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var version struct {
		ClientVersion struct{ GitVersion string } `json:"clientVersion"`
	}
	if err := json.Unmarshal([]byte(out), &version); err != nil || version.ClientVersion.GitVersion != controlplane.Version {
		t.Fatalf("%s is kubectl %q (%v), want %s", k.bin, version.ClientVersion.GitVersion, err, controlplane.Version)
	}
	return k
}

func (k *kubectl) run(t *testing.T, stdin io.Reader, args ...string) (string, string, error) {
	t.Helper()
	return run(t, stdin, k.bin, append([]string{"--kubeconfig", k.kubeconfig, "--cache-dir", k.cacheDir}, args...)...)
}

// render returns the objects `kubectl kustomize dir` makes.
func (k *kubectl) render(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	out, _, err := k.run(t, nil, "kustomize", dir)
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, out)
}
