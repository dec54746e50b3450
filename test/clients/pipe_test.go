package clients

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/informerhub/informerhub/internal/testhub"
)

// TestExamplesEndQuietlyOnAClosedPipe runs the Node.js and Python examples
// as `example watch configmaps -n NS | head -1` would: their reader takes
// one line and goes away, and the next change they print meets a closed
// pipe. They must end with status 0 and say nothing of it on stderr (no
// stack trace), as hubctl, and any command line tool, does.
func TestExamplesEndQuietlyOnAClosedPipe(t *testing.T) {
	ns, err := kube.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "pipe-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(serviceAccountToken(t, ns.Name, "reader", "list", "watch")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	createConfigMap := func(name string) {
		t.Helper()
		if _, err := kube.CoreV1().ConfigMaps(ns.Name).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	createConfigMap("first")
	hub := testhub.Start(t, cluster.KubeConfig, "--auth", "kubernetes")
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	flags := []string{"--insecure", "--hub", hub.Addr, "--token-file", tokenFile, "watch", "configmaps", "-n", ns.Name}
	for name, argv := range map[string][]string{
		"node":   append([]string{"node", filepath.Join(root, "clients", "node", "example.js")}, flags...),
		"python": append([]string{python, filepath.Join(root, "clients", "python", "example.py")}, flags...),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := exec.LookPath(argv[0]); err != nil {
				t.Fatalf("%s is not installed: %v", argv[0], err)
			}
			if _, err := os.Stat(filepath.Join(root, "clients", "node", "node_modules")); name == "node" && err != nil {
				t.Fatalf("clients/node has no node_modules: run `make node-deps`: %v", err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
			if name == "python" {
				stubs := t.TempDir()
				generate := exec.Command(filepath.Join(root, "clients", "python", "generate.sh"), stubs)
				generate.Env = append(os.Environ(), "PYTHON="+python)
				if out, err := generate.CombinedOutput(); err != nil {
					t.Fatalf("generating the Python stubs: %v\n%s", err, out)
				}
				cmd.Env = append(os.Environ(), "PYTHONPATH="+stubs, "PYTHONDONTWRITEBYTECODE=1")
			}
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			cmd.WaitDelay = 10 * time.Second
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// head -1: one line, then the pipe's reading end is closed.
			line, err := bufio.NewReader(stdout).ReadString('\n')
			if err != nil || !strings.Contains(line, `"first"`) {
				cmd.Process.Kill() //nolint:errcheck // failing anyway
				cmd.Wait()         //nolint:errcheck // failing anyway
				t.Fatalf("the first line %q (%v), want the ADDED of first; stderr:\n%s", line, err, stderr.String())
			}
			stdout.Close()
			// Changes until one meets the closed pipe: the first may sit in
			// a buffer.
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			for i := 0; ; i++ {
				createConfigMap(fmt.Sprintf("%s-%d", name, i))
				select {
				case err = <-done:
				case <-time.After(time.Second):
					if ctx.Err() != nil {
						t.Fatalf("still running after its reader went away; stderr:\n%s", stderr.String())
					}
					continue
				}
				break
			}
			if err != nil {
				t.Fatalf("%s ended with %v after its reader went away, want status 0; stderr:\n%s", name, err, stderr.String())
			}
			if s := stderr.String(); strings.Contains(s, "EPIPE") || strings.Contains(s, "Traceback") || strings.Contains(s, "BrokenPipe") || strings.Contains(s, "    at ") {
				t.Fatalf("stderr tells of the closed pipe:\n%s", s)
			}
		})
	}
}
