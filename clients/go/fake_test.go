package hubclient_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	hubclient "github.com/informerhub/informerhub/clients/go"
	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
)

// fakeHub is an InformerHubService that plays scripts: each Watch call plays
// the next one. It is a fake for testing the SDK's logic; the SDK's
// behaviour against a real hub and API server is tested in the main
// module's test/integration.
type fakeHub struct {
	informerhubv1.UnimplementedInformerHubServiceServer
	name string
	dead bool // nothing listens: connections fail

	mu       sync.Mutex // guards the fields below
	scripts  []script
	requests []*informerhubv1.WatchRequest
	auth     []string // authorization metadata of each call
	snapshot []*informerhubv1.SnapshotResponse
	// snapshotAt, when set, makes the pages of the nth Snapshot (from 1)
	// instead of snapshot; it runs before they are sent.
	snapshotAt func(n int) []*informerhubv1.SnapshotResponse
	digest     *informerhubv1.DigestResponse    // what Digest answers
	digests    int                              // Digest calls served
	snapshots  []*informerhubv1.SnapshotRequest // each Snapshot request served
	resources  *informerhubv1.ListResourcesResponse
	served     chan *informerhubv1.WatchRequest // each Watch request, as it comes
}

// script is what one Watch call sends: its header token, its responses, and
// the status it ends with (nil: it stays open until the client leaves).
type script struct {
	header    string
	responses []*informerhubv1.WatchResponse
	end       error
}

func newFakeHub(name string, scripts ...script) *fakeHub {
	return &fakeHub{name: name, scripts: scripts, served: make(chan *informerhubv1.WatchRequest, 100)}
}

func (h *fakeHub) Watch(req *informerhubv1.WatchRequest, stream grpc.ServerStreamingServer[informerhubv1.WatchResponse]) error {
	h.mu.Lock()
	h.requests = append(h.requests, req)
	md, _ := metadata.FromIncomingContext(stream.Context())
	h.auth = append(h.auth, fmt.Sprint(md.Get("authorization")))
	var s script
	open := len(h.scripts) == 0
	if !open {
		s, h.scripts = h.scripts[0], h.scripts[1:]
	}
	h.mu.Unlock()
	h.served <- req
	if open {
		<-stream.Context().Done()
		return stream.Context().Err()
	}
	if s.header != "" {
		if err := stream.SendHeader(metadata.Pairs("resume-token", s.header)); err != nil {
			return err
		}
	}
	for _, resp := range s.responses {
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
	if s.end != nil {
		return s.end
	}
	<-stream.Context().Done()
	return stream.Context().Err()
}

func (h *fakeHub) Snapshot(req *informerhubv1.SnapshotRequest, stream grpc.ServerStreamingServer[informerhubv1.SnapshotResponse]) error {
	h.mu.Lock()
	h.snapshots = append(h.snapshots, req)
	pages, at, n := h.snapshot, h.snapshotAt, len(h.snapshots)
	h.mu.Unlock()
	if at != nil {
		pages = at(n)
	}
	for _, p := range pages {
		if err := stream.Send(p); err != nil {
			return err
		}
	}
	return nil
}

func (h *fakeHub) Digest(context.Context, *informerhubv1.DigestRequest) (*informerhubv1.DigestResponse, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.digests++
	if h.digest == nil {
		return nil, status.Error(codes.Unimplemented, "the fake hub has no digest")
	}
	return h.digest, nil
}

func (h *fakeHub) ListResources(context.Context, *informerhubv1.ListResourcesRequest) (*informerhubv1.ListResourcesResponse, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.resources, nil
}

func (h *fakeHub) watchRequests() []*informerhubv1.WatchRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*informerhubv1.WatchRequest(nil), h.requests...)
}

func (h *fakeHub) snapshotRequests() []*informerhubv1.SnapshotRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*informerhubv1.SnapshotRequest(nil), h.snapshots...)
}

// next waits for the next Watch request the hub serves.
func (h *fakeHub) next(t testing.TB) *informerhubv1.WatchRequest {
	t.Helper()
	select {
	case req := <-h.served:
		return req
	case <-time.After(10 * time.Second):
		t.Fatalf("hub %s served no Watch", h.name)
		return nil
	}
}

// serveFakes runs each hub on an in-memory listener named after it, and
// returns a client for all of them (without TLS).
func serveFakes(t testing.TB, opts []hubclient.Option, hubs ...*fakeHub) *hubclient.Client {
	t.Helper()
	listeners := map[string]*bufconn.Listener{}
	var targets []string
	for _, h := range hubs {
		lis := bufconn.Listen(1 << 20)
		listeners[h.name] = lis
		targets = append(targets, "passthrough:///"+h.name)
		if h.dead {
			lis.Close()
			continue
		}
		g := grpc.NewServer()
		informerhubv1.RegisterInformerHubServiceServer(g, h)
		go g.Serve(lis) //nolint:errcheck // ends with Stop
		t.Cleanup(g.Stop)
	}
	dial := grpc.WithContextDialer(func(ctx context.Context, target string) (net.Conn, error) {
		return listeners[target].DialContext(ctx)
	})
	opts = append([]hubclient.Option{
		hubclient.WithInsecure(),
		hubclient.WithDialOptions(dial),
		hubclient.WithBackoff(hubclient.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond}),
		hubclient.WithLogger(discard),
	}, opts...)
	c, err := hubclient.New(targets, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Responses, as a hub sends them.

func cm(name, rv, uid string) string {
	return fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q,"namespace":"ns","uid":%q,"resourceVersion":%q},"data":{"v":%q}}`,
		name, uid, rv, rv)
}

func resp(t informerhubv1.EventType, object, rv, token string) *informerhubv1.WatchResponse {
	return &informerhubv1.WatchResponse{Type: t, Object: object, ResourceVersion: rv, ResumeToken: token}
}

func added(name, rv, token string) *informerhubv1.WatchResponse {
	return resp(informerhubv1.EventType_EVENT_TYPE_ADDED, cm(name, rv, "uid-"+name), rv, token)
}

func modified(name, rv, token string) *informerhubv1.WatchResponse {
	return resp(informerhubv1.EventType_EVENT_TYPE_MODIFIED, cm(name, rv, "uid-"+name), rv, token)
}

func initialEnd(rv, token string) *informerhubv1.WatchResponse {
	return &informerhubv1.WatchResponse{Type: informerhubv1.EventType_EVENT_TYPE_BOOKMARK, ResourceVersion: rv, ResumeToken: token, InitialEventsEnd: true}
}
