package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"

	hubclient "github.com/informerhub/informerhub/clients/go"
	"github.com/informerhub/informerhub/informerhub"
)

// The SDK's query features (filters, projections, previous states, field
// selectors on any field) against a real hub and API server.

// sdkQueryEvent is an SDK event as these tests compare it: what happened,
// to which ConfigMap, with which data and labels, and the same of the
// previous state.
type sdkQueryEvent struct {
	Type         hubclient.EventType
	Name         string
	RV           string
	Data         string // data.v
	Labels       map[string]string
	PreviousRV   string
	PreviousData string
	Resync       bool
}

// nextQueryEvent reads the next event of w, bookmarks included.
func nextQueryEvent(t *testing.T, w *hubclient.Watcher) (sdkQueryEvent, hubclient.Event) {
	t.Helper()
	_, e := nextSDK(t, w)
	out := sdkQueryEvent{Type: e.Type, RV: e.ResourceVersion, Resync: e.Resync}
	if e.Object != nil {
		cm, err := hubclient.Decode[corev1.ConfigMap](e)
		if err != nil {
			t.Fatal(err)
		}
		out.Name, out.RV, out.Data, out.Labels = cm.Name, cm.ResourceVersion, cm.Data["v"], cm.Labels
	}
	if e.Previous != nil {
		prev, err := hubclient.DecodeJSON[corev1.ConfigMap](e.Previous)
		if err != nil {
			t.Fatal(err)
		}
		if prev.Name != out.Name || prev.UID == "" {
			t.Fatalf("the previous state of %s is of %s (uid %q)", out.Name, prev.Name, prev.UID)
		}
		out.PreviousRV, out.PreviousData = prev.ResourceVersion, prev.Data["v"]
	}
	return out, e
}

// nextQueryChange reads the next event of w that is not a bookmark.
func nextQueryChange(t *testing.T, w *hubclient.Watcher) (sdkQueryEvent, hubclient.Event) {
	t.Helper()
	for {
		if e, raw := nextQueryEvent(t, w); e.Type != hubclient.Bookmark {
			return e, raw
		}
	}
}

// sdkInitialEvents reads a watch's initial events, up to their end.
func sdkInitialEvents(t *testing.T, w *hubclient.Watcher) []sdkQueryEvent {
	t.Helper()
	var out []sdkQueryEvent
	for {
		e, raw := nextQueryEvent(t, w)
		if raw.InitialEventsEnd {
			return out
		}
		out = append(out, e)
	}
}

// configMapRV returns a ConfigMap's resourceVersion now.
func configMapRV(t *testing.T, ns, name string) string {
	t.Helper()
	cm, err := kube.CoreV1().ConfigMaps(ns).Get(bgCtx(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cm.ResourceVersion
}

func sdkWatch(t *testing.T, c *hubclient.Client, sel hubclient.Selector, opts hubclient.WatchOptions) *hubclient.Watcher {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	w := c.Watch(ctx, sel, opts)
	t.Cleanup(w.Close)
	return w
}

// TestSDKFilterEnterAndLeave: objects that start satisfying a watch's CEL
// filter arrive as ADDED, those that stop as DELETED in their last matching
// state (at the resourceVersion of the change that made them leave), those
// that keep satisfying it as MODIFIED; the others never arrive.
func TestSDKFilterEnterAndLeave(t *testing.T) {
	ns := namespace(t)
	createConfigMap(t, ns, "hot-1", nil, "hot")
	createConfigMap(t, ns, "cold-1", nil, "cold")
	h := startHub(t, informerhub.Config{})
	sel := hubclient.Selector{Resource: configMaps, Namespace: ns, Filter: `has(object.data) && object.data.v.startsWith("hot")`}
	w := sdkWatch(t, sdkClient(t, h.addr), sel, hubclient.WatchOptions{SendInitialEvents: true})

	initial := sdkInitialEvents(t, w)
	if diff := cmp.Diff([]sdkQueryEvent{{Type: hubclient.Added, Name: "hot-1", RV: configMapRV(t, ns, "hot-1"), Data: "hot"}}, initial); diff != "" {
		t.Fatalf("initial events (-want +got):\n%s", diff)
	}
	updateConfigMap(t, ns, "cold-1", nil, "hot") // enters
	enteredRV := configMapRV(t, ns, "cold-1")
	updateConfigMap(t, ns, "hot-1", nil, "cold") // leaves
	leftRV := configMapRV(t, ns, "hot-1")
	updateConfigMap(t, ns, "cold-1", map[string]string{"still": "hot"}, "hotter") // stays
	stayedRV := configMapRV(t, ns, "cold-1")
	createConfigMap(t, ns, "cold-2", nil, "cold") // never selected
	updateConfigMap(t, ns, "hot-1", nil, "colder")
	marker := createConfigMap(t, ns, "marker", nil, "hot")

	want := []sdkQueryEvent{
		{Type: hubclient.Added, Name: "cold-1", RV: enteredRV, Data: "hot"},
		{Type: hubclient.Deleted, Name: "hot-1", RV: leftRV, Data: "hot"},
		{Type: hubclient.Modified, Name: "cold-1", RV: stayedRV, Data: "hotter", Labels: map[string]string{"still": "hot"}},
		{Type: hubclient.Added, Name: "marker", RV: marker.ResourceVersion, Data: "hot"},
	}
	var got []sdkQueryEvent
	for len(got) < len(want) {
		e, _ := nextQueryChange(t, w)
		got = append(got, e)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("changes (-want +got):\n%s", diff)
	}
}

// TestSDKFilterThatDoesNotCompileEndsTheWatch: the hub refuses it with
// INVALID_ARGUMENT naming selector.filter, and the watch ends rather than
// retry.
func TestSDKFilterThatDoesNotCompileEndsTheWatch(t *testing.T) {
	h := startHub(t, informerhub.Config{})
	w := sdkWatch(t, sdkClient(t, h.addr), hubclient.Selector{Resource: configMaps, Filter: "object.data.v =="}, hubclient.WatchOptions{})
	_, err := w.Next()
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Next: %v, want INVALID_ARGUMENT", err)
	}
	var fields []string
	for _, d := range status.Convert(err).Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				fields = append(fields, v.GetField())
			}
		}
	}
	if !slices.Equal(fields, []string{"selector.filter"}) {
		t.Fatalf("%v: the BadRequest names %q, want selector.filter", err, fields)
	}
}

// TestSDKFieldsAndIncludePrevious: a projected watch receives only the
// fields asked for, and no MODIFIED for a change of other fields; with
// IncludePrevious, a MODIFIED carries the state before the change, projected
// too. A watch without a projection receives every change, each with the
// whole previous state.
func TestSDKFieldsAndIncludePrevious(t *testing.T) {
	ns := namespace(t)
	created := createConfigMap(t, ns, "a", map[string]string{"app": "web"}, "1")
	h := startHub(t, informerhub.Config{})
	client := sdkClient(t, h.addr)
	sel := hubclient.Selector{Resource: configMaps, Namespace: ns}
	projected := sdkWatch(t, client, sel, hubclient.WatchOptions{SendInitialEvents: true, Fields: []string{"data"}, IncludePrevious: true})
	whole := sdkWatch(t, client, sel, hubclient.WatchOptions{SendInitialEvents: true, IncludePrevious: true})

	if diff := cmp.Diff([]sdkQueryEvent{{Type: hubclient.Added, Name: "a", RV: created.ResourceVersion, Data: "1"}}, sdkInitialEvents(t, projected)); diff != "" {
		t.Fatalf("projected initial events (-want +got):\n%s", diff)
	}
	sdkInitialEvents(t, whole)

	before := sdkConfigMapJSON(t, ns, "a")
	updateConfigMap(t, ns, "a", map[string]string{"app": "db"}, "1") // labels only: not for the projected watch
	labelsRV := configMapRV(t, ns, "a")
	afterLabels := sdkConfigMapJSON(t, ns, "a")
	updateConfigMap(t, ns, "a", map[string]string{"app": "db"}, "2")
	dataRV := configMapRV(t, ns, "a")

	// The projected watch: the data change, whose previous state is the
	// one the labels change made (which it never received).
	e, raw := nextQueryChange(t, projected)
	want := sdkQueryEvent{Type: hubclient.Modified, Name: "a", RV: dataRV, Data: "2", PreviousRV: labelsRV, PreviousData: "1"}
	if diff := cmp.Diff(want, e); diff != "" {
		t.Fatalf("the projected watch's next event (-want +got):\n%s", diff)
	}
	for what, object := range map[string][]byte{"object": raw.Object, "previous object": raw.Previous} {
		var members map[string]json.RawMessage
		if err := json.Unmarshal(object, &members); err != nil {
			t.Fatal(err)
		}
		if keys := slices.Sorted(maps.Keys(members)); !slices.Equal(keys, []string{"apiVersion", "data", "kind", "metadata"}) {
			t.Fatalf("the %s has members %v, want the projection's: %s", what, keys, object)
		}
		if got := canonicalJSON(t, members["metadata"]); got != fmt.Sprintf(`{"name":"a","namespace":%q,"resourceVersion":%q,"uid":%q}`, ns, sdkObjectRV(t, object), created.UID) {
			t.Fatalf("the %s's metadata is %s, want the identity only", what, got)
		}
	}

	// The whole watch: both changes, each with the API server's previous
	// state.
	for _, want := range []struct{ rv, previous string }{{labelsRV, before}, {dataRV, afterLabels}} {
		e, raw := nextQueryChange(t, whole)
		if e.Type != hubclient.Modified || e.RV != want.rv {
			t.Fatalf("the whole watch got %+v, want the MODIFIED at %s", e, want.rv)
		}
		if got := canonicalJSON(t, raw.Previous); got != want.previous {
			t.Fatalf("the previous state of the MODIFIED at %s is\n%s\nwant the API server's\n%s", want.rv, got, want.previous)
		}
	}
}

func sdkConfigMapJSON(t *testing.T, ns, name string) string {
	t.Helper()
	u, err := dyn.Resource(configMaps).Namespace(ns).Get(bgCtx(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	return canonicalJSON(t, data)
}

func sdkObjectRV(t *testing.T, object []byte) string {
	t.Helper()
	cm, err := hubclient.DecodeJSON[corev1.ConfigMap](object)
	if err != nil {
		t.Fatal(err)
	}
	return cm.ResourceVersion
}

// TestSDKResyncWithFilterAndFields cuts an SDK watch with a filter, a
// projection and IncludePrevious off while more changes happen than the
// hub's history holds, and compacts etcd: the hub answers OUT_OF_RANGE and
// the SDK re-syncs. The re-sync lists with the same filter and fields, and
// delivers exactly the differences from what the watch had delivered: an
// object whose unprojected fields alone changed is not reported, a
// MODIFIED carries the state delivered last as Previous, objects that
// stopped matching are DELETED with that state, those that started are
// ADDED, projected.
func TestSDKResyncWithFilterAndFields(t *testing.T) {
	ns := namespace(t)
	web := map[string]string{"app": "web"}
	for _, name := range []string{"edit", "gone", "keep", "leave"} {
		createConfigMap(t, ns, name, web, "hot-0")
	}
	createConfigMap(t, ns, "cold", web, "cold-0")
	createConfigMap(t, ns, "enter", web, "cold-0")
	createConfigMap(t, ns, "churn", nil, "0")
	// On the API server without a watch cache, so that compacting etcd
	// makes the client's token unusable upstream too.
	h := startHubAt(t, etcdAPIServer(t).Config, informerhub.Config{HistorySize: 20})
	proxy := newTCPProxy(t, h.addr)
	sel := hubclient.Selector{Resource: configMaps, Namespace: ns, Filter: `object.data.v.startsWith("hot")`}
	w := sdkWatch(t, sdkClient(t, proxy.addr()), sel, hubclient.WatchOptions{SendInitialEvents: true, Fields: []string{"data"}, IncludePrevious: true})

	var names []string
	for _, e := range sdkInitialEvents(t, w) {
		if e.Labels != nil {
			t.Fatalf("initial event %+v is not projected", e)
		}
		names = append(names, e.Name)
	}
	if want := []string{"edit", "gone", "keep", "leave"}; !slices.Equal(names, want) {
		t.Fatalf("initial events %v, want %v", names, want)
	}
	updateConfigMap(t, ns, "edit", web, "hot-1")
	if e, _ := nextQueryChange(t, w); e.Name != "edit" || e.Data != "hot-1" || e.PreviousData != "hot-0" {
		t.Fatalf("got %+v, want the change of edit", e)
	}
	editDeliveredRV := configMapRV(t, ns, "edit")
	leaveDeliveredRV := configMapRV(t, ns, "leave")
	goneDeliveredRV := configMapRV(t, ns, "gone")

	proxy.cut()
	updateConfigMap(t, ns, "keep", map[string]string{"app": "db"}, "hot-0") // fields not asked for
	updateConfigMap(t, ns, "edit", web, "hot-2")
	updateConfigMap(t, ns, "leave", web, "cold-1")
	updateConfigMap(t, ns, "enter", web, "hot-1")
	updateConfigMap(t, ns, "cold", web, "cold-1")
	deleteConfigMap(t, ns, "gone")
	for i := range 25 { // more changes than the history holds
		updateConfigMap(t, ns, "churn", nil, fmt.Sprint(i+1))
	}
	editRV, enterRV := configMapRV(t, ns, "edit"), configMapRV(t, ns, "enter")
	if _, err := cluster.Compact(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	proxy.restore()

	var resync []sdkQueryEvent
	var raws []hubclient.Event
	for {
		e, raw := nextQueryEvent(t, w)
		if !e.Resync {
			t.Fatalf("got %+v before the re-sync ended", e)
		}
		if raw.Type == hubclient.Bookmark {
			break
		}
		resync, raws = append(resync, e), append(raws, raw)
	}
	want := []sdkQueryEvent{
		{Type: hubclient.Deleted, Name: "gone", RV: goneDeliveredRV, Data: "hot-0", Resync: true},
		{Type: hubclient.Deleted, Name: "leave", RV: leaveDeliveredRV, Data: "hot-0", Resync: true},
		{Type: hubclient.Modified, Name: "edit", RV: editRV, Data: "hot-2", PreviousRV: editDeliveredRV, PreviousData: "hot-1", Resync: true},
		{Type: hubclient.Added, Name: "enter", RV: enterRV, Data: "hot-1", Resync: true},
	}
	if diff := cmp.Diff(want, resync); diff != "" {
		t.Fatalf("re-sync (-want +got):\n%s", diff)
	}
	for _, raw := range raws {
		var members map[string]json.RawMessage
		if err := json.Unmarshal(raw.Object, &members); err != nil {
			t.Fatal(err)
		}
		if _, ok := members["data"]; !ok || len(members) != 4 {
			t.Fatalf("re-sync event %s %s is not the projection", raw.Type, raw.Object)
		}
	}

	marker := createConfigMap(t, ns, "marker", nil, "hot")
	if e, _ := nextQueryChange(t, w); e.Resync || e.Type != hubclient.Added || e.Name != "marker" || e.RV != marker.ResourceVersion {
		t.Fatalf("after the re-sync got %+v, want the marker", e)
	}
}

// TestSDKInformerOnOneNodesPods runs a stock client-go informer on the pods
// of one node (the kubelet's view), through the SDK's ListerWatcher with
// the field selector spec.nodeName=node-a,status.phase!=Succeeded: the hub
// selects as the API server does. A pod bound to the node enters the
// informer, one that succeeds leaves it, pods of other nodes never arrive,
// and the indexer ends equal to the API server's answer to the same
// selector.
func TestSDKInformerOnOneNodesPods(t *testing.T) {
	ns := namespace(t)
	const selector = "spec.nodeName=node-a,status.phase!=Succeeded"
	sdkCreatePod(t, ns, "a-1", "node-a")
	sdkCreatePod(t, ns, "b-1", "node-b")
	sdkCreatePod(t, ns, "pending", "")
	h := startHub(t, informerhub.Config{})
	lw := sdkClient(t, h.addr).ListerWatcher(hubclient.Selector{Resource: sdkPods, Namespace: ns, FieldSelector: selector}, hubclient.WithScheme(scheme.Scheme))
	informer := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
	var mu sync.Mutex // guards seen
	var seen []string
	marker := make(chan struct{})
	var markerOnce sync.Once
	record := func(what string) func(any) {
		return func(obj any) {
			if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			pod := obj.(*corev1.Pod)
			mu.Lock()
			seen = append(seen, what+" "+pod.Name+" on "+pod.Spec.NodeName)
			mu.Unlock()
			if pod.Name == "marker" {
				markerOnce.Do(func() { close(marker) })
			}
		}
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    record("add"),
		UpdateFunc: func(_, obj any) { record("update")(obj) },
		DeleteFunc: record("delete"),
	}); err != nil {
		t.Fatal(err)
	}
	defer runInformer(context.Background(), informer)()
	if !cache.WaitForCacheSync(ctxFor(t).Done(), informer.HasSynced) {
		t.Fatal("the informer did not sync")
	}

	sdkCreatePod(t, ns, "b-2", "node-b")
	if err := kube.CoreV1().Pods(ns).Bind(bgCtx(), &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: "pending"},
		Target:     corev1.ObjectReference{Kind: "Node", Name: "node-a"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a1, err := kube.CoreV1().Pods(ns).Get(bgCtx(), "a-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a1.Status.Phase = corev1.PodSucceeded
	if _, err := kube.CoreV1().Pods(ns).UpdateStatus(bgCtx(), a1, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	sdkCreatePod(t, ns, "marker", "node-a")
	select {
	case <-marker:
	case <-time.After(time.Minute):
		t.Fatal("the informer never saw the marker")
	}

	mu.Lock()
	got := slices.Clone(seen)
	mu.Unlock()
	want := []string{"add a-1 on node-a", "add pending on node-a", "delete a-1 on node-a", "add marker on node-a"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("the informer's notifications (-want +got):\n%s", diff)
	}
	list, err := kube.CoreV1().Pods(ns).List(bgCtx(), metav1.ListOptions{FieldSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	apiPods := clientState{}
	for _, p := range list.Items {
		apiPods[p.Name] = [2]string{p.ResourceVersion, string(p.UID)}
	}
	indexer := clientState{}
	for _, obj := range informer.GetStore().List() {
		p := obj.(*corev1.Pod)
		indexer[p.Name] = [2]string{p.ResourceVersion, string(p.UID)}
	}
	if diff := cmp.Diff(apiPods, indexer); diff != "" {
		t.Fatalf("the indexer differs from the API server's answer to %s (-api +indexer):\n%s", selector, diff)
	}
}

var sdkPods = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// sdkCreatePod creates a pod on a node ("": not scheduled).
func sdkCreatePod(t *testing.T, ns, name, node string) {
	t.Helper()
	if _, err := kube.CoreV1().Pods(ns).Create(bgCtx(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "nginx"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
