package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// reviewTokenEnv names the token file the test binary, run as devcluster's
// command, reviews with the API server (TestMain).
const reviewTokenEnv = "DEVCLUSTER_TEST_REVIEW_TOKEN"

func TestMain(m *testing.M) {
	flag.Parse()
	if file := os.Getenv(reviewTokenEnv); file != "" {
		// devcluster appends --kubeconfig FILE to its command, this test
		// binary in TestTokenOutlivesARestart; the flag is
		// controller-runtime's, registered globally.
		if err := reviewToken(flag.Lookup("kubeconfig").Value.String(), file); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// reviewToken asks the API server of kubeconfig whether the token in file
// is demo/explorer's.
func reviewToken(kubeconfig, file string) error {
	token, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	review, err := kube.AuthenticationV1().TokenReviews().Create(
		context.Background(), &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: strings.TrimSpace(string(token))}}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	if want := "system:serviceaccount:demo:explorer"; !review.Status.Authenticated || review.Status.User.Username != want {
		return fmt.Errorf("the token of the last run is not %s's now: %+v", want, review.Status)
	}
	return nil
}

// TestTokenOutlivesARestart runs devcluster twice over the same etcd and
// service account key, as `make run` does when restarted: the token the
// first run wrote is still demo/explorer's in the second.
func TestTokenOutlivesARestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane twice")
	}
	dir := t.TempDir()
	kubeconfig, token := filepath.Join(dir, "kubeconfig"), filepath.Join(dir, "token")
	etcd, key := filepath.Join(dir, "etcd"), filepath.Join(dir, "sa-signer.key")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if code, err := run(log, config{kubeconfig: kubeconfig, tokenFile: token, etcdDir: etcd, saKey: key}, []string{"true"}); err != nil || code != 0 {
		t.Fatalf("the first run: exit %d, %v", code, err)
	}
	kept := filepath.Join(dir, "token-of-the-first-run")
	if err := os.Rename(token, kept); err != nil {
		t.Fatal(err)
	}
	t.Setenv(reviewTokenEnv, kept)
	if code, err := run(log, config{kubeconfig: kubeconfig, tokenFile: token, etcdDir: etcd, saKey: key}, []string{self, "-test.run=^$"}); err != nil || code != 0 {
		t.Fatalf("the second run: exit %d, %v (exit 3: the first run's token was refused)", code, err)
	}
}
