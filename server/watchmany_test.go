package server

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/gen/informerhub/v1/informerhubv1connect"
	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/informerhub/hubtest"
)

// TestWatchManyIsTheSameOnEveryProtocol: native gRPC, and the Connect
// protocol and gRPC-Web in binary and JSON, send the same
// WatchManyResponses, each framing the event's shared encoding (one per
// wire encoding, however many streams send it); the event is what Watch
// sends.
func TestWatchManyIsTheSameOnEveryProtocol(t *testing.T) {
	cluster := hubtest.NewCluster(t)
	var mu sync.Mutex // guards encodes
	encodes := map[bool]int{}
	hub := informerhub.New(informerhub.Config{Logger: discard, BookmarkInterval: time.Hour, EncodeEvent: func(ev *informerhub.Event) informerhub.Encoded {
		if ev.Type != informerhub.EventBookmark {
			mu.Lock()
			encodes[ev.Encoding&encodingWireJSON != 0]++
			mu.Unlock()
		}
		return EncodeEvent(ev)
	}}, cluster, cluster)
	defer hub.Close()
	addr := serveOnePort(t, New(hub, Config{Logger: discard}), onePortOptions{})
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req := &informerhubv1.WatchManyRequest{Watches: []*informerhubv1.WatchRequest{
		{Selector: &informerhubv1.ResourceSelector{Version: "v1", Resource: "pods"}, SendInitialEvents: true},
		{Selector: &informerhubv1.ResourceSelector{Version: "v1", Resource: "configmaps"}},
	}}
	single, err := informerhubv1.NewInformerHubServiceClient(conn).Watch(ctx, &informerhubv1.WatchRequest{Selector: req.Watches[1].Selector})
	if err != nil {
		t.Fatal(err)
	}
	var recvs []func() (*informerhubv1.WatchManyResponse, error)
	stream, err := informerhubv1.NewInformerHubServiceClient(conn).WatchMany(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	recvs = append(recvs, stream.Recv)
	for _, c := range []informerhubv1connect.InformerHubServiceClient{
		connectClientOf(t, addr, false),
		connectClientOf(t, addr, true, connect.WithGRPCWeb()),
		connectClientOf(t, addr, true, connect.WithProtoJSON()),
		connectClientOf(t, addr, false, connect.WithGRPCWeb(), connect.WithProtoJSON()),
	} {
		stream, err := c.WatchMany(ctx, connect.NewRequest(req))
		if err != nil {
			t.Fatal(err)
		}
		recvs = append(recvs, func() (*informerhubv1.WatchManyResponse, error) {
			if !stream.Receive() {
				return nil, stream.Err()
			}
			return stream.Msg(), nil
		})
	}
	receiveAll := func(what string) []*informerhubv1.WatchManyResponse {
		var out []*informerhubv1.WatchManyResponse
		for i, recv := range recvs {
			resp, err := recv()
			if err != nil {
				t.Fatalf("%s: stream %d: %v", what, i, err)
			}
			out = append(out, resp)
		}
		for i, resp := range out[1:] {
			// Their tokens may differ (each stream starts where the feed
			// is when it subscribes); the rest must not.
			got, want := proto.Clone(resp).(*informerhubv1.WatchManyResponse), proto.Clone(out[0]).(*informerhubv1.WatchManyResponse)
			if got.ResumeToken == "" || strings.Count(got.ResumeToken, ".") != 2 {
				t.Errorf("%s: stream %d's token %q is not a composite of two", what, i+1, got.ResumeToken)
			}
			got.ResumeToken, want.ResumeToken, got.Event.ResumeToken, want.Event.ResumeToken = "", "", "", ""
			if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
				t.Errorf("%s: stream %d received another response (-gRPC +got):\n%s", what, i+1, diff)
			}
		}
		return out
	}
	end := receiveAll("the end of the initial events")[0]
	if end.Index != 0 || !end.InitialEventsEnd || !end.Event.InitialEventsEnd || end.Event.Type != informerhubv1.EventType_EVENT_TYPE_BOOKMARK {
		t.Fatalf("first response %v, want the pods' initial events' end", end)
	}
	cluster.ConfigMaps().Add(hubtest.ConfigMap("ns", "a", nil, strings.Repeat("x", 100)))
	change := receiveAll("a change")[0]
	watched, err := single.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if change.Index != 1 || change.InitialEventsEnd || !proto.Equal(change.Event, watched) {
		t.Fatalf("a change: %v, want index 1 and Watch's %v", change, watched)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := map[bool]int{false: 1, true: 1}; !cmp.Equal(encodes, want) {
		t.Fatalf("encodes by wire JSON: %v, want %v", encodes, want)
	}
}

func firstManyResponse(t *testing.T, client informerhubv1.InformerHubServiceClient, ctx context.Context, req *informerhubv1.WatchManyRequest) (*informerhubv1.WatchManyResponse, error) {
	t.Helper()
	stream, err := client.WatchMany(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	return stream.Recv()
}

// TestWatchManyErrorsNameTheWatch: what one watch makes fail, at the call
// or while the stream runs, carries its index, and its field within the
// request; the syntax of every watch is checked before any review; each
// watch takes a stream of the caller's.
func TestWatchManyErrorsNameTheWatch(t *testing.T) {
	cluster := hubtest.NewCluster(t)
	authz := &tableAuthorizer{allowed: map[string][]string{"alice": {"a"}}}
	counting := &countingAuthorizer{}
	hub := informerhub.New(informerhub.Config{Logger: discard}, cluster, cluster)
	client := informerhubv1.NewInformerHubServiceClient(serveWithAuth(t, hub,
		Config{Authorizer: authz, AuthzRecheckInterval: 20 * time.Millisecond, MaxSubscriptionsPerIdentity: 3, MaxWatchesPerStream: 4}))
	countingClient := informerhubv1.NewInformerHubServiceClient(serveWithAuth(t, hub, Config{Authorizer: counting}))
	inA := func(resource string) *informerhubv1.WatchRequest {
		return &informerhubv1.WatchRequest{Selector: &informerhubv1.ResourceSelector{Version: "v1", Resource: resource, Namespace: "a"}, SendInitialEvents: true}
	}
	inB := &informerhubv1.WatchRequest{Selector: &informerhubv1.ResourceSelector{Version: "v1", Resource: "pods", Namespace: "b"}}
	malformed := &informerhubv1.WatchRequest{Selector: &informerhubv1.ResourceSelector{Version: "v1", Resource: "pods", Namespace: "Not_A_Name"}}
	for _, tc := range []struct {
		name    string
		client  informerhubv1.InformerHubServiceClient
		watches []*informerhubv1.WatchRequest
		code    codes.Code
		reason  string
		field   string
		index   string
	}{
		{"none", client, nil, codes.InvalidArgument, ReasonInvalidArgument, "watches", ""},
		{"too many", client, []*informerhubv1.WatchRequest{inA("pods"), inA("pods"), inA("pods"), inA("pods"), inA("pods")}, codes.InvalidArgument, ReasonInvalidArgument, "watches", ""},
		{"malformed", countingClient, []*informerhubv1.WatchRequest{inA("pods"), malformed}, codes.InvalidArgument, ReasonInvalidArgument, "watches[1].selector.namespace", "1"},
		{"forbidden", client, []*informerhubv1.WatchRequest{inA("pods"), inB}, codes.PermissionDenied, ReasonForbidden, "", "1"},
		{"more than the caller's streams", client, []*informerhubv1.WatchRequest{inA("pods"), inA("configmaps"), inA("pods"), inA("configmaps")}, codes.ResourceExhausted, ReasonTooManySubscriptions, "", ""},
	} {
		_, err := firstManyResponse(t, tc.client, as("alice"), &informerhubv1.WatchManyRequest{Watches: tc.watches})
		info := errorInfoOf(err)
		if status.Code(err) != tc.code || info.GetReason() != tc.reason || fieldViolationsOf(err) != tc.field || info.GetMetadata()["index"] != tc.index {
			t.Errorf("%s: %v (%v, fields %q), want %v %s on %q, index %q", tc.name, err, info, fieldViolationsOf(err), tc.code, tc.reason, tc.field, tc.index)
		}
	}
	if n := counting.asked.Load(); n != 0 {
		t.Errorf("a malformed watch cost %d reviews, want none", n)
	}

	// Three streams are alice's: a WatchMany of three takes them all.
	stream, err := client.WatchMany(as("alice"), &informerhubv1.WatchManyRequest{Watches: []*informerhubv1.WatchRequest{inA("configmaps"), inA("pods"), inA("pods")}})
	if err != nil {
		t.Fatal(err)
	}
	var last *informerhubv1.WatchManyResponse
	for last == nil || !last.InitialEventsEnd {
		if last, err = stream.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := firstResponse(t, client, as("alice"), cmInitial); errorInfoOf(err).GetReason() != ReasonTooManySubscriptions {
		t.Fatalf("a fourth stream: %v, want TOO_MANY_SUBSCRIPTIONS", err)
	}
	// Revoked: the first watch's access is rechecked first.
	authz.set("alice")
	_, err = stream.Recv()
	info := errorInfoOf(err)
	if status.Code(err) != codes.PermissionDenied || info.GetMetadata()["index"] != "0" || info.GetMetadata()["resume_token"] != last.ResumeToken {
		t.Fatalf("revoked: %v (%v), want PERMISSION_DENIED of watch 0 with the last composite token", err, info)
	}
}

// TestWatchManyChargesEachWatchAsACall: a WatchMany counts as one call per
// watch against the rate limit per identity, so that one call cannot
// compile and review as many watches as a burst of calls would.
func TestWatchManyChargesEachWatchAsACall(t *testing.T) {
	cluster := hubtest.NewCluster(t)
	hub := informerhub.New(informerhub.Config{Logger: discard}, cluster, cluster)
	client := informerhubv1.NewInformerHubServiceClient(serveWithAuth(t, hub,
		Config{Authorizer: &tableAuthorizer{allowed: map[string][]string{"alice": {"*"}}}, RatePerIdentity: 0.001, RateBurstPerIdentity: 5}))
	watches := func(n int) *informerhubv1.WatchManyRequest {
		req := &informerhubv1.WatchManyRequest{}
		for range n {
			req.Watches = append(req.Watches, &informerhubv1.WatchRequest{Selector: cmSelector})
		}
		return req
	}
	if _, err := firstManyResponse(t, client, as("alice"), watches(6)); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("6 watches with a burst of 5 calls: %v, want RESOURCE_EXHAUSTED", err)
	}
	stream, err := client.WatchMany(as("alice"), watches(4))
	if err == nil {
		_, err = stream.Header()
	}
	if err != nil {
		t.Fatalf("4 watches, within the burst left: %v", err)
	}
	if _, err := client.ListResources(as("alice"), &informerhubv1.ListResourcesRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a call after 1 + 4 watches' worth: %v, want RESOURCE_EXHAUSTED", err)
	}
}
