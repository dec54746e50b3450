package integration

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/server"
	"github.com/informerhub/informerhub/server/auth"
)

// TestATokenFloodDrainsNothing: one client address floods the hub with
// calls carrying random bearer tokens, as fast as it can and over every
// protocol (native gRPC, Connect and gRPC-Web), beside 100
// authenticated streams (of ten service accounts, from the same address)
// whose access is rechecked every 200ms. The TokenReviews the API server
// receives stay within the per-address budget (its burst, then its rate);
// the flood's calls are refused (UNAUTHENTICATED, or RESOURCE_EXHAUSTED
// once the budget is spent, never UNAVAILABLE); the rechecks go on beside
// it; and no authenticated stream ends.
//
// The flood lasts as long as it takes to be one on this machine, not a
// fixed time: until it has made at least minCalls calls, for at least
// minFlood, and the streams' rechecks have made minReviews
// SubjectAccessReviews while it ran. The TokenReview budget is computed
// from the time it took.
func TestATokenFloodDrainsNothing(t *testing.T) {
	const (
		perPeer = 10
		recheck = 200 * time.Millisecond
		// minCalls is far more calls than the budget allows reviews: most
		// are refused before one.
		minCalls = 1000
		// minFlood is long enough for the budget's rate, not only its
		// burst, to count, and for fifteen recheck intervals.
		minFlood = 3 * time.Second
		// minReviews is ten rechecks of each of the ten identities (their
		// streams share a decision under half an interval old).
		minReviews = 10 * 10
	)
	ns := namespace(t)
	createConfigMap(t, ns, "cm", nil, "v0")
	var tokens []string
	for i := range 10 {
		name := fmt.Sprint("reader-", i)
		tokens = append(tokens, serviceAccountToken(t, ns, name))
		grant(t, ns, serviceAccount(ns, name), "configmaps")
	}
	h := startAuthHub(t, server.Config{
		AuthzRecheckInterval: recheck,
		Authenticator:        auth.NewTokenReview(kube.AuthenticationV1().TokenReviews(), auth.TokenReviewConfig{ReviewsPerPeer: perPeer}),
	})
	sel := &informerhubv1.ResourceSelector{Version: "v1", Resource: "configmaps", Namespace: ns}

	ctx, stopStreams := context.WithCancel(ctxFor(t))
	defer stopStreams()
	streams := openAuthenticatedStreams(ctx, h.client, sel, 100, func(i int) string { return tokens[i%10] })

	reviews := func(resource string) float64 {
		return apiServerMetric(t, "apiserver_request_total", map[string]string{"resource": resource, "verb": "POST"})
	}
	before, sarsBefore := reviews("tokenreviews"), reviews("subjectaccessreviews")
	began := time.Now()
	var calls, refused, rejected atomic.Int64
	stop := make(chan struct{})
	stopFlood := sync.OnceFunc(func() { close(stop) })
	enough := make(chan struct{}) // closed at the flood's minCalls-th call
	var flood sync.WaitGroup
	defer func() { // however the test ends, no flood call outlives it
		stopFlood()
		flood.Wait()
	}()
	// The flood comes over every protocol at once, from one address.
	flooders := make([]informerhubv1.InformerHubServiceClient, len(protocols))
	for i, p := range protocols {
		flooders[i] = p.Dial(t, h.addr)
	}
	for g := range 2 * len(protocols) {
		client := flooders[g%len(flooders)]
		flood.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if calls.Add(1) == minCalls {
					close(enough)
				}
				_, err := client.ListResources(withBearer(t, fmt.Sprintf("random-%d-%d", g, i)), &informerhubv1.ListResourcesRequest{})
				switch status.Code(err) {
				case codes.ResourceExhausted:
					refused.Add(1)
				case codes.Unauthenticated:
					rejected.Add(1)
				default:
					t.Errorf("a random token's call: %v, want UNAUTHENTICATED or RESOURCE_EXHAUSTED", err)
					stopFlood()
					return
				}
			}
		})
	}
	select {
	case <-enough:
	case <-stop: // a call failed; reported
	}
	select {
	case <-time.After(time.Until(began.Add(minFlood))):
	case <-stop:
	}
	// Rechecks confirm access with SubjectAccessReviews (the flood's calls,
	// refused before, make none); counted by the API server, which tells
	// no one when it counts.
	eventually(t, "the streams' rechecks ran beside the flood", func() bool {
		return reviews("subjectaccessreviews")-sarsBefore >= minReviews
	})
	stopFlood()
	flood.Wait()
	elapsed := time.Since(began)
	got, sars := reviews("tokenreviews")-before, reviews("subjectaccessreviews")-sarsBefore
	// The burst, what reviews under way at once when it ran out may add,
	// and the rate.
	budget := math.Floor(2*perPeer + perPeer*elapsed.Seconds())
	t.Logf("%d calls with random tokens in %v: %d rejected after a review, %d refused before one; %v TokenReviews (budget %v); %v rechecks' SubjectAccessReviews",
		calls.Load(), elapsed.Round(time.Millisecond), rejected.Load(), refused.Load(), got, budget, sars)
	if got > budget {
		t.Errorf("%v TokenReviews for one address's random tokens, want at most %v", got, budget)
	}
	stopStreams()
	for _, e := range streams.wait() {
		t.Errorf("an authenticated stream ended during the flood: %v", e.err)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("the test ran out of time")
	}
}
