package auth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/informerhub/informerhub/internal/testpki"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// These tests fake the API server's TokenReview and SubjectAccessReview;
// test/integration checks the same paths against a real one.

func withToken(token string) context.Context {
	return metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+token))
}

func fakeTokenReviews(calls *atomic.Int32) *fake.Clientset {
	kube := fake.NewClientset()
	kube.PrependReactor("create", "tokenreviews", func(action k8stesting.Action) (bool, runtime.Object, error) {
		calls.Add(1)
		review := action.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview)
		switch review.Spec.Token {
		case "good":
			review.Status = authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: []string{"hub"},
				User: authenticationv1.UserInfo{Username: "alice", UID: "u1", Groups: []string{"devs"}}}
		case "other-audience":
			review.Status = authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: []string{"elsewhere"},
				User: authenticationv1.UserInfo{Username: "bob"}}
		case "broken":
			return true, nil, errors.New("API server down")
		default:
			review.Status = authenticationv1.TokenReviewStatus{Error: "invalid bearer token"}
		}
		return true, review, nil
	})
	return kube
}

func TestTokenReview(t *testing.T) {
	var calls atomic.Int32
	a := NewTokenReview(fakeTokenReviews(&calls).AuthenticationV1().TokenReviews(), TokenReviewConfig{Audiences: []string{"hub"}})

	user, err := a.Authenticate(withToken("good"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(User{Name: "alice", UID: "u1", Groups: []string{"devs"}}, user); diff != "" {
		t.Fatalf("user (-want +got):\n%s", diff)
	}
	if _, err := a.Authenticate(withToken("good")); err != nil || calls.Load() != 1 {
		t.Fatalf("the second call made %d TokenReviews (%v), want the cached answer", calls.Load(), err)
	}

	for name, ctx := range map[string]context.Context{
		"no credentials":       context.Background(),
		"not bearer":           metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Basic abc")),
		"empty bearer":         metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer ")),
		"two headers":          metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer a", "authorization", "Bearer b")),
		"invalid token":        withToken("nope"),
		"another audience":     withToken("other-audience"),
		"an overlong token":    withToken(string(make([]byte, maxTokenLength+1))),
		"invalid token, again": withToken("nope"),
	} {
		if _, err := a.Authenticate(ctx); !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("%s: %v, want ErrUnauthenticated", name, err)
		}
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("%d TokenReviews, want 3 (good, nope once: rejections are cached too, other-audience)", n)
	}
	if _, err := a.Authenticate(withToken("broken")); err == nil || errors.Is(err, ErrUnauthenticated) {
		t.Errorf("an API server failure gave %v, want an error that is not ErrUnauthenticated", err)
	}
}

func TestSubjectAccessReview(t *testing.T) {
	var calls atomic.Int32
	allow := atomic.Bool{}
	allow.Store(true)
	kube := fake.NewClientset()
	var last *authorizationv1.SubjectAccessReview
	kube.PrependReactor("create", "subjectaccessreviews", func(action k8stesting.Action) (bool, runtime.Object, error) {
		calls.Add(1)
		review := action.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		last = review
		review.Status.Allowed = allow.Load() && review.Spec.ResourceAttributes.Namespace == "a"
		return true, review, nil
	})
	a := NewSubjectAccessReview(kube.AuthorizationV1().SubjectAccessReviews(), SubjectAccessReviewConfig{})
	user := User{Name: "alice", UID: "u1", Groups: []string{"devs"}, Extra: map[string][]string{"scope": {"x"}}}
	cms := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	ctx := context.Background()

	if err := CanWatch(ctx, a, user, cms, "a", time.Hour); err != nil {
		t.Fatal(err)
	}
	spec := last.Spec
	if spec.User != "alice" || spec.UID != "u1" || spec.Groups[0] != "devs" || spec.Extra["scope"][0] != "x" ||
		spec.ResourceAttributes.Verb != "watch" || spec.ResourceAttributes.Resource != "configmaps" {
		t.Fatalf("review %+v does not ask for the caller and the request", spec)
	}
	var forbidden *ForbiddenError
	if err := CanWatch(ctx, a, user, cms, "b", time.Hour); !errors.As(err, &forbidden) || forbidden.Attributes.Verb != "list" {
		t.Fatalf("watch in namespace b: %v, want forbidden to list", err)
	}
	if calls.Load() != 3 {
		t.Fatalf("%d reviews, want 3", calls.Load())
	}

	// Decisions are reused within maxAge; a recheck with a short maxAge asks
	// again, and sees access revoked.
	allow.Store(false)
	if err := CanWatch(ctx, a, user, cms, "a", time.Hour); err != nil {
		t.Fatalf("cached decision: %v", err)
	}
	if err := CanWatch(ctx, a, user, cms, "a", 0); !errors.As(err, &forbidden) {
		t.Fatalf("recheck after revocation: %v, want forbidden", err)
	}
}

func TestClientCertificate(t *testing.T) {
	withChain := func(chain ...*x509.Certificate) context.Context {
		return peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{
			VerifiedChains: [][]*x509.Certificate{chain}}}})
	}
	later := time.Now().Add(time.Hour)
	ca := &x509.Certificate{Subject: pkix.Name{CommonName: "ca"}, NotAfter: later}
	cert := &x509.Certificate{Subject: pkix.Name{CommonName: "carol", Organization: []string{"ops", "audit"}}, NotAfter: later}
	user, err := ClientCertificate{}.Authenticate(withChain(cert, ca))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(User{Name: "carol", Groups: []string{"system:authenticated", "ops", "audit"}}, user); diff != "" {
		t.Fatalf("user (-want +got):\n%s", diff)
	}
	if _, err := (ClientCertificate{}).Authenticate(peer.NewContext(context.Background(), &peer.Peer{})); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("without a certificate: %v", err)
	}
	// Verified at the handshake, expired since: a long stream's recheck
	// refuses it.
	expired := &x509.Certificate{Subject: pkix.Name{CommonName: "carol"}, NotAfter: time.Now().Add(-time.Second)}
	if _, err := (ClientCertificate{}).Authenticate(withChain(expired, ca)); !errors.Is(err, ErrUnauthenticated) || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("an expired certificate: %v", err)
	}
	expiredCA := &x509.Certificate{Subject: pkix.Name{CommonName: "ca"}, NotAfter: time.Now().Add(-time.Second)}
	if _, err := (ClientCertificate{}).Authenticate(withChain(cert, expiredCA)); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("an expired issuer: %v", err)
	}
}

// TestDecisionKeysAreInjective: identities whose parts would concatenate
// to the same bytes get different keys.
func TestDecisionKeysAreInjective(t *testing.T) {
	attrs := Attributes{Verb: "list", Resource: schema.GroupVersionResource{Version: "v1", Resource: "secrets"}}
	users := []User{
		{Name: "a", Groups: []string{"b\x01c"}},
		{Name: "a", Groups: []string{"b", "c"}},
		{Name: "a", Extra: map[string][]string{"k": {"x\x03y"}}},
		{Name: "a", Extra: map[string][]string{"k": {"x", "y"}}},
		{Name: "a\x00", UID: ""},
		{Name: "a", UID: "\x00"},
		{Name: "a", Groups: []string{"k"}},
		{Name: "a", Extra: map[string][]string{"k": nil}},
	}
	seen := map[string]int{}
	for i, u := range users {
		key := decisionKey(u, attrs)
		if j, ok := seen[key]; ok {
			t.Errorf("users %d and %d share a key", j, i)
		}
		seen[key] = i
	}
	reordered := User{Name: "a", Groups: []string{"c", "b"}}
	if decisionKey(reordered, attrs) != decisionKey(users[1], attrs) {
		t.Error("the order of groups changed the key")
	}
}

// TestConcurrentQuestionsShareOneReview: many calls asking the same thing
// at once (a client opening many streams) cost one SubjectAccessReview
// and one TokenReview.
func TestConcurrentQuestionsShareOneReview(t *testing.T) {
	release := make(chan struct{})
	var sars, tokenReviews atomic.Int32
	kube := fake.NewClientset()
	kube.PrependReactor("create", "subjectaccessreviews", func(action k8stesting.Action) (bool, runtime.Object, error) {
		sars.Add(1)
		<-release
		review := action.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		review.Status.Allowed = true
		return true, review, nil
	})
	kube.PrependReactor("create", "tokenreviews", func(action k8stesting.Action) (bool, runtime.Object, error) {
		tokenReviews.Add(1)
		<-release
		review := action.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview)
		review.Status.Authenticated, review.Status.User.Username = true, "alice"
		return true, review, nil
	})
	authz := NewSubjectAccessReview(kube.AuthorizationV1().SubjectAccessReviews(), SubjectAccessReviewConfig{})
	authn := NewTokenReview(kube.AuthenticationV1().TokenReviews(), TokenReviewConfig{})
	attrs := Attributes{Verb: "watch", Resource: schema.GroupVersionResource{Version: "v1", Resource: "pods"}}
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if _, err := authn.Authenticate(withToken("t")); err != nil {
				t.Error(err)
			}
			if ok, err := authz.Authorize(context.Background(), User{Name: "alice"}, attrs, time.Hour); !ok || err != nil {
				t.Error(ok, err)
			}
		})
	}
	// Every goroutine waits in the one review in flight, or will find its
	// answer cached: let the reviews answer.
	close(release)
	wg.Wait()
	if s, tr := sars.Load(), tokenReviews.Load(); s != 1 || tr != 1 {
		t.Fatalf("%d SubjectAccessReviews and %d TokenReviews, want 1 each", s, tr)
	}
}

func TestLimiters(t *testing.T) {
	subs := NewSubscriptionLimiter(2)
	for range 2 {
		if err := subs.Acquire("alice"); err != nil {
			t.Fatal(err)
		}
	}
	var tooMany *TooManySubscriptionsError
	if err := subs.Acquire("alice"); !errors.As(err, &tooMany) {
		t.Fatalf("third stream: %v", err)
	}
	if err := subs.Acquire("bob"); err != nil {
		t.Fatalf("another identity is limited by alice's streams: %v", err)
	}
	subs.Release("alice")
	if err := subs.Acquire("alice"); err != nil {
		t.Fatalf("after a release: %v", err)
	}

	rate := NewRateLimiter(0.001, 3)
	alice := WithUser(context.Background(), User{Name: "alice"})
	for range 3 {
		if err := rate.Limit(alice); err != nil {
			t.Fatal(err)
		}
	}
	if err := rate.Limit(alice); err == nil {
		t.Fatal("the burst was exceeded without an error")
	}
	if err := rate.Limit(WithUser(context.Background(), User{Name: "bob"})); err != nil {
		t.Fatalf("bob is limited by alice's calls: %v", err)
	}
}

func TestCertificateReloader(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, "test-ca")
	var certFile, keyFile string
	writePair := func(cn string) {
		t.Helper()
		certFile, keyFile = testpki.WritePair(t, dir, "tls", ca.Issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: cn}}))
	}
	served := func(r *CertificateReloader) string {
		t.Helper()
		c, err := r.GetCertificate(nil)
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := x509.ParseCertificate(c.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return leaf.Subject.CommonName
	}
	writePair("first")
	r, err := NewCertificateReloader(certFile, keyFile, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if cn := served(r); cn != "first" {
		t.Fatalf("serving %q", cn)
	}
	writePair("second")
	r.checked = time.Time{} // as if the check interval had passed
	if cn := served(r); cn != "second" {
		t.Fatalf("after rotation, serving %q, want second", cn)
	}
	if err := os.WriteFile(keyFile, []byte("half-written"), 0o600); err != nil {
		t.Fatal(err)
	}
	r.checked = time.Time{}
	if cn := served(r); cn != "second" {
		t.Fatalf("with a broken key file, serving %q, want the previous certificate", cn)
	}
}
