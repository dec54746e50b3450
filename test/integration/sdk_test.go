package integration

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"

	hubclient "github.com/informerhub/informerhub/clients/go"
	"github.com/informerhub/informerhub/informerhub"
)

func sdkClient(t *testing.T, addr string) *hubclient.Client {
	t.Helper()
	c, err := hubclient.New([]string{addr}, hubclient.WithInsecure(),
		hubclient.WithBackoff(hubclient.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond}),
		hubclient.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// sdkEvent is an SDK event as tests compare it.
type sdkEvent struct {
	Type   hubclient.EventType
	Name   string
	UID    string
	RV     string
	Resync bool
}

func nextSDK(t *testing.T, w *hubclient.Watcher) (sdkEvent, hubclient.Event) {
	t.Helper()
	done := make(chan struct{})
	var e hubclient.Event
	var err error
	go func() {
		defer close(done)
		e, err = w.Next()
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		w.Close()
		<-done
		t.Fatal("no event within a minute")
	}
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	out := sdkEvent{Type: e.Type, RV: e.ResourceVersion, Resync: e.Resync}
	if e.Object != nil {
		cm, err := hubclient.Decode[corev1.ConfigMap](e)
		if err != nil {
			t.Fatal(err)
		}
		out.Name, out.UID, out.RV = cm.Name, string(cm.UID), cm.ResourceVersion
	}
	return out, e
}

// clientState is what a client holds after applying events: each object's
// resourceVersion and UID, by name.
type clientState map[string][2]string

func (s clientState) apply(e sdkEvent) {
	switch e.Type {
	case hubclient.Added, hubclient.Modified:
		s[e.Name] = [2]string{e.RV, e.UID}
	case hubclient.Deleted:
		delete(s, e.Name)
	}
}

func apiState(t *testing.T, ns string) clientState {
	t.Helper()
	list, err := kube.CoreV1().ConfigMaps(ns).List(ctxFor(t), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := clientState{}
	for _, cm := range list.Items {
		s[cm.Name] = [2]string{cm.ResourceVersion, string(cm.UID)}
	}
	return s
}

// TestSDKResyncsWithTheTrueDifferences cuts an SDK watch off (a TCP proxy
// between it and the hub drops every connection) while more changes happen
// than the hub's history holds. When it can reconnect, the hub answers
// OUT_OF_RANGE; the SDK re-syncs and delivers exactly the differences
// between what it had delivered and the API server's state.
func TestSDKResyncsWithTheTrueDifferences(t *testing.T) {
	ns := namespace(t)
	for i := range 8 {
		createConfigMap(t, ns, fmt.Sprint("cm-", i), nil, "v0")
	}
	// On the API server without a watch cache, so that compacting etcd
	// makes the client's token unusable upstream too.
	h := startHubAt(t, etcdAPIServer(t).Config, informerhub.Config{HistorySize: 20})
	proxy := newTCPProxy(t, h.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w := sdkClient(t, proxy.addr()).Watch(ctx, hubclient.Selector{Resource: configMaps, Namespace: ns}, hubclient.WatchOptions{SendInitialEvents: true})
	defer w.Close()

	state := clientState{}
	for {
		e, raw := nextSDK(t, w)
		state.apply(e)
		if raw.InitialEventsEnd {
			break
		}
	}
	updateConfigMap(t, ns, "cm-0", nil, "v1")
	e, _ := nextSDK(t, w)
	state.apply(e)
	before := maps.Clone(state)

	proxy.cut()
	for i := range 25 { // more changes than the history holds
		updateConfigMap(t, ns, "cm-1", nil, fmt.Sprint("v", i+1))
	}
	deleteConfigMap(t, ns, "cm-2")
	deleteConfigMap(t, ns, "cm-3")
	createConfigMap(t, ns, "cm-3", nil, "again") // a new UID
	createConfigMap(t, ns, "new", nil, "v0")
	after := apiState(t, ns)
	if _, err := cluster.Compact(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	proxy.restore()

	var resync []sdkEvent
	for {
		e, raw := nextSDK(t, w)
		if !e.Resync {
			t.Fatalf("got %v before the re-sync ended", e)
		}
		state.apply(e)
		if raw.Type == hubclient.Bookmark {
			break
		}
		e.RV = "" // DELETED carries the last delivered version; compare without versions
		resync = append(resync, e)
	}
	want := []sdkEvent{
		{Type: hubclient.Deleted, Name: "cm-2", UID: before["cm-2"][1], Resync: true},
		{Type: hubclient.Deleted, Name: "cm-3", UID: before["cm-3"][1], Resync: true},
		{Type: hubclient.Modified, Name: "cm-1", UID: after["cm-1"][1], Resync: true},
		{Type: hubclient.Added, Name: "cm-3", UID: after["cm-3"][1], Resync: true},
		{Type: hubclient.Added, Name: "new", UID: after["new"][1], Resync: true},
	}
	if diff := cmp.Diff(want, resync); diff != "" {
		t.Fatalf("re-sync differences (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(after, state); diff != "" {
		t.Fatalf("client state after the re-sync differs from the API server's (-api +client):\n%s", diff)
	}

	createConfigMap(t, ns, "marker", nil, "")
	if e, _ := nextSDK(t, w); e.Resync || e.Name != "marker" {
		t.Fatalf("after the re-sync got %v, want the marker", e)
	}
}

// TestSDKWatchSurvivesAHubRestart kills the hub while an SDK watch runs,
// changes objects while it is down, and starts a new hub at the same
// address: the watch reconnects by itself and its client state ends equal
// to the API server's, with no change lost.
func TestSDKWatchSurvivesAHubRestart(t *testing.T) {
	ns := namespace(t)
	for i := range 5 {
		createConfigMap(t, ns, fmt.Sprint("cm-", i), nil, "v0")
	}
	hub := startRestartableHub(t, informerhub.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w := sdkClient(t, hub.addr).Watch(ctx, hubclient.Selector{Resource: configMaps, Namespace: ns}, hubclient.WatchOptions{SendInitialEvents: true})
	defer w.Close()
	state := clientState{}
	for {
		e, raw := nextSDK(t, w)
		state.apply(e)
		if raw.InitialEventsEnd {
			break
		}
	}

	hub.kill()
	updateConfigMap(t, ns, "cm-0", nil, "v1")
	deleteConfigMap(t, ns, "cm-1")
	createConfigMap(t, ns, "new", nil, "v0")
	hub.start()
	updateConfigMap(t, ns, "cm-2", nil, "v1") // after the restart
	createConfigMap(t, ns, "marker", nil, "")

	// Read up to the marker, and to the end of a re-sync the marker may be
	// part of (a re-sync delivers its differences in name order).
	for sawMarker := false; ; {
		e, raw := nextSDK(t, w)
		state.apply(e)
		sawMarker = sawMarker || e.Name == "marker"
		if sawMarker && (!e.Resync || raw.Type == hubclient.Bookmark) {
			break
		}
	}
	if diff := cmp.Diff(apiState(t, ns), state); diff != "" {
		t.Fatalf("client state differs from the API server's (-api +client):\n%s", diff)
	}
}

// TestStockInformerOverTheHub runs client-go's SharedIndexInformer, with
// typed ConfigMaps, on the SDK's ListerWatcher: its indexer must equal the
// API server's state through creates, updates, deletes and a hub restart.
func TestStockInformerOverTheHub(t *testing.T) {
	ns := namespace(t)
	for i := range 5 {
		createConfigMap(t, ns, fmt.Sprint("cm-", i), nil, "v0")
	}
	hub := startRestartableHub(t, informerhub.Config{})
	lw := sdkClient(t, hub.addr).ListerWatcher(hubclient.Selector{Resource: configMaps, Namespace: ns}, hubclient.WithScheme(scheme.Scheme))
	informer := cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, cache.Indexers{})
	seen := make(chan string, 1000)
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { seen <- obj.(*corev1.ConfigMap).Name },
		UpdateFunc: func(_, obj any) { seen <- obj.(*corev1.ConfigMap).Name },
	}); err != nil {
		t.Fatal(err)
	}
	defer runInformer(context.Background(), informer)()
	waitFor := func(name string) {
		t.Helper()
		timeout := time.After(time.Minute)
		for {
			select {
			case got := <-seen:
				if got == name {
					return
				}
			case <-timeout:
				t.Fatalf("the informer never saw %s", name)
			}
		}
	}
	indexer := func() clientState {
		s := clientState{}
		for _, obj := range informer.GetStore().List() {
			cm := obj.(*corev1.ConfigMap)
			s[cm.Name] = [2]string{cm.ResourceVersion, string(cm.UID)}
		}
		return s
	}

	updateConfigMap(t, ns, "cm-0", nil, "v1")
	deleteConfigMap(t, ns, "cm-1")
	createConfigMap(t, ns, "cm-new", nil, "v0")
	createConfigMap(t, ns, "marker-1", nil, "")
	waitFor("marker-1")
	if diff := cmp.Diff(apiState(t, ns), indexer()); diff != "" {
		t.Fatalf("indexer differs from the API server (-api +indexer):\n%s", diff)
	}

	hub.kill()
	updateConfigMap(t, ns, "cm-2", nil, "v1")
	deleteConfigMap(t, ns, "cm-3")
	createConfigMap(t, ns, "made-while-down", nil, "")
	hub.start()
	createConfigMap(t, ns, "marker-2", nil, "")
	waitFor("marker-2")
	if diff := cmp.Diff(apiState(t, ns), indexer()); diff != "" {
		t.Fatalf("after a hub restart, the indexer differs from the API server (-api +indexer):\n%s", diff)
	}
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(newTestWriter(t), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// TestFailoverBetweenReplicas runs two hubs whose informers are running (a
// watch on each keeps them so), and an SDK watch and a stock informer
// through both. Killing the replica they use moves them to the other, which
// places their tokens by resourceVersion: the watch continues with no
// re-sync and nothing lost, and the informer does not list again.
func TestFailoverBetweenReplicas(t *testing.T) {
	ns := namespace(t)
	for i := range 4 {
		createConfigMap(t, ns, fmt.Sprint("cm-", i), nil, "v0")
	}
	replicas := []*restartableHub{startRestartableHub(t, informerhub.Config{}), startRestartableHub(t, informerhub.Config{})}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sel := hubclient.Selector{Resource: configMaps, Namespace: ns}
	for _, r := range replicas {
		keeper := sdkClient(t, r.addr).Watch(ctx, sel, hubclient.WatchOptions{SendInitialEvents: true})
		defer keeper.Close()
		for e, raw := nextSDK(t, keeper); !raw.InitialEventsEnd; e, raw = nextSDK(t, keeper) {
			_ = e
		}
	}
	client, err := hubclient.New([]string{replicas[0].addr, replicas[1].addr}, hubclient.WithInsecure(),
		hubclient.WithBackoff(hubclient.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond}), hubclient.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	w := client.Watch(ctx, sel, hubclient.WatchOptions{SendInitialEvents: true})
	defer w.Close()
	state := clientState{}
	for e, raw := nextSDK(t, w); ; e, raw = nextSDK(t, w) {
		state.apply(e)
		if raw.InitialEventsEnd {
			break
		}
	}
	informer := cache.NewSharedIndexInformer(client.ListerWatcher(sel, hubclient.WithScheme(scheme.Scheme)), &corev1.ConfigMap{}, 0, cache.Indexers{})
	markerSeen := make(chan struct{})
	var once sync.Once
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		if obj.(*corev1.ConfigMap).Name == "marker" {
			once.Do(func() { close(markerSeen) })
		}
	}}); err != nil {
		t.Fatal(err)
	}
	defer runInformer(ctx, informer)()
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		t.Fatal("the informer did not sync")
	}
	snapshotsBefore := replicas[0].snapshots.Load() + replicas[1].snapshots.Load()

	updateConfigMap(t, ns, "cm-0", nil, "v1")
	e, _ := nextSDK(t, w)
	state.apply(e)
	// Kill the replica serving the SDK's streams (it has the keeper's, the
	// watch's and the informer's).
	victim, survivor := replicas[0], replicas[1]
	if victim.subscribers(t, configMaps) < survivor.subscribers(t, configMaps) {
		victim, survivor = survivor, victim
	}
	if victim.subscribers(t, configMaps) != 3 {
		t.Fatalf("the replicas serve %d and %d streams: the client's are not on one", victim.subscribers(t, configMaps), survivor.subscribers(t, configMaps))
	}
	victim.kill()
	updateConfigMap(t, ns, "cm-1", nil, "v1")
	deleteConfigMap(t, ns, "cm-2")
	createConfigMap(t, ns, "marker", nil, "")
	for {
		e, _ := nextSDK(t, w)
		if e.Resync {
			t.Fatalf("the watch re-synced (%v) although the other replica holds its position", e)
		}
		state.apply(e)
		if e.Name == "marker" {
			break
		}
	}
	want := apiState(t, ns)
	if diff := cmp.Diff(want, state); diff != "" {
		t.Fatalf("after failover the client state differs from the API server's (-api +client):\n%s", diff)
	}
	select {
	case <-markerSeen:
	case <-time.After(time.Minute):
		t.Fatal("the informer never saw the marker")
	}
	got := clientState{}
	for _, obj := range informer.GetStore().List() {
		cm := obj.(*corev1.ConfigMap)
		got[cm.Name] = [2]string{cm.ResourceVersion, string(cm.UID)}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("after failover the informer's indexer differs from the API server (-api +indexer):\n%s", diff)
	}
	if after := replicas[0].snapshots.Load() + replicas[1].snapshots.Load(); after != snapshotsBefore {
		t.Fatalf("the informer listed again (%d snapshots) although the other replica could resume it", after-snapshotsBefore)
	}
}

// runInformer runs informer until ctx ends or stop is called; stop
// returns once it has stopped.
func runInformer(ctx context.Context, informer cache.SharedIndexInformer) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		informer.RunWithContext(ctx)
	}()
	return func() {
		cancel()
		<-stopped
	}
}
