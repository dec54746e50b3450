package chart

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
)

// The Prometheus Operator whose CRDs the monitoring objects are checked
// against: its Go module ships them (example/prometheus-operator-crd), so
// the Go module proxy serves them, and the checksum pins their content.
const (
	prometheusOperator        = "github.com/prometheus-operator/prometheus-operator"
	prometheusOperatorVersion = "v0.85.0"
	prometheusOperatorSum     = "h1:M5xLCLEoaW2IJfnuCwFzzpL+jSVQu3KGT84Pye+fW8s="
)

// monitoringCRDs are the plurals of the Prometheus Operator's kinds the
// chart makes.
var monitoringCRDs = []string{"servicemonitors", "podmonitors", "prometheusrules"}

// installMonitoringCRDs installs the CRDs of ServiceMonitor, PodMonitor
// and PrometheusRule for real, and waits until the API server serves them.
func installMonitoringCRDs(t *testing.T, k *kubectl) {
	t.Helper()
	installCRDs(t, k, monitoringCRDs...)
}

// installCRDs installs the Prometheus Operator's CRDs of plurals, and
// waits until the API server serves them.
func installCRDs(t *testing.T, k *kubectl, plurals ...string) {
	t.Helper()
	cmd := exec.CommandContext(ctxFor(t), "go", "mod", "download", "-json", prometheusOperator+"@"+prometheusOperatorVersion)
	cmd.Dir = t.TempDir() // outside any module: the download touches no go.mod
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod download %s@%s: %v\n%s", prometheusOperator, prometheusOperatorVersion, err, out)
	}
	var module struct{ Dir, Sum, Error string }
	if err := json.Unmarshal(out, &module); err != nil || module.Error != "" {
		t.Fatalf("go mod download: %v %s\n%s", err, module.Error, out)
	}
	if module.Sum != prometheusOperatorSum {
		t.Fatalf("%s@%s has checksum %s, want %s", prometheusOperator, prometheusOperatorVersion, module.Sum, prometheusOperatorSum)
	}
	args := []string{"apply", "--server-side", "--force-conflicts"}
	var names []string
	for _, plural := range plurals {
		args = append(args, "-f", filepath.Join(module.Dir, "example", "prometheus-operator-crd", "monitoring.coreos.com_"+plural+".yaml"))
		names = append(names, "crd/"+plural+".monitoring.coreos.com")
	}
	if _, _, err := k.run(t, nil, args...); err != nil {
		t.Fatal(err)
	}
	// kubectl wait watches the CRDs' conditions.
	if _, _, err := k.run(t, nil, append([]string{"wait", "--for", "condition=Established", "--timeout", "60s"}, names...)...); err != nil {
		t.Fatal(err)
	}
	// Discovery lists an established CRD a moment later (its own
	// controller), and helm install decides from discovery whether to make
	// the monitors: wait until it lists all three. Discovery has no watch.
	err = wait.PollUntilContextTimeout(ctxFor(t), 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		out, _, err := k.run(t, nil, "api-resources", "--api-group", "monitoring.coreos.com", "-o", "name")
		if err != nil {
			return false, err
		}
		listed := strings.Fields(out)
		return !slices.ContainsFunc(names, func(name string) bool {
			return !slices.Contains(listed, strings.TrimPrefix(name, "crd/"))
		}), nil
	})
	if err != nil {
		t.Fatalf("discovery does not list the monitoring CRDs: %v", err)
	}
}

// createNamespace makes the release's namespace for real (a server-side
// dry run of objects in a namespace that does not exist fails), with Pod
// Security "restricted" enforced and warned about, as deploy/ has it.
func createNamespace(t *testing.T) {
	t.Helper()
	_, err := kube.CoreV1().Namespaces().Create(ctxFor(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: namespace,
		Labels: map[string]string{
			"pod-security.kubernetes.io/enforce": "restricted",
			"pod-security.kubernetes.io/warn":    "restricted",
		},
	}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// dryRun applies manifest with a server-side dry run: the API server
// validates (strict field validation), defaults and admits every object
// (Pod Security included) and stores nothing. It returns the names kubectl
// reports and what it warned about.
func dryRun(t *testing.T, k *kubectl, manifest string) (names, warnings []string, err error) {
	t.Helper()
	stdout, stderr, err := k.run(t, strings.NewReader(manifest), "apply", "--dry-run=server", "-f", "-", "-o", "name")
	for line := range strings.Lines(stderr) {
		if strings.HasPrefix(line, "Warning:") {
			warnings = append(warnings, strings.TrimSpace(line))
		}
	}
	return strings.Fields(stdout), warnings, err
}

// resourceName is how kubectl names an object (-o name).
func resourceName(obj *unstructured.Unstructured) string {
	gvk := obj.GroupVersionKind()
	kind := strings.ToLower(gvk.Kind)
	if gvk.Group != "" {
		kind += "." + gvk.Group
	}
	return kind + "/" + obj.GetName()
}

// modes are the values files of ci/ (chart-testing's convention), and the
// defaults; what each must render.
var modes = []struct {
	name, values string
	want         []string // the kinds rendered, sorted
}{
	{"defaults", "", []string{"ClusterRole", "ClusterRoleBinding", "Deployment", "PodDisruptionBudget", "Service", "Service", "ServiceAccount"}},
	{"deployment", "ci/deployment-values.yaml", []string{"ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment", "NetworkPolicy", "PodDisruptionBudget", "PrometheusRule", "Service", "Service", "ServiceAccount", "ServiceMonitor"}},
	{"durable", "ci/durable-values.yaml", []string{"ClusterRole", "ClusterRoleBinding", "ConfigMap", "NetworkPolicy", "PodDisruptionBudget", "PodMonitor", "PrometheusRule", "Service", "Service", "ServiceAccount", "StatefulSet"}},
	{"mtls", "ci/mtls-values.yaml", []string{"ClusterRole", "ClusterRoleBinding", "Deployment", "Service", "ServiceAccount"}},
	// The hub's objects, and informerhub-export's: its ConfigMap,
	// Deployment, volume claim, Service, ServiceAccount, ServiceMonitor and
	// RBAC (a ClusterRole, and a Role in the namespace default).
	{"export", "ci/export-values.yaml", []string{"ClusterRole", "ClusterRole", "ClusterRoleBinding", "ClusterRoleBinding", "ConfigMap",
		"Deployment", "Deployment", "PersistentVolumeClaim", "PodDisruptionBudget", "PrometheusRule", "Role", "RoleBinding",
		"Service", "Service", "Service", "ServiceAccount", "ServiceAccount", "ServiceMonitor", "ServiceMonitor"}},
}

func valuesArgs(t *testing.T, file string) []string {
	if file == "" {
		return nil
	}
	return []string{"-f", filepath.Join(chartDir(t), file)}
}

func TestHelmLintStrict(t *testing.T) {
	helm := tool(t, "helm")
	files, err := filepath.Glob(filepath.Join(chartDir(t), "ci", "*-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range modes {
		if m.values != "" {
			files = slices.DeleteFunc(files, func(f string) bool { return strings.HasSuffix(f, m.values) })
		}
	}
	if len(files) > 0 {
		t.Errorf("ci/ has values files no test renders: %v (add them to modes)", files)
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			if _, _, err := run(t, nil, helm, append([]string{"lint", "--strict", chartDir(t)}, valuesArgs(t, m.values)...)...); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Each mode's objects, as helm template renders them, are accepted by a
// real API server (the Prometheus Operator's CRDs installed there) with
// no warning: Pod Security "restricted" included, the monitoring objects
// validated against the operator's schemas.
func TestEachModeDryRunsOnARealAPIServer(t *testing.T) {
	k := newKubectl(t)
	installMonitoringCRDs(t, k)
	createNamespace(t)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			manifest, objs := mustTemplate(t, valuesArgs(t, m.values)...)
			if got := kinds(objs); !slices.Equal(got, m.want) {
				t.Fatalf("rendered %v, want %v", got, m.want)
			}
			names, warnings, err := dryRun(t, k, manifest)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range warnings {
				t.Errorf("kubectl warned: %s", w)
			}
			var want []string
			for _, obj := range objs {
				want = append(want, resourceName(obj))
			}
			slices.Sort(want)
			slices.Sort(names)
			if !slices.Equal(names, want) {
				t.Errorf("the dry run reported\n  %s\nwant\n  %s", strings.Join(names, "\n  "), strings.Join(want, "\n  "))
			}
		})
	}
	// And stored none of them.
	if _, err := kube.CoreV1().ServiceAccounts(namespace).Get(ctxFor(t), release, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after the dry runs, getting the ServiceAccount: %v, want NotFound", err)
	}
}

// The dry run is a real check: a misspelt field of the PrometheusRule is
// refused by the operator's schema, a pod that breaks Pod Security is
// warned about.
func TestTheDryRunCatchesMistakes(t *testing.T) {
	k := newKubectl(t)
	installMonitoringCRDs(t, k)
	createNamespace(t)
	manifest, _ := mustTemplate(t, valuesArgs(t, "ci/deployment-values.yaml")...)
	for _, tt := range []struct {
		name, old, new, wantError, wantWarning string
	}{
		{name: "a misspelt field of a monitoring object", old: "  podMetricsEndpoints:", new: "  podMetricEndpoints:",
			wantError: `unknown field "spec.podMetricEndpoints"`},
		{name: "a misspelt field of a ServiceMonitor", old: "  endpoints:\n    - port: metrics", new: "  endpoint:\n    - port: metrics",
			wantError: `unknown field "spec.endpoint"`},
		{name: "a pod that breaks Pod Security restricted", old: "allowPrivilegeEscalation: false", new: "allowPrivilegeEscalation: true",
			wantWarning: `would violate PodSecurity "restricted:latest": allowPrivilegeEscalation != false`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := manifest
			if tt.name == "a misspelt field of a monitoring object" {
				m, _ = mustTemplate(t, valuesArgs(t, "ci/durable-values.yaml")...)
			}
			if strings.Count(m, tt.old) != 1 {
				t.Fatalf("the manifest does not have %q exactly once", tt.old)
			}
			_, warnings, err := dryRun(t, k, strings.Replace(m, tt.old, tt.new, 1))
			switch {
			case tt.wantError != "" && (err == nil || !strings.Contains(err.Error(), tt.wantError)):
				t.Fatalf("the dry run: %v, want an error about %s", err, tt.wantError)
			case tt.wantError == "" && err != nil:
				t.Fatal(err)
			case tt.wantWarning != "" && !slices.ContainsFunc(warnings, func(w string) bool { return strings.Contains(w, tt.wantWarning) }):
				t.Fatalf("warnings %q, want one about %s", warnings, tt.wantWarning)
			}
		})
	}
}

// Without a cluster, helm template makes the Prometheus Operator's objects
// only of the kinds --api-versions names: each kind
// (monitoring.coreos.com/v1/Kind), or all three with the group and version
// alone (monitoring.coreos.com/v1, as GitOps tools pass it). Where a kind
// is named too, as a cluster's discovery lists them, only the kinds named
// are made. helm install asks the cluster
// (TestTheChartInstallsAsTheReadmeSays).
func TestMonitoringObjectsOnlyOfKindsTheClusterServes(t *testing.T) {
	for _, tt := range []struct {
		name   string
		values string
		apis   []string
		want   []string // the monitoring kinds rendered, sorted
	}{
		{"neither", "deployment", nil, nil},
		{"another group's version", "deployment", []string{"monitoring.coreos.com/v1alpha1", "example.com/v1/ServiceMonitor"}, nil},
		{"the group and version", "deployment", []string{"monitoring.coreos.com/v1"}, []string{"PrometheusRule", "ServiceMonitor"}},
		{"the group and version, PodMonitor", "durable", []string{"monitoring.coreos.com/v1"}, []string{"PodMonitor", "PrometheusRule"}},
		{"the kind ServiceMonitor", "deployment", []string{"monitoring.coreos.com/v1/ServiceMonitor"}, []string{"ServiceMonitor"}},
		{"the kind PrometheusRule", "deployment", []string{"monitoring.coreos.com/v1/PrometheusRule"}, []string{"PrometheusRule"}},
		{"both kinds", "deployment", []string{"monitoring.coreos.com/v1/ServiceMonitor", "monitoring.coreos.com/v1/PrometheusRule"}, []string{"PrometheusRule", "ServiceMonitor"}},
		{"the kind PodMonitor", "durable", []string{"monitoring.coreos.com/v1/PodMonitor"}, []string{"PodMonitor"}},
		// What discovery lists where only the ServiceMonitor's CRD is installed.
		{"the group and version with one kind", "deployment", []string{"monitoring.coreos.com/v1", "monitoring.coreos.com/v1/ServiceMonitor"}, []string{"ServiceMonitor"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args := []string{"template", release, chartDir(t), "--namespace", namespace, "-f", filepath.Join(chartDir(t), "ci", tt.values+"-values.yaml")}
			for _, api := range tt.apis {
				args = append(args, "--api-versions", api)
			}
			out, _, err := run(t, nil, tool(t, "helm"), args...)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, kind := range kinds(decode(t, out)) {
				if kind == "ServiceMonitor" || kind == "PodMonitor" || kind == "PrometheusRule" {
					got = append(got, kind)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("rendered %v, want %v", got, tt.want)
			}
		})
	}
}
