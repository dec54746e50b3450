package conformance

import (
	"context"
	"strconv"
	"testing"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/informerhub/digest"
)

// referenceDigest is the digest of what the reference's state at
// resourceVersion holds of a selection, as a client computes it from the
// proto's definition.
func referenceDigest(t *testing.T, s *scenario, p probe, resourceVersion string) (string, uint64) {
	t.Helper()
	v, err := strconv.ParseUint(resourceVersion, 10, 64)
	if err != nil {
		t.Fatalf("resourceVersion %q: %v", resourceVersion, err)
	}
	s.reach(t, p.kind, v)
	state, err := s.refs[p.kind].State(resourceVersion, p.options(s))
	if err != nil {
		t.Fatal(err)
	}
	var set digest.Set
	for _, e := range state {
		set.Add(digest.Of(e.Namespace, e.Name, e.UID, e.ResourceVersion))
	}
	return set.String(), set.Count()
}

// checkDigestAt compares the hub's Digest at token (now when "") with the
// reference's state at the position the hub says it digested.
func checkDigestAt(t *testing.T, ctx context.Context, s *scenario, p probe, client informerhubv1.InformerHubServiceClient, sel *informerhubv1.ResourceSelector, token, wantRV string) {
	t.Helper()
	got, err := client.Digest(ctx, &informerhubv1.DigestRequest{Selector: sel, ResumeToken: token})
	if err != nil {
		t.Fatalf("Digest at %q: %v", wantRV, err)
	}
	if got.GetMoved() || wantRV != "" && got.GetResourceVersion() != wantRV {
		t.Errorf("Digest at the token of %s: at %s, moved %v", wantRV, got.GetResourceVersion(), got.GetMoved())
		return
	}
	digest, count := referenceDigest(t, s, p, got.GetResourceVersion())
	if got.GetDigest() != digest || got.GetCount() != count {
		t.Errorf("Digest at resourceVersion %s: %s of %d objects; the API server's state there: %s of %d",
			got.GetResourceVersion(), got.GetDigest(), got.GetCount(), digest, count)
	}
}

// TestDigest: each selector's Digest at every token its stream received
// through the churn (its changes' and its bookmarks'), at its Snapshot's
// token, and now, equals the digest of the reference's state (the API
// server's, watched) at that resourceVersion.
func TestDigest(t *testing.T) {
	s := newScenario(t, smallPayload)
	h := startHub(t, cluster.Config, hubConfig())
	var runs []*probeRun
	snapshots := map[*probeRun][2]string{}
	for _, p := range probesFor(colDigest) {
		r := newProbeRun(t, s, p, grpcDialer(t, h.Addr))
		_, token, rv := snapshotEvents(t, r.ctx, r.client, r.req)
		r.from = rv
		r.open(token, false)
		snapshots[r] = [2]string{token, rv}
		runs = append(runs, r)
	}
	s.churn(2)
	settleAll(s, runs)
	for _, r := range runs {
		t.Run(string(r.p.row), func(t *testing.T) {
			passIfOK(t, r.p.row, colDigest)
			sel := r.req.GetSelector()
			snap := snapshots[r]
			checkDigestAt(t, r.ctx, s, r.p, r.client, sel, snap[0], snap[1])
			events := r.tr.Events()
			if len(events) == 0 {
				t.Fatal("the stream received nothing")
			}
			for _, e := range events {
				checkDigestAt(t, r.ctx, s, r.p, r.client, sel, e.ResumeToken, e.ResourceVersion)
			}
			checkDigestAt(t, r.ctx, s, r.p, r.client, sel, "", "")
		})
	}
}
