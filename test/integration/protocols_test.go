package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authenticationclient "k8s.io/client-go/kubernetes/typed/authentication/v1"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/internal/testhub"
	"github.com/informerhub/informerhub/server"
	"github.com/informerhub/informerhub/server/auth"
)

// protocols are every protocol and HTTP version the hub serves (see
// testhub.Protocols).
var protocols = testhub.Protocols

// connectOverTLS is a connect-go client of the hub at addr over TLS.
var connectOverTLS = testhub.ConnectOverTLS

// TestEveryProtocolServesTheSame makes the same calls over every protocol
// at once, and compares what each returns with native gRPC's: the same
// resource types, snapshot, events (tokens included, in both object
// formats) and errors (code, message and details).
func TestEveryProtocolServesTheSame(t *testing.T) {
	ns := namespace(t)
	createConfigMap(t, ns, "a", map[string]string{"app": "x"}, "v0")
	createConfigMap(t, ns, "b", nil, "v0")
	h := startHub(t, informerhub.Config{})
	clients := make([]informerhubv1.InformerHubServiceClient, len(protocols))
	for i, p := range protocols {
		clients[i] = p.Dial(t, h.addr)
	}
	compare := func(t *testing.T, what string, got func(c informerhubv1.InformerHubServiceClient) any, opts ...cmp.Option) {
		t.Helper()
		want := got(clients[0])
		for i, p := range protocols[1:] {
			if diff := cmp.Diff(want, got(clients[i+1]), append(opts, protocmp.Transform())...); diff != "" {
				t.Errorf("%s over %s differs from gRPC's (-grpc +%s):\n%s", what, p.Name, p.Name, diff)
			}
		}
	}

	// Watches first, all open at once, so that they see the same changes.
	type watch struct {
		format informerhubv1.ObjectFormat
		reader *streamReader[informerhubv1.WatchResponse]
	}
	watches := make([][]watch, len(protocols))
	for i, c := range clients {
		for _, format := range []informerhubv1.ObjectFormat{informerhubv1.ObjectFormat_OBJECT_FORMAT_UNSPECIFIED, informerhubv1.ObjectFormat_OBJECT_FORMAT_STRUCT} {
			stream, err := c.Watch(ctxFor(t), &informerhubv1.WatchRequest{Selector: watchSelector(ns), SendInitialEvents: true,
				IncludePrevious: true, ObjectFormat: format})
			if err != nil {
				t.Fatal(err)
			}
			watches[i] = append(watches[i], watch{format: format, reader: readStream(stream.Recv)})
		}
	}
	updateConfigMap(t, ns, "a", map[string]string{"app": "y"}, "v1")
	deleteConfigMap(t, ns, "b")
	createConfigMap(t, ns, "c", nil, "v0")
	createConfigMap(t, ns, "marker", nil, "")
	responses := func(r *streamReader[informerhubv1.WatchResponse]) []*informerhubv1.WatchResponse {
		var out []*informerhubv1.WatchResponse
		for {
			resp := r.next(t)
			if resp.Type == informerhubv1.EventType_EVENT_TYPE_BOOKMARK && !resp.InitialEventsEnd {
				continue // sent when each stream was quiet: not the same for all
			}
			out = append(out, resp)
			if resp.Type == informerhubv1.EventType_EVENT_TYPE_ADDED && objectName(resp) == "marker" {
				return out
			}
		}
	}
	for f := range watches[0] {
		want := responses(watches[0][f].reader)
		if len(want) != 7 { // 2 initial, the end, 4 changes
			t.Fatalf("gRPC sent %d responses, want 7: %v", len(want), want)
		}
		for i, p := range protocols[1:] {
			if diff := cmp.Diff(want, responses(watches[i+1][f].reader), protocmp.Transform()); diff != "" {
				t.Errorf("Watch (%v) over %s differs from gRPC's (-grpc +%s):\n%s", watches[0][f].format, p.Name, p.Name, diff)
			}
		}
	}

	compare(t, "Snapshot", func(c informerhubv1.InformerHubServiceClient) any {
		stream, err := c.Snapshot(ctxFor(t), &informerhubv1.SnapshotRequest{Selector: watchSelector(ns), Fields: []string{"metadata.name", "data"}})
		if err != nil {
			t.Fatal(err)
		}
		var pages []*informerhubv1.SnapshotResponse
		for {
			page, err := stream.Recv()
			if err == io.EOF {
				return pages
			}
			if err != nil {
				t.Fatal(err)
			}
			pages = append(pages, page)
		}
	})
	compare(t, "ListResources", func(c informerhubv1.InformerHubServiceClient) any {
		resp, err := c.ListResources(ctxFor(t), &informerhubv1.ListResourcesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}, protocmp.IgnoreFields(&informerhubv1.Resource{}, "subscribers", "history_events", "history_bytes", "history_resource_version",
		"cached_objects", "informer_active", "retained_resource_version", "retained_since"))

	compare(t, "Digest", func(c informerhubv1.InformerHubServiceClient) any {
		resp, err := c.Digest(ctxFor(t), &informerhubv1.DigestRequest{Selector: watchSelector(ns)})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}, protocmp.IgnoreFields(&informerhubv1.DigestResponse{}, "resource_version", "resume_token"))

	bad := map[string]func(c informerhubv1.InformerHubServiceClient) error{
		"a label selector that does not parse": func(c informerhubv1.InformerHubServiceClient) error {
			_, err := firstWatchResponse(c, ctxFor(t), &informerhubv1.ResourceSelector{Version: "v1", Resource: "configmaps", LabelSelector: "a in ("})
			return err
		},
		"a resource the cluster does not serve": func(c informerhubv1.InformerHubServiceClient) error {
			_, err := firstWatchResponse(c, ctxFor(t), &informerhubv1.ResourceSelector{Version: "v1", Resource: "nopes"})
			return err
		},
		"a mangled resume token": func(c informerhubv1.InformerHubServiceClient) error {
			stream, err := c.Watch(ctxFor(t), &informerhubv1.WatchRequest{Selector: watchSelector(ns), ResumeToken: "garbage"})
			if err == nil {
				_, err = stream.Recv()
			}
			return err
		},
		"a filter that does not compile": func(c informerhubv1.InformerHubServiceClient) error {
			stream, err := c.Snapshot(ctxFor(t), &informerhubv1.SnapshotRequest{Selector: &informerhubv1.ResourceSelector{Version: "v1", Resource: "configmaps", Filter: "object.("}})
			if err == nil {
				_, err = stream.Recv()
			}
			return err
		},
		"an invalid namespace": func(c informerhubv1.InformerHubServiceClient) error {
			_, err := c.ListResources(ctxFor(t), &informerhubv1.ListResourcesRequest{Namespace: "Not_A_Namespace"})
			return err
		},
	}
	for name, call := range bad {
		compare(t, name, func(c informerhubv1.InformerHubServiceClient) any {
			err := call(c)
			if err == nil {
				t.Fatalf("%s: no error", name)
			}
			return status.Convert(err).Proto()
		})
	}
}

// TestAWatchResumesExactlyAcrossProtocols: a watch is dropped again and
// again while 300 changes are made, each time resumed with its last token
// over the next protocol (Connect JSON and binary, gRPC-Web, native gRPC,
// HTTP/1.1 and HTTP/2), on a connection of its own. The joined stream
// equals the API server's watch: a token resumes exactly on every
// protocol, whichever protocol it came from.
func TestAWatchResumesExactlyAcrossProtocols(t *testing.T) {
	ns := namespace(t)
	const objects, changes = 10, 300
	for i := range objects {
		createConfigMap(t, ns, fmt.Sprintf("cm-%02d", i), nil, "v0")
	}
	h := startHub(t, informerhub.Config{})
	stream, cancel := openWatch(t, protocols[1].Dial(t, h.addr), &informerhubv1.WatchRequest{Selector: watchSelector(ns), SendInitialEvents: true})
	initial, end := initialEvents(t, stream)
	cancel()
	if diff := cmp.Diff(listAt(t, ns, end.ResourceVersion, "", ""), initial); diff != "" {
		t.Fatalf("initial events over %s differ from a LIST (-list +hub):\n%s", protocols[1].Name, diff)
	}

	api := watchConfigMaps(t, ns, end.ResourceVersion)
	writerDone := writeChanges(ns, objects, changes)
	token, got := end.ResumeToken, []change(nil)
	used := map[string]int{}
	for reconnects := 2; ; reconnects++ {
		p := protocols[reconnects%len(protocols)]
		used[p.Name]++
		stream, cancel := openWatch(t, p.Dial(t, h.addr), &informerhubv1.WatchRequest{Selector: watchSelector(ns), ResumeToken: token})
		reachedMarker := false
		for range 23 {
			resp := stream.next(t)
			checkResponse(t, resp)
			token = resp.ResumeToken
			if resp.Type == informerhubv1.EventType_EVENT_TYPE_BOOKMARK {
				continue
			}
			c := hubChange(t, resp)
			if reachedMarker = c.Name == "marker"; reachedMarker {
				break
			}
			got = append(got, c)
		}
		cancel()
		if reachedMarker {
			break
		}
	}
	t.Logf("resumed over %v", used)
	if len(used) < len(protocols) {
		t.Fatalf("resumed over %v only: the test tests less than it says", used)
	}
	checkJoinedStream(t, writerDone, api, changes, got)
}

// objectName returns the name of a response's object, in either format.
func objectName(resp *informerhubv1.WatchResponse) string {
	if st := resp.GetObjectStruct(); st != nil {
		return st.GetFields()["metadata"].GetStructValue().GetFields()["name"].GetStringValue()
	}
	var obj struct {
		Metadata struct{ Name string } `json:"metadata"`
	}
	_ = json.Unmarshal([]byte(resp.GetObject()), &obj)
	return obj.Metadata.Name
}

// countingTokenReviews counts the TokenReviews the hub asks for.
type countingTokenReviews struct {
	authenticationclient.TokenReviewInterface
	created atomic.Int64
}

func (c *countingTokenReviews) Create(ctx context.Context, review *authenticationv1.TokenReview, opts metav1.CreateOptions) (*authenticationv1.TokenReview, error) {
	c.created.Add(1)
	return c.TokenReviewInterface.Create(ctx, review, opts)
}

// TestEveryProtocolAuthenticatesTheSame: no token, a bad token, a token
// without access and an oversized request get the same status over every
// protocol, and cost the same TokenReviews; but an oversized request, which
// connect-go refuses before any review, where grpc-go reads a stream's
// request after its interceptors.
func TestEveryProtocolAuthenticatesTheSame(t *testing.T) {
	ns := namespace(t)
	createConfigMap(t, ns, "cm", nil, "")
	reader := serviceAccountToken(t, ns, "reader")
	grant(t, ns, serviceAccount(ns, "reader"), "configmaps")
	stranger := serviceAccountToken(t, ns, "stranger")
	reviews := &countingTokenReviews{TokenReviewInterface: kube.AuthenticationV1().TokenReviews()}
	// No cache: each call with a token costs one review.
	h := startAuthHub(t, server.Config{Authenticator: auth.NewTokenReview(reviews, auth.TokenReviewConfig{CacheTTL: 1})})
	calls := []struct {
		name, token string
		sel         *informerhubv1.ResourceSelector
		code        codes.Code
		reviews     int64
	}{
		{"no token", "", watchSelector(ns), codes.Unauthenticated, 0},
		{"a token the cluster does not accept", "not-a-token-", watchSelector(ns), codes.Unauthenticated, 1},
		{"a token without access", stranger, watchSelector(ns), codes.PermissionDenied, 1},
		{"a token with access", reader, watchSelector(ns), codes.OK, 1},
		{"an oversized request", reader, &informerhubv1.ResourceSelector{Version: "v1", Resource: "configmaps", Namespace: ns,
			LabelSelector: strings.Repeat("a", 100<<10)}, codes.ResourceExhausted, 1},
	}
	for _, p := range protocols {
		t.Run(p.Name, func(t *testing.T) {
			client := p.Dial(t, h.addr)
			for _, c := range calls {
				before := reviews.created.Load()
				token := c.token
				if strings.HasSuffix(token, "-") {
					token += p.Name // rejected tokens are remembered
				}
				_, err := firstWatchResponse(client, withBearer(t, token), c.sel)
				if status.Code(err) != c.code {
					t.Errorf("%s: %v, want %v", c.name, err, c.code)
				}
				want := c.reviews
				if c.code == codes.ResourceExhausted && p.Name != "grpc" {
					want = 0
				}
				if got := reviews.created.Load() - before; got != want {
					t.Errorf("%s: %d TokenReviews, want %d", c.name, got, want)
				}
			}
		})
	}
}
