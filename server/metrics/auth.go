package metrics

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/informerhub/informerhub/server/auth"
)

// The auth metrics count decisions, one counter bump each, as the server
// asks for them: per call and per recheck, never per event.
//
// Their labels are bounded sets, all of whose series exist from the
// start (at 0), so that rate() and increase() see the first decision of a
// kind: check is "call" (a new call) or "recheck" (a running stream's,
// every --authz-recheck-interval); result below.
var (
	checkLabels = []string{"call", "recheck"}
	// Authentication results: accepted; rejected (no credentials, or ones
	// the API server does not accept: UNAUTHENTICATED); refused (a
	// TokenReview the budget of --token-reviews-per-peer or
	// --token-reviews-rejected does not allow: RESOURCE_EXHAUSTED); error
	// (the API server could not answer: UNAVAILABLE).
	authnResults = []string{"accepted", "rejected", "refused", "error"}
	// Authorization results: allowed, denied, error (the API server could
	// not answer).
	authzResults = []string{"allowed", "denied", "error"}
	// Which budget refused a TokenReview: one client address's
	// (--token-reviews-per-peer) or all of them together's
	// (--token-reviews-rejected).
	reviewLimits = []string{"client_address", "all_clients"}
)

// authMetrics are the instruments of Authenticator and Authorizer.
type authMetrics struct {
	authentications *prometheus.CounterVec // check, result
	authorizations  *prometheus.CounterVec // check, result
	reviewsRefused  *prometheus.CounterVec // limit
}

func newAuthMetrics() *authMetrics {
	m := &authMetrics{
		authentications: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "informerhub_authentications_total",
			Help: "Callers' credentials checked, by check (call: a new call; recheck: a running stream's) and result (accepted; rejected: UNAUTHENTICATED; refused: a TokenReview over --token-reviews-per-peer or --token-reviews-rejected, RESOURCE_EXHAUSTED; error: the API server could not answer, UNAVAILABLE). Answers from the hub's cache count too.",
		}, []string{"check", "result"}),
		authorizations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "informerhub_authorizations_total",
			Help: "Authorization decisions (each list or watch of a resource type a caller asks for: a SubjectAccessReview, or its cached answer), by check (call, recheck) and result (allowed; denied: PERMISSION_DENIED; error: the API server could not answer).",
		}, []string{"check", "result"}),
		reviewsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "informerhub_token_reviews_refused_total",
			Help: "Calls refused before any TokenReview because tokens the API server rejected used up a review budget: limit client_address (--token-reviews-per-peer) or all_clients (--token-reviews-rejected).",
		}, []string{"limit"}),
	}
	for _, check := range checkLabels {
		for _, result := range authnResults {
			m.authentications.WithLabelValues(check, result)
		}
		for _, result := range authzResults {
			m.authorizations.WithLabelValues(check, result)
		}
	}
	for _, limit := range reviewLimits {
		m.reviewsRefused.WithLabelValues(limit)
	}
	return m
}

func (m *authMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.authentications, m.authorizations, m.reviewsRefused}
}

func checkOf(ctx context.Context) string {
	if auth.IsRecheck(ctx) {
		return "recheck"
	}
	return "call"
}

// Authenticator returns a, counting its decisions in
// informerhub_authentications_total and informerhub_token_reviews_refused_total.
func (m *Metrics) Authenticator(a auth.Authenticator) auth.Authenticator {
	return &countingAuthenticator{next: a, m: m.auth}
}

type countingAuthenticator struct {
	next auth.Authenticator
	m    *authMetrics
}

func (c *countingAuthenticator) Authenticate(ctx context.Context) (auth.User, error) {
	user, err := c.next.Authenticate(ctx)
	result := "accepted"
	var tooMany *auth.TooManyReviewsError
	switch {
	case err == nil:
	case errors.Is(err, auth.ErrUnauthenticated):
		result = "rejected"
	case errors.As(err, &tooMany):
		result = "refused"
		limit := "all_clients"
		if tooMany.Peer != "" {
			limit = "client_address"
		}
		c.m.reviewsRefused.WithLabelValues(limit).Inc()
	default:
		result = "error"
	}
	c.m.authentications.WithLabelValues(checkOf(ctx), result).Inc()
	return user, err
}

// Authorizer returns a, counting its decisions in
// informerhub_authorizations_total.
func (m *Metrics) Authorizer(a auth.Authorizer) auth.Authorizer {
	return &countingAuthorizer{next: a, m: m.auth}
}

type countingAuthorizer struct {
	next auth.Authorizer
	m    *authMetrics
}

func (c *countingAuthorizer) Authorize(ctx context.Context, user auth.User, attrs auth.Attributes, maxAge time.Duration) (bool, error) {
	allowed, err := c.next.Authorize(ctx, user, attrs, maxAge)
	result := "denied"
	switch {
	case err != nil:
		result = "error"
	case allowed:
		result = "allowed"
	}
	c.m.authorizations.WithLabelValues(checkOf(ctx), result).Inc()
	return allowed, err
}
