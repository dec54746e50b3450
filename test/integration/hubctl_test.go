package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/internal/testhub"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files of the hubctl tests")

// hubctl builds cmd/hubctl once per test run.
func hubctl(t *testing.T) string {
	t.Helper()
	return testhub.Build(t, "github.com/informerhub/informerhub/cmd/hubctl")
}

// normalize makes hubctl's output comparable across runs: the test's
// namespace, resourceVersions and ages vary; spacing follows their widths.
func normalize(out, ns string) string {
	out = strings.ReplaceAll(out, ns, "NS")
	var lines []string
	for line := range strings.SplitSeq(strings.TrimRight(out, "\n"), "\n") {
		fields := strings.Fields(line)
		for i, f := range fields {
			switch {
			case regexp.MustCompile(`^\d+$`).MatchString(f):
				fields[i] = "<rv>"
			case regexp.MustCompile(`^\d+(s|m|h|d)$`).MatchString(f):
				fields[i] = "<age>"
			}
		}
		lines = append(lines, strings.Join(fields, " "))
	}
	return strings.Join(lines, "\n") + "\n"
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "hubctl", name)
	if *updateGolden {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run the test with -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s differs (-golden +got):\n%s", name, diff)
	}
}

// runHubctl runs the CLI to its end, with no kubeconfig: its namespace is
// "default" unless the command gives one.
func runHubctl(t *testing.T, bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return runHubctlEnv(t, bin, []string{"KUBECONFIG=" + filepath.Join(t.TempDir(), "none")}, args...)
}

// runHubctlEnv runs the CLI to its end, with env after the test's own.
func runHubctlEnv(t *testing.T, bin string, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

// TestHubctl runs the CLI against a hub for a scripted scenario.
func TestHubctl(t *testing.T) {
	bin := hubctl(t)
	ns := namespace(t)
	createConfigMap(t, ns, "alpha", map[string]string{"app": "web"}, "1")
	createConfigMap(t, ns, "beta", map[string]string{"app": "db"}, "1")
	h := startHub(t, informerhub.Config{})
	run := func(args ...string) (stdout, stderr string, code int) {
		t.Helper()
		return runHubctl(t, bin, append([]string{"--insecure", "--hub", h.addr}, args...)...)
	}

	t.Run("snapshot", func(t *testing.T) {
		stdout, stderr, code := run("snapshot", "configmaps", "-n", ns)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		golden(t, "snapshot.golden", normalize(stdout, ns))
		if !strings.Contains(stderr, "2 objects at resourceVersion") || !strings.Contains(stderr, "--resume-token ") {
			t.Errorf("stderr %q does not give the resume token", stderr)
		}

		stdout, _, _ = run("snapshot", "configmaps", "-n", ns, "-l", "app=web", "-o", "json")
		var snap struct {
			ResumeToken string            `json:"resumeToken"`
			Items       []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal([]byte(stdout), &snap); err != nil || snap.ResumeToken == "" || len(snap.Items) != 1 {
			t.Fatalf("-o json printed %s (%v)", stdout, err)
		}
	})

	t.Run("watch several types", func(t *testing.T) {
		ns := namespace(t)
		createConfigMap(t, ns, "a", nil, "1")
		if _, err := kube.CoreV1().Secrets(ns).Create(ctxFor(t), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "--insecure", "--hub", h.addr, "watch", "configmaps,secrets", "-n", ns)
		stdoutPipe, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		scanner := bufio.NewScanner(stdoutPipe)
		var out strings.Builder
		read := func(n int) {
			t.Helper()
			for range n {
				if !scanner.Scan() {
					t.Fatalf("hubctl printed %q, then ended: %s", out.String(), stderr.String())
				}
				out.WriteString(scanner.Text() + "\n")
			}
		}
		read(3) // the header, the ConfigMap, the Secret: initial events in the order of the types
		createConfigMap(t, ns, "b", nil, "1")
		read(1)
		if err := cmd.Process.Signal(os.Interrupt); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("hubctl exited with %v after Ctrl-C: %s", err, stderr.String())
		}
		golden(t, "watch-many.golden", normalize(out.String(), ns))
		if !strings.Contains(stderr.String(), "resume with: --resume-token ") {
			t.Errorf("after Ctrl-C, stderr %q gives no resume token", stderr.String())
		}
		if _, stderr, code := run("snapshot", "configmaps,secrets", "-n", ns); code != 2 || !strings.Contains(stderr, "are for watch") {
			t.Errorf("snapshot of several types: exit %d, %q; want a usage error", code, stderr)
		}
	})

	t.Run("count", func(t *testing.T) {
		ns := namespace(t)
		createConfigMap(t, ns, "a", map[string]string{"app": "web"}, "1")
		createConfigMap(t, ns, "b", map[string]string{"app": "web"}, "1")
		createConfigMap(t, ns, "c", map[string]string{"app": "db"}, "1")
		createConfigMap(t, ns, "d", nil, "1")
		stdout, stderr, code := run("count", "configmaps", "-n", ns, "--by", "label:app")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		golden(t, "count.golden", stdout) // no resourceVersions, ages or names to normalize
		stdout, _, _ = run("count", "configmaps", "-n", ns, "-o", "json")
		var counts struct {
			Total           uint64 `json:"total"`
			ResourceVersion string `json:"resourceVersion"`
		}
		if err := json.Unmarshal([]byte(stdout), &counts); err != nil || counts.Total != 4 || counts.ResourceVersion == "" {
			t.Fatalf("-o json printed %s (%v), want a total of 4", stdout, err)
		}
		if _, stderr, code := run("count", "configmaps", "-n", ns, "--by", "label:not a key"); code != 1 || !strings.Contains(stderr, "InvalidArgument") {
			t.Errorf("a bad --by: exit %d, %q; want INVALID_ARGUMENT", code, stderr)
		}

		// Live: new counts when they change.
		cmd := exec.Command(bin, "--insecure", "--hub", h.addr, "count", "configmaps", "-n", ns, "-w", "-o", "json")
		stdoutPipe, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer cmd.Wait() //nolint:errcheck // ended by the interrupt below
		defer cmd.Process.Signal(os.Interrupt)
		lines := bufio.NewScanner(stdoutPipe)
		for _, want := range []uint64{4, 5} {
			if !lines.Scan() {
				t.Fatalf("count -w ended before a total of %d", want)
			}
			if err := json.Unmarshal(lines.Bytes(), &counts); err != nil || counts.Total != want {
				t.Fatalf("count -w printed %s (%v), want a total of %d", lines.Text(), err, want)
			}
			if want == 4 {
				createConfigMap(t, ns, "e", nil, "1")
			}
		}
	})

	t.Run("watch, Ctrl-C, resume", func(t *testing.T) {
		cmd := exec.Command(bin, "--insecure", "--hub", h.addr, "watch", "configmaps.v1", "-n", ns)
		stdoutPipe, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 100)
		go func() {
			defer close(lines)
			scanner := bufio.NewScanner(stdoutPipe)
			for scanner.Scan() {
				lines <- scanner.Text()
			}
		}()
		var out strings.Builder
		read := func(n int) {
			t.Helper()
			for range n {
				select {
				case line := <-lines:
					out.WriteString(line + "\n")
				case <-time.After(time.Minute):
					t.Fatalf("hubctl printed %q, then nothing", out.String())
				}
			}
		}
		read(3) // the header and the two objects
		updateConfigMap(t, ns, "alpha", map[string]string{"app": "web"}, "2")
		createConfigMap(t, ns, "gamma", nil, "1")
		deleteConfigMap(t, ns, "beta")
		read(3)
		if err := cmd.Process.Signal(os.Interrupt); err != nil {
			t.Fatal(err)
		}
		for range lines { // to the end of its output
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("hubctl exited with %v after Ctrl-C: %s", err, stderr.String())
		}
		golden(t, "watch.golden", normalize(out.String(), ns))

		m := regexp.MustCompile(`resume with: --resume-token (\S+)`).FindStringSubmatch(stderr.String())
		if m == nil {
			t.Fatalf("after Ctrl-C, stderr %q gives no resume token", stderr.String())
		}
		// A change made while no watch runs arrives after resuming.
		createConfigMap(t, ns, "delta", nil, "1")
		resumed := exec.Command(bin, "--insecure", "--hub", h.addr, "watch", "configmaps", "-n", ns, "--resume-token", m[1], "-o", "json")
		resumedOut, err := resumed.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := resumed.Start(); err != nil {
			t.Fatal(err)
		}
		defer resumed.Wait() //nolint:errcheck // ended by the interrupt below
		defer resumed.Process.Signal(os.Interrupt)
		line, err := bufio.NewReader(resumedOut).ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		var e struct {
			Type   string `json:"type"`
			Object struct {
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
			} `json:"object"`
			ResumeToken string `json:"resumeToken"`
		}
		if err := json.Unmarshal([]byte(line), &e); err != nil || e.Type != "ADDED" || e.Object.Metadata.Name != "delta" || e.ResumeToken == "" {
			t.Fatalf("the resumed watch printed %s (%v), want the ADDED of delta", line, err)
		}
	})

	t.Run("resources", func(t *testing.T) {
		stdout, _, code := run("resources")
		if code != 0 || !regexp.MustCompile(`(?m)^\s+v1\s+configmaps\s+ConfigMap\s+true\s+running\s+\d+\s+\d+$`).MatchString(stdout) {
			t.Fatalf("exit %d, resources:\n%s", code, stdout)
		}
		if !regexp.MustCompile(`(?m)^apps\s+v1\s+deployments\s+Deployment\s+true\s+-\s+0\s+0$`).MatchString(stdout) {
			t.Fatalf("resources does not list deployments.apps:\n%s", stdout)
		}
		// In a namespace: no cluster-wide activity, and no cluster-scoped
		// types.
		stdout, _, code = run("resources", "-n", ns)
		if code != 0 || !regexp.MustCompile(`(?m)^\s+v1\s+configmaps\s+ConfigMap$`).MatchString(stdout) || strings.Contains(stdout, "namespaces") {
			t.Fatalf("exit %d, resources -n:\n%s", code, stdout)
		}
	})

	t.Run("errors", func(t *testing.T) {
		for _, tt := range []struct {
			args   []string
			code   int
			stderr string
		}{
			{[]string{"watch", "nosuchthings"}, 1, `the cluster serves no resource type "nosuchthings" that can be watched (hubctl resources lists them)`},
			{[]string{"watch"}, 2, "which resource?"},
			{[]string{"snapshot", "configmaps", "-l", "a in (b"}, 1, "InvalidArgument: selector.label_selector"},
			{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		} {
			_, stderr, code := run(tt.args...)
			if code != tt.code || !strings.Contains(stderr, tt.stderr) {
				t.Errorf("hubctl %v: exit %d, stderr %q; want exit %d and %q", tt.args, code, stderr, tt.code, tt.stderr)
			}
		}
	})
}
