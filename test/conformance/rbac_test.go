package conformance

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/internal/controlplane"
	"github.com/informerhub/informerhub/internal/testhub"
	"github.com/informerhub/informerhub/server"
	"github.com/informerhub/informerhub/server/auth"
	"github.com/informerhub/informerhub/test/checker"
)

// authServerConfig authenticates bearer tokens with TokenReview and
// authorizes with SubjectAccessReview, as --auth=kubernetes does, and
// rechecks every second.
func authServerConfig() server.Config {
	cfg := serverConfig()
	cfg.Authenticator = auth.NewTokenReview(kube.AuthenticationV1().TokenReviews(), auth.TokenReviewConfig{})
	cfg.Authorizer = auth.NewSubjectAccessReview(kube.AuthorizationV1().SubjectAccessReviews(), auth.SubjectAccessReviewConfig{})
	cfg.AuthzRecheckInterval = time.Second
	return cfg
}

// reader is a service account of ns that may list and watch ConfigMaps
// there (a Role and RoleBinding named as it), and a context whose calls
// present its token.
func reader(t *testing.T, ns, name string) context.Context {
	t.Helper()
	token, err := controlplane.ServiceAccountToken(context.Background(), kube, ns, name,
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"list", "watch"}})
	if err != nil {
		t.Fatal(err)
	}
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
}

// revoke takes away what reader gave name in ns.
func revoke(t *testing.T, ns, name string) {
	t.Helper()
	if err := kube.RbacV1().RoleBindings(ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// errorInfoOf is err's google.rpc.ErrorInfo, if it has one.
func errorInfoOf(err error) *errdetails.ErrorInfo {
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info
		}
	}
	return nil
}

// endedWith checks that a stream ended with code, and the token to resume
// from: the last it received, or the one before (a response in flight
// when the stream ended); tokens are those it received, in order.
func endedWith(t *testing.T, what string, err error, code codes.Code, tokens []string) {
	t.Helper()
	if status.Code(err) != code {
		t.Errorf("%s ended with %s, want %v", what, statusOf(err), code)
		return
	}
	token := errorInfoOf(err).GetMetadata()["resume_token"]
	if n := len(tokens); token == "" || n > 0 && !slices.Contains(tokens[max(0, n-2):], token) {
		t.Errorf("%s ended with %s, whose resume_token %q is neither of the last two it received", what, statusOf(err), token)
	}
}

// tokensOf is the resume tokens a transcript holds, in order.
func tokensOf(tr *checker.Transcript) []string {
	var tokens []string
	for _, e := range tr.Events() {
		tokens = append(tokens, e.ResumeToken)
	}
	return tokens
}

// TestRBAC: a caller that may list and watch ConfigMaps in one namespace
// gets that namespace on every path (a live Watch, initial events, a
// Snapshot, a replay of an old token, a WatchMany, a Count, each
// protocol), and is refused anything wider; once its access is revoked,
// every stream it holds ends with PERMISSION_DENIED and the token to
// resume from, and resuming is refused.
func TestRBAC(t *testing.T) {
	s := newScenario(t, smallPayload)
	cfg := hubConfig()
	cfg.HistorySize = 32
	h := testhub.Serve(t, cluster.Config, cfg, authServerConfig())
	ctx := reader(t, s.nsA, "reader")
	p := probes[slicesIndex(rowNamespace)]

	// Nothing wider.
	client := grpcDialer(t, h.Addr)
	everywhere := watchOf(kindConfigMaps, &informerhubv1.ResourceSelector{})
	denied := func(what string, err error) {
		t.Helper()
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s of every namespace: %s, want PERMISSION_DENIED", what, statusOf(err))
		}
	}
	firstOf := func(stream interface{ RecvMsg(any) error }, err error) error {
		if err != nil {
			return err
		}
		return stream.RecvMsg(&informerhubv1.WatchResponse{})
	}
	denied("a Watch", firstOf(client.Watch(ctx, everywhere)))
	denied("a Snapshot", firstOf(client.Snapshot(ctx, &informerhubv1.SnapshotRequest{Selector: everywhere.GetSelector()})))
	denied("a Count", firstOf(client.Count(ctx, &informerhubv1.CountRequest{Selector: everywhere.GetSelector()})))
	_, err := client.Digest(ctx, &informerhubv1.DigestRequest{Selector: everywhere.GetSelector()})
	denied("a Digest", err)
	err = firstOf(client.WatchMany(ctx, &informerhubv1.WatchManyRequest{Watches: []*informerhubv1.WatchRequest{p.request(s), everywhere}}))
	if denied("a WatchMany", err); errorInfoOf(err).GetMetadata()["index"] != "1" {
		t.Errorf("a WatchMany with a watch of every namespace: %v, want its index, 1", errorInfoOf(err))
	}

	// The namespace, on every path.
	runs := map[column]*probeRun{}
	add := func(c column, dial dialer) *probeRun {
		r := newProbeRun(t, s, p, dial(t, h.Addr))
		r.ctx = ctx
		runs[c] = r
		return r
	}
	var replayToken string
	for _, c := range []column{colLive, colSnapshot, colReplayResume} {
		r := add(c, grpcDialer)
		events, token, rv := snapshotEvents(t, ctx, r.client, r.req)
		r.from = rv
		switch c {
		case colSnapshot:
			for _, e := range events {
				r.tr.Record(e)
			}
			r.initial = true
			r.open(token, false)
		case colLive:
			r.open(token, false)
		case colReplayResume:
			replayToken = token // opened once the history has moved past it
		}
	}
	add(colInitial, grpcDialer).open("", true)
	for _, proto := range testhub.Protocols {
		if c, ok := protocolColumns[proto.Name]; ok {
			add(c, dialProtocol(proto)).open("", true)
		}
	}
	many := &manyRun{t: t, s: s, probes: []probe{p}, client: grpcDialer(t, h.Addr), ctx: ctx,
		req: &informerhubv1.WatchManyRequest{Watches: []*informerhubv1.WatchRequest{p.request(s)}}, trs: []*checker.Transcript{{}},
		changed: make(chan struct{})}
	many.req.Watches[0].SendInitialEvents = true
	many.open("")
	count := &countRun{cp: countProbe{row: rowRBAC, probe: p}, s: s}
	countCtx, cancelCount := context.WithCancel(ctx)
	defer cancelCount()
	countStream, err := client.Count(countCtx, &informerhubv1.CountRequest{Selector: p.request(s).GetSelector()})
	if err != nil {
		t.Fatal(err)
	}
	go count.read(countStream)

	// Every stream opened so far reads live before the history moves on:
	// one still in its initial events when the history passes their
	// point would replay too, and only the old token is to.
	s.settle()
	for c, r := range runs {
		if c != colReplayResume {
			r.settled()
		}
	}
	many.await("its initial events and what followed", func() bool { return many.bookmarks[0] >= s.lastRV[kindConfigMaps] })

	// A stream that falls further behind than the history while this churns
	// (a slow reader on a loaded machine) is cut, and its resume replays
	// too: those are counted, and only the replays beyond them are the old
	// token's.
	before := statsOf(t, h.Hub, kindConfigMaps)
	s.churn(3) // past the history of 32
	runs[colReplayResume].open(replayToken, false)
	s.churn(1)
	s.settle()
	for _, r := range runs {
		r.settled()
	}
	many.await("the bookmark of the last change", func() bool { return many.bookmarks[0] >= s.lastRV[kindConfigMaps] })
	after := statsOf(t, h.Hub, kindConfigMaps)
	if replays, cut := after.Replays-before.Replays, after.SlowDisconnects-before.SlowDisconnects; replays != 1+cut {
		t.Errorf("%d replays, with %d streams cut for falling behind; want the old token's besides theirs", replays, cut)
	}
	for c, r := range runs {
		t.Run(string(c), func(t *testing.T) {
			passIfOK(t, rowRBAC, c)
			r.t = t
			o := checker.Options{InitialEvents: r.initial}
			if !r.initial {
				o.FromResourceVersion = r.from
			}
			r.check(o)
		})
	}
	t.Run(string(colDigest), func(t *testing.T) {
		passIfOK(t, rowRBAC, colDigest)
		r := runs[colLive]
		checkDigestAt(t, ctx, s, p, client, p.request(s).GetSelector(), r.tr.LastToken(), "")
		checkDigestAt(t, ctx, s, p, client, p.request(s).GetSelector(), "", "")
	})
	t.Run(string(colWatchMany), func(t *testing.T) {
		passIfOK(t, rowRBAC, colWatchMany)
		r := &probeRun{t: t, p: p, s: s, tr: many.trs[0]}
		r.check(checker.Options{InitialEvents: true})
	})

	// Revoked: every stream ends, saying so and where to resume from.
	revoke(t, s.nsA, "reader")
	for c, r := range runs {
		endedWith(t, string(c), r.awaitEnd(), codes.PermissionDenied, tokensOf(r.tr))
		stream, err := r.client.Watch(ctx, &informerhubv1.WatchRequest{Selector: r.req.GetSelector(), ResumeToken: r.tr.LastToken()})
		if err == nil {
			_, err = stream.Recv()
		}
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s: resuming once access was revoked: %s, want PERMISSION_DENIED", c, statusOf(err))
		}
	}
	err = many.awaitEnd()
	many.mu.Lock()
	endedWith(t, "the WatchMany", err, codes.PermissionDenied, many.composites)
	many.mu.Unlock()
	eventually(t, "the Count's end", func() bool { count.mu.Lock(); defer count.mu.Unlock(); return count.err != nil })
	if status.Code(count.err) != codes.PermissionDenied {
		t.Errorf("the Count ended with %s, want PERMISSION_DENIED", statusOf(count.err))
	}
	if !t.Failed() {
		pass(t, rowRBAC, colCount)
	}
}
