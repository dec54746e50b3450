// Command devcluster runs a command against a local Kubernetes control plane:
// it starts kube-apiserver and etcd (built by `make controlplane`), writes
// their kubeconfig, adds a few demo objects and a demo identity (the service
// account demo/explorer, bound to the ClusterRole view) whose bearer token it
// writes to a file, runs the command with --kubeconfig appended, and tears
// everything down when the command exits or on Ctrl-C. `make run` uses it to
// run informerhub.
//
// With -etcd-dir and -service-account-key, what one run made (objects,
// tokens) is there and valid in the next. With -ready-url, it prints
// -ready-message once the command answers that URL with 200 OK: hints for
// a person, printed when they work rather than while the command starts.
//
//	devcluster [-kubeconfig FILE] [-token FILE] [-etcd-dir DIR] [-service-account-key FILE]
//	           [-ready-url URL -ready-message TEXT] -- COMMAND [ARGS...]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/informerhub/informerhub/internal/controlplane"
)

func main() {
	// A FlagSet of its own: controller-runtime registers a global -kubeconfig.
	fs := flag.NewFlagSet("devcluster", flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", ".cache/run/kubeconfig", "where to write the control plane's kubeconfig")
	token := fs.String("token", ".cache/run/token", "where to write the bearer token of demo/explorer")
	etcdDir := fs.String("etcd-dir", "", "keep etcd's data here across runs (empty: a temporary directory)")
	saKey := fs.String("service-account-key", "", "keep the key that signs service account tokens in this file, so that with -etcd-dir the tokens of one run are valid in the next (empty: a new key each run)")
	readyURL := fs.String("ready-url", "", "poll this URL (the command's readiness probe) and print -ready-message once it answers 200 OK")
	readyMessage := fs.String("ready-message", "", "what to print, on stdout, once -ready-url answers 200 OK")
	_ = fs.Parse(os.Args[1:]) // ExitOnError
	if fs.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: devcluster [-kubeconfig FILE] [-token FILE] [-etcd-dir DIR] [-service-account-key FILE] [-ready-url URL -ready-message TEXT] -- COMMAND [ARGS...]")
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("component", "devcluster")
	code, err := run(log, config{
		kubeconfig: *kubeconfig, tokenFile: *token, etcdDir: *etcdDir, saKey: *saKey,
		ready: announcement{url: *readyURL, message: *readyMessage, out: os.Stdout},
	}, fs.Args())
	if err != nil {
		log.Error("devcluster failed", "error", err)
		os.Exit(1)
	}
	os.Exit(code)
}

// config is what devcluster's flags say.
type config struct {
	kubeconfig, tokenFile string // where to write the kubeconfig and demo/explorer's token
	etcdDir, saKey        string // what to keep across runs; "": nothing
	ready                 announcement
}

func run(log *slog.Logger, c config, command []string) (int, error) {
	kubeconfig, tokenFile := c.kubeconfig, c.tokenFile
	log.Info("starting kube-apiserver and etcd", "version", controlplane.Version, "etcdDir", c.etcdDir)
	cp, err := controlplane.StartWith(controlplane.Options{EtcdDataDir: c.etcdDir, ServiceAccountKeyFile: c.saKey})
	if err != nil {
		return 0, err
	}
	defer func() {
		log.Info("stopping the control plane")
		if err := cp.Stop(); err != nil {
			log.Error("stopping the control plane", "error", err)
		}
	}()
	if err := os.MkdirAll(filepath.Dir(kubeconfig), 0o755); err != nil {
		return 0, err
	}
	if err := os.WriteFile(kubeconfig, cp.KubeConfig, 0o600); err != nil {
		return 0, err
	}
	token, err := seed(cp)
	if err != nil {
		return 0, fmt.Errorf("adding demo objects: %w", err)
	}
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		return 0, err
	}
	log.Info("control plane ready", "kubeconfig", kubeconfig, "token", tokenFile,
		"try", "KUBECONFIG="+kubeconfig+" kubectl get configmaps -n demo")

	cmd := exec.Command(command[0], append(command[1:], "--kubeconfig", kubeconfig)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	announced := make(chan struct{})
	ctx, stopAnnouncing := context.WithCancel(context.Background())
	go func() {
		defer close(announced)
		c.ready.whenReady(ctx, log)
	}()
	defer func() { stopAnnouncing(); <-announced }()
	// Ctrl-C reaches the whole process group; SIGTERM to this process is
	// passed on, and so is SIGHUP (a closed terminal), as SIGTERM. Either
	// way the command shuts down first, then the control plane, which
	// would otherwise outlive this process.
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		for sig := range signals {
			if sig == syscall.SIGHUP {
				sig = syscall.SIGTERM
			}
			_ = cmd.Process.Signal(sig)
		}
	}()
	err = cmd.Wait()
	signal.Stop(signals)
	close(signals)
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), nil
	}
	return 0, err
}

// seed adds a namespace "demo" with a few ConfigMaps to explore, and the
// service account demo/explorer, which may read what the ClusterRole view
// allows (most things, not Secrets); it returns a token of explorer valid
// for a day. On a kept etcd (-etcd-dir) they exist already, as left.
func seed(cp *controlplane.ControlPlane) (token string, err error) {
	ctx := context.Background()
	kube, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		return "", err
	}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "demo"}}, metav1.CreateOptions{}); created(err) != nil {
		return "", err
	}
	for i, app := range []string{"web", "web", "db"} {
		_, err := kube.CoreV1().ConfigMaps("demo").Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", app, i), Labels: map[string]string{"app": app}},
			Data:       map[string]string{"greeting": "hello"},
		}, metav1.CreateOptions{})
		if created(err) != nil {
			return "", err
		}
	}
	if _, err := kube.CoreV1().ServiceAccounts("demo").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "explorer"}}, metav1.CreateOptions{}); created(err) != nil {
		return "", err
	}
	if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "demo-explorer-view"},
		// The rules of view: with no controller manager to aggregate them,
		// view itself is empty here.
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:aggregate-to-view"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "demo", Name: "explorer"}},
	}, metav1.CreateOptions{}); created(err) != nil {
		return "", err
	}
	day := int64(24 * 60 * 60)
	tr, err := kube.CoreV1().ServiceAccounts("demo").CreateToken(ctx, "explorer", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &day},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return tr.Status.Token, nil
}

// created passes on a create's error, but for AlreadyExists: seeding a
// kept etcd finds what the last run made.
func created(err error) error {
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}
