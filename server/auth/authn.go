package auth

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	info, ok := tlsInfoOf(p.AuthInfo)
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
	// CacheTTL is how long an accepted token's identity is reused, never
	// past the token's own expiry (its "exp" claim, for a JWT).
	// Default: 2m.
	CacheTTL time.Duration
	// FailureCacheTTL is how long a rejected token stays rejected without
	// asking again, so a client that retries with a bad token does not
	// cause a TokenReview per call. Default: 10s.
	FailureCacheTTL time.Duration
	// MaxStale is how long past CacheTTL an accepted token's identity
	// stands in while the API server cannot answer (never past the
	// token's expiry), so an API server outage ends no stream whose
	// caller's token is still good. Default: 10m.
	MaxStale time.Duration
	// CacheSize bounds the tokens remembered, accepted and rejected
	// apart, so rejected ones never push out accepted ones. Keys are
	// hashes, so it bounds the bytes too. Default: 10000.
	CacheSize int
	// ReviewsPerPeer bounds the TokenReviews of tokens the API server
	// does not accept that one client address may cause: this many per
	// second, and as many at once (the reviews under way at once from one
	// address, of any tokens, are bounded by it too). Past it, a call with
	// a token not accepted lately is refused with a *TooManyReviewsError
	// before any review: a client presenting random tokens costs the API
	// server at most this. IPv6 addresses count by their /64, which one
	// host usually holds whole. Default: 10.
	ReviewsPerPeer float64
	// RejectedReviews bounds the same for all addresses together, so that
	// many addresses cannot use up the TokenReview budget either.
	// Default: 50.
	RejectedReviews float64
	// RecheckClient, when set, makes the reviews asked for with a context
	// from ForRecheck (running streams' rechecks), so that they have a
	// budget of their own that new calls cannot use up.
	RecheckClient authenticationclient.TokenReviewInterface
}

// TokenReview authenticates callers by the bearer token in their
// "authorization" metadata, asking the API server with a TokenReview.
type TokenReview struct {
	client, recheckClient authenticationclient.TokenReviewInterface
	cfg                   TokenReviewConfig
	// accepted and rejected cache answers by sha256(token): accepted ->
	// acceptedToken, rejected -> error.
	accepted, rejected *cache.LRUExpireCache
	peers              *buckets[*peerBucket] // by client address (peerHost)
	all                *peerBucket           // every address's reviews of unknown tokens
	// flight shares one TokenReview among concurrent calls with the same
	// token (a client opening many streams at once).
	flight singleflight.Group
	now    func() time.Time
}

// acceptedToken is a token the API server accepted.
type acceptedToken struct {
	user User
	// fresh is until when the answer is reused as is, stale until when it
	// stands in for one the API server cannot give.
	fresh, stale time.Time
}

// NewTokenReview returns a TokenReview authenticator using client.
func NewTokenReview(client authenticationclient.TokenReviewInterface, cfg TokenReviewConfig) *TokenReview {
	if cfg.CacheTTL <= 0 {
		cfg.CacheTTL = 2 * time.Minute
	}
	if cfg.FailureCacheTTL <= 0 {
		cfg.FailureCacheTTL = 10 * time.Second
	}
	if cfg.MaxStale <= 0 {
		cfg.MaxStale = 10 * time.Minute
	}
	if cfg.CacheSize <= 0 {
		cfg.CacheSize = 10000
	}
	if cfg.ReviewsPerPeer <= 0 {
		cfg.ReviewsPerPeer = 10
	}
	if cfg.RejectedReviews <= 0 {
		cfg.RejectedReviews = 50
	}
	recheckClient := cfg.RecheckClient
	if recheckClient == nil {
		recheckClient = client
	}
	return &TokenReview{client: client, recheckClient: recheckClient, cfg: cfg,
		accepted: cache.NewLRUExpireCache(cfg.CacheSize), rejected: cache.NewLRUExpireCache(cfg.CacheSize),
		peers: newBuckets(time.Minute, func() *peerBucket { return newPeerBucket(cfg.ReviewsPerPeer) }), all: newPeerBucket(cfg.RejectedReviews), now: time.Now}
}

// maxTokenLength bounds what is hashed and sent to the API server.
const maxTokenLength = 16 << 10

func (a *TokenReview) Authenticate(ctx context.Context) (User, error) {
	token, err := bearerToken(ctx)
	if err != nil {
		return User{}, err
	}
	// Tokens are secrets: the caches key on their hash, never on them.
	key := sha256.Sum256([]byte(token))
	if user, err, ok := a.cached(key); ok {
		return user, err
	}
	limiter := a.peers.get(peerHost(ctx))
	// A recheck does not join a new call's review: it would take that
	// call's budget, and wait behind its address's.
	flightKey := string(key[:])
	if isRecheck(ctx) {
		flightKey += "\x00recheck"
	}
	v, err, _ := a.flight.Do(flightKey, func() (any, error) {
		// A review that just ended may have answered already.
		if user, err, ok := a.cached(key); ok {
			return tokenResult{user, err}, nil
		}
		// A token not accepted lately (a running stream's recheck is)
		// is reviewed within its address's budget and everyone's: only
		// tokens the API server does not accept use them up.
		_, known := a.accepted.Get(key)
		if !known {
			if !limiter.begin(ctx, a.now) {
				return nil, &TooManyReviewsError{Peer: peerHost(ctx), PerSecond: a.cfg.ReviewsPerPeer}
			}
			if !a.all.begin(ctx, a.now) {
				limiter.end(a.now(), false)
				return nil, &TooManyReviewsError{PerSecond: a.cfg.RejectedReviews}
			}
		}
		client := a.client
		if isRecheck(ctx) {
			client = a.recheckClient
		}
		// Shared by several calls: not canceled by the first caller.
		reviewCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reviewTimeout)
		defer cancel()
		r, err := a.review(reviewCtx, client, key, token)
		if !known {
			// A token accepted but not cached (past its exp by the hub's
			// clock) would be reviewed on every call: it costs as a
			// rejection does.
			_, cachedNow := a.accepted.Get(key)
			rejected := err != nil || r.err != nil || !cachedNow
			limiter.end(a.now(), rejected)
			a.all.end(a.now(), rejected)
		}
		if err != nil && cannotAnswer(err) {
			// The API server cannot be reached: an identity it gave this
			// token lately stands in, until the token expires.
			if v, ok := a.accepted.Get(key); ok && a.now().Before(v.(acceptedToken).stale) {
				return tokenResult{user: v.(acceptedToken).user}, nil
			}
		}
		return r, err
	})
	if err != nil {
		return User{}, err
	}
	r := v.(tokenResult)
	return r.user, r.err
}

type tokenResult struct {
	user User
	err  error
}

// cached returns the fresh answer about the token of key, if any.
func (a *TokenReview) cached(key [sha256.Size]byte) (User, error, bool) {
	if v, ok := a.rejected.Get(key); ok {
		return User{}, v.(error), true
	}
	if v, ok := a.accepted.Get(key); ok && a.now().Before(v.(acceptedToken).fresh) {
		return v.(acceptedToken).user, nil, true
	}
	return User{}, nil, false
}

// reviewTimeout bounds one TokenReview or SubjectAccessReview.
const reviewTimeout = 10 * time.Second

// review asks the API server about token and caches the answer.
func (a *TokenReview) review(ctx context.Context, client authenticationclient.TokenReviewInterface, key [sha256.Size]byte, token string) (tokenResult, error) {
	review, err := client.Create(ctx, &authenticationv1.TokenReview{
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
	if r.err != nil {
		a.rejected.Add(key, r.err, a.cfg.FailureCacheTTL)
		a.accepted.Remove(key)
		return r, nil
	}
	now := a.now()
	entry := acceptedToken{user: r.user, fresh: now.Add(a.cfg.CacheTTL), stale: now.Add(a.cfg.CacheTTL + a.cfg.MaxStale)}
	if exp, ok := jwtExpiry(token); ok {
		// The cache must not outlive the token.
		entry.fresh, entry.stale = minTime(entry.fresh, exp), minTime(entry.stale, exp)
	}
	if ttl := entry.stale.Sub(now); ttl > 0 {
		a.accepted.Add(key, entry, ttl)
	}
	return r, nil
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// jwtExpiry returns the "exp" claim of token, if it is a JWT with one. The
// API server has just verified the token; the hub only reads when it ends.
func jwtExpiry(token string) (time.Time, bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, false
	}
	var claims struct {
		Exp *json.Number `json:"exp"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil || claims.Exp == nil {
		return time.Time{}, false
	}
	exp, err := claims.Exp.Float64()
	if err != nil || exp <= 0 || exp > 1<<40 {
		return time.Time{}, false // none, or none a clock reaches
	}
	return time.Unix(int64(exp), 0), true
}

// TooManyReviewsError refuses a call whose token the hub would have to
// review, from a client address that has had its share of reviews of
// tokens the API server rejected.
type TooManyReviewsError struct {
	Peer      string
	PerSecond float64
}

func (e *TooManyReviewsError) Error() string {
	if e.Peer == "" {
		return fmt.Sprintf("clients presented more unknown tokens than the hub reviews (%g per second): retry with backoff, with a valid token", e.PerSecond)
	}
	return fmt.Sprintf("%s presented more unknown tokens than the hub reviews per client address (%g per second): retry with backoff, with a valid token",
		e.Peer, e.PerSecond)
}

// peerBucket is one client address's budget of reviews: a token bucket
// that only reviews of tokens the API server did not accept draw from, and
// at most burst reviews under way at once. A review starts only while the
// bucket holds a token, so rejected reviews come at most burst at once and
// perSecond after; accepted ones (many identities behind one address,
// connecting together) wait only for each other, briefly.
type peerBucket struct {
	perSecond, burst float64

	mu       sync.Mutex // guards the fields below
	tokens   float64    // below zero after concurrent rejections: a debt
	last     time.Time
	underway int
	ended    chan struct{} // closed and replaced when a review ends
}

func newPeerBucket(perSecond float64) *peerBucket {
	burst := max(1, perSecond)
	return &peerBucket{perSecond: perSecond, burst: burst, tokens: burst, ended: make(chan struct{})}
}

// maxReviewWait bounds how long a call waits for one of its address's
// review slots: as long as a review may take, so that a thousand
// identities connecting at once through one address are all reviewed.
const maxReviewWait = reviewTimeout

// begin starts a review, if the bucket holds a token: at once when fewer
// than burst are under way, else once one ends, within maxReviewWait.
// Every successful begin needs an end.
func (b *peerBucket) begin(ctx context.Context, now func() time.Time) bool {
	deadline := time.NewTimer(maxReviewWait)
	defer deadline.Stop()
	for {
		b.mu.Lock()
		b.refillLocked(now())
		if b.tokens < 1 {
			b.mu.Unlock()
			return false // no waiting: the budget is spent on rejections
		}
		if float64(b.underway) < b.burst {
			b.underway++
			b.mu.Unlock()
			return true
		}
		ended := b.ended
		b.mu.Unlock()
		select {
		case <-ended:
		case <-deadline.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// refillLocked adds the tokens earned since the last refill. The caller
// holds b.mu.
func (b *peerBucket) refillLocked(now time.Time) {
	if !b.last.IsZero() {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.perSecond)
	}
	b.last = now
}

// end ends a review; one whose token was not accepted costs a token.
func (b *peerBucket) end(now time.Time, rejected bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.underway--
	if rejected {
		b.refillLocked(now)
		b.tokens--
	}
	close(b.ended)
	b.ended = make(chan struct{})
}

// tlsInfoOf returns the TLS state of a connection's AuthInfo, which may
// wrap it (package cork's does: Unwrap).
func tlsInfoOf(info credentials.AuthInfo) (credentials.TLSInfo, bool) {
	for info != nil {
		if t, ok := info.(credentials.TLSInfo); ok {
			return t, true
		}
		w, ok := info.(interface{ Unwrap() credentials.AuthInfo })
		if !ok {
			break
		}
		info = w.Unwrap()
	}
	return credentials.TLSInfo{}, false
}

// peerHost is the address of ctx's client without its port: one host's
// connections share a budget. An IPv6 address counts by its /64, which
// one host usually holds whole.
func peerHost(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return ""
	}
	host, _, err := net.SplitHostPort(p.Addr.String())
	if err != nil {
		return p.Addr.String()
	}
	if ip := net.ParseIP(host); ip != nil && ip.To4() == nil {
		return (&net.IPNet{IP: ip.Mask(net.CIDRMask(64, 128)), Mask: net.CIDRMask(64, 128)}).String()
	}
	return host
}

// cannotAnswer reports whether err says the API server could not be
// reached or failed (a connection error, a timeout, a 5xx), rather than
// the hub's own budget ran out or the API server refused the question: only
// then does a recent answer stand in for the one it cannot give.
func cannotAnswer(err error) bool {
	var netErr net.Error
	if errors.As(err, &netErr) {
		return true
	}
	var status apierrors.APIStatus
	return errors.As(err, &status) && status.Status().Code >= 500
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
	// A JWT's segments have one encoding each; the decoders the API server
	// uses also take variants (unused bits set in the last character), so
	// one token would otherwise be many strings, each a review and a cache
	// entry of its own.
	if parts := strings.Split(token, "."); len(parts) == 3 {
		for _, part := range parts {
			if _, err := base64.RawURLEncoding.Strict().DecodeString(part); err != nil {
				return "", fmt.Errorf("%w: the bearer token is not a canonically encoded JWT", ErrUnauthenticated)
			}
		}
	}
	return token, nil
}
