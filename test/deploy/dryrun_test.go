package deploy

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// dryRun applies the kustomization in dir as a server-side dry run: the
// API server validates, defaults and admits every object (field validation
// is strict, Pod Security admission warns about pod templates) and stores
// nothing. It returns the names kubectl reports and what it warned about.
//
// A server-side dry run of a Namespace does not create it, so the objects
// in it would fail with "namespaces not found": the Namespace is applied
// for real first, then the whole kustomization (the Namespace again
// included) is dry-run.
func dryRun(t *testing.T, k *kubectl, dir string) (names, warnings []string, err error) {
	t.Helper()
	k.applyForReal(t, only(t, k.render(t, dir), "Namespace")...)
	stdout, stderr, err := k.run(t, "apply", "--dry-run=server", "-k", dir, "-o", "name")
	for line := range strings.Lines(stderr) {
		if strings.HasPrefix(line, "Warning:") {
			warnings = append(warnings, strings.TrimSpace(line))
		}
	}
	return strings.Fields(stdout), warnings, err
}

func TestServerSideDryRun(t *testing.T) {
	k := newKubectl(t)
	dir := filepath.Join(repoRoot(t), "deploy")
	objs := k.render(t, dir)
	names, warnings, err := dryRun(t, k, dir)
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
		t.Errorf("the server-side dry run reported\n  %s\nwant every object of deploy/:\n  %s", strings.Join(names, "\n  "), strings.Join(want, "\n  "))
	}
	t.Logf("the API server accepted %d objects: %s", len(names), strings.Join(names, ", "))
	// And stored none of them.
	if _, err := kube.AppsV1().Deployments("informerhub").Get(ctxFor(t), "informerhub", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after the dry run, getting the Deployment: %v, want NotFound", err)
	}
}

// The dry run is a real check: what the API server rejects or warns about,
// it reports.
func TestServerSideDryRunCatchesMistakes(t *testing.T) {
	k := newKubectl(t)
	for _, tt := range []struct {
		name           string
		file, old, new string
		wantError      string // in kubectl's output, when it must fail
		wantWarning    string // in a warning, when it must succeed with one
	}{
		{
			name: "a misspelt field",
			file: "base/deployment.yaml", old: "readOnlyRootFilesystem:", new: "readOnlyRootFileSystem:",
			wantError: `unknown field "spec.template.spec.containers[0].securityContext.readOnlyRootFileSystem"`,
		},
		{
			name: "an invalid value",
			file: "base/deployment.yaml", old: "maxUnavailable: 0", new: "maxUnavailable: -1",
			wantError: "spec.strategy.rollingUpdate.maxUnavailable",
		},
		{
			name: "a pod that breaks Pod Security restricted",
			file: "base/deployment.yaml", old: "allowPrivilegeEscalation: false", new: "allowPrivilegeEscalation: true",
			wantWarning: `would violate PodSecurity "restricted:latest": allowPrivilegeEscalation != false`,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := copyDeploy(t)
			path := filepath.Join(dir, tt.file)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Count(string(data), tt.old) != 1 {
				t.Fatalf("%s does not have %q exactly once", tt.file, tt.old)
			}
			if err := os.WriteFile(path, []byte(strings.Replace(string(data), tt.old, tt.new, 1)), 0o600); err != nil {
				t.Fatal(err)
			}
			_, warnings, err := dryRun(t, k, dir)
			switch {
			case tt.wantError != "" && err == nil:
				t.Fatalf("the dry run succeeded, want an error about %s", tt.wantError)
			case tt.wantError != "" && !strings.Contains(err.Error(), tt.wantError):
				t.Fatalf("the dry run failed, but not about %s: %v", tt.wantError, err)
			case tt.wantError == "" && err != nil:
				t.Fatal(err)
			case tt.wantWarning != "" && !slices.ContainsFunc(warnings, func(w string) bool { return strings.Contains(w, tt.wantWarning) }):
				t.Fatalf("warnings %q, want one about %s", warnings, tt.wantWarning)
			}
		})
	}
}

// Why dryRun applies the Namespace first: without it, the dry run of the
// objects in it fails.
func TestDryRunNeedsTheNamespace(t *testing.T) {
	k := newKubectl(t)
	dir := copyDeploy(t)
	path := filepath.Join(dir, "base", "kustomization.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const old, ns = "namespace: informerhub\n", "informerhub-not-yet"
	if strings.Count(string(data), old) != 1 {
		t.Fatalf("base/kustomization.yaml does not say %q exactly once", old)
	}
	data = []byte(strings.Replace(string(data), old, "namespace: "+ns+"\n", 1))
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err = k.run(t, "apply", "--dry-run=server", "-k", dir, "-o", "name")
	if want := `namespaces "` + ns + `" not found`; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("dry run without the namespace: got %v, want an error saying %s", err, want)
	}
}

// copyDeploy copies deploy/ to a temporary directory, to change it there.
func copyDeploy(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	if err := os.CopyFS(dst, os.DirFS(filepath.Join(repoRoot(t), "deploy"))); err != nil {
		t.Fatal(err)
	}
	return dst
}
