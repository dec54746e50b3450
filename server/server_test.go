package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/informerhub/hubtest"
	"github.com/informerhub/informerhub/server/auth"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var discard = slog.New(slog.DiscardHandler)

func TestErrorsBecomeStatuses(t *testing.T) {
	cms := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	forbidden := &auth.ForbiddenError{User: "alice", Attributes: auth.Attributes{Verb: "list", Resource: cms, Namespace: "a"}}
	tests := []struct {
		name     string
		err      error
		code     codes.Code
		reason   string
		metadata map[string]string
	}{
		{"invalid request", &informerhub.RequestError{Field: informerhub.FieldLabelSelector, Reason: "bad", Err: informerhub.ErrInvalidRequest},
			codes.InvalidArgument, ReasonInvalidArgument, map[string]string{"field": "selector.label_selector"}},
		{"invalid token", &informerhub.RequestError{Field: informerhub.FieldResumeToken, Reason: "bad", Err: informerhub.ErrInvalidToken},
			codes.InvalidArgument, ReasonInvalidResumeToken, map[string]string{"field": "resume_token"}},
		{"unknown resource", &informerhub.ResourceError{Resource: cms, Err: informerhub.ErrUnknownResource},
			codes.NotFound, ReasonResourceNotFound, map[string]string{"group": "", "version": "v1", "resource": "configmaps"}},
		{"expired token", &informerhub.ExpiredError{Resource: cms},
			codes.OutOfRange, ReasonResumeTokenExpired, map[string]string{"group": "", "version": "v1", "resource": "configmaps"}},
		{"token compacted upstream", &informerhub.ExpiredError{Resource: cms, Upstream: true},
			codes.OutOfRange, ReasonResumeTokenExpired, map[string]string{"group": "", "version": "v1", "resource": "configmaps"}},
		{"token older than a replay can hold", &informerhub.ExpiredError{Resource: cms, TooLarge: true},
			codes.OutOfRange, ReasonResumeTokenExpired, map[string]string{"group": "", "version": "v1", "resource": "configmaps"}},
		{"too many distinct filters", &informerhub.LimitError{Resource: cms, Limit: informerhub.LimitFilters, Max: 32},
			codes.ResourceExhausted, ReasonTooManyDistinct, map[string]string{"group": "", "version": "v1", "resource": "configmaps", "limit": "max-filters-per-resource", "max": "32"}},
		{"too many projections for one identity", &informerhub.LimitError{Resource: cms, Limit: informerhub.LimitProjectionsPerOwner, Max: 8},
			codes.ResourceExhausted, ReasonTooManyDistinct, map[string]string{"group": "", "version": "v1", "resource": "configmaps", "limit": "max-projections-per-identity", "max": "8"}},
		{"replays hold too much state", &informerhub.LimitError{Resource: cms, Limit: informerhub.LimitReplayState, Max: 1 << 20},
			codes.ResourceExhausted, ReasonReplayLimit, map[string]string{"group": "", "version": "v1", "resource": "configmaps", "limit": "max-replay-state-bytes", "max": "1048576"}},
		{"too slow", &informerhub.TooSlowError{Resource: cms, ResumeToken: "tok"},
			codes.ResourceExhausted, ReasonSubscriberTooSlow, map[string]string{"group": "", "version": "v1", "resource": "configmaps", "resume_token": "tok"}},
		{"a Count's client stopped reading", &informerhub.TooSlowError{Resource: cms, Counting: true, Stalled: true},
			codes.ResourceExhausted, ReasonSubscriberTooSlow, map[string]string{"group": "", "version": "v1", "resource": "configmaps"}},
		{"too many token reviews", &auth.TooManyReviewsError{Peer: "10.0.0.1", PerSecond: 10},
			codes.ResourceExhausted, ReasonTooManyTokenReviews, nil},
		{"token ahead", &informerhub.ResourceError{Resource: cms, Err: fmt.Errorf("%w: later", informerhub.ErrTokenAhead)},
			codes.Unavailable, ReasonResumeTokenAhead, map[string]string{"group": "", "version": "v1", "resource": "configmaps"}},
		{"upstream forbidden", &informerhub.ResourceError{Resource: cms, Err: fmt.Errorf("%w: listing failed: %w", informerhub.ErrUnavailable, apierrors.NewForbidden(cms.GroupResource(), "", errors.New("no")))},
			codes.Unavailable, ReasonUpstreamUnavailable, map[string]string{"group": "", "version": "v1", "resource": "configmaps", "kubernetes_reason": "Forbidden"}},
		{"shutting down", informerhub.ErrClosed, codes.Unavailable, ReasonShuttingDown, nil},
		{"unauthenticated", fmt.Errorf("%w: no credentials", auth.ErrUnauthenticated), codes.Unauthenticated, ReasonUnauthenticated, nil},
		{"forbidden", forbidden, codes.PermissionDenied, ReasonForbidden,
			map[string]string{"group": "", "version": "v1", "resource": "configmaps", "user": "alice", "verb": "list", "namespace": "a"}},
		{"access revoked", &accessLostError{err: forbidden, resumeToken: "tok"}, codes.PermissionDenied, ReasonForbidden,
			map[string]string{"group": "", "version": "v1", "resource": "configmaps", "user": "alice", "verb": "list", "namespace": "a", "resume_token": "tok"}},
		{"a Count's access revoked", &accessLostError{err: forbidden}, codes.PermissionDenied, ReasonForbidden,
			map[string]string{"group": "", "version": "v1", "resource": "configmaps", "user": "alice", "verb": "list", "namespace": "a"}},
		{"a Count's credentials rejected at a recheck", &accessLostError{err: fmt.Errorf("%w: expired", auth.ErrUnauthenticated)},
			codes.Unauthenticated, ReasonUnauthenticated, nil},
		{"a Count's access not confirmed for too long", &accessLostError{err: &authUnavailableError{err: errors.New("connection refused")}},
			codes.Unavailable, ReasonUpstreamUnavailable, nil},
		{"a Count drained", &drainedError{}, codes.Unavailable, ReasonShuttingDown, nil},
		{"credentials rejected at a recheck", &accessLostError{err: fmt.Errorf("%w: expired", auth.ErrUnauthenticated), resumeToken: "tok"},
			codes.Unauthenticated, ReasonUnauthenticated, map[string]string{"resume_token": "tok"}},
		{"access cannot be checked", &authUnavailableError{err: errors.New("connection refused")}, codes.Unavailable, ReasonUpstreamUnavailable, nil},
		{"access not confirmed for too long", &accessLostError{err: &authUnavailableError{err: errors.New("connection refused")}, resumeToken: "tok"},
			codes.Unavailable, ReasonUpstreamUnavailable, map[string]string{"resume_token": "tok"}},
		{"too many subscriptions", &auth.TooManySubscriptionsError{User: "alice", Max: 3}, codes.ResourceExhausted, ReasonTooManySubscriptions,
			map[string]string{"user": "alice", "limit": "3"}},
		{"a running Watch's selector refused by the API server", &endedAtError{err: &informerhub.RequestError{Field: informerhub.FieldLabelSelector, Reason: "bad", Err: informerhub.ErrInvalidRequest}, resumeToken: "tok"},
			codes.InvalidArgument, ReasonInvalidArgument, map[string]string{"field": "selector.label_selector", "resume_token": "tok"}},
		{"a running Watch's token expired as it caught up", &endedAtError{err: &informerhub.ExpiredError{Resource: cms}, resumeToken: "tok"},
			codes.OutOfRange, ReasonResumeTokenExpired, map[string]string{"group": "", "version": "v1", "resource": "configmaps", "resume_token": "tok"}},
		{"a running Watch's object unsendable", &endedAtError{err: &informerhub.ObjectError{Resource: cms, Namespace: "a", Name: "b", Err: errors.New("bad")}, resumeToken: "tok"},
			codes.Internal, ReasonObjectUnsendable, map[string]string{"group": "", "version": "v1", "resource": "configmaps", "namespace": "a", "name": "b", "resume_token": "tok"}},
		{"a running Watch's internal error", &endedAtError{err: errors.New("boom"), resumeToken: "tok"}, codes.Internal, "", nil},
		{"canceled", context.Canceled, codes.Canceled, "", nil},
		{"a gRPC status (the client went away)", status.Error(codes.Unavailable, "transport is closing"), codes.Unavailable, "", nil},
		{"something else", errors.New("boom"), codes.Internal, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := status.Convert(toStatus(discard, tt.err))
			if st.Code() != tt.code {
				t.Fatalf("code %v, want %v", st.Code(), tt.code)
			}
			if tt.code == codes.Internal && tt.reason == "" && st.Message() != "internal error" {
				t.Errorf("internal error text %q reached the client", st.Message())
			}
			var info *errdetails.ErrorInfo
			for _, d := range st.Details() {
				if i, ok := d.(*errdetails.ErrorInfo); ok {
					info = i
				}
			}
			if tt.reason == "" {
				if info != nil {
					t.Fatalf("unexpected ErrorInfo %v", info)
				}
				return
			}
			if info == nil || info.Reason != tt.reason || info.Domain != ErrorDomain {
				t.Fatalf("ErrorInfo %v, want reason %s", info, tt.reason)
			}
			if diff := cmp.Diff(tt.metadata, info.Metadata); diff != "" && tt.metadata != nil {
				t.Errorf("ErrorInfo metadata (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCodecSendsTheSharedEncoding(t *testing.T) {
	c := codec{proto: encoding.GetCodecV2("proto")}
	ev := &informerhub.Event{Type: informerhub.EventModified, Object: `{"a":1}`, ResourceVersion: "7", ResumeToken: "tok"}

	// Without an encoding, the codec encodes the event itself...
	plain, err := c.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	var got informerhubv1.WatchResponse
	if err := proto.Unmarshal(plain.Materialize(), &got); err != nil {
		t.Fatal(err)
	}
	want := &informerhubv1.WatchResponse{Type: informerhubv1.EventType_EVENT_TYPE_MODIFIED, Object: `{"a":1}`, ResourceVersion: "7", ResumeToken: "tok"}
	if diff := cmp.Diff(want, &got, protocmp.Transform()); diff != "" {
		t.Fatalf("encoded event (-want +got):\n%s", diff)
	}

	if diff := cmp.Diff(plain.Materialize(), EncodeEvent(ev).(mem.BufferSlice).Materialize()); diff != "" {
		t.Fatalf("EncodeEvent differs from the codec (-codec +EncodeEvent):\n%s", diff)
	}

	// ...with one (a hub's event), it sends those very bytes, not a copy.
	shared := []byte("pre-encoded")
	cluster := hubtest.NewCluster(t)
	hub := informerhub.New(informerhub.Config{Logger: discard, EncodeEvent: func(*informerhub.Event) informerhub.Encoded { return mem.BufferSlice{mem.SliceBuffer(shared)} }}, cluster, cluster)
	defer hub.Close()
	sub, err := hub.Watch(context.Background(), informerhub.WatchRequest{Selector: informerhub.Selector{Resource: hubtest.ConfigMaps}, SendInitialEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	hubEvent, err := sub.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	sent, err := c.Marshal(hubEvent)
	if err != nil {
		t.Fatal(err)
	}
	if len(sent) != 1 || &sent[0].ReadOnlyData()[0] != &shared[0] || sent.Len() != len(shared) {
		t.Fatal("the codec did not send the event's shared encoding")
	}
}

// serve runs a Server for hub on an in-memory connection.
func serve(t *testing.T, hub *informerhub.Hub) informerhubv1.InformerHubServiceClient {
	t.Helper()
	return serveWith(t, hub, Config{Logger: discard})
}

// serveWith is serve with a Config.
func serveWith(t *testing.T, hub *informerhub.Hub, cfg Config) informerhubv1.InformerHubServiceClient {
	t.Helper()
	return informerhubv1.NewInformerHubServiceClient(dial(t, hub, cfg))
}

// dial serves hub with cfg over an in-memory listener, with health and
// reflection beside it, and returns a connection to it whose flow-control
// window is a fixed 64 KiB, so a client that stops reading stalls sends
// quickly. Both stop when the test ends.
func dial(t *testing.T, hub *informerhub.Hub, cfg Config) *grpc.ClientConn {
	t.Helper()
	_, conn := dialServer(t, hub, cfg)
	return conn
}

// dialServer is dial, returning the Server too.
func dialServer(t *testing.T, hub *informerhub.Hub, cfg Config) (*Server, *grpc.ClientConn) {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := New(hub, cfg)
	g := grpc.NewServer(srv.ServerOptions()...)
	srv.Register(g)
	healthpb.RegisterHealthServer(g, health.NewServer())
	reflection.Register(g)
	go g.Serve(lis) //nolint:errcheck // ends with Stop
	conn, err := grpc.NewClient("passthrough:///bufconn", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		hub.Close()
		g.Stop()
	})
	return srv, conn
}

// TestEachChangeIsEncodedOnceForAllStreams runs 20 Watch streams over gRPC
// and counts the encodings: one per change, however many streams send it.
func TestEachChangeIsEncodedOnceForAllStreams(t *testing.T) {
	cluster := hubtest.NewCluster(t)
	var encodings atomic.Int64
	hub := informerhub.New(informerhub.Config{Logger: discard, EncodeEvent: func(ev *informerhub.Event) informerhub.Encoded {
		if ev.Type != informerhub.EventBookmark && ev.ResumeToken != "" && ev.Object != "" {
			encodings.Add(1)
		}
		return EncodeEvent(ev)
	}}, cluster, cluster)
	client := serve(t, hub)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	const streams, changes = 20, 30
	var recvs []grpc.ServerStreamingClient[informerhubv1.WatchResponse]
	for range streams {
		stream, err := client.Watch(ctx, &informerhubv1.WatchRequest{Selector: &informerhubv1.ResourceSelector{Version: "v1", Resource: "configmaps"}, SendInitialEvents: true})
		if err != nil {
			t.Fatal(err)
		}
		if resp, err := stream.Recv(); err != nil || !resp.InitialEventsEnd {
			t.Fatalf("first response %v, %v; want the initial-events-end bookmark", resp, err)
		}
		recvs = append(recvs, stream)
	}
	encodings.Store(0)
	for i := range changes {
		cluster.ConfigMaps().Add(hubtest.ConfigMap("ns", fmt.Sprint(i), nil, ""))
	}
	for i, stream := range recvs {
		for n := range changes {
			resp, err := stream.Recv()
			if err != nil {
				t.Fatalf("stream %d: %v", i, err)
			}
			if resp.Type != informerhubv1.EventType_EVENT_TYPE_ADDED || resp.ResourceVersion != fmt.Sprint(n+1) {
				t.Fatalf("stream %d got %v, want ADDED at %d", i, resp, n+1)
			}
		}
	}
	if got := encodings.Load(); got != changes {
		t.Errorf("%d encodings for %d changes sent on %d streams, want %d", got, changes, streams, changes)
	}
}

func TestSnapshotAndListResources(t *testing.T) {
	cluster := hubtest.NewCluster(t)
	for i := range 5 {
		cluster.ConfigMaps().Add(hubtest.ConfigMap("ns", fmt.Sprint(i), nil, ""))
	}
	client := serve(t, informerhub.New(informerhub.Config{Logger: discard, SnapshotPageSize: 2}, cluster, cluster))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	stream, err := client.Snapshot(ctx, &informerhubv1.SnapshotRequest{Selector: &informerhubv1.ResourceSelector{Version: "v1", Resource: "configmaps"}})
	if err != nil {
		t.Fatal(err)
	}
	var sizes []int
	var lasts []bool
	for {
		page, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if page.ResourceVersion != "5" || page.ResumeToken == "" {
			t.Fatalf("page %v: want resourceVersion 5 and a token", page)
		}
		sizes, lasts = append(sizes, len(page.Objects)), append(lasts, page.Last)
	}
	if diff := cmp.Diff([]int{2, 2, 1}, sizes); diff != "" {
		t.Errorf("page sizes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]bool{false, false, true}, lasts); diff != "" {
		t.Errorf("last flags (-want +got):\n%s", diff)
	}

	resources, err := client.ListResources(ctx, &informerhubv1.ListResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if since := resources.Resources[0].GetRetainedSince(); since == nil || time.Since(since.AsTime()) > time.Minute {
		t.Errorf("retained_since %v, want when the informer synced", since)
	}
	resources.Resources[0].RetainedSince = nil
	shardFields := []string{"object.metadata.uid", "object.metadata.namespace"}
	want := &informerhubv1.ListResourcesResponse{MaxWatchesPerStream: 32, Resources: []*informerhubv1.Resource{
		// The history starts at the initial list (rv 5) and holds nothing yet.
		{Version: "v1", Resource: "configmaps", Kind: "ConfigMap", Namespaced: true, InformerActive: true, CachedObjects: 5, HistoryResourceVersion: "5",
			RetainedResourceVersion: "5", SelectableFields: []string{"metadata.name", "metadata.namespace"}, ShardFields: shardFields},
		{Version: "v1", Resource: "namespaces", Kind: "Namespace", SelectableFields: []string{"metadata.name", "status.phase"}, ShardFields: shardFields},
		{Version: "v1", Resource: "pods", Kind: "Pod", Namespaced: true, SelectableFields: []string{
			"metadata.name", "metadata.namespace", "spec.hostNetwork", "spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
			"spec.serviceAccountName", "status.nominatedNodeName", "status.phase", "status.podIP", "status.podIPs"}, ShardFields: shardFields},
	}}
	if diff := cmp.Diff(want, resources, protocmp.Transform()); diff != "" {
		t.Errorf("ListResources (-want +got):\n%s", diff)
	}
}

func TestWatchWithoutSelectorIsInvalid(t *testing.T) {
	cluster := hubtest.NewCluster(t)
	client := serve(t, informerhub.New(informerhub.Config{Logger: discard}, cluster, cluster))
	stream, err := client.Watch(context.Background(), &informerhubv1.WatchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Watch without a selector: %v, want INVALID_ARGUMENT", err)
	}
}

// TestOversizedRequestsAreRefused: a request larger than MaxRecvMsgSize is
// refused by gRPC before the service sees it.
func TestOversizedRequestsAreRefused(t *testing.T) {
	cluster := hubtest.NewCluster(t)
	client := serveWith(t, informerhub.New(informerhub.Config{Logger: discard}, cluster, cluster), Config{Logger: discard, MaxRecvMsgSize: 1 << 10})
	sel := &informerhubv1.ResourceSelector{Version: "v1", Resource: "configmaps"}
	for _, tt := range []struct {
		token string
		code  codes.Code
	}{
		{strings.Repeat("x", 2<<10), codes.ResourceExhausted},
		{"garbage", codes.InvalidArgument}, // small enough to reach the service
	} {
		stream, err := client.Watch(context.Background(), &informerhubv1.WatchRequest{Selector: sel, ResumeToken: tt.token})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); status.Code(err) != tt.code {
			t.Fatalf("a %d-byte token: %v, want %v", len(tt.token), err, tt.code)
		}
	}
}

// logSignal is a slog.Handler that closes seen when a record with a message
// starting with prefix is logged: tests wait on what the server does rather
// than poll for it.
type logSignal struct {
	prefix string
	seen   chan struct{}
	once   *sync.Once
}

func newLogSignal(prefix string) logSignal {
	return logSignal{prefix: prefix, seen: make(chan struct{}), once: &sync.Once{}}
}

func (l logSignal) Enabled(context.Context, slog.Level) bool { return true }
func (l logSignal) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l logSignal) WithGroup(string) slog.Handler            { return l }
func (l logSignal) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, l.prefix) {
		l.once.Do(func() { close(l.seen) })
	}
	return nil
}

func (l logSignal) wait(t *testing.T) {
	t.Helper()
	select {
	case <-l.seen:
	case <-time.After(time.Minute):
		t.Fatalf("the server never logged %q", l.prefix)
	}
}

// bigConfigMaps adds n ConfigMaps of 64 KiB each.
func bigConfigMaps(c *hubtest.Cluster, ns string, n int) {
	big := strings.Repeat("x", 64<<10)
	for i := range n {
		c.ConfigMaps().Add(hubtest.ConfigMap(ns, fmt.Sprintf("big-%03d", i), nil, big))
	}
}

// drain reads a stalled stream to its end: the responses that reached the
// client, and the status.
func drain(t *testing.T, stream grpc.ServerStreamingClient[informerhubv1.WatchResponse]) (last, prev string, n int, err error) {
	t.Helper()
	for {
		resp, err := stream.Recv()
		if err != nil {
			return last, prev, n, err
		}
		last, prev, n = resp.ResumeToken, last, n+1
	}
}

func tokenOf(t *testing.T, err error) string {
	t.Helper()
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.Metadata["resume_token"]
		}
	}
	t.Fatalf("no ErrorInfo in %v", err)
	return ""
}

// TestStallWhileTheClientDoesNotRead: the client stops reading while
// changes flow, many more than its queue holds. Its subscription falls
// behind and would read on from the history; the stream ends only after
// MaxSendStall, with RESOURCE_EXHAUSTED; its token is never ahead of what
// the client received (a response in flight when a stalled stream is cut
// may still arrive after the server chose the token); resuming from the
// client's own last token loses and repeats nothing.
func TestStallWhileTheClientDoesNotRead(t *testing.T) {
	cluster := hubtest.NewCluster(t)
	stalled := newLogSignal("ending a stream whose client has not read")
	hub := informerhub.New(informerhub.Config{Logger: discard, QueueSize: 4, EncodeEvent: EncodeEvent}, cluster, cluster)
	client := serveWith(t, hub, Config{Logger: slog.New(stalled), MaxSendStall: 100 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sel := &informerhubv1.ResourceSelector{Version: "v1", Resource: "configmaps"}
	stream, err := client.Watch(ctx, &informerhubv1.WatchRequest{Selector: sel})
	if err != nil {
		t.Fatal(err)
	}
	header, err := stream.Header() // the subscription is established
	if err != nil {
		t.Fatal(err)
	}
	tokens := header.Get(ResumeTokenHeader)
	reader, err := hub.Watch(ctx, informerhub.WatchRequest{Selector: informerhub.Selector{Resource: hubtest.ConfigMaps}})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	bigConfigMaps(cluster, "ns", 40)
	for range 40 { // once the reader has them all, they were dispatched
		if _, err := reader.Next(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if st := hub.Stats()[0]; st.FellBehind == 0 || st.SlowDisconnects != 0 {
		t.Fatalf("%d subscribers fell behind, %d were disconnected; want the stalled one behind and none disconnected", st.FellBehind, st.SlowDisconnects)
	}
	stalled.wait(t)
	for {
		resp, err := stream.Recv()
		if err != nil {
			if status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("stream ended with %v, want RESOURCE_EXHAUSTED", err)
			}
			if got := tokenOf(t, err); got != tokens[len(tokens)-1] && (len(tokens) < 2 || got != tokens[len(tokens)-2]) {
				t.Fatal("the status token is neither the last token received nor the one before")
			}
			break
		}
		tokens = append(tokens, resp.ResumeToken)
	}
	received := len(tokens) - 1
	if received >= 40 {
		t.Fatalf("the client received all %d changes: it never stalled", received)
	}
	resumed, err := client.Watch(ctx, &informerhubv1.WatchRequest{Selector: sel, ResumeToken: tokens[len(tokens)-1]})
	if err != nil {
		t.Fatal(err)
	}
	for i := received; i < 40; i++ {
		resp, err := resumed.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf(`"name":"big-%03d"`, i); !strings.Contains(resp.Object, want) {
			t.Fatalf("after resuming, change %d is not big-%03d: %s %.80s (rv %s)", i, i, resp.Type, resp.Object, resp.ResourceVersion)
		}
	}
}

// TestStalledInitialEvents: a client that stops reading during its initial
// events (no queue can overflow then) is ended after MaxSendStall, with the
// token of the last response it received, from which it resumes.
func TestStalledInitialEvents(t *testing.T) {
	cluster := hubtest.NewCluster(t)
	bigConfigMaps(cluster, "ns", 40)
	hub := informerhub.New(informerhub.Config{Logger: discard, EncodeEvent: EncodeEvent}, cluster, cluster)
	ended := newLogSignal("ending a stream whose client has not read")
	client := serveWith(t, hub, Config{Logger: slog.New(ended), MaxSendStall: 100 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sel := &informerhubv1.ResourceSelector{Version: "v1", Resource: "configmaps"}
	stream, err := client.Watch(ctx, &informerhubv1.WatchRequest{Selector: sel, SendInitialEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	ended.wait(t)
	last, prev, n, err := drain(t, stream)
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("stream ended with %v after %d responses, want RESOURCE_EXHAUSTED", err, n)
	}
	if got := tokenOf(t, err); got != last && got != prev {
		t.Fatal("the status token is neither the last token received nor the one before")
	}
	resumed, err := client.Watch(ctx, &informerhubv1.WatchRequest{Selector: sel, ResumeToken: last})
	if err != nil {
		t.Fatal(err)
	}
	for i := n; ; i++ {
		resp, err := resumed.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if resp.InitialEventsEnd {
			if i != 40 {
				t.Fatalf("the joined initial events hold %d objects, want 40", i)
			}
			break
		}
		if want := fmt.Sprintf(`"name":"big-%03d"`, i); !strings.Contains(resp.Object, want) {
			t.Fatalf("initial event %d is not big-%03d", i, i)
		}
	}
}

func TestStalledSnapshotReader(t *testing.T) {
	cluster := hubtest.NewCluster(t)
	bigConfigMaps(cluster, "ns", 100)
	hub := informerhub.New(informerhub.Config{Logger: discard}, cluster, cluster)
	ended := newLogSignal("ending a stream whose client has not read")
	client := serveWith(t, hub, Config{Logger: slog.New(ended), MaxSendStall: 100 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stream, err := client.Snapshot(ctx, &informerhubv1.SnapshotRequest{Selector: &informerhubv1.ResourceSelector{Version: "v1", Resource: "configmaps"}})
	if err != nil {
		t.Fatal(err)
	}
	ended.wait(t)
	var pages int
	for {
		page, err := stream.Recv()
		if err != nil {
			if status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("snapshot ended with %v, want RESOURCE_EXHAUSTED", err)
			}
			break
		}
		if page.Last {
			t.Fatal("the stalled reader received the whole snapshot")
		}
		pages++
	}
	if pages == 0 {
		t.Fatal("no page reached the client")
	}
}
