package integration

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/informerhub"
)

// TestStalledSubscriberOverflowsWithoutDelayingOthers has one client stop
// reading while 300 changes of 16 KiB objects flow. A healthy subscriber
// receives every change while the stalled one still has not read anything;
// the stalled one then finds its stream ended with RESOURCE_EXHAUSTED, and
// resumes exactly from the token of the last response it received.
func TestStalledSubscriberOverflowsWithoutDelayingOthers(t *testing.T) {
	ns := namespace(t)
	createConfigMap(t, ns, "big", nil, "v0")
	h := startHub(t, informerhub.Config{QueueSize: 20})

	// A fixed 64 KiB window (which also turns off gRPC's dynamic window),
	// so the stalled client's buffers fill quickly.
	stalledConn, err := grpc.NewClient(h.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer stalledConn.Close()
	stalledStream, err := informerhubv1.NewInformerHubServiceClient(stalledConn).Watch(ctxFor(t),
		&informerhubv1.WatchRequest{Selector: watchSelector(ns), SendInitialEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	for { // through the initial events: the subscription is live
		resp, err := stalledStream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if resp.InitialEventsEnd {
			break
		}
	}

	healthy, _ := openWatch(t, h.client, &informerhubv1.WatchRequest{Selector: watchSelector(ns)})
	big := strings.Repeat("x", 16<<10)
	for i := range 300 {
		updateConfigMap(t, ns, "big", nil, big+string(rune('a'+i%26)))
	}
	createConfigMap(t, ns, "marker", nil, "")
	want := hubChangesUntil(t, healthy, "marker")
	if len(want) != 300 {
		t.Fatalf("the healthy subscriber received %d changes, want 300", len(want))
	}

	// Now the stalled client reads what reached it, then the status.
	var got []change
	var lastToken, prevToken string
	for {
		resp, err := stalledStream.Recv()
		if err != nil {
			if status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("stalled stream ended with %v, want RESOURCE_EXHAUSTED", err)
			}
			info := errorInfo(t, err)
			if info.Reason != "SUBSCRIBER_TOO_SLOW" {
				t.Fatalf("ErrorInfo %v, want SUBSCRIBER_TOO_SLOW", info)
			}
			// Never ahead of what the client received; one response that
			// was in flight when the stream was cut may follow it.
			if tok := info.Metadata["resume_token"]; tok != lastToken && tok != prevToken {
				t.Fatal("the status token is neither the last token received nor the one before")
			}
			break
		}
		got = append(got, hubChange(t, resp))
		lastToken, prevToken = resp.ResumeToken, lastToken
	}
	if len(got) >= 300 {
		t.Fatalf("the stalled client received all %d changes: it never overflowed", len(got))
	}
	t.Logf("the stalled client received %d of 300 changes before its stream ended", len(got))

	resumed, _ := openWatch(t, h.client, &informerhubv1.WatchRequest{Selector: watchSelector(ns), ResumeToken: lastToken})
	got = append(got, hubChangesUntil(t, resumed, "marker")...)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("stalled then resumed stream differs from the healthy one (-healthy +stalled):\n%s", diff)
	}
}
