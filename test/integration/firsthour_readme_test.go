package integration

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/informerhub/informerhub/server"
)

// TestTheREADMEsHubctlLinesWorkForMakeRunsIdentity runs each hubctl line of
// the README as make run's demo identity may (the read rules of the
// ClusterRole view, bound as cmd/devcluster binds them: everything but
// Secrets), in a namespace of its own standing in for demo. A line passes
// once hubctl has printed its first result, or ended with status 0: a line
// the identity may not run ends with PERMISSION_DENIED first (issue 39:
// `watch configmaps,secrets` did).
func TestTheREADMEsHubctlLinesWorkForMakeRunsIdentity(t *testing.T) {
	lines := readmeHubctlLines(t)
	if len(lines) < 5 {
		t.Fatalf("found %d hubctl lines in the README; its hubctl block moved?", len(lines))
	}
	bin := hubctl(t)
	ns := namespace(t)
	createConfigMap(t, ns, "web-0", map[string]string{"app": "web"}, "hello")
	token := serviceAccountToken(t, ns, "explorer")
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-explorer-view"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:aggregate-to-view"},
		Subjects:   []rbacv1.Subject{serviceAccount(ns, "explorer")},
	}
	if _, err := kube.RbacV1().ClusterRoleBindings().Create(bgCtx(), binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
	})
	// Something for each line to print: hubctl prints a watch's table once
	// its initial objects are listed, and says "No resources found" on
	// stderr for none.
	pod := corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}
	if _, err := kube.CoreV1().Pods(ns).Create(bgCtx(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: pod}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	web := map[string]string{"app": "web"}
	if _, err := kube.AppsV1().Deployments(ns).Create(bgCtx(), &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: web},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: web},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: web}, Spec: pod},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	h := startAuthHub(t, server.Config{})
	global := []string{"--hub", h.addr, "--insecure", "--token-file", tokenFile}
	for _, line := range lines {
		args := strings.Fields(strings.ReplaceAll(" "+line+" ", " demo ", " "+ns+" "))[1:]
		t.Run(line, func(t *testing.T) {
			ctx, cancel := context.WithCancel(ctxFor(t))
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, append(global, args...)...)
			cmd.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(t.TempDir(), "none"))
			var stderr strings.Builder
			cmd.Stderr = &stderr
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			printed := make(chan string, 1)
			go func() {
				sc := bufio.NewScanner(stdout)
				if sc.Scan() {
					printed <- sc.Text()
				}
				close(printed)
			}()
			first, ok := <-printed
			if ok {
				t.Logf("first line: %s", first)
				cancel() // a watch runs until stopped
				_ = cmd.Wait()
				return
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("hubctl %s: %v, printing nothing: %s", strings.Join(args, " "), err, stderr.String())
			}
		})
	}
}

// readmeHubctlLines returns the hubctl commands of the README's hubctl
// block (the one that defines the alias), without their comments.
func readmeHubctlLines(t *testing.T) []string {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	inBlock := false
	for line := range strings.SplitSeq(string(readme), "\n") {
		switch {
		case strings.HasPrefix(line, "alias hubctl="):
			inBlock = true
		case inBlock && strings.HasPrefix(line, "```"):
			return lines
		case inBlock && strings.HasPrefix(line, "hubctl "):
			command, _, _ := strings.Cut(line, "#")
			lines = append(lines, strings.TrimSpace(command))
		}
	}
	t.Fatal(fmt.Errorf("README.md has no block with alias hubctl= and hubctl lines"))
	return nil
}
