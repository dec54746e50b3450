package integration

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"

	hubclient "github.com/informerhub/informerhub/clients/go"
	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/server"
)

// TestADrainedReplicaHandsItsStreamsOver: one of two replicas, a hub
// process, gets SIGTERM under 100 plain streams and 100 Go SDK watches
// (1,000 of each with -full-size). The plain streams, over every protocol
// (native gRPC, Connect and gRPC-Web), end one by one over
// its --shutdown-drain, each with UNAVAILABLE, SHUTTING_DOWN and the token
// of the last response it received, and the process exits cleanly; the
// SDK watches move to the other replica and, after changes made once the
// first is gone, hold exactly the API server's state.
func TestADrainedReplicaHandsItsStreamsOver(t *testing.T) {
	streams := 100
	if *fullSize {
		streams = 1000
	}
	const period = 2 * time.Second
	ns := namespace(t)
	for i := range 5 {
		createConfigMap(t, ns, fmt.Sprint("cm-", i), nil, "v0")
	}
	// Every stream on one connection, as in-process hubs allow.
	draining := startHubProcess(t, "--shutdown-drain", period.String(), "--shutdown-timeout", "10s", "--max-concurrent-streams", "100000")
	other := startHub(t, informerhub.Config{})
	ctx, cancel := context.WithCancel(ctxFor(t))
	defer cancel()
	sel := watchSelector(ns)
	conn, err := grpc.NewClient(draining.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	drainingClient := informerhubv1.NewInformerHubServiceClient(conn)
	// subscribers counts the streams the draining hub serves.
	subscribers := func() uint32 {
		resp, err := drainingClient.ListResources(ctx, &informerhubv1.ListResourcesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range resp.Resources {
			if r.Resource == "configmaps" && r.Group == "" {
				return r.Subscribers
			}
		}
		return 0
	}

	// Plain streams on the replica that goes, to see how each ends.
	type ending struct {
		at                time.Time
		err               error
		lastToken, status string
	}
	endings := make(chan ending, streams)
	plainClients := make([]informerhubv1.InformerHubServiceClient, len(protocols))
	for i, p := range protocols {
		plainClients[i] = p.Dial(t, draining.Addr)
	}
	for i := range streams {
		stream, err := plainClients[i%len(plainClients)].Watch(ctx, &informerhubv1.WatchRequest{Selector: sel, SendInitialEvents: true})
		if err != nil {
			t.Fatal(err)
		}
		var last string
		for {
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

	// SDK watches, all starting on the replica that goes: a client starts
	// at a random one of its endpoints, so take one that started there.
	var client *hubclient.Client
	for attempt := 0; client == nil; attempt++ {
		c, err := hubclient.New([]string{draining.Addr, other.addr}, hubclient.WithInsecure(),
			hubclient.WithBackoff(hubclient.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond}),
			hubclient.WithLogger(testLogger(t)))
		if err != nil {
			t.Fatal(err)
		}
		probe := c.Watch(ctx, hubclient.Selector{Resource: configMaps, Namespace: ns}, hubclient.WatchOptions{SendInitialEvents: true})
		for e, _ := nextSDK(t, probe); ; e, _ = nextSDK(t, probe) {
			if e.Type == hubclient.Bookmark {
				break // the end of initial events: subscribed
			}
		}
		if subscribers() == uint32(streams+1) {
			client = c
		} else if attempt == 20 {
			t.Fatal("no client started on the replica that drains")
		} else {
			c.Close()
		}
		probe.Close()
	}
	defer client.Close()
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex // guards states
		states = make([]clientState, streams)
	)
	synced := make(chan struct{}, streams)
	for i := range streams {
		w := client.Watch(ctx, hubclient.Selector{Resource: configMaps, Namespace: ns}, hubclient.WatchOptions{SendInitialEvents: true})
		states[i] = clientState{}
		wg.Go(func() {
			defer w.Close()
			for {
				e, err := w.Next()
				if err != nil {
					return // the test ended it
				}
				out := sdkEvent{Type: e.Type}
				if e.Object != nil {
					cm, err := hubclient.Decode[corev1.ConfigMap](e)
					if err != nil {
						t.Error(err)
						return
					}
					out.Name, out.UID, out.RV = cm.Name, string(cm.UID), cm.ResourceVersion
				}
				mu.Lock()
				states[i].apply(out)
				mu.Unlock()
				if e.InitialEventsEnd {
					synced <- struct{}{}
				}
			}
		})
	}
	for range streams {
		<-synced
	}

	began := time.Now()
	draining.Terminate(period + time.Minute)
	var times []time.Time
	for range streams {
		e := <-endings
		info := errorInfo(t, e.err)
		if status.Code(e.err) != codes.Unavailable || info.Reason != server.ReasonShuttingDown || info.Metadata["resume_token"] != e.lastToken {
			t.Fatalf("a drained stream ended with %v (%v), want UNAVAILABLE, SHUTTING_DOWN and its last token", e.err, info)
		}
		times = append(times, e.at)
	}
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	t.Logf("%d streams ended from %v to %v after the drain began", streams, times[0].Sub(began), times[len(times)-1].Sub(began))
	if span := times[len(times)-1].Sub(times[0]); span < period/2 {
		t.Errorf("the streams ended within %v of each other, want spread over the %v period", span, period)
	}

	// Changes once the replica is gone reach the SDK watches on the other.
	updateConfigMap(t, ns, "cm-0", nil, "v1")
	deleteConfigMap(t, ns, "cm-1")
	createConfigMap(t, ns, "marker", nil, "")
	want := apiState(t, ns)
	deadline := time.NewTimer(time.Minute)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		mu.Lock()
		behind := slices.IndexFunc(states, func(s clientState) bool { return !cmp.Equal(s, want) })
		var diff string
		if behind >= 0 {
			diff = cmp.Diff(want, states[behind])
		}
		mu.Unlock()
		if behind < 0 {
			break
		}
		select {
		case <-tick.C: // polling the watches' states, which their goroutines update
		case <-deadline.C:
			t.Fatalf("SDK watch %d differs from the API server (-api +client):\n%s", behind, diff)
		}
	}
	cancel()
	wg.Wait()
}
