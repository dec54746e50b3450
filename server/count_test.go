package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/informerhub/hubtest"
	"github.com/informerhub/informerhub/server/auth"
)

// TestCountGroupByIsRefusedBeforeAnyReview: a group_by that cannot be one
// is INVALID_ARGUMENT on the field group_by, without one authorization
// question, whatever the selector.
func TestCountGroupByIsRefusedBeforeAnyReview(t *testing.T) {
	cluster := hubtest.NewCluster(t)
	authz := &countingAuthorizer{}
	conn := serveWithAuth(t, informerhub.New(informerhub.Config{Logger: discard}, cluster, cluster), Config{Authorizer: authz})
	client := informerhubv1.NewInformerHubServiceClient(conn)
	for _, groupBy := range []string{"label:", "label:not a key", "status..phase", "spec.containers[0].image", strings.Repeat("a", 60<<10)} {
		for _, sel := range []*informerhubv1.ResourceSelector{cmSelector, {Version: "v1", Resource: "configmaps"}} {
			stream, err := client.Count(as("alice"), &informerhubv1.CountRequest{Selector: sel, GroupBy: groupBy})
			if err != nil {
				t.Fatal(err)
			}
			_, err = stream.Recv()
			if status.Code(err) != codes.InvalidArgument || fieldViolationsOf(err) != "group_by" {
				t.Fatalf("group_by %.20q: %v, want INVALID_ARGUMENT on group_by", groupBy, err)
			}
			if info := errorInfoOf(err); info.GetReason() != ReasonInvalidArgument || info.GetMetadata()["field"] != "group_by" {
				t.Fatalf("group_by %.20q: ErrorInfo %v", groupBy, info)
			}
			if len(status.Convert(err).Message()) > 1024 {
				t.Errorf("group_by %.20q: a message of %d bytes repeats the input", groupBy, len(status.Convert(err).Message()))
			}
		}
	}
	if n := authz.asked.Load(); n != 0 {
		t.Fatalf("the authorizer was asked %d questions, want none", n)
	}
}

// recvCounts receives counts until they are want, or fails the test.
func recvCounts(t *testing.T, recv func() (*informerhubv1.CountResponse, error), want *informerhubv1.CountResponse) {
	t.Helper()
	for {
		resp, err := recv()
		if err != nil {
			t.Fatalf("counts did not become %v: %v", want, err)
		}
		if resp.ResourceVersion == "" {
			t.Fatalf("counts without a resourceVersion: %v", resp)
		}
		if cmp.Equal(resp, want, protocmp.Transform(), protocmp.IgnoreFields(&informerhubv1.CountResponse{}, "resource_version")) {
			return
		}
	}
}

// TestCountStreamsCountsOnEveryProtocol: the counts, then new ones as they
// change, over native gRPC and the Connect protocol alike.
func TestCountStreamsCountsOnEveryProtocol(t *testing.T) {
	cluster := hubtest.NewCluster(t)
	cluster.ConfigMaps().Add(hubtest.ConfigMap("a", "1", map[string]string{"app": "web"}, ""))
	cluster.ConfigMaps().Add(hubtest.ConfigMap("b", "1", nil, ""))
	hub := informerhub.New(informerhub.Config{Logger: discard, EncodeEvent: EncodeEvent, CountInterval: time.Millisecond}, cluster, cluster)
	t.Cleanup(hub.Close)
	addr := serveOnePort(t, New(hub, Config{Logger: discard}), onePortOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req := &informerhubv1.CountRequest{Selector: &informerhubv1.ResourceSelector{Version: "v1", Resource: "configmaps"}, GroupBy: "label:app"}

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	native, err := informerhubv1.NewInformerHubServiceClient(conn).Count(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	overConnect, err := connectClientOf(t, addr, true, connect.WithProtoJSON()).Count(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	defer overConnect.Close()
	connectRecv := func() (*informerhubv1.CountResponse, error) {
		if !overConnect.Receive() {
			return nil, overConnect.Err()
		}
		return overConnect.Msg(), nil
	}
	for name, recv := range map[string]func() (*informerhubv1.CountResponse, error){"gRPC": native.Recv, "Connect": connectRecv} {
		recvCounts(t, recv, &informerhubv1.CountResponse{Groups: map[string]uint64{"": 1, "web": 1}, Total: 2})
		t.Logf("%s: the first counts", name)
	}
	cluster.ConfigMaps().Modify(hubtest.ConfigMap("b", "1", map[string]string{"app": "web"}, ""))
	for _, recv := range []func() (*informerhubv1.CountResponse, error){native.Recv, connectRecv} {
		recvCounts(t, recv, &informerhubv1.CountResponse{Groups: map[string]uint64{"web": 2}, Total: 2})
	}
}

// TestRevokedAccessEndsARunningCount: a Count's caller is rechecked as a
// Watch's; revoked access ends it with PERMISSION_DENIED, without a token.
func TestRevokedAccessEndsARunningCount(t *testing.T) {
	cluster := hubtest.NewCluster(t)
	authz := &tableAuthorizer{allowed: map[string][]string{"alice": {"a"}}}
	conn := serveWithAuth(t, informerhub.New(informerhub.Config{Logger: discard}, cluster, cluster),
		Config{Authorizer: authz, AuthzRecheckInterval: 20 * time.Millisecond})
	client := informerhubv1.NewInformerHubServiceClient(conn)
	ctx, cancel := context.WithTimeout(as("alice"), time.Minute)
	defer cancel()

	everywhere, err := client.Count(ctx, &informerhubv1.CountRequest{Selector: &informerhubv1.ResourceSelector{Version: "v1", Resource: "configmaps"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := everywhere.Recv(); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a cluster-wide Count of a caller allowed one namespace: %v, want PERMISSION_DENIED", err)
	}
	stream, err := client.Count(ctx, &informerhubv1.CountRequest{Selector: cmSelector})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	authz.set("alice")
	_, err = stream.Recv()
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("after revocation the stream ended with %v, want PERMISSION_DENIED", err)
	}
	if info := errorInfoOf(err); info.GetReason() != ReasonForbidden {
		t.Fatalf("ErrorInfo %v, want FORBIDDEN", info)
	} else if token, ok := info.GetMetadata()["resume_token"]; ok {
		t.Fatalf("a Count ended with a resume token %q", token)
	}
	if msg := status.Convert(err).Message(); strings.Contains(msg, "resume token") {
		t.Fatalf("message %q speaks of a resume token", msg)
	}
}

// TestDrainEndsCounts: Drain refuses new Counts and ends running ones, with
// UNAVAILABLE, SHUTTING_DOWN, and no token.
func TestDrainEndsCounts(t *testing.T) {
	cluster := hubtest.NewCluster(t)
	hub := informerhub.New(informerhub.Config{Logger: discard}, cluster, cluster)
	srv, conn := dialServer(t, hub, Config{Logger: discard})
	client := informerhubv1.NewInformerHubServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req := &informerhubv1.CountRequest{Selector: &informerhubv1.ResourceSelector{Version: "v1", Resource: "configmaps"}, GroupBy: "namespace"}
	stream, err := client.Count(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Drain(ctx, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	_, err = stream.Recv()
	if info := errorInfoOf(err); status.Code(err) != codes.Unavailable || info.GetReason() != ReasonShuttingDown || len(info.GetMetadata()) != 0 {
		t.Fatalf("a drained Count: %v (%v), want UNAVAILABLE, SHUTTING_DOWN, without metadata", err, info)
	}
	again, err := client.Count(ctx, req)
	if err == nil {
		_, err = again.Recv()
	}
	if status.Code(err) != codes.Unavailable || errorInfoOf(err).GetReason() != ReasonShuttingDown {
		t.Fatalf("a Count while draining: %v, want UNAVAILABLE, SHUTTING_DOWN", err)
	}
}

// TestCountEndingsCarryNoToken: the statuses that end a Count name no
// resume token, in metadata or message: counts have none.
func TestCountEndingsCarryNoToken(t *testing.T) {
	cms := hubtest.ConfigMaps
	forbidden := &auth.ForbiddenError{User: "alice", Attributes: auth.Attributes{Verb: "list", Resource: cms, Namespace: "a"}}
	for name, err := range map[string]error{
		"client stopped reading":   &informerhub.TooSlowError{Resource: cms, Counting: true, Stalled: true},
		"access revoked":           &accessLostError{err: forbidden},
		"credentials rejected":     &accessLostError{err: fmt.Errorf("%w: expired", auth.ErrUnauthenticated)},
		"access not confirmed":     &accessLostError{err: &authUnavailableError{err: errors.New("connection refused")}},
		"drained":                  &drainedError{},
		"informer could not go on": &informerhub.ResourceError{Resource: cms, Err: fmt.Errorf("%w: the API server has delivered nothing", informerhub.ErrUnavailable)},
	} {
		st := status.Convert(toStatus(discard, err))
		if _, ok := errorInfoOf(st.Err()).GetMetadata()["resume_token"]; ok {
			t.Errorf("%s: %v carries a resume_token", name, st)
		}
		if msg := strings.ToLower(st.Message()); strings.Contains(msg, "resume token") || strings.Contains(msg, "watch again") {
			t.Errorf("%s: message %q speaks of resuming a Watch", name, st.Message())
		}
	}
}
