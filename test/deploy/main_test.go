// Package deploy checks the Kubernetes manifests of deploy/ against a real
// kube-apiserver (internal/controlplane): the API server accepts every
// object (server-side dry run, Pod Security "restricted" included), and the
// ClusterRole is enough for the hub, run as its service account, to serve a
// caller. It runs the kubectl `make $(TOOLS)/kubectl` builds.
package deploy

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
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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

// repoRoot is the repository's top directory: the one holding deploy/.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "deploy", "kustomization.yaml")); err != nil {
		t.Fatalf("no deploy/kustomization.yaml in %s: %v", root, err)
	}
	return root
}

// kubectlVersion is the kubectl the Makefile builds: the control plane's.
const kubectlVersion = controlplane.Version

// kubectl runs kubectl for the control plane's administrator.
type kubectl struct {
	bin, kubeconfig, cacheDir string
}

// newKubectl finds the kubectl `make` builds into .cache/tools/bin and
// checks its version: kustomize and apply differ between kubectl versions.
func newKubectl(t *testing.T) *kubectl {
	t.Helper()
	bin := filepath.Join(repoRoot(t), ".cache", "tools", "bin", "kubectl")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("no kubectl at %s: build it with `make %s` (the Makefile's $(TOOLS)/kubectl): %v", bin, bin, err)
	}
	dir := t.TempDir()
	k := &kubectl{bin: bin, kubeconfig: filepath.Join(dir, "kubeconfig"), cacheDir: filepath.Join(dir, "cache")}
	if err := os.WriteFile(k.kubeconfig, cluster.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, err := k.run(t, "version", "--client", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var version struct {
		ClientVersion struct{ GitVersion string } `json:"clientVersion"`
	}
	if err := json.Unmarshal([]byte(out), &version); err != nil {
		t.Fatalf("kubectl version: %v\n%s", err, out)
	}
	if version.ClientVersion.GitVersion != kubectlVersion {
		t.Fatalf("%s is kubectl %s, want %s: rebuild it with `rm %s && make %s`", bin, version.ClientVersion.GitVersion, kubectlVersion, bin, bin)
	}
	return k
}

// run runs kubectl with args and returns its stdout and stderr; err tells
// whether it failed, with its output.
func (k *kubectl) run(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var outBuf, errBuf bytes.Buffer
	cmd := exec.CommandContext(ctxFor(t), k.bin, append([]string{"--kubeconfig", k.kubeconfig, "--cache-dir", k.cacheDir}, args...)...)
	cmd.Stdout, cmd.Stderr = &outBuf, &errBuf
	if err := cmd.Run(); err != nil {
		return outBuf.String(), errBuf.String(), fmt.Errorf("kubectl %s: %w\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, outBuf.String(), errBuf.String())
	}
	return outBuf.String(), errBuf.String(), nil
}

// render returns the objects `kubectl kustomize dir` makes, in order.
func (k *kubectl) render(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	out, _, err := k.run(t, "kustomize", dir)
	if err != nil {
		t.Fatal(err)
	}
	var objs []*unstructured.Unstructured
	dec := yaml.NewYAMLOrJSONDecoder(strings.NewReader(out), 4096)
	for {
		obj := &unstructured.Unstructured{}
		err := dec.Decode(&obj.Object)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("decoding kubectl kustomize %s: %v", dir, err)
		}
		if len(obj.Object) > 0 {
			objs = append(objs, obj)
		}
	}
	if len(objs) == 0 {
		t.Fatalf("kubectl kustomize %s made no objects", dir)
	}
	return objs
}

// applyForReal applies objs (kubectl apply, no dry run).
func (k *kubectl) applyForReal(t *testing.T, objs ...*unstructured.Unstructured) {
	t.Helper()
	list := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "v1", "kind": "List"}}
	for _, obj := range objs {
		list.Items = append(list.Items, *obj)
	}
	data, err := list.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "objects.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := k.run(t, "apply", "-f", path); err != nil {
		t.Fatal(err)
	}
}

// only returns the objects of the kinds given, failing the test unless
// there is one of each.
func only(t *testing.T, objs []*unstructured.Unstructured, kinds ...string) []*unstructured.Unstructured {
	t.Helper()
	var picked []*unstructured.Unstructured
	for _, kind := range kinds {
		found := 0
		for _, obj := range objs {
			if obj.GetKind() == kind {
				picked = append(picked, obj)
				found++
			}
		}
		if found != 1 {
			t.Fatalf("deploy/ has %d objects of kind %s, want 1", found, kind)
		}
	}
	return picked
}

// resourceName is how kubectl names an object in its output (-o name):
// deployment.apps/informerhub, namespace/informerhub.
func resourceName(obj *unstructured.Unstructured) string {
	gvk := obj.GroupVersionKind()
	kind := strings.ToLower(gvk.Kind)
	if gvk.Group != "" {
		kind += "." + gvk.Group
	}
	return kind + "/" + obj.GetName()
}
