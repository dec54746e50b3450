package chart

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/informerhub/informerhub/internal/controlplane"
)

// The chart's README is run as written. Each ```sh block of
// charts/informerhub/README.md is marked by the HTML comment on the line
// before it (invisible on GitHub) with when the test runs it:
//
//	<!-- test: without-crds -->            on a bare API server, as `make run`'s
//	<!-- test: with-crds -->               after the Prometheus Operator's CRDs are installed
//	<!-- test: without-crds with-crds -->  in both phases
//	<!-- test: skip REASON -->             never: REASON says what it needs that the test cannot have
//
// A block without a mark fails the test. The blocks of a phase run in
// their order as one bash script (set -euo pipefail), in a directory that
// looks like the repository's root (its entries are symbolic links to the
// repository's), with the helm and kubectl of .cache/tools/bin first on
// PATH and KUBECONFIG pointing at a control plane of the test's own.
const chartReadme = "charts/informerhub/README.md"

type readmeBlock struct {
	line   int      // of the opening ```sh
	phases []string // without-crds, with-crds; empty: skipped
	skip   string   // why it is skipped
	script string
}

var testMark = regexp.MustCompile(`^<!-- test: (.*) -->$`)

// readmeBlocks returns the ```sh blocks of a Markdown file with their
// marks; a block without one has neither phases nor skip.
func readmeBlocks(t *testing.T, path string) []readmeBlock {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var (
		blocks []readmeBlock
		prev   string
		cur    *readmeBlock
		body   strings.Builder
	)
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur != nil && strings.TrimSpace(line) == "```":
			cur.script = body.String()
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			body.WriteString(line + "\n")
		case line == "```sh":
			cur = &readmeBlock{line: n}
			body.Reset()
			if m := testMark.FindStringSubmatch(prev); m != nil {
				if reason, ok := strings.CutPrefix(m[1], "skip "); ok {
					cur.skip = strings.TrimSpace(reason)
				} else {
					cur.phases = strings.Fields(m[1])
				}
			}
		}
		if strings.TrimSpace(line) != "" {
			prev = strings.TrimSpace(line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if cur != nil {
		t.Fatalf("%s:%d: a ```sh block that never ends", path, cur.line)
	}
	return blocks
}

// readmeScript returns the blocks of phase, in order, as one script.
func readmeScript(t *testing.T, blocks []readmeBlock, phase string) string {
	t.Helper()
	var script strings.Builder
	for _, b := range blocks {
		if slices.Contains(b.phases, phase) {
			fmt.Fprintf(&script, "# %s:%d\n%s", chartReadme, b.line, b.script)
		}
	}
	if script.Len() == 0 {
		t.Fatalf("%s has no block marked for %s", chartReadme, phase)
	}
	return script.String()
}

// Every ```sh block of the chart's README is marked, with a phase the test
// knows or a reason to skip it; and the helm commands of the other
// documents are in the chart's README, where they are run.
func TestTheReadmesCommandsAreMarked(t *testing.T) {
	root := repoRoot(t)
	for _, b := range readmeBlocks(t, filepath.Join(root, chartReadme)) {
		switch {
		case b.skip == "" && len(b.phases) == 0:
			t.Errorf("%s:%d: a ```sh block with no <!-- test: ... --> mark on the line before (readme_test.go says which)", chartReadme, b.line)
		case b.skip == "" && slices.ContainsFunc(b.phases, func(p string) bool { return p != "without-crds" && p != "with-crds" }):
			t.Errorf("%s:%d: unknown phases %q (without-crds, with-crds, or skip REASON)", chartReadme, b.line, b.phases)
		}
	}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	docs = append(docs, filepath.Join(root, "README.md"), filepath.Join(root, "deploy", "README.md"))
	for _, doc := range docs {
		for _, b := range readmeBlocks(t, doc) {
			if regexp.MustCompile(`(?m)^\s*helm `).MatchString(b.script) {
				rel, _ := filepath.Rel(root, doc)
				t.Errorf("%s:%d: a helm command outside %s, where test/chart runs them: link to it instead", rel, b.line, chartReadme)
			}
		}
	}
}

// The README's command that installs the Prometheus Operator's CRDs,
// which the test cannot run (it downloads them), installs those the test
// installs its own way (installMonitoringCRDs): the same release, the same
// files, and waits for each.
func TestTheReadmesCRDsAreTheTests(t *testing.T) {
	path := filepath.Join(repoRoot(t), chartReadme)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	version := regexp.MustCompile(`\bv\d+\.\d+\.\d+\b`)
	operator := regexp.MustCompile(`(?i)\boperator\b|prometheus-operator`)
	seen := 0
	for n, line := range strings.Split(string(data), "\n") {
		if !operator.MatchString(line) {
			continue
		}
		for _, v := range version.FindAllString(line, -1) {
			seen++
			if v != prometheusOperatorVersion {
				t.Errorf("%s:%d: the Prometheus Operator %s, but test/chart checks the chart against %s", chartReadme, n+1, v, prometheusOperatorVersion)
			}
		}
	}
	if seen == 0 {
		t.Errorf("%s names no release of the Prometheus Operator (test/chart checks against %s)", chartReadme, prometheusOperatorVersion)
	}
	var crds []readmeBlock
	for _, b := range readmeBlocks(t, path) {
		if strings.Contains(b.script, "prometheus-operator-crd") {
			crds = append(crds, b)
		}
	}
	if len(crds) != 1 {
		t.Fatalf("%s has %d blocks that install the Prometheus Operator's CRDs, want 1", chartReadme, len(crds))
	}
	b := crds[0]
	if want := "/" + prometheusOperatorVersion + "/example/prometheus-operator-crd"; !strings.Contains(b.script, want) {
		t.Errorf("%s:%d: the CRDs are not those of %s", chartReadme, b.line, want)
	}
	for _, plural := range monitoringCRDs {
		for _, want := range []string{"monitoring.coreos.com_" + plural + ".yaml", "crd/" + plural + ".monitoring.coreos.com"} {
			if !strings.Contains(b.script, want) {
				t.Errorf("%s:%d: the block that installs the CRDs does not name %s", chartReadme, b.line, want)
			}
		}
	}
	if n := strings.Count(b.script, "monitoring.coreos.com_"); n != len(monitoringCRDs) {
		t.Errorf("%s:%d: the block installs %d CRDs, test/chart %d (%v)", chartReadme, b.line, n, len(monitoringCRDs), monitoringCRDs)
	}
}

// readmeShell runs scripts as a user of the README would: from (what looks
// like) the repository's root, with the tools `make chart-tools` builds on
// PATH, against one control plane.
type readmeShell struct {
	dir, home, kubeconfig string
}

func newReadmeShell(t *testing.T, kubeconfig []byte) *readmeShell {
	t.Helper()
	root, tmp := repoRoot(t), t.TempDir()
	sh := &readmeShell{dir: filepath.Join(tmp, "repo"), home: filepath.Join(tmp, "home"), kubeconfig: filepath.Join(tmp, "kubeconfig")}
	for _, dir := range []string{sh.dir, sh.home} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == ".git" || e.Name() == ".cache" {
			continue
		}
		if err := os.Symlink(filepath.Join(root, e.Name()), filepath.Join(sh.dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(sh.kubeconfig, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	return sh
}

func (sh *readmeShell) run(t *testing.T, script string) {
	t.Helper()
	tools := filepath.Dir(tool(t, "helm"))
	tool(t, "kubectl")
	cmd := exec.CommandContext(ctxFor(t), "bash", "-euo", "pipefail", "-x", "-c", script)
	cmd.Dir = sh.dir
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "HELM_") || strings.HasPrefix(name, "KUBE") || strings.HasPrefix(name, "XDG_") ||
			name == "HOME" || name == "PATH" {
			continue
		}
		cmd.Env = append(cmd.Env, kv)
	}
	cmd.Env = append(cmd.Env, "HOME="+sh.home, "KUBECONFIG="+sh.kubeconfig, "PATH="+tools+string(filepath.ListSeparator)+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the script failed: %v\n--- script\n%s--- output\n%s", err, script, out)
	}
	t.Logf("--- output\n%s", out)
	for line := range strings.Lines(string(out)) {
		if strings.HasPrefix(line, "Warning:") || strings.HasPrefix(line, "W") && regexp.MustCompile(`^W\d{4} `).MatchString(line) {
			t.Errorf("the API server warned: %s", line)
		}
	}
}

// noPrivateKeys fails the test if the scripts left a private key in the
// repository's root, where nothing git-ignores it and `git add` would
// commit it.
func (sh *readmeShell) noPrivateKeys(t *testing.T) {
	t.Helper()
	entries, err := os.ReadDir(sh.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue // the repository's own entries are symbolic links
		}
		data, err := os.ReadFile(filepath.Join(sh.dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(e.Name(), ".key") || bytes.Contains(data, []byte("PRIVATE KEY-----")) {
			t.Errorf("the README's commands left the private key %s in the repository's root: write it to a directory of its own (mktemp -d)", e.Name())
		}
	}
}

// helm runs the helm of .cache/tools/bin against sh's control plane.
func (sh *readmeShell) helm(t *testing.T, args ...string) string {
	t.Helper()
	out, _, err := run(t, nil, tool(t, "helm"), append(args, "--kubeconfig", sh.kubeconfig)...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// releaseKinds returns the kinds of a release's manifest, sorted, and its
// notes.
func (sh *readmeShell) release(t *testing.T, ns, name string) (got []string, notes string) {
	t.Helper()
	out := sh.helm(t, "status", name, "-n", ns, "-o", "json", "--show-resources=false")
	var status struct {
		Info struct {
			Status string `json:"status"`
			Notes  string `json:"notes"`
		} `json:"info"`
	}
	if err := json.Unmarshal([]byte(out), &status); err != nil {
		t.Fatal(err)
	}
	if status.Info.Status != "deployed" {
		t.Fatalf("release %s/%s is %s, want deployed", ns, name, status.Info.Status)
	}
	return kinds(decode(t, sh.helm(t, "get", "manifest", name, "-n", ns))), status.Info.Notes
}

// The chart installs as its README says, on a bare API server (as `make
// run`'s: no Prometheus Operator, no nodes) and then with the operator's
// CRDs; so does each values file of ci/, installed for real.
func TestTheChartInstallsAsTheReadmeSays(t *testing.T) {
	blocks := readmeBlocks(t, filepath.Join(repoRoot(t), chartReadme))
	// A control plane of this test's own: the package's has the CRDs once
	// any test installed them.
	bare, err := controlplane.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := bare.Stop(); err != nil {
			t.Error(err)
		}
	})
	sh := newReadmeShell(t, bare.KubeConfig)
	k := kubectlFor(t, bare.KubeConfig)

	monitoring := map[string][]string{ // the monitoring kinds each ci/ file enables
		"deployment": {"PrometheusRule", "ServiceMonitor"},
		"durable":    {"PodMonitor", "PrometheusRule"},
		"mtls":       nil,
		"export":     {"PrometheusRule", "ServiceMonitor"},
	}
	ciInstall := func(t *testing.T, m string, crds bool) {
		ns := "ci-" + m
		if !crds {
			if _, _, err := k.run(t, nil, "create", "namespace", ns); err != nil {
				t.Fatal(err)
			}
			if _, _, err := k.run(t, nil, "label", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted"); err != nil {
				t.Fatal(err)
			}
		}
		_, stderr, err := run(t, nil, tool(t, "helm"), "upgrade", "--install", ns, chartDir(t), "-n", ns,
			"-f", filepath.Join(chartDir(t), "ci", m+"-values.yaml"), "--kubeconfig", sh.kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(stderr, "arning") {
			t.Errorf("helm warned:\n%s", stderr)
		}
		got, notes := sh.release(t, ns, ns)
		for _, kind := range monitoring[m] {
			if has := slices.Contains(got, kind); has != crds {
				t.Errorf("the release has a %s: %t, want %t (the CRDs installed: %t); it has %v", kind, has, crds, crds, got)
			}
			if warned := strings.Contains(notes, "WARNING: NOT INSTALLED") && strings.Contains(notes, kind); warned == crds {
				t.Errorf("the notes warn that the %s is not installed: %t, want %t:\n%s", kind, warned, !crds, notes)
			}
		}
		if !slices.Contains(got, "Deployment") && !slices.Contains(got, "StatefulSet") {
			t.Errorf("the release has no workload: %v", got)
		}
	}

	if !t.Run("README without the CRDs", func(t *testing.T) {
		sh.run(t, readmeScript(t, blocks, "without-crds"))
		sh.noPrivateKeys(t)
		got, notes := sh.release(t, namespace, release)
		want := []string{"ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment", "PodDisruptionBudget", "Service", "Service", "ServiceAccount"}
		if !slices.Equal(got, want) {
			t.Errorf("the release has %v, want %v", got, want)
		}
		for _, want := range []string{"WARNING: NOT INSTALLED: the ServiceMonitor and the PrometheusRule you enabled", "helm -n informerhub upgrade informerhub <the chart> --reuse-values"} {
			if !strings.Contains(notes, want) {
				t.Errorf("the notes do not say %q:\n%s", want, notes)
			}
		}
		// The objects are in the cluster, the README's Secret among them, the
		// image the README built.
		out, _, err := k.run(t, nil, "-n", namespace, "get", "deployment/informerhub", "secret/informerhub-tls", "configmap/informerhub-dashboard",
			"-o", `jsonpath={.items[0].spec.template.spec.containers[0].image} {.items[1].type}`)
		if err != nil {
			t.Fatal(err)
		}
		if want := "informerhub:v0.1.0 kubernetes.io/tls"; out != want {
			t.Errorf("the image and the Secret's type: %q, want %q", out, want)
		}
	}) {
		return
	}
	for _, m := range slices.Sorted(maps.Keys(monitoring)) {
		t.Run("ci/"+m+"-values.yaml without the CRDs", func(t *testing.T) { ciInstall(t, m, false) })
	}

	installMonitoringCRDs(t, k)

	t.Run("README with the CRDs", func(t *testing.T) {
		sh.run(t, readmeScript(t, blocks, "with-crds"))
		got, notes := sh.release(t, namespace, release)
		for _, kind := range []string{"PrometheusRule", "ServiceMonitor"} {
			if !slices.Contains(got, kind) {
				t.Errorf("the release has no %s: %v", kind, got)
			}
		}
		if strings.Contains(notes, "WARNING") {
			t.Errorf("the notes still warn:\n%s", notes)
		}
		if _, _, err := k.run(t, nil, "-n", namespace, "get", "servicemonitor/informerhub", "prometheusrule/informerhub"); err != nil {
			t.Fatal(err)
		}
	})
	for _, m := range slices.Sorted(maps.Keys(monitoring)) {
		t.Run("ci/"+m+"-values.yaml with the CRDs", func(t *testing.T) { ciInstall(t, m, true) })
	}
}

// helm install asks the cluster which kinds it serves, and discovery lists
// each: where only the ServiceMonitor's CRD is installed, the release has
// the ServiceMonitor, and leaves out the PrometheusRule, saying so, rather
// than fail with "no matches for kind". So does helm install --dry-run
// (client-side, its default): it too asks the cluster's discovery (helm
// template, which asks none, prints no notes).
func TestHelmInstallAsksTheClusterWhichKindsItServes(t *testing.T) {
	cp, err := controlplane.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Error(err)
		}
	})
	sh := newReadmeShell(t, cp.KubeConfig)
	k := kubectlFor(t, cp.KubeConfig)
	install := []string{"install", release, chartDir(t), "-n", namespace, "--create-namespace", "-f", filepath.Join(chartDir(t), "ci", "deployment-values.yaml")}
	const warning = "Helm did not find the API\nmonitoring.coreos.com/v1 "

	out := sh.helm(t, append(install, "--dry-run")...)
	if want := "WARNING: NOT INSTALLED: the ServiceMonitor and the PrometheusRule you enabled. " + warning + "ServiceMonitor or PrometheusRule in the cluster"; !strings.Contains(out, want) {
		t.Errorf("helm install --dry-run on a cluster without the CRDs does not say %q:\n%s", want, out)
	}

	installCRDs(t, k, "servicemonitors")
	out = sh.helm(t, append(install, "--dry-run")...)
	if want := "WARNING: NOT INSTALLED: the PrometheusRule you enabled. " + warning + "PrometheusRule in the cluster"; !strings.Contains(out, want) {
		t.Errorf("helm install --dry-run with the ServiceMonitor's CRD does not say %q:\n%s", want, out)
	}
	sh.helm(t, install...)
	got, notes := sh.release(t, namespace, release)
	if !slices.Contains(got, "ServiceMonitor") || slices.Contains(got, "PrometheusRule") {
		t.Errorf("the release has %v, want a ServiceMonitor and no PrometheusRule", got)
	}
	if want := "WARNING: NOT INSTALLED: the PrometheusRule you enabled."; !strings.Contains(notes, want) {
		t.Errorf("the notes do not say %q:\n%s", want, notes)
	}
}
