package chart

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// pinnedVersions returns the versions tools/helm/go.mod pins of modules.
func pinnedVersions(t *testing.T, modules ...string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "tools", "helm", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	versions := map[string]string{}
	for line := range strings.Lines(string(data)) {
		fields := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if len(fields) >= 2 && slices.Contains(modules, fields[0]) {
			versions[fields[0]] = fields[1]
		}
	}
	for _, m := range modules {
		if versions[m] == "" {
			t.Fatalf("tools/helm/go.mod pins no %s", m)
		}
	}
	return versions
}

// The helm `make chart-tools` builds carries the stamps of Helm's release
// builds (the Makefile's -X flags): its own version, and the Kubernetes
// version helm template and helm lint assume without a cluster, that of the
// client-go it is built with. Without them (a plain go install) helm
// assumes Kubernetes 1.20, refuses the chart (kubeVersion >=1.32), and
// checks no deprecation newer than 1.20: a Helm upgrade that moves the
// stamped variables fails here.
func TestOurHelmIsStampedWithItsVersions(t *testing.T) {
	helm := tool(t, "helm")
	pinned := pinnedVersions(t, "helm.sh/helm/v3", "k8s.io/client-go")
	minor := strings.Split(pinned["k8s.io/client-go"], ".")[1] // v0.37.0: 37
	kube := "v1." + minor + ".0"

	out, _, err := run(t, nil, helm, "version", "--template", "{{.Version}}")
	if err != nil {
		t.Fatal(err)
	}
	if out != pinned["helm.sh/helm/v3"] {
		t.Errorf("helm version says %q, want %s (tools/helm/go.mod)", out, pinned["helm.sh/helm/v3"])
	}

	// A chart that prints the Kubernetes version helm template assumes,
	// and uses an API removed in 1.25 (deprecated in 1.21), which helm lint
	// reports (an error with --strict) only when it assumes 1.21 or later.
	probe := t.TempDir()
	for name, content := range map[string]string{
		"Chart.yaml": "apiVersion: v2\nname: probe\nversion: 0.1.0\n",
		"templates/version.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: version\n" +
			"data:\n  version: {{ .Capabilities.KubeVersion.Version }}\n",
		"templates/pdb.yaml": "apiVersion: policy/v1beta1\nkind: PodDisruptionBudget\nmetadata:\n  name: old\n" +
			"spec:\n  maxUnavailable: 1\n  selector:\n    matchLabels: {app: probe}\n",
	} {
		path := filepath.Join(probe, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, _, err = run(t, nil, helm, "template", "probe", probe, "--show-only", "templates/version.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "version: "+kube+"\n") {
		t.Errorf("helm template assumes Kubernetes\n%s\nwant %s (the minor version of k8s.io/client-go %s)", out, kube, pinned["k8s.io/client-go"])
	}
	out, _, err = run(t, nil, helm, "lint", "--strict", probe)
	if err == nil || !strings.Contains(out, "policy/v1beta1 PodDisruptionBudget is deprecated in v1.21+, unavailable in v1.25+") {
		t.Errorf("helm lint of a chart with a PodDisruptionBudget of policy/v1beta1: %v, want it to report the API removed in 1.25:\n%s", err, out)
	}

	// And so the chart renders as its README says, with no --kube-version
	// and no cluster.
	if _, _, err := run(t, nil, helm, "template", release, chartDir(t), "--namespace", namespace); err != nil {
		t.Fatal(err)
	}
}
