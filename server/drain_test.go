package server

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/informerhub/hubtest"
)

// TestDrainEndsStreamsOneByOne: Drain refuses new calls at once, then ends
// the running Watches spread over its period, each with UNAVAILABLE,
// SHUTTING_DOWN and the token of the last response it sent.
func TestDrainEndsStreamsOneByOne(t *testing.T) {
	const streams, period = 10, time.Second
	cluster := hubtest.NewCluster(t)
	cluster.ConfigMaps().Add(hubtest.ConfigMap("ns", "a", nil, ""))
	hub := informerhub.New(informerhub.Config{Logger: discard, EncodeEvent: EncodeEvent}, cluster, cluster)
	srv, conn := dialServer(t, hub, Config{Logger: discard})
	client := informerhubv1.NewInformerHubServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sel := &informerhubv1.ResourceSelector{Version: "v1", Resource: "configmaps"}

	type ending struct {
		at        time.Time
		err       error
		lastToken string
	}
	endings := make(chan ending, streams)
	for range streams {
		stream, err := client.Watch(ctx, &informerhubv1.WatchRequest{Selector: sel, SendInitialEvents: true})
		if err != nil {
			t.Fatal(err)
		}
		var last string
		for { // through the initial events
			resp, err := stream.Recv()
			if err != nil {
				t.Fatal(err)
			}
			last = resp.ResumeToken
			if resp.InitialEventsEnd {
				break
			}
		}
		go func() {
			for {
				resp, err := stream.Recv()
				if err != nil {
					endings <- ending{at: time.Now(), err: err, lastToken: last}
					return
				}
				last = resp.ResumeToken
			}
		}()
	}

	drained := make(chan error, 1)
	began := time.Now()
	go func() { drained <- srv.Drain(ctx, period) }()
	var got []ending
	got = append(got, <-endings)
	// Draining: a new call is refused.
	stream, err := client.Watch(ctx, &informerhubv1.WatchRequest{Selector: sel})
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.Unavailable || errorInfoOf(err).GetReason() != ReasonShuttingDown {
		t.Fatalf("a Watch while draining: %v, want UNAVAILABLE, SHUTTING_DOWN", err)
	}
	for len(got) < streams {
		got = append(got, <-endings)
	}
	if err := <-drained; err != nil {
		t.Fatal(err)
	}
	for _, e := range got {
		info := errorInfoOf(e.err)
		if status.Code(e.err) != codes.Unavailable || info.GetReason() != ReasonShuttingDown || info.GetMetadata()["resume_token"] != e.lastToken {
			t.Fatalf("a drained stream ended with %v (%v), want UNAVAILABLE, SHUTTING_DOWN and its last token", e.err, info)
		}
	}
	// One at a time, a tenth of the period apart: the last ends most of
	// the period after the first.
	times := make([]time.Time, len(got))
	for i, e := range got {
		times[i] = e.at
	}
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	if span := times[len(times)-1].Sub(times[0]); span < period/2 {
		t.Fatalf("the streams ended within %v of each other (drain began %v before the first), want spread over the %v period",
			span, times[0].Sub(began), period)
	}
}
