package integration

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"

	hubclient "github.com/informerhub/informerhub/clients/go"
	"github.com/informerhub/informerhub/server"
)

// The first hour with the Go SDK (issue 29): what a newcomer does with the
// token `make run` writes, against a hub that authenticates with the API
// server.

// TestSDKTokenFromAFileWithATrailingNewline reads a real service account
// token from a file that ends in a newline, as `make run`'s and `kubectl
// create token > file` do, three ways: the file's content as read,
// WithTokenFile, and a token source that returns it untrimmed. Each
// watches.
func TestSDKTokenFromAFileWithATrailingNewline(t *testing.T) {
	ns := namespace(t)
	token := serviceAccountToken(t, ns, "newcomer")
	grant(t, ns, serviceAccount(ns, "newcomer"), "configmaps")
	createConfigMap(t, ns, "hello", nil, "v0")
	h := startAuthHub(t, server.Config{})
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for name, opt := range map[string]hubclient.Option{
		"WithBearerToken(file content)": hubclient.WithBearerToken(string(raw)),
		"WithTokenFile":                 hubclient.WithTokenFile(file),
		"WithTokenSource(untrimmed)":    hubclient.WithTokenSource(func(context.Context) (string, error) { return string(raw), nil }),
	} {
		t.Run(name, func(t *testing.T) {
			c, err := hubclient.New([]string{h.addr}, hubclient.WithInsecure(), opt, hubclient.WithLogger(testLogger(t)))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			w := c.Watch(ctxFor(t), hubclient.Selector{Resource: configMaps, Namespace: ns}, hubclient.WatchOptions{SendInitialEvents: true})
			defer w.Close()
			got, _ := nextSDK(t, w)
			if got.Type != hubclient.Added || got.Name != "hello" {
				t.Fatalf("first event %+v, want hello ADDED", got)
			}
		})
	}
}

// TestSDKTokenThatCannotBeSent: a token with a character a header cannot
// carry is refused when the client is built (WithBearerToken), or ends the
// watch with UNAUTHENTICATED at once (a token source), instead of being
// retried for ever.
func TestSDKTokenThatCannotBeSent(t *testing.T) {
	h := startAuthHub(t, server.Config{})
	if _, err := hubclient.New([]string{h.addr}, hubclient.WithInsecure(), hubclient.WithBearerToken("abc\ndef")); err == nil || !strings.Contains(err.Error(), "cannot be sent in a header") {
		t.Fatalf("New with a token holding a newline: %v, want an error that says why", err)
	}
	c, err := hubclient.New([]string{h.addr}, hubclient.WithInsecure(), hubclient.WithLogger(testLogger(t)),
		hubclient.WithTokenSource(func(context.Context) (string, error) { return "abc\ndef", nil }))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	err = watchError(t, c, hubclient.Selector{Resource: configMaps, Namespace: "default"})
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "cannot be sent in a header") {
		t.Fatalf("the watch ended with %v, want UNAUTHENTICATED that says why", err)
	}
	if _, err := c.Snapshot(ctxFor(t), hubclient.Selector{Resource: configMaps, Namespace: "default"}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("Snapshot: %v, want UNAUTHENTICATED", err)
	}
}

// TestSDKTokenTheClusterRejects: a token the API server does not accept
// ends a Watch with UNAUTHENTICATED at once, and a stock informer given
// StopOnUnauthorized stops with it, rather than retrying for ever.
func TestSDKTokenTheClusterRejects(t *testing.T) {
	ns := namespace(t)
	h := startAuthHub(t, server.Config{})
	bogus := serviceAccountToken(t, ns, "doomed")
	if err := kube.CoreV1().ServiceAccounts(ns).Delete(ctxFor(t), "doomed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The API server learns of the deletion through its own informer: until
	// it has, it would still accept the token.
	if err := wait.PollUntilContextTimeout(ctxFor(t), 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		review, err := kube.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: bogus}}, metav1.CreateOptions{})
		return err == nil && !review.Status.Authenticated, err
	}); err != nil {
		t.Fatalf("the API server still accepts the token of a deleted service account: %v", err)
	}
	c, err := hubclient.New([]string{h.addr}, hubclient.WithInsecure(), hubclient.WithBearerToken(bogus), hubclient.WithLogger(testLogger(t)),
		hubclient.WithBackoff(hubclient.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sel := hubclient.Selector{Resource: configMaps, Namespace: ns}
	if err := watchError(t, c, sel); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("the watch ended with %v, want UNAUTHENTICATED", err)
	}

	informer := cache.NewSharedIndexInformer(c.ListerWatcher(sel, hubclient.WithScheme(scheme.Scheme)), &corev1.ConfigMap{}, 0, cache.Indexers{})
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	if err := informer.SetWatchErrorHandlerWithContext(hubclient.StopOnUnauthorized(cancel)); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		informer.RunWithContext(ctx)
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		cancel(errors.New("timed out"))
		<-done
		t.Fatal("the informer did not stop within a minute")
	}
	if err := context.Cause(ctx); !apierrors.IsUnauthorized(err) {
		t.Fatalf("the informer stopped with %v, want a 401", err)
	}
}

// watchError opens a watch and returns the error that ends it, failing the
// test if none does within a minute or an event arrives.
func watchError(t *testing.T, c *hubclient.Client, sel hubclient.Selector) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctxFor(t), time.Minute)
	defer cancel()
	w := c.Watch(ctx, sel, hubclient.WatchOptions{SendInitialEvents: true})
	defer w.Close()
	e, err := w.Next()
	if err == nil {
		t.Fatalf("the watch delivered %v, want an error", e.Type)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatal("the watch was still retrying after a minute")
	}
	return err
}
