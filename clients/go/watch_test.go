package hubclient_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	hubclient "github.com/informerhub/informerhub/clients/go"
	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
)

var (
	discard     = slog.New(slog.DiscardHandler)
	configMaps  = hubclient.Selector{Resource: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Namespace: "ns"}
	unavailable = status.Error(codes.Unavailable, "gone")
	expired     = status.Error(codes.OutOfRange, "resume token expired")
)

// got is an event as tests compare it.
type got struct {
	Type   hubclient.EventType
	Name   string
	RV     string
	Token  string
	Resync bool
}

func next(t *testing.T, w *hubclient.Watcher) got {
	t.Helper()
	e, err := w.Next()
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	g := got{Type: e.Type, RV: e.ResourceVersion, Token: e.ResumeToken, Resync: e.Resync}
	if e.Object != nil {
		u, err := e.Unstructured()
		if err != nil {
			t.Fatal(err)
		}
		g.Name = u.GetName()
	}
	return g
}

func startWatch(t *testing.T, c *hubclient.Client, opts hubclient.WatchOptions) *hubclient.Watcher {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	w := c.Watch(ctx, configMaps, opts)
	t.Cleanup(w.Close)
	return w
}

func TestWatchResumesAfterDisconnects(t *testing.T) {
	hub := newFakeHub("hub",
		script{header: "t0", responses: []*informerhubv1.WatchResponse{added("a", "1", "t1"), added("b", "2", "t2")}, end: unavailable},
		script{header: "t2", responses: []*informerhubv1.WatchResponse{modified("a", "3", "t3")}},
	)
	w := startWatch(t, serveFakes(t, nil, hub), hubclient.WatchOptions{ResumeToken: "start"})
	want := []got{
		{Type: hubclient.Added, Name: "a", RV: "1", Token: "t1"},
		{Type: hubclient.Added, Name: "b", RV: "2", Token: "t2"},
		{Type: hubclient.Modified, Name: "a", RV: "3", Token: "t3"},
	}
	for _, wantEvent := range want {
		if diff := cmp.Diff(wantEvent, next(t, w)); diff != "" {
			t.Fatalf("event (-want +got):\n%s", diff)
		}
	}
	reqs := hub.watchRequests()
	if len(reqs) != 2 || reqs[0].ResumeToken != "start" || reqs[1].ResumeToken != "t2" {
		t.Fatalf("requests %v, want tokens start then t2", reqs)
	}
	if w.ResumeToken() != "t3" {
		t.Fatalf("ResumeToken() = %q, want t3", w.ResumeToken())
	}
}

func TestWatchFromNowResumesFromTheHeaderToken(t *testing.T) {
	hub := newFakeHub("hub",
		script{header: "start", end: unavailable}, // drops before any event
		script{header: "start", responses: []*informerhubv1.WatchResponse{added("a", "1", "t1")}},
	)
	w := startWatch(t, serveFakes(t, nil, hub), hubclient.WatchOptions{})
	next(t, w)
	if reqs := hub.watchRequests(); reqs[0].ResumeToken != "" || reqs[1].ResumeToken != "start" {
		t.Fatalf("requests %v, want the second from the header's token", reqs)
	}
}

func TestWatchKeepsAskingForInitialEventsUntilTheHubIssuedAToken(t *testing.T) {
	hub := newFakeHub("hub",
		script{end: unavailable}, // an error before any header
		script{header: "i0", responses: []*informerhubv1.WatchResponse{added("a", "1", "i1")}, end: unavailable},
		script{header: "i1", responses: []*informerhubv1.WatchResponse{initialEnd("1", "t1")}},
	)
	w := startWatch(t, serveFakes(t, nil, hub), hubclient.WatchOptions{SendInitialEvents: true})
	next(t, w)
	if e := next(t, w); e.Type != hubclient.Bookmark {
		t.Fatalf("got %v, want the initial-events-end bookmark", e)
	}
	reqs := hub.watchRequests()
	want := []struct {
		token   string
		initial bool
	}{{"", true}, {"", true}, {"i1", false}}
	for i, r := range reqs {
		if r.ResumeToken != want[i].token || r.SendInitialEvents != want[i].initial {
			t.Fatalf("request %d: token %q initial %v, want %+v", i, r.ResumeToken, r.SendInitialEvents, want[i])
		}
	}
}

func TestWatchFailsOverToAnotherReplica(t *testing.T) {
	a := newFakeHub("a", script{header: "t0", responses: []*informerhubv1.WatchResponse{added("x", "1", "t1")}, end: unavailable})
	b := newFakeHub("b", script{header: "t0", responses: []*informerhubv1.WatchResponse{added("x", "1", "t1")}, end: unavailable})
	w := startWatch(t, serveFakes(t, nil, a, b), hubclient.WatchOptions{ResumeToken: "t0"})
	next(t, w)
	// Whichever replica it started on, the retry goes to the other one.
	var otherHub *fakeHub
	select {
	case <-a.served:
		otherHub = b
	case <-b.served:
		otherHub = a
	}
	next(t, w)
	if req := otherHub.next(t); req.ResumeToken != "t1" {
		t.Fatalf("the other replica was asked from %q, want t1", req.ResumeToken)
	}
}

// TestWatchResyncsAfterExpiry: after OUT_OF_RANGE the watcher lists again
// and delivers only the differences from what it delivered, then a resync
// bookmark, then the changes that follow.
func TestWatchResyncsAfterExpiry(t *testing.T) {
	recreated := resp(informerhubv1.EventType_EVENT_TYPE_ADDED, cm("e", "6", "uid-e2"), "6", "r-e")
	hub := newFakeHub("hub",
		script{header: "i0", responses: []*informerhubv1.WatchResponse{
			added("a", "1", "i-a"), added("b", "1", "i-b"), added("c", "1", "i-c"), added("e", "1", "i-e"),
			initialEnd("1", "t1"), modified("a", "2", "t2"),
		}, end: expired},
		script{header: "r0", responses: []*informerhubv1.WatchResponse{
			added("a", "2", "r-a"), // unchanged: nothing
			added("b", "3", "r-b"), // changed: MODIFIED
			added("d", "4", "r-d"), // new: ADDED
			// c is gone: DELETED
			recreated, // e deleted and created again: DELETED then ADDED
			initialEnd("6", "r-end"),
			modified("d", "7", "t7"),
		}},
	)
	w := startWatch(t, serveFakes(t, nil, hub), hubclient.WatchOptions{SendInitialEvents: true})
	for range 6 { // initial events, their end, a change
		next(t, w)
	}
	want := []got{
		{Type: hubclient.Deleted, Name: "c", RV: "6", Token: "t2", Resync: true},
		{Type: hubclient.Deleted, Name: "e", RV: "6", Token: "t2", Resync: true},
		{Type: hubclient.Modified, Name: "b", RV: "3", Token: "t2", Resync: true},
		{Type: hubclient.Added, Name: "d", RV: "4", Token: "t2", Resync: true},
		{Type: hubclient.Added, Name: "e", RV: "6", Token: "t2", Resync: true},
		{Type: hubclient.Bookmark, RV: "6", Token: "r-end", Resync: true},
		{Type: hubclient.Modified, Name: "d", RV: "7", Token: "t7"},
	}
	var gotEvents []got
	for range want {
		gotEvents = append(gotEvents, next(t, w))
	}
	// Deletions first, then the rest, each in namespace and name order.
	if diff := cmp.Diff(want, gotEvents); diff != "" {
		t.Fatalf("events after the expiry (-want +got):\n%s", diff)
	}
	if reqs := hub.watchRequests(); reqs[1].ResumeToken != "" || !reqs[1].SendInitialEvents {
		t.Fatalf("the re-sync request %v does not list again", reqs[1])
	}
}

func TestDeletedByAResyncCarriesTheIdentity(t *testing.T) {
	hub := newFakeHub("hub",
		script{header: "t0", responses: []*informerhubv1.WatchResponse{added("gone", "1", "t1")}, end: expired},
		script{header: "r0", responses: []*informerhubv1.WatchResponse{initialEnd("5", "r-end")}},
	)
	w := startWatch(t, serveFakes(t, nil, hub), hubclient.WatchOptions{})
	next(t, w)
	e, err := w.Next()
	if err != nil {
		t.Fatal(err)
	}
	cm, err := hubclient.Decode[corev1.ConfigMap](e)
	if err != nil {
		t.Fatal(err)
	}
	if e.Type != hubclient.Deleted || cm.Name != "gone" || cm.Namespace != "ns" || cm.UID != "uid-gone" || cm.ResourceVersion != "1" || cm.Kind != "ConfigMap" {
		t.Fatalf("got %s %+v, want DELETED with the identity of ns/gone", e.Type, cm)
	}
}

func TestAnInterruptedResyncResumesItsListing(t *testing.T) {
	hub := newFakeHub("hub",
		script{header: "t0", end: expired},
		script{header: "r0", responses: []*informerhubv1.WatchResponse{added("a", "1", "r-a")}, end: unavailable},
		script{header: "r-a", responses: []*informerhubv1.WatchResponse{added("b", "1", "r-b"), initialEnd("1", "r-end")}},
	)
	w := startWatch(t, serveFakes(t, nil, hub), hubclient.WatchOptions{ResumeToken: "t0"})
	var names []string
	for {
		e := next(t, w)
		if e.Type == hubclient.Bookmark {
			break
		}
		names = append(names, e.Name)
	}
	if strings.Join(names, ",") != "a,b" {
		t.Fatalf("re-sync delivered %v, want a and b", names)
	}
	reqs := hub.watchRequests()
	if reqs[2].ResumeToken != "r-a" || reqs[2].SendInitialEvents {
		t.Fatalf("the interrupted listing restarted with %v, want to resume from r-a", reqs[2])
	}
}

func TestWatchEndsOnErrorsRetryingCannotFix(t *testing.T) {
	for _, code := range []codes.Code{codes.InvalidArgument, codes.NotFound, codes.PermissionDenied, codes.Unauthenticated} {
		t.Run(code.String(), func(t *testing.T) {
			hub := newFakeHub("hub", script{end: status.Error(code, "no")})
			w := startWatch(t, serveFakes(t, nil, hub), hubclient.WatchOptions{})
			_, err := w.Next()
			if status.Code(err) != code {
				t.Fatalf("Next: %v, want %v", err, code)
			}
			if _, again := w.Next(); status.Code(again) != code {
				t.Fatalf("Next after the end: %v", again)
			}
			if n := len(hub.watchRequests()); n != 1 {
				t.Fatalf("%d requests, want 1: the watcher retried", n)
			}
		})
	}
}

// TestExpiredCredentialsReconnectWithFreshOnes: a hub that ends a running
// stream because its credentials expired (UNAUTHENTICATED with a resume
// token) gets a new stream with the token source's current credentials,
// resumed where the old one stopped; credentials refused when a stream
// opens end the watch.
func TestExpiredCredentialsReconnectWithFreshOnes(t *testing.T) {
	credsExpired, err := status.New(codes.Unauthenticated, "unauthenticated: the token has expired").WithDetails(
		&errdetails.ErrorInfo{Reason: "UNAUTHENTICATED", Domain: "informerhub.io", Metadata: map[string]string{"resume_token": "t1"}})
	if err != nil {
		t.Fatal(err)
	}
	hub := newFakeHub("hub",
		script{header: "t0", responses: []*informerhubv1.WatchResponse{added("a", "1", "t1")}, end: credsExpired.Err()},
		script{header: "t1", responses: []*informerhubv1.WatchResponse{added("b", "2", "t2")}, end: credsExpired.Err()},
		script{end: status.Error(codes.Unauthenticated, "unauthenticated: the token has expired")},
	)
	var issued atomic.Int32
	source := hubclient.WithTokenSource(func(context.Context) (string, error) {
		return fmt.Sprint("token-", issued.Add(1)), nil
	})
	w := startWatch(t, serveFakes(t, []hubclient.Option{source, hubclient.AllowTokensWithoutTLS()}, hub), hubclient.WatchOptions{})
	if e := next(t, w); e.Name != "a" {
		t.Fatalf("got %v", e)
	}
	if e := next(t, w); e.Name != "b" {
		t.Fatalf("got %v after the credentials expired, want b", e)
	}
	if _, err := w.Next(); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("Next: %v, want the refusal to end the watch", err)
	}
	reqs := hub.watchRequests()
	hub.mu.Lock()
	defer hub.mu.Unlock()
	if len(reqs) != 3 || reqs[1].ResumeToken != "t1" || reqs[2].ResumeToken != "t2" || hub.auth[1] == hub.auth[0] {
		t.Fatalf("requests %v with credentials %v: want each resumed, with the source's current credentials", reqs, hub.auth)
	}
}

func TestWatchEndsWithItsContext(t *testing.T) {
	hub := newFakeHub("hub") // streams stay open with nothing to send
	c := serveFakes(t, nil, hub)
	ctx, cancel := context.WithCancel(context.Background())
	w := c.Watch(ctx, configMaps, hubclient.WatchOptions{})
	defer w.Close()
	errc := make(chan error, 1)
	go func() {
		_, err := w.Next()
		errc <- err
	}()
	hub.next(t)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Next: %v, want context.Canceled", err)
	}
}

func TestBearerToken(t *testing.T) {
	hub := newFakeHub("hub", script{header: "t0", responses: []*informerhubv1.WatchResponse{added("a", "1", "t1")}})
	w := startWatch(t, serveFakes(t, []hubclient.Option{hubclient.WithBearerToken("s3cret"), hubclient.AllowTokensWithoutTLS()}, hub), hubclient.WatchOptions{})
	next(t, w)
	hub.mu.Lock()
	defer hub.mu.Unlock()
	if hub.auth[0] != "[Bearer s3cret]" {
		t.Fatalf("authorization %q", hub.auth[0])
	}
}

// A token is sent trimmed, whichever way it is given; one that a header
// cannot carry is refused by New, or ends the watch at once.
func TestBearerTokenIsTrimmedOrRefused(t *testing.T) {
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, opt := range map[string]hubclient.Option{
		"WithBearerToken": hubclient.WithBearerToken("  s3cret\r\n"),
		"WithTokenFile":   hubclient.WithTokenFile(file),
		"WithTokenSource": hubclient.WithTokenSource(func(context.Context) (string, error) { return "s3cret\n", nil }),
	} {
		t.Run(name, func(t *testing.T) {
			hub := newFakeHub("hub", script{header: "t0", responses: []*informerhubv1.WatchResponse{added("a", "1", "t1")}})
			w := startWatch(t, serveFakes(t, []hubclient.Option{opt, hubclient.AllowTokensWithoutTLS()}, hub), hubclient.WatchOptions{})
			next(t, w)
			hub.mu.Lock()
			defer hub.mu.Unlock()
			if hub.auth[0] != "[Bearer s3cret]" {
				t.Fatalf("authorization %q", hub.auth[0])
			}
		})
	}
	for _, bad := range []string{"s3c ret", "s3cr\x00t", "sécret"} {
		if _, err := hubclient.New([]string{"localhost:1"}, hubclient.WithInsecure(), hubclient.WithBearerToken(bad)); err == nil {
			t.Errorf("New accepted the token %q", bad)
		}
	}
	// An empty token is none, as kubectl's empty --token.
	hub := newFakeHub("hub", script{header: "t0", responses: []*informerhubv1.WatchResponse{added("a", "1", "t1")}})
	next(t, startWatch(t, serveFakes(t, []hubclient.Option{hubclient.WithBearerToken(" \n")}, hub), hubclient.WatchOptions{}))
	hub.mu.Lock()
	sent := hub.auth[0]
	hub.mu.Unlock()
	if sent != "[]" {
		t.Fatalf("an empty token sent authorization %q", sent)
	}
	hub = newFakeHub("hub", script{header: "t0", responses: []*informerhubv1.WatchResponse{added("a", "1", "t1")}})
	source := hubclient.WithTokenSource(func(context.Context) (string, error) { return "s3c\nret", nil })
	w := startWatch(t, serveFakes(t, []hubclient.Option{source, hubclient.AllowTokensWithoutTLS()}, hub), hubclient.WatchOptions{})
	if _, err := w.Next(); status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "cannot be sent in a header") {
		t.Fatalf("Next with a token a header cannot carry: %v, want UNAUTHENTICATED that says why", err)
	}
	if n := len(hub.watchRequests()); n != 0 {
		t.Fatalf("the hub received %d watches", n)
	}
}

func TestBackoffGrowsWithJitterToItsMaximum(t *testing.T) {
	b := hubclient.Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2, Jitter: 0.2}
	for failures, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond, 4: 800 * time.Millisecond, 5: time.Second, 50: time.Second} {
		for range 100 {
			if d := hubclient.BackoffDelay(b, failures); d < want*8/10 || d > want*12/10 {
				t.Fatalf("delay after %d failures = %v, want %v ± 20%%", failures, d, want)
			}
		}
	}
}

func ExampleDecode() {
	e := hubclient.Event{Type: hubclient.Added, Object: []byte(cm("web", "42", "uid-web"))}
	configMap, err := hubclient.Decode[corev1.ConfigMap](e)
	if err != nil {
		panic(err)
	}
	fmt.Println(configMap.Namespace, configMap.Name, configMap.Data["v"])
	// Output: ns web 42
}

// TestResyncOfAWatchFromATokenListsEverything: a watch resumed from a token
// does not know what its caller holds, so its re-sync lists every object.
func TestResyncOfAWatchFromATokenListsEverything(t *testing.T) {
	hub := newFakeHub("hub",
		script{end: expired},
		script{header: "r0", responses: []*informerhubv1.WatchResponse{added("a", "1", "r-a"), added("b", "2", "r-b"), initialEnd("2", "r-end")}},
	)
	w := startWatch(t, serveFakes(t, nil, hub), hubclient.WatchOptions{ResumeToken: "saved"})
	for _, want := range []got{
		{Type: hubclient.Added, Name: "a", RV: "1", Token: "saved", Resync: true},
		{Type: hubclient.Added, Name: "b", RV: "2", Token: "saved", Resync: true},
		{Type: hubclient.Bookmark, RV: "2", Token: "r-end", Resync: true},
	} {
		e, err := w.Next()
		if err != nil {
			t.Fatal(err)
		}
		if !e.ResyncReplaces {
			t.Fatalf("%v: a re-sync of a resumed watch must say it replaces", e)
		}
		g := got{Type: e.Type, RV: e.ResourceVersion, Token: e.ResumeToken, Resync: e.Resync}
		if e.Object != nil {
			u, _ := e.Unstructured()
			g.Name = u.GetName()
		}
		if diff := cmp.Diff(want, g); diff != "" {
			t.Fatalf("event (-want +got):\n%s", diff)
		}
	}
}

// TestResyncDuringInitialEventsEndsThem: when the initial events are cut
// short by an expiry, the re-sync's bookmark ends them.
func TestResyncDuringInitialEventsEndsThem(t *testing.T) {
	hub := newFakeHub("hub",
		script{header: "i0", responses: []*informerhubv1.WatchResponse{added("a", "1", "i-a")}, end: expired},
		script{header: "r0", responses: []*informerhubv1.WatchResponse{added("a", "1", "r-a"), added("b", "1", "r-b"), initialEnd("1", "r-end")}},
	)
	w := startWatch(t, serveFakes(t, nil, hub), hubclient.WatchOptions{SendInitialEvents: true})
	next(t, w)
	if e := next(t, w); e.Type != hubclient.Added || e.Name != "b" || !e.Resync {
		t.Fatalf("got %v, want the ADDED of b from the re-sync", e)
	}
	e, err := w.Next()
	if err != nil {
		t.Fatal(err)
	}
	if e.Type != hubclient.Bookmark || !e.Resync || !e.InitialEventsEnd {
		t.Fatalf("got %+v, want the re-sync bookmark ending the initial events", e)
	}
}

func TestTokenSourceErrorsAreRetried(t *testing.T) {
	hub := newFakeHub("hub", script{header: "t0", responses: []*informerhubv1.WatchResponse{added("a", "1", "t1")}})
	var calls int
	source := hubclient.WithTokenSource(func(context.Context) (string, error) {
		if calls++; calls == 1 {
			return "", errors.New("the token file is being rotated")
		}
		return "fresh", nil
	})
	w := startWatch(t, serveFakes(t, []hubclient.Option{source, hubclient.AllowTokensWithoutTLS()}, hub), hubclient.WatchOptions{})
	if e := next(t, w); e.Name != "a" {
		t.Fatalf("got %v", e)
	}
}

func TestNewRefusesContradictionsAndPlaintextTokens(t *testing.T) {
	for name, tt := range map[string]struct {
		endpoints []string
		opts      []hubclient.Option
		ok        bool
	}{
		"TLS and insecure":           {[]string{"hub:8080"}, []hubclient.Option{hubclient.WithInsecure(), hubclient.WithTLS(nil)}, true},
		"a token in the clear":       {[]string{"hub:8080"}, []hubclient.Option{hubclient.WithInsecure(), hubclient.WithBearerToken("t")}, false},
		"a token to loopback":        {[]string{"127.0.0.1:8080", "localhost:8081"}, []hubclient.Option{hubclient.WithInsecure(), hubclient.WithBearerToken("t")}, true},
		"a token allowed explicitly": {[]string{"hub:8080"}, []hubclient.Option{hubclient.WithInsecure(), hubclient.WithBearerToken("t"), hubclient.AllowTokensWithoutTLS()}, true},
		"an empty endpoint":          {[]string{""}, nil, false},
		"no endpoints":               {nil, nil, false},
	} {
		c, err := hubclient.New(tt.endpoints, tt.opts...)
		if (err == nil) != tt.ok {
			t.Errorf("%s: %v, want ok=%v", name, err, tt.ok)
		}
		if c != nil {
			c.Close()
		}
	}
}

func TestCloseEndsCallsAndIsIdempotent(t *testing.T) {
	c := serveFakes(t, nil, newFakeHub("hub"))
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	w := c.Watch(context.Background(), configMaps, hubclient.WatchOptions{})
	if _, err := w.Next(); !errors.Is(err, hubclient.ErrClientClosed) {
		t.Fatalf("Next on a closed client: %v", err)
	}
}
