package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/server"
	"github.com/informerhub/informerhub/server/auth"
)

// TestRechecksScaleWithIdentitiesNotStreams: 1,000 streams of 100 service
// accounts (10,000 of 1,000 with -full-size), opened at once, are
// rechecked every second for several seconds. No stream ends, and the
// SubjectAccessReviews the API server receives grow with the identities,
// not the streams: streams of one identity share decisions, and their
// rechecks, spread over the interval, do not all ask at once.
func TestRechecksScaleWithIdentitiesNotStreams(t *testing.T) {
	identities, perIdentity := 100, 10
	if *fullSize {
		identities = 1000
	}
	const interval = time.Second
	ns := namespace(t)
	createConfigMap(t, ns, "cm", nil, "v0")
	grant(t, ns, rbacv1.Subject{Kind: rbacv1.GroupKind, Name: "system:serviceaccounts:" + ns}, "configmaps")
	tokens := make([]string, identities)
	inParallel(t, identities, func(i int) error {
		tokens[i] = serviceAccountToken(t, ns, fmt.Sprint("reader-", i))
		return nil
	})
	// Every identity connects through one address here: reviews under way
	// at once from it are bounded by the per-address budget, which this
	// test does not measure (TestATokenFloodDrainsNothing does).
	h := startAuthHub(t, server.Config{AuthzRecheckInterval: interval,
		Authenticator: auth.NewTokenReview(kube.AuthenticationV1().TokenReviews(), auth.TokenReviewConfig{ReviewsPerPeer: float64(identities)})})
	sel := &informerhubv1.ResourceSelector{Version: "v1", Resource: "configmaps", Namespace: ns}
	reviews := func() float64 {
		return apiServerMetric(t, "apiserver_request_total", map[string]string{"resource": "subjectaccessreviews", "verb": "POST"})
	}

	ctx, stopStreams := context.WithCancel(ctxFor(t))
	defer stopStreams()
	streams := identities * perIdentity
	running := openAuthenticatedStreams(ctx, h.client, sel, streams, func(i int) string { return tokens[i%identities] })
	before, began := reviews(), time.Now()
	// Several intervals of rechecks: the streams' next ones are due within
	// one and a quarter; wait through four of them.
	timer := time.NewTimer(5 * interval)
	select {
	case <-timer.C:
	case <-ctx.Done():
		t.Fatal("out of time")
	}
	got, elapsed := reviews()-before, time.Since(began)
	stopStreams()
	for _, e := range running.wait() {
		t.Errorf("a stream ended: %v", e.err)
	}
	// Per interval: list and watch per identity, once per half interval
	// at most (decisions are reused while younger than that); and at
	// least one round of them. (At full size, the API server answers
	// about a thousand reviews a second here: the rest of the rechecks
	// wait, then their last decisions stand in.)
	intervals := elapsed.Seconds() / interval.Seconds()
	limit, floor := 2*2*float64(identities)*(intervals+1), 2*float64(identities)
	t.Logf("%d streams of %d identities, %.1f intervals: %v SubjectAccessReviews (at most %v by identities; %v if each stream asked)",
		streams, identities, intervals, got, limit, 2*float64(streams)*intervals)
	if got > limit || got < floor {
		t.Errorf("%v SubjectAccessReviews, want between %v and %v: as many as identities ask, not streams", got, floor, limit)
	}
}
