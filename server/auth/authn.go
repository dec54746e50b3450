package auth

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/singleflight"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	authenticationclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
)

// User is a caller's Kubernetes identity.
type User struct {
	Name   string
	UID    string
	Groups []string
	Extra  map[string][]string
}

type userKey struct{}

// WithUser returns ctx carrying user.
func WithUser(ctx context.Context, user User) context.Context {
	return context.WithValue(ctx, userKey{}, user)
}

// UserFrom returns the user ctx carries, if any.
func UserFrom(ctx context.Context) (User, bool) {
	u, ok := ctx.Value(userKey{}).(User)
	return u, ok
}

// Authenticator finds out who is calling.
type Authenticator interface {
	// Authenticate returns the caller's identity, or an error wrapping
	// ErrUnauthenticated when it has none the hub accepts, or another error
	// when it cannot tell now.
	Authenticate(ctx context.Context) (User, error)
}

// ErrUnauthenticated: the caller gave no credentials, or invalid ones.
var ErrUnauthenticated = errors.New("unauthenticated")

// Anonymous authenticates every caller as the same user, for --auth=none.
type Anonymous struct{}

// AnonymousUser is the identity of every caller with --auth=none.
var AnonymousUser = User{Name: "system:anonymous", Groups: []string{"system:unauthenticated"}}

func (Anonymous) Authenticate(context.Context) (User, error) { return AnonymousUser, nil }

// ClientCertificate authenticates callers by the TLS client certificate the
// server verified against its client CA: the certificate's CommonName is the
// user and its Organizations the groups, as Kubernetes does. TLS verifies the
// chain once, at the handshake; Authenticate also refuses a certificate
// that has expired since, so a long stream does not outlive it.
type ClientCertificate struct{}

func (ClientCertificate) Authenticate(ctx context.Context) (User, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return User{}, fmt.Errorf("%w: no peer", ErrUnauthenticated)
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return User{}, fmt.Errorf("%w: no verified client certificate", ErrUnauthenticated)
	}
	cert := info.State.VerifiedChains[0][0]
	for _, c := range info.State.VerifiedChains[0] {
		if time.Now().After(c.NotAfter) {
			return User{}, fmt.Errorf("%w: the client certificate (or its issuer %q) expired at %s", ErrUnauthenticated, c.Subject.CommonName, c.NotAfter.Format(time.RFC3339))
		}
	}
	if cert.Subject.CommonName == "" {
		return User{}, fmt.Errorf("%w: the client certificate has no common name", ErrUnauthenticated)
	}
	return User{Name: cert.Subject.CommonName, Groups: append([]string{"system:authenticated"}, cert.Subject.Organization...)}, nil
}

// TokenReviewConfig tunes a TokenReview authenticator.
type TokenReviewConfig struct {
	// Audiences, when set, are the audiences a token must be issued for.
	Audiences []string
	// CacheTTL is how long an accepted token's identity is reused.
	// Default: 2m.
	CacheTTL time.Duration
	// FailureCacheTTL is how long a rejected token stays rejected without
	// asking again, so a client that retries with a bad token does not
	// cause a TokenReview per call. Default: 10s.
	FailureCacheTTL time.Duration
	// CacheSize bounds the tokens remembered. Default: 10000.
	CacheSize int
}

// TokenReview authenticates callers by the bearer token in their
// "authorization" metadata, asking the API server with a TokenReview.
type TokenReview struct {
	client authenticationclient.TokenReviewInterface
	cfg    TokenReviewConfig
	cache  *cache.LRUExpireCache // sha256(token) -> tokenResult
	// flight shares one TokenReview among concurrent calls with the same
	// token (a client opening many streams at once).
	flight singleflight.Group
}

type tokenResult struct {
	user User
	err  error
}

// NewTokenReview returns a TokenReview authenticator using client.
func NewTokenReview(client authenticationclient.TokenReviewInterface, cfg TokenReviewConfig) *TokenReview {
	if cfg.CacheTTL <= 0 {
		cfg.CacheTTL = 2 * time.Minute
	}
	if cfg.FailureCacheTTL <= 0 {
		cfg.FailureCacheTTL = 10 * time.Second
	}
	if cfg.CacheSize <= 0 {
		cfg.CacheSize = 10000
	}
	return &TokenReview{client: client, cfg: cfg, cache: cache.NewLRUExpireCache(cfg.CacheSize)}
}

// maxTokenLength bounds what is hashed and sent to the API server.
const maxTokenLength = 16 << 10

func (a *TokenReview) Authenticate(ctx context.Context) (User, error) {
	token, err := bearerToken(ctx)
	if err != nil {
		return User{}, err
	}
	// Tokens are secrets: the cache keys on their hash, never on them.
	key := sha256.Sum256([]byte(token))
	if cached, ok := a.cache.Get(key); ok {
		r := cached.(tokenResult)
		return r.user, r.err
	}
	v, err, _ := a.flight.Do(string(key[:]), func() (any, error) {
		// A review that just ended may have answered already.
		if cached, ok := a.cache.Get(key); ok {
			return cached.(tokenResult), nil
		}
		// Shared by several calls: not canceled by the first caller.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reviewTimeout)
		defer cancel()
		return a.review(ctx, key, token)
	})
	if err != nil {
		return User{}, err
	}
	r := v.(tokenResult)
	return r.user, r.err
}

// reviewTimeout bounds one TokenReview or SubjectAccessReview.
const reviewTimeout = 10 * time.Second

// review asks the API server about token and caches the answer.
func (a *TokenReview) review(ctx context.Context, key [sha256.Size]byte, token string) (tokenResult, error) {
	review, err := a.client.Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: a.cfg.Audiences},
	}, metav1.CreateOptions{})
	if err != nil {
		return tokenResult{}, fmt.Errorf("asking the API server to review the token: %w", err)
	}
	var r tokenResult
	switch {
	case !review.Status.Authenticated:
		reason := review.Status.Error
		if reason == "" {
			reason = "the token is not valid"
		}
		r.err = fmt.Errorf("%w: %s", ErrUnauthenticated, reason)
	case len(a.cfg.Audiences) > 0 && !slices.ContainsFunc(review.Status.Audiences, func(aud string) bool { return slices.Contains(a.cfg.Audiences, aud) }):
		r.err = fmt.Errorf("%w: the token is not for this hub's audience", ErrUnauthenticated)
	default:
		u := review.Status.User
		r.user = User{Name: u.Username, UID: u.UID, Groups: u.Groups}
		if len(u.Extra) > 0 {
			r.user.Extra = make(map[string][]string, len(u.Extra))
			for k, v := range u.Extra {
				r.user.Extra[k] = v
			}
		}
	}
	ttl := a.cfg.CacheTTL
	if r.err != nil {
		ttl = a.cfg.FailureCacheTTL
	}
	a.cache.Add(key, r, ttl)
	return r, nil
}

// bearerToken reads "authorization: Bearer <token>" from the call's
// metadata.
func bearerToken(ctx context.Context) (string, error) {
	values := metadata.ValueFromIncomingContext(ctx, "authorization")
	if len(values) == 0 {
		return "", fmt.Errorf("%w: no credentials: send \"authorization: Bearer <token>\"", ErrUnauthenticated)
	}
	if len(values) > 1 {
		return "", fmt.Errorf("%w: more than one authorization header", ErrUnauthenticated)
	}
	scheme, token, ok := strings.Cut(values[0], " ")
	if !ok || !strings.EqualFold(scheme, "bearer") || strings.TrimSpace(token) == "" {
		return "", fmt.Errorf("%w: the authorization header is not \"Bearer <token>\"", ErrUnauthenticated)
	}
	token = strings.TrimSpace(token)
	if len(token) > maxTokenLength {
		return "", fmt.Errorf("%w: the bearer token is longer than %d bytes", ErrUnauthenticated, maxTokenLength)
	}
	return token, nil
}
