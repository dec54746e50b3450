package integration

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/server"
	"github.com/informerhub/informerhub/test/checker"
)

// The fault suite: each test injects one fault while subscribers stream,
// and checks every subscriber's transcript with test/checker against a
// reference recorded straight from the API server.

// workload makes a reproducible mix of changes in one namespace: creates,
// updates, deletes, re-creates (a new UID under an old name) and label flips
// that move objects in and out of the selector team=a.
type workload struct {
	t       *testing.T
	ns      string
	rnd     *rand.Rand
	live    []string // names that exist
	gone    []string // names deleted, to create again
	next    int      // for new names
	markers int
}

func newWorkload(t *testing.T, ns string, objects int) *workload {
	w := &workload{t: t, ns: ns, rnd: rand.New(rand.NewPCG(uint64(len(ns)), 42))}
	for range objects {
		w.create()
	}
	return w
}

func (w *workload) team() map[string]string {
	return map[string]string{"team": []string{"a", "b"}[w.rnd.IntN(2)]}
}

func (w *workload) create() {
	var name string
	if len(w.gone) > 0 && w.rnd.IntN(2) == 0 {
		name, w.gone = w.gone[len(w.gone)-1], w.gone[:len(w.gone)-1]
	} else {
		name = fmt.Sprintf("obj-%03d", w.next)
		w.next++
	}
	createConfigMap(w.t, w.ns, name, w.team(), "v0")
	w.live = append(w.live, name)
}

// step makes n changes.
func (w *workload) step(n int) {
	w.t.Helper()
	for range n {
		switch r := w.rnd.IntN(10); {
		case r < 2 || len(w.live) < 3:
			w.create()
		case r < 3:
			i := w.rnd.IntN(len(w.live))
			deleteConfigMap(w.t, w.ns, w.live[i])
			w.gone = append(w.gone, w.live[i])
			w.live = append(w.live[:i], w.live[i+1:]...)
		default: // an update, which may flip the label
			updateConfigMap(w.t, w.ns, w.live[w.rnd.IntN(len(w.live))], w.team(), fmt.Sprint("v", w.rnd.IntN(1000)))
		}
	}
}

// settle brings every subscriber to a point where it has everything made
// so far. A marker alone is not enough after a relist: its ADDED may be one
// of the relist's differences, with others still to come; a second marker
// made once the first has arrived comes after the whole relist.
func (w *workload) settle(subs []*subscriber) {
	w.t.Helper()
	for range 2 {
		m := w.marker()
		for _, s := range subs {
			s.waitFor(w.t, m)
		}
	}
}

// marker creates an object every subscriber selects, and returns its name:
// once a subscriber has it, it has everything made before (unless it came in
// a relist, see settle).
func (w *workload) marker() string {
	w.markers++
	name := fmt.Sprintf("marker-%d", w.markers)
	createConfigMap(w.t, w.ns, name, map[string]string{"team": "a"}, "")
	return name
}

// TestHubKilledAndRestarted is fault 3: the hub process is killed with
// SIGKILL while subscribers stream and changes flow, and started again. The
// subscribers reconnect with the tokens they hold; the new process, whose
// informer lists after the token, replays the gap from the API server: the
// transcripts are exact.
func TestHubKilledAndRestarted(t *testing.T) {
	ns := namespace(t)
	w := newWorkload(t, ns, 10)
	ref := startReference(t, ns)
	hub := startHubProcess(t)
	conn, err := grpc.NewClient(hub.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := func() informerhubv1.InformerHubServiceClient { return informerhubv1.NewInformerHubServiceClient(conn) }
	subs := []*subscriber{subscribe(t, client, ns, ""), subscribe(t, client, ns, "team=a"), subscribe(t, client, ns, "team notin (b)")}

	for round := range 3 {
		w.step(20)
		m := w.marker()
		for _, s := range subs {
			s.waitFor(t, m)
		}
		hub.Kill()
		w.step(20) // while no hub runs
		hub.Restart()
		w.step(10)
		t.Logf("round %d: killed and restarted", round)
	}
	m := w.marker()
	for _, s := range subs {
		s.waitFor(t, m)
		if s.resumed() < 3 {
			t.Errorf("subscriber %v resumed %d times, want at least 3 (one per kill)", s.sel, s.resumed())
		}
		s.check(t, ref, false)
	}
}

// TestClientsMoveBetweenReplicas is fault 4: three hub replicas, and
// subscribers that move to another replica after every few changes, each
// time with the token the previous one gave them. Each move lands where the
// new replica's history may or may not reach: either way the transcripts
// are exact.
func TestClientsMoveBetweenReplicas(t *testing.T) {
	ns := namespace(t)
	w := newWorkload(t, ns, 10)
	ref := startReference(t, ns)
	var clients []informerhubv1.InformerHubServiceClient
	for i := range 3 {
		// Each with a small history, so that moves also need replays.
		h := startHub(t, informerhub.Config{HistorySize: 10 + 20*i})
		clients = append(clients, h.client)
	}
	var mu sync.Mutex // guards replica
	replica := 0
	client := func() informerhubv1.InformerHubServiceClient {
		mu.Lock()
		defer mu.Unlock()
		return clients[replica]
	}
	subs := []*subscriber{subscribe(t, client, ns, ""), subscribe(t, client, ns, "team=a")}
	for move := range 8 {
		w.step(15)
		m := w.marker()
		for _, s := range subs {
			s.waitFor(t, m)
		}
		mu.Lock()
		replica = (replica + 1) % len(clients)
		mu.Unlock()
		for _, s := range subs {
			s.reconnect()
		}
		t.Logf("move %d: to replica %d", move, replica)
	}
	m := w.marker()
	for _, s := range subs {
		s.waitFor(t, m)
		s.check(t, ref, false)
	}
}

// TestManySubscribeCycles is fault 7: 10,000 subscriptions opened and
// closed, on four selectors, while a long-lived subscriber streams. The
// hub's goroutines and heap must come back to what they were (bounds below),
// and the long-lived transcript stays exact.
func TestManySubscribeCycles(t *testing.T) {
	ns := namespace(t)
	w := newWorkload(t, ns, 20)
	ref := startReference(t, ns)
	h := startHub(t, informerhub.Config{})
	client := h.current
	long := subscribe(t, client, ns, "team=a")
	m := w.marker()
	long.waitFor(t, m)

	measure := func() (goroutines int, heap uint64) {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return runtime.NumGoroutine(), ms.HeapAlloc
	}
	const cycles = 10000
	cycle := func(i int) {
		// Straight on the stream, so the test itself keeps nothing per
		// cycle that would show in the heap. Each cycle is bounded, not
		// the 10,000 together: under load they take minutes.
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		sel := watchSelector(ns)
		sel.LabelSelector = []string{"", "team=a", "team=b", "team in (a,b)"}[i%4]
		stream, err := h.client.Watch(ctx, &informerhubv1.WatchRequest{Selector: sel, SendInitialEvents: i%2 == 0})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Header(); err != nil { // the subscription exists
			t.Fatal(err)
		}
		if i%2 == 0 {
			if _, err := stream.Recv(); err != nil { // an initial event, or the bookmark that ends them
				t.Fatal(err)
			}
		}
		cancel()
		for { // past what was in flight
			if _, err := stream.Recv(); err != nil {
				if status.Code(err) != codes.Canceled {
					t.Fatalf("a canceled stream ended with %v", err)
				}
				break
			}
		}
	}
	for i := range 200 { // warm up: connections, pools, caches
		cycle(i)
	}
	goroutinesBefore, heapBefore := measure()
	for i := range cycles {
		cycle(i)
		if i%1000 == 0 {
			w.step(5) // the long-lived subscriber keeps receiving
		}
	}
	// Streams end asynchronously on the server; wait until they have.
	var goroutinesAfter int
	var heapAfter uint64
	deadline := time.Now().Add(30 * time.Second)
	for {
		goroutinesAfter, heapAfter = measure()
		if goroutinesAfter <= goroutinesBefore+5 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // polling a condition, not synchronising
	}
	t.Logf("after %d cycles: goroutines %d -> %d, heap %d KiB -> %d KiB", cycles, goroutinesBefore, goroutinesAfter, heapBefore>>10, heapAfter>>10)
	// A leak of one goroutine per cycle would show as 10,000 goroutines,
	// and one of 400 bytes per cycle as 4 MiB (a subscription's queue alone
	// is 16 KiB).
	if goroutinesAfter > goroutinesBefore+5 {
		t.Errorf("goroutines grew from %d to %d over %d cycles", goroutinesBefore, goroutinesAfter, cycles)
	}
	if heapAfter > heapBefore+4<<20 {
		t.Errorf("heap grew from %d KiB to %d KiB over %d cycles", heapBefore>>10, heapAfter>>10, cycles)
	}
	m = w.marker()
	long.waitFor(t, m)
	long.check(t, ref, false)
}

// TestAPIServerKilledAndRestarted is fault 1: the API server the hub uses
// is killed (SIGKILL) and started again while 100 subscribers stream, and
// changes are made (through another API server on the same etcd) during and
// after the outage. The subscribers stay connected and receive every change:
// client-go's reflector lists again after a watch that broke other than by
// a refused connection, so what happened during the outage may arrive as a
// relist's true differences, each object once at its current state (the
// checker's relisted mode), never a phantom or a duplicate.
func TestAPIServerKilledAndRestarted(t *testing.T) {
	ns := namespace(t)
	w := newWorkload(t, ns, 10)
	ref := startReference(t, ns)
	upstream := etcdAPIServer(t)
	h := startHubAt(t, upstream.Config, informerhub.Config{})
	client := h.current
	var subs []*subscriber
	for i := range 100 {
		subs = append(subs, subscribe(t, client, ns, []string{"", "team=a", "team notin (b)", "team in (a,b)"}[i%4]))
	}
	m := w.marker()
	for _, s := range subs {
		s.waitFor(t, m)
	}

	if err := upstream.Kill(); err != nil {
		t.Fatal(err)
	}
	w.step(30) // during the outage
	if err := upstream.Start(); err != nil {
		t.Fatal(err)
	}
	w.step(30) // after it
	w.settle(subs)
	for _, s := range subs {
		if n := s.resumed(); n != 0 {
			t.Errorf("subscriber %v had to reconnect %d times", s.sel, n)
		}
		s.check(t, ref, true)
	}
}

// TestCompactionForcesARelist is fault 2: while the hub is cut off from the
// API server, objects change and etcd is compacted, so the hub's watch
// cannot resume (410 Gone) and its informer lists again. Subscribers receive
// the true differences: each changed object once, at its current state;
// none of the unchanged ones (no phantom MODIFIED); and their state ends
// equal to a LIST.
func TestCompactionForcesARelist(t *testing.T) {
	ns := namespace(t)
	w := newWorkload(t, ns, 20)
	createConfigMap(t, ns, "hot", map[string]string{"team": "a"}, "v0")
	ref := startReference(t, ns)
	upstream := etcdAPIServer(t)
	restConfig, proxy := throughProxy(t, upstream.Config)
	h := startHubAt(t, restConfig, informerhub.Config{})
	client := h.current
	subs := []*subscriber{subscribe(t, client, ns, ""), subscribe(t, client, ns, "team=a")}
	w.step(10)
	m := w.marker()
	for _, s := range subs {
		s.waitFor(t, m)
	}
	before := len(subs[0].tr.Events())

	proxy.cut()
	w.step(20)
	for i := range 5 {
		updateConfigMap(t, ns, "hot", map[string]string{"team": "a"}, fmt.Sprint("v", i+1))
	}
	if _, err := cluster.Compact(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	proxy.restore()
	w.settle(subs)
	for _, s := range subs {
		s.check(t, ref, true)
	}
	// The relist happened: the five updates of hot arrived as one.
	hot := 0
	for _, e := range subs[0].tr.Events()[before:] {
		if e.Name == "hot" {
			hot++
		}
	}
	if hot != 1 {
		t.Errorf("hot changed 5 times while the hub was cut off; its subscriber received %d events of it, want 1 (the relist's difference)", hot)
	}
}

// TestNetworkToTheAPIServerStallsAndDrops is fault 5: the network between
// the hub and the API server stalls (a proxy holds every byte for a while,
// keeping connections open), then drops (the proxy closes every connection
// and refuses new ones for a while). Changes go on meanwhile; subscribers
// see no gap.
func TestNetworkToTheAPIServerStallsAndDrops(t *testing.T) {
	ns := namespace(t)
	w := newWorkload(t, ns, 10)
	ref := startReference(t, ns)
	restConfig, proxy := throughProxy(t, cluster.Config)
	h := startHubAt(t, restConfig, informerhub.Config{})
	client := h.current
	subs := []*subscriber{subscribe(t, client, ns, ""), subscribe(t, client, ns, "team=a")}
	m := w.marker()
	for _, s := range subs {
		s.waitFor(t, m)
	}

	proxy.pause()
	w.step(20)
	proxy.unpause()
	m = w.marker()
	for _, s := range subs {
		s.waitFor(t, m)
	}

	proxy.cut()
	w.step(20)
	proxy.restore()
	w.step(10)
	m = w.marker()
	for _, s := range subs {
		s.waitFor(t, m)
		s.check(t, ref, false)
	}
}

// throughProxy returns a copy of restConfig that reaches its API server
// through a tcpProxy the test controls. TLS passes through unchanged: the
// serving certificate names 127.0.0.1 whatever the port.
func throughProxy(t *testing.T, restConfig *rest.Config) (*rest.Config, *tcpProxy) {
	t.Helper()
	u, err := url.Parse(restConfig.Host)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newTCPProxy(t, u.Host)
	proxied := rest.CopyConfig(restConfig)
	u.Host = proxy.addr()
	proxied.Host = u.String()
	return proxied, proxy
}

// TestStalledAndSlowSubscribers is fault 6: one client stops reading, and
// one reads slowly, while 300 changes of 16 KiB objects flow. Two healthy
// subscribers are not held up: every change reaches them well before the
// hub would give up on the stalled client (MaxSendStall), the bound a hub
// that waited for it would exceed. The stalled client's subscription falls
// behind and would read on from the history; its stream ends once it has
// read nothing for MaxSendStall, with RESOURCE_EXHAUSTED and the token of
// the last response it received, from which it resumes exactly. The slow
// one falls behind and catches up from the history, or resumes.
func TestStalledAndSlowSubscribers(t *testing.T) {
	const maxSendStall = 4 * time.Second
	ns := namespace(t)
	createConfigMap(t, ns, "big", map[string]string{"team": "a"}, "v0")
	ref := startReference(t, ns)
	stallEnded := make(chan struct{})
	logger := slog.New(&signalHandler{
		Handler: slog.NewTextHandler(newTestWriter(t), &slog.HandlerOptions{Level: slog.LevelWarn}),
		prefix:  "ending a stream whose client has not read", seen: stallEnded, once: &sync.Once{},
	})
	h := startHubWith(t, informerhub.Config{QueueSize: 20, Logger: logger},
		server.Config{StalledSendGrace: 100 * time.Millisecond, MaxSendStall: maxSendStall})
	client := h.current

	// A fixed 64 KiB window (which also turns off gRPC's dynamic window),
	// so the stalled client's buffers fill quickly.
	stalledConn, err := grpc.NewClient(h.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer stalledConn.Close()
	stalledClient := informerhubv1.NewInformerHubServiceClient(stalledConn)
	var stalled subscriber // only its transcript and options: the test reads its streams itself
	stalled.opts.Namespace, stalled.opts.InitialEvents = ns, true
	stalledStream, err := stalledClient.Watch(ctxFor(t), &informerhubv1.WatchRequest{Selector: watchSelector(ns), SendInitialEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	stalled.tr.Open("")
	record := func(resp *informerhubv1.WatchResponse) {
		e, err := checker.FromWatchResponse(resp)
		if err != nil {
			t.Fatal(err)
		}
		stalled.tr.Record(e)
	}
	for { // through the initial events: the subscription is live
		resp, err := stalledStream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		record(resp)
		if resp.InitialEventsEnd {
			break
		}
	}

	healthy := []*subscriber{subscribe(t, client, ns, ""), subscribe(t, client, ns, "team=a")}
	slow := subscribeSlowly(t, client, ns, "", 20*time.Millisecond)
	w := &workload{t: t, ns: ns}
	w.settle(append(healthy, slow))

	big := strings.Repeat("x", 16<<10)
	written := map[string]time.Time{} // resourceVersion -> when its write returned
	for i := range 300 {
		cm, err := kube.CoreV1().ConfigMaps(ns).Get(bgCtx(), "big", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Data = map[string]string{"v": big + fmt.Sprint(i)}
		if cm, err = kube.CoreV1().ConfigMaps(ns).Update(bgCtx(), cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		written[cm.ResourceVersion] = time.Now()
	}
	m := w.marker()
	for _, s := range healthy {
		s.waitFor(t, m)
		var delays []time.Duration
		for rv, at := range written {
			got, ok := s.arrival(rv)
			if !ok {
				t.Fatalf("subscriber %v never received the change at %s", s.sel, rv)
			}
			delays = append(delays, max(0, got.Sub(at)))
		}
		slices.Sort(delays)
		worst := delays[len(delays)-1]
		t.Logf("subscriber %v: delivery delay p50 %v, p99 %v, max %v", s.sel, delays[len(delays)/2], delays[len(delays)*99/100], worst)
		if worst >= maxSendStall/2 {
			t.Errorf("subscriber %v received a change %v after it was made: held up by the stalled client", s.sel, worst)
		}
	}

	// Once the hub has given up on it, the stalled client reads what
	// reached it, then the status.
	select {
	case <-stallEnded:
	case <-ctxFor(t).Done():
		t.Fatal("the hub never ended the stalled stream")
	}
	var lastToken, prevToken string
	for {
		resp, err := stalledStream.Recv()
		if err != nil {
			stalled.tr.Close(err)
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
		record(resp)
		lastToken, prevToken = resp.ResumeToken, lastToken
	}
	if n := len(stalled.tr.Events()); n >= 300 {
		t.Fatalf("the stalled client received %d events: it never stalled", n)
	}
	stalled.tr.Open(lastToken)
	resumed, _ := openWatch(t, h.client, &informerhubv1.WatchRequest{Selector: watchSelector(ns), ResumeToken: lastToken})
	for {
		resp := resumed.next(t)
		record(resp)
		if resp.Type == informerhubv1.EventType_EVENT_TYPE_ADDED && strings.Contains(resp.Object, `"name":"`+m+`"`) {
			break
		}
	}
	stalled.check(t, ref, false)

	slow.waitFor(t, m)
	t.Logf("the slow subscriber resumed %d times; subscribers fell behind %d times", slow.resumed(), statsOf(t, h).FellBehind)
	for _, s := range append(healthy, slow) {
		s.check(t, ref, false)
	}
}

// signalHandler is a slog.Handler that closes seen the first time a message
// starting with prefix is logged.
type signalHandler struct {
	slog.Handler
	prefix string
	seen   chan struct{}
	once   *sync.Once
}

func (h *signalHandler) Handle(ctx context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, h.prefix) {
		h.once.Do(func() { close(h.seen) })
	}
	return h.Handler.Handle(ctx, r)
}

func (h *signalHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &signalHandler{Handler: h.Handler.WithAttrs(attrs), prefix: h.prefix, seen: h.seen, once: h.once}
}

func (h *signalHandler) WithGroup(name string) slog.Handler {
	return &signalHandler{Handler: h.Handler.WithGroup(name), prefix: h.prefix, seen: h.seen, once: h.once}
}
