package auth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	goruntime "runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/informerhub/informerhub/internal/testpki"
)

// errRefused is what client-go returns when the API server is down.
var errRefused = &url.Error{Op: "Post", URL: "https://127.0.0.1:6443/apis", Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}

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
		switch token := review.Spec.Token; {
		case strings.HasPrefix(token, "valid-"):
			review.Status = authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: []string{"hub"},
				User: authenticationv1.UserInfo{Username: token}}
		case token == "good":
			review.Status = authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: []string{"hub"},
				User: authenticationv1.UserInfo{Username: "alice", UID: "u1", Groups: []string{"devs"}}}
		case token == "other-audience":
			review.Status = authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: []string{"elsewhere"},
				User: authenticationv1.UserInfo{Username: "bob"}}
		case token == "broken":
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
	subs := NewSubscriptionLimiter(2, 4)
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
	// Four open in all (alice 2, bob 1, and one more): the server's bound.
	if err := subs.Acquire("carol"); err != nil {
		t.Fatal(err)
	}
	if err := subs.Acquire("dave"); !errors.As(err, &tooMany) || tooMany.User != "" || tooMany.Max != 4 {
		t.Fatalf("a fifth stream in all: %v, want the server's bound", err)
	}
	subs.Release("carol")
	if err := subs.Acquire("dave"); err != nil {
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

// fromPeer is withToken from a client at addr.
func fromPeer(token, addr string) context.Context {
	tcp, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		panic(err)
	}
	return peer.NewContext(withToken(token), &peer.Peer{Addr: tcp})
}

// TestRejectedTokensCostTheirPeerOnly: one client address presenting
// tokens the API server rejects causes at most ReviewsPerPeer reviews at
// once, then is refused before any; another address, and tokens already
// accepted, are not held up by it; accepted tokens cost the budget
// nothing; and rejected tokens never push accepted ones out of the cache.
func TestRejectedTokensCostTheirPeerOnly(t *testing.T) {
	var calls atomic.Int32
	a := NewTokenReview(fakeTokenReviews(&calls).AuthenticationV1().TokenReviews(),
		TokenReviewConfig{Audiences: []string{"hub"}, ReviewsPerPeer: 5, CacheSize: 3})
	const attacker, other = "10.0.0.1:4000", "10.0.0.2:4000"
	if _, err := a.Authenticate(fromPeer("good", attacker)); err != nil {
		t.Fatal(err)
	}
	var refused int
	for i := range 100 {
		_, err := a.Authenticate(fromPeer(fmt.Sprint("random-", i), "10.0.0.1:"+fmt.Sprint(5000+i)))
		var tooMany *TooManyReviewsError
		switch {
		case errors.As(err, &tooMany):
			refused++
		case !errors.Is(err, ErrUnauthenticated):
			t.Fatalf("random token %d: %v", i, err)
		}
	}
	if n := calls.Load(); n != 1+5 || refused != 95 {
		t.Fatalf("%d TokenReviews and %d refusals for 100 random tokens from one host, want 5 reviews (the burst) and 95 refusals", n-1, refused)
	}
	if _, err := a.Authenticate(fromPeer("random-x", other)); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("another host's token: %v, want it reviewed and rejected", err)
	}
	// "good" was accepted before the flood, and the cache of rejections
	// (3 entries) turned over many times: it is still cached.
	before := calls.Load()
	if _, err := a.Authenticate(fromPeer("good", attacker)); err != nil || calls.Load() != before {
		t.Fatalf("the accepted token after the flood: %v, %d more reviews; want its cached identity", err, calls.Load()-before)
	}
}

// TestAcceptedTokensNeverOutliveTheirExpiry: an accepted JWT's identity is
// reused until CacheTTL, or its exp claim if sooner; while the API server
// cannot answer it stands in for MaxStale more, but never past exp.
func TestAcceptedTokensNeverOutliveTheirExpiry(t *testing.T) {
	var calls atomic.Int32
	var down atomic.Bool
	kube := fake.NewClientset()
	kube.PrependReactor("create", "tokenreviews", func(action k8stesting.Action) (bool, runtime.Object, error) {
		calls.Add(1)
		if down.Load() {
			return true, nil, errRefused
		}
		review := action.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview)
		review.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "alice"}}
		return true, review, nil
	})
	a := NewTokenReview(kube.AuthenticationV1().TokenReviews(), TokenReviewConfig{CacheTTL: time.Minute, MaxStale: 10 * time.Minute})
	now := time.Unix(1_000_000, 0)
	a.now = func() time.Time { return now }
	jwt := func(exp time.Time) string {
		payload := base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, `{"sub":"alice","exp":%d}`, exp.Unix()))
		return "eyJhbGciOiJSUzI1NiJ9." + payload + ".c2ln"
	}
	authenticate := func(token string) error {
		_, err := a.Authenticate(withToken(token))
		return err
	}

	short := jwt(now.Add(30 * time.Second))
	if err := authenticate(short); err != nil {
		t.Fatal(err)
	}
	now = now.Add(29 * time.Second)
	if err := authenticate(short); err != nil || calls.Load() != 1 {
		t.Fatalf("within exp: %v after %d reviews, want the cached identity", err, calls.Load())
	}
	now = now.Add(2 * time.Second) // past exp, within CacheTTL
	down.Store(true)
	if err := authenticate(short); err == nil || calls.Load() != 2 {
		t.Fatalf("past exp with the API server down: %v after %d reviews, want a review and an error", err, calls.Load())
	}

	long := jwt(now.Add(time.Hour))
	down.Store(false)
	if err := authenticate(long); err != nil {
		t.Fatal(err)
	}
	down.Store(true)
	now = now.Add(5 * time.Minute) // past CacheTTL, within MaxStale
	if err := authenticate(long); err != nil {
		t.Fatalf("API server down, token good, identity 5m old: %v, want it to stand in", err)
	}
	now = now.Add(10 * time.Minute) // past CacheTTL+MaxStale
	if err := authenticate(long); err == nil || errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("API server down past MaxStale: %v, want an error that is not a rejection", err)
	}
}

// TestAllowedDecisionsStandInWhileTheAPIServerCannotAnswer: a recheck
// during an outage keeps an allowed decision (for MaxStale), a denial once
// the API server is back ends it; and rechecks use their own client.
func TestAllowedDecisionsStandInWhileTheAPIServerCannotAnswer(t *testing.T) {
	var admissions, rechecks atomic.Int32
	var down, throttled, allow atomic.Bool
	allow.Store(true)
	reactor := func(count *atomic.Int32) k8stesting.ReactionFunc {
		return func(action k8stesting.Action) (bool, runtime.Object, error) {
			count.Add(1)
			switch {
			case down.Load():
				return true, nil, errRefused
			case throttled.Load():
				return true, nil, errors.New("client rate limiter Wait returned an error: rate: Wait(n=1) would exceed context deadline")
			}
			review := action.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
			review.Status.Allowed = allow.Load()
			return true, review, nil
		}
	}
	admission, recheck := fake.NewClientset(), fake.NewClientset()
	admission.PrependReactor("create", "subjectaccessreviews", reactor(&admissions))
	recheck.PrependReactor("create", "subjectaccessreviews", reactor(&rechecks))
	a := NewSubjectAccessReview(admission.AuthorizationV1().SubjectAccessReviews(),
		SubjectAccessReviewConfig{RecheckClient: recheck.AuthorizationV1().SubjectAccessReviews()})
	user := User{Name: "alice"}
	cms := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	ctx := context.Background()

	if err := CanWatch(ctx, a, user, cms, "a", time.Hour); err != nil {
		t.Fatal(err)
	}
	down.Store(true)
	if err := CanWatch(ForRecheck(ctx), a, user, cms, "a", 0); err != nil {
		t.Fatalf("recheck during an outage: %v, want the allowed decision to stand in", err)
	}
	// The hub's own client budget running out is not an outage: the API
	// server may answer others, and revoke meanwhile.
	down.Store(false)
	throttled.Store(true)
	if _, err := a.Authorize(ForRecheck(ctx), user, Attributes{Verb: "list", Resource: cms, Namespace: "a"}, 0); err == nil {
		t.Fatal("the hub's own rate limit refused the review, and the old allowed decision stood in")
	}
	throttled.Store(false)
	allow.Store(false)
	var forbidden *ForbiddenError
	if err := CanWatch(ForRecheck(ctx), a, user, cms, "a", 0); !errors.As(err, &forbidden) {
		t.Fatalf("recheck once back, access revoked: %v, want forbidden", err)
	}
	down.Store(true)
	if err := CanWatch(ForRecheck(ctx), a, user, cms, "a", 0); err == nil {
		t.Fatal("after a denial, an outage brought the old allowed decision back")
	}
	if admissions.Load() != 2 || rechecks.Load() != 5 {
		t.Fatalf("%d admission and %d recheck reviews, want 2 (list, watch) and 5", admissions.Load(), rechecks.Load())
	}
}

// TestManyIdentitiesBehindOneAddress: a hundred valid tokens presented at
// once from one address (a proxy, a NAT) are all reviewed and accepted:
// they wait for each other's reviews, never for the budget of rejections.
func TestManyIdentitiesBehindOneAddress(t *testing.T) {
	var calls atomic.Int32
	a := NewTokenReview(fakeTokenReviews(&calls).AuthenticationV1().TokenReviews(),
		TokenReviewConfig{Audiences: []string{"hub"}, ReviewsPerPeer: 5})
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Go(func() {
			if _, err := a.Authenticate(fromPeer(fmt.Sprint("valid-", i), "10.0.0.9:4000")); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := calls.Load(); n != 100 {
		t.Fatalf("%d TokenReviews, want 100", n)
	}
}

// TestTokenReviewBudgetsHoldAcrossAddresses: addresses in one IPv6 /64
// share a budget; all addresses together have one too; and a JWT written
// in a non-canonical encoding (another string for the same token) is
// refused without a review.
func TestTokenReviewBudgetsHoldAcrossAddresses(t *testing.T) {
	var calls atomic.Int32
	a := NewTokenReview(fakeTokenReviews(&calls).AuthenticationV1().TokenReviews(),
		TokenReviewConfig{Audiences: []string{"hub"}, ReviewsPerPeer: 2, RejectedReviews: 6})
	for i := range 10 { // one /64, ten addresses
		a.Authenticate(fromPeer(fmt.Sprint("v6-", i), fmt.Sprintf("[2001:db8::%x]:4000", i+1))) //nolint:errcheck // counted below
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("%d TokenReviews for ten addresses of one /64, want 2 (its budget)", n)
	}
	for i := range 20 { // twenty IPv4 addresses
		a.Authenticate(fromPeer(fmt.Sprint("v4-", i), fmt.Sprintf("10.1.0.%d:4000", i+1))) //nolint:errcheck // counted below
	}
	if n := calls.Load(); n != 6 {
		t.Fatalf("%d TokenReviews in all, want 6 (everyone's budget)", n)
	}

	b := NewTokenReview(fakeTokenReviews(&calls).AuthenticationV1().TokenReviews(), TokenReviewConfig{})
	before := calls.Load()
	// "c2k" and "c2l" decode to the same bytes; only the first is canonical.
	if _, err := b.Authenticate(withToken("eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2l")); !errors.Is(err, ErrUnauthenticated) || calls.Load() != before {
		t.Fatalf("a non-canonical JWT: %v after %d reviews, want refused without one", err, calls.Load()-before)
	}
	if _, err := b.Authenticate(withToken("eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2k")); !errors.Is(err, ErrUnauthenticated) || calls.Load() != before+1 {
		t.Fatalf("a canonical JWT the API server rejects: %v after %d reviews, want one review", err, calls.Load()-before)
	}
}

// concurrentReviews is a TokenReview API that answers many reviews at
// once (client-go's fake clientset answers one at a time), and records the
// most under way together. Tokens starting "valid-" are accepted.
type concurrentReviews struct {
	mu                sync.Mutex // guards underway and most
	underway, most    int
	reviews, rejected atomic.Int32
	release           chan struct{} // closed to let reviews answer
}

func (c *concurrentReviews) Create(ctx context.Context, tr *authenticationv1.TokenReview, _ metav1.CreateOptions) (*authenticationv1.TokenReview, error) {
	c.reviews.Add(1)
	c.mu.Lock()
	c.underway++
	c.most = max(c.most, c.underway)
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.underway--
		c.mu.Unlock()
	}()
	select {
	case <-c.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	out := tr.DeepCopy()
	if strings.HasPrefix(tr.Spec.Token, "valid-") {
		out.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: tr.Spec.Token}}
	} else {
		c.rejected.Add(1)
		out.Status = authenticationv1.TokenReviewStatus{Error: "invalid bearer token"}
	}
	return out, nil
}

// TestReviewsUnderWayAtOnceAreBounded: fifty calls with random tokens at
// once from one address start at most ReviewsPerPeer reviews together,
// and no more than that in all (the rest are refused once the budget is
// spent); fifty valid tokens at once from another address all pass,
// ReviewsPerPeer at a time.
func TestReviewsUnderWayAtOnceAreBounded(t *testing.T) {
	api := &concurrentReviews{release: make(chan struct{})}
	a := NewTokenReview(api, TokenReviewConfig{ReviewsPerPeer: 5, RejectedReviews: 100})
	var wg sync.WaitGroup
	var refused atomic.Int32
	for i := range 50 {
		wg.Go(func() {
			_, err := a.Authenticate(fromPeer(fmt.Sprint("random-", i), "10.0.0.1:4000"))
			var tooMany *TooManyReviewsError
			if errors.As(err, &tooMany) {
				refused.Add(1)
			}
		})
	}
	// Let the reviews under way answer once as many as can start have.
	for {
		api.mu.Lock()
		n := api.underway
		api.mu.Unlock()
		if n == 5 {
			break
		}
		goruntime.Gosched()
	}
	close(api.release)
	wg.Wait()
	if api.most != 5 || api.rejected.Load() > 10 || refused.Load() < 40 {
		t.Fatalf("random tokens: %d reviews at most at once, %d rejected, %d refused; want 5 at once, at most 10 (burst, then the debt) and the rest refused",
			api.most, api.rejected.Load(), refused.Load())
	}

	api2 := &concurrentReviews{release: make(chan struct{})}
	b := NewTokenReview(api2, TokenReviewConfig{ReviewsPerPeer: 5})
	close(api2.release)
	for i := range 50 {
		wg.Go(func() {
			if _, err := b.Authenticate(fromPeer(fmt.Sprint("valid-", i), "10.0.0.2:4000")); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if api2.reviews.Load() != 50 || api2.most > 5 {
		t.Fatalf("valid tokens: %d reviews, %d at most at once; want 50, at most 5 at once", api2.reviews.Load(), api2.most)
	}
}
