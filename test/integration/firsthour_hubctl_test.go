package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/server"
)

// TestHubctlAsKubectlUsersTypeIt runs hubctl as a kubectl user would in
// their first hour (issue 29): the names kubectl takes, its namespace from
// the kubeconfig, -A, -o yaml, snapshot -o json as a List, snapshot -w.
func TestHubctlAsKubectlUsersTypeIt(t *testing.T) {
	bin := hubctl(t)
	ns, other := namespace(t), namespace(t)
	createConfigMap(t, ns, "alpha", map[string]string{"app": "web"}, "1")
	createConfigMap(t, ns, "beta", nil, "1")
	createConfigMap(t, other, "elsewhere", nil, "1")
	h := startHub(t, informerhub.Config{})
	global := []string{"--insecure", "--hub", h.addr}
	// A kubeconfig whose context is in ns, as `kubectl config
	// set-context --current --namespace` makes it; hubctl reads only its
	// namespace.
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {}}]
contexts: [{name: c, context: {cluster: c, user: u, namespace: `+ns+`}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	inNS := []string{"KUBECONFIG=" + kubeconfig}
	run := func(env []string, args ...string) (string, string) {
		t.Helper()
		stdout, stderr, code := runHubctlEnv(t, bin, env, append(global, args...)...)
		if code != 0 {
			t.Fatalf("hubctl %q: exit %d: %s", args, code, stderr)
		}
		return stdout, stderr
	}
	names := func(list string) []string {
		t.Helper()
		var l struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
			Items []struct {
				Metadata struct{ Name string } `json:"metadata"`
			} `json:"items"`
			ResumeToken string `json:"resumeToken"`
		}
		if err := yaml.Unmarshal([]byte(list), &l); err != nil {
			t.Fatalf("not a List: %v\n%s", err, list)
		}
		if l.APIVersion != "v1" || l.Kind != "List" || l.Metadata.ResourceVersion == "" || l.ResumeToken == "" {
			t.Fatalf("not a Kubernetes List with a resourceVersion and a resumeToken:\n%s", list)
		}
		var out []string
		for _, i := range l.Items {
			out = append(out, i.Metadata.Name)
		}
		return out
	}

	t.Run("the names kubectl takes", func(t *testing.T) {
		want, _ := run(nil, "snapshot", "configmaps", "-n", ns)
		for _, name := range []string{"cm", "configmap", "ConfigMap", "cm.v1"} {
			if got, _ := run(nil, "snapshot", name, "-n", ns); normalize(got, ns) != normalize(want, ns) {
				t.Errorf("snapshot %s:\n%s\nwant, as configmaps:\n%s", name, got, want)
			}
		}
		_, stderr, code := runHubctl(t, bin, append(global, "snapshot", "confgmaps", "-n", ns)...)
		if code != 1 || !strings.Contains(stderr, `the cluster serves no resource type "confgmaps"`) || !strings.Contains(stderr, "did you mean configmaps?") {
			t.Errorf("a misspelt name: exit %d, %q; want a suggestion", code, stderr)
		}
	})

	t.Run("the kubeconfig's namespace, -n and -A", func(t *testing.T) {
		stdout, _ := run(inNS, "snapshot", "cm", "-o", "json")
		if got := names(stdout); strings.Join(got, ",") != "alpha,beta" {
			t.Errorf("snapshot in the kubeconfig's namespace: %q, want alpha,beta", got)
		}
		stdout, _ = run(inNS, "snapshot", "cm", "-n", other, "-o", "json")
		if got := names(stdout); strings.Join(got, ",") != "elsewhere" {
			t.Errorf("snapshot -n %s: %q, want elsewhere", other, got)
		}
		stdout, _ = run(inNS, "snapshot", "cm", "-A", "-o", "json")
		all := strings.Join(names(stdout), ",")
		if !strings.Contains(all, "alpha,beta") || !strings.Contains(all, "elsewhere") {
			t.Errorf("snapshot -A: %q, want alpha, beta and elsewhere among them", all)
		}
		// No kubeconfig: "default", as kubectl.
		stdout, _ = run(nil, "snapshot", "cm", "-o", "json")
		if got := names(stdout); strings.Contains(strings.Join(got, ","), "alpha") {
			t.Errorf("snapshot without a kubeconfig listed %q, want those of default only", got)
		}
		// The tables' NAMESPACE column, as kubectl get's: with -A, for a
		// namespaced type only.
		for _, tt := range []struct {
			args []string
			want bool
		}{
			{[]string{"snapshot", "cm"}, false},
			{[]string{"snapshot", "cm", "-n", other}, false},
			{[]string{"snapshot", "cm", "-A"}, true},
			{[]string{"snapshot", "namespaces", "-A"}, false},
		} {
			stdout, _ := run(inNS, tt.args...)
			header, _, _ := strings.Cut(stdout, "\n")
			if got := strings.HasPrefix(header, "NAMESPACE "); got != tt.want {
				t.Errorf("hubctl %s printed the header %q; want NAMESPACE: %v", strings.Join(tt.args, " "), header, tt.want)
			}
		}
		if _, stderr, code := runHubctlEnv(t, bin, inNS, append(global, "snapshot", "cm", "-A", "-n", ns)...); code != 2 || !strings.Contains(stderr, "contradicts") {
			t.Errorf("-A with -n: exit %d, %q; want a usage error", code, stderr)
		}
	})

	t.Run("snapshot -o json and -o yaml", func(t *testing.T) {
		stdout, _ := run(nil, "snapshot", "cm", "-n", ns, "-o", "json")
		var raw map[string]json.RawMessage
		if err := json.Unmarshal([]byte(stdout), &raw); err != nil || raw["items"] == nil {
			t.Fatalf("-o json has no items: %v\n%s", err, stdout)
		}
		if got := names(stdout); strings.Join(got, ",") != "alpha,beta" {
			t.Errorf("-o json items %q", got)
		}
		stdout, _ = run(nil, "snapshot", "cm", "-n", ns, "-o", "yaml")
		// One document, a List, as kubectl prints it: no --- before it.
		if !strings.HasPrefix(stdout, "apiVersion: v1\n") {
			t.Errorf("-o yaml does not start with the List:\n%s", stdout)
		}
		if got := names(stdout); strings.Join(got, ",") != "alpha,beta" {
			t.Errorf("-o yaml items %q", got)
		}
	})

	t.Run("snapshot -w and watch -o yaml", func(t *testing.T) {
		ns := namespace(t)
		createConfigMap(t, ns, "first", nil, "1")
		follow := startHubctlWatch(t, bin, append(global, "snapshot", "cm", "-n", ns, "-w")...)
		if got := normalize(strings.Join(follow.read(t, 2), "\n"), ns); got != "NAME RESOURCEVERSION AGE\nfirst <rv> <age>\n" {
			t.Errorf("snapshot -w began with:\n%s", got)
		}
		yamlWatch := startHubctlWatch(t, bin, append(global, "watch", "cm", "-n", ns, "-o", "yaml")...)
		if got := yamlWatch.read(t, 1); got[0] != "object:" { // no --- before the first document
			t.Errorf("watch -o yaml began with %q", got)
		}
		createConfigMap(t, ns, "second", nil, "1")
		// After the snapshot's table, the changes after it, as hubctl watch
		// prints them.
		if got := normalize(strings.Join(follow.read(t, 2), "\n"), ns); got != "EVENT NAME RESOURCEVERSION AGE\nADDED second <rv> <age>\n" {
			t.Errorf("snapshot -w then printed:\n%s", got)
		}
	})
}

// TestHubctlSaysWhatToDo runs hubctl into each error a newcomer meets
// (issue 29), and checks that it says the cause and what to do.
func TestHubctlSaysWhatToDo(t *testing.T) {
	bin := hubctl(t)
	ns := namespace(t)
	createConfigMap(t, ns, "alpha", nil, "1")
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(serviceAccountToken(t, ns, "newcomer")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	grant(t, ns, serviceAccount(ns, "newcomer"), "configmaps")
	h := startAuthHub(t, server.Config{})
	for _, tt := range []struct {
		name   string
		args   []string
		stderr []string
	}{
		{"a type the caller may not read", []string{"--insecure", "--hub", h.addr, "--token-file", tokenFile, "snapshot", "secrets", "-n", ns},
			[]string{"PermissionDenied", "may not list secrets", "RBAC"}},
		{"a plaintext hub without --insecure", []string{"--hub", h.addr, "--token-file", tokenFile, "snapshot", "cm", "-n", ns},
			[]string{"tls: first record does not look like a TLS handshake", "speaks plaintext, not TLS: add --insecure"}},
		{"no token", []string{"--insecure", "--hub", h.addr, "snapshot", "cm", "-n", ns},
			[]string{"Unauthenticated", "give --token-file FILE"}},
		{"a CEL syntax error", []string{"--insecure", "--hub", h.addr, "--token-file", tokenFile, "snapshot", "cm", "-n", ns, "--filter", "object.data.v =="},
			[]string{"InvalidArgument", "ERROR: <input>:1:17: Syntax error", "\n | object.data.v ==\n | ................^"}},
		{"a label key as dotted names", []string{"--insecure", "--hub", h.addr, "--token-file", tokenFile, "snapshot", "cm", "-n", ns, "--field", "metadata.labels.app.kubernetes.io/name"},
			[]string{"InvalidArgument", `'/' cannot be in a plain name`, `metadata.labels["app.kubernetes.io/name"]`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, stderr, code := runHubctl(t, bin, tt.args...)
			if code != 1 {
				t.Errorf("exit %d, want 1: %s", code, stderr)
			}
			for _, want := range tt.stderr {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr does not say %q:\n%s", want, stderr)
				}
			}
		})
	}
	// Given what it asked for, the same caller reads.
	stdout, stderr, code := runHubctl(t, bin, "--insecure", "--hub", h.addr, "--token-file", tokenFile, "snapshot", "cm", "-n", ns)
	if code != 0 || !strings.Contains(stdout, "alpha") {
		t.Fatalf("exit %d, %s: %s", code, stdout, stderr)
	}
}
