package metrics

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/informerhub/informerhub/server/auth"
)

// authnAnswer is an Authenticator that answers err (nil: accepts).
type authnAnswer struct{ err error }

func (a authnAnswer) Authenticate(context.Context) (auth.User, error) {
	if a.err != nil {
		return auth.User{}, a.err
	}
	return auth.User{Name: "alice"}, nil
}

// authzAnswer is an Authorizer that answers allowed, err.
type authzAnswer struct {
	allowed bool
	err     error
}

func (a authzAnswer) Authorize(context.Context, auth.User, auth.Attributes, time.Duration) (bool, error) {
	return a.allowed, a.err
}

// Every decision counts once, by whether it was a new call's or a
// running stream's recheck and by its result, and the wrappers hand back
// what they wrap answered, unchanged.
func TestAuthDecisions(t *testing.T) {
	m := New(fakeHub{}, BuildInfo{})
	call, recheck := context.Background(), auth.ForRecheck(context.Background())
	down := errors.New("connection refused")
	for _, tt := range []struct {
		ctx context.Context
		err error
	}{
		{call, nil},
		{call, nil},
		{call, fmt.Errorf("%w: the token is not valid", auth.ErrUnauthenticated)},
		{call, &auth.TooManyReviewsError{Peer: "10.0.0.1", PerSecond: 10}},
		{call, &auth.TooManyReviewsError{PerSecond: 50}},
		{call, &auth.TooManyReviewsError{PerSecond: 50}},
		{recheck, nil},
		{recheck, down},
	} {
		user, err := m.Authenticator(authnAnswer{tt.err}).Authenticate(tt.ctx)
		if err != tt.err || (err == nil) != (user.Name == "alice") {
			t.Fatalf("Authenticate: %v, %v; want what the wrapped one answered, %v", user, err, tt.err)
		}
	}
	for _, tt := range []struct {
		ctx     context.Context
		allowed bool
		err     error
	}{
		{call, true, nil},
		{call, false, nil},
		{call, false, down},
		{recheck, true, nil},
		{recheck, true, nil},
	} {
		allowed, err := m.Authorizer(authzAnswer{tt.allowed, tt.err}).Authorize(tt.ctx, auth.User{}, auth.Attributes{}, time.Minute)
		if allowed != tt.allowed || err != tt.err {
			t.Fatalf("Authorize: %v, %v; want %v, %v", allowed, err, tt.allowed, tt.err)
		}
	}
	// Every series exists, at 0 until its first decision: alerts on a
	// rate see the first refusal.
	want := `
# HELP informerhub_authentications_total Callers' credentials checked, by check (call: a new call; recheck: a running stream's) and result (accepted; rejected: UNAUTHENTICATED; refused: a TokenReview over --token-reviews-per-peer or --token-reviews-rejected, RESOURCE_EXHAUSTED; error: the API server could not answer, UNAVAILABLE). Answers from the hub's cache count too.
# TYPE informerhub_authentications_total counter
informerhub_authentications_total{check="call",result="accepted"} 2
informerhub_authentications_total{check="call",result="error"} 0
informerhub_authentications_total{check="call",result="refused"} 3
informerhub_authentications_total{check="call",result="rejected"} 1
informerhub_authentications_total{check="recheck",result="accepted"} 1
informerhub_authentications_total{check="recheck",result="error"} 1
informerhub_authentications_total{check="recheck",result="refused"} 0
informerhub_authentications_total{check="recheck",result="rejected"} 0
# HELP informerhub_authorizations_total Authorization decisions (each list or watch of a resource type a caller asks for: a SubjectAccessReview, or its cached answer), by check (call, recheck) and result (allowed; denied: PERMISSION_DENIED; error: the API server could not answer).
# TYPE informerhub_authorizations_total counter
informerhub_authorizations_total{check="call",result="allowed"} 1
informerhub_authorizations_total{check="call",result="denied"} 1
informerhub_authorizations_total{check="call",result="error"} 1
informerhub_authorizations_total{check="recheck",result="allowed"} 2
informerhub_authorizations_total{check="recheck",result="denied"} 0
informerhub_authorizations_total{check="recheck",result="error"} 0
# HELP informerhub_token_reviews_refused_total Calls refused before any TokenReview because tokens the API server rejected used up a review budget: limit client_address (--token-reviews-per-peer) or all_clients (--token-reviews-rejected).
# TYPE informerhub_token_reviews_refused_total counter
informerhub_token_reviews_refused_total{limit="all_clients"} 2
informerhub_token_reviews_refused_total{limit="client_address"} 1
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want),
		"informerhub_authentications_total", "informerhub_authorizations_total", "informerhub_token_reviews_refused_total"); err != nil {
		t.Fatal(err)
	}
}
