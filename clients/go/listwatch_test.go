package hubclient_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"

	hubclient "github.com/informerhub/informerhub/clients/go"
	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
)

func TestListerWatcherMapsResourceVersionsToTokens(t *testing.T) {
	hub := newFakeHub("hub",
		script{header: "s3", responses: []*informerhubv1.WatchResponse{
			modified("a", "4", "t4"),
			{Type: informerhubv1.EventType_EVENT_TYPE_BOOKMARK, ResourceVersion: "5", ResumeToken: "t5"},
		}},
		script{header: "t4", end: expired},
	)
	hub.snapshot = []*informerhubv1.SnapshotResponse{{Objects: []string{cm("a", "3", "uid-a"), cm("b", "2", "uid-b")}, ResumeToken: "s3", ResourceVersion: "3", Last: true}}
	hub.resources = &informerhubv1.ListResourcesResponse{Resources: []*informerhubv1.Resource{{Version: "v1", Resource: "configmaps", Kind: "ConfigMap", Namespaced: true}}}
	lw := serveFakes(t, nil, hub).ListerWatcher(configMaps)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	list, err := lw.ListWithContext(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		t.Fatal(err)
	}
	if rv, _ := meta.NewAccessor().ResourceVersion(list); rv != "3" || len(items) != 2 {
		t.Fatalf("list at %q with %d items, want 2 at 3", rv, len(items))
	}

	w, err := lw.WatchWithContext(ctx, metav1.ListOptions{ResourceVersion: "3", AllowWatchBookmarks: true})
	if err != nil {
		t.Fatal(err)
	}
	if req := hub.next(t); req.ResumeToken != "s3" {
		t.Fatalf("watch from resourceVersion 3 asked the hub from %q, want the snapshot's token", req.ResumeToken)
	}
	e := <-w.ResultChan()
	if u := e.Object.(*unstructured.Unstructured); e.Type != watch.Modified || u.GetName() != "a" || u.GetResourceVersion() != "4" {
		t.Fatalf("first event %s %v", e.Type, e.Object)
	}
	e = <-w.ResultChan()
	if u := e.Object.(*unstructured.Unstructured); e.Type != watch.Bookmark || u.GetResourceVersion() != "5" || u.GetKind() != "ConfigMap" {
		t.Fatalf("bookmark %s %v", e.Type, e.Object)
	}
	w.Stop()
	if _, open := <-w.ResultChan(); open {
		t.Fatal("result channel open after Stop")
	}

	// The reflector resumes from the last resourceVersion it processed.
	w, err = lw.WatchWithContext(ctx, metav1.ListOptions{ResourceVersion: "4"})
	if err != nil {
		t.Fatal(err)
	}
	if req := hub.next(t); req.ResumeToken != "t4" {
		t.Fatalf("watch from resourceVersion 4 asked the hub from %q, want t4", req.ResumeToken)
	}
	// The hub says the token expired: the reflector must get a 410.
	e = <-w.ResultChan()
	if status, ok := e.Object.(*metav1.Status); e.Type != watch.Error || !ok || !apierrors.IsResourceExpired(apierrors.FromObject(status)) {
		t.Fatalf("after OUT_OF_RANGE got %s %v, want a 410 Expired error event", e.Type, e.Object)
	}
	w.Stop()

	if _, err := lw.WatchWithContext(ctx, metav1.ListOptions{ResourceVersion: "999"}); !apierrors.IsResourceExpired(err) {
		t.Fatalf("watch from an unknown resourceVersion: %v, want 410 Expired", err)
	}
}

func TestListerWatcherCombinesSelectors(t *testing.T) {
	hub := newFakeHub("hub")
	hub.snapshot = []*informerhubv1.SnapshotResponse{{ResumeToken: "s", ResourceVersion: "1", Last: true}}
	sel := configMaps
	sel.LabelSelector = "app=web"
	lw := serveFakes(t, nil, hub).ListerWatcher(sel)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := lw.ListWithContext(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	w, err := lw.WatchWithContext(ctx, metav1.ListOptions{ResourceVersion: "1", LabelSelector: "tier=front", FieldSelector: "metadata.name=x"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	req := hub.next(t)
	if got := req.GetSelector(); got.LabelSelector != "app=web,tier=front" || got.FieldSelector != "metadata.name=x" {
		t.Fatalf("selectors %q %q", got.LabelSelector, got.FieldSelector)
	}
}

// TestListerWatcherTurnsTransientErrorsInto429: the reflector backs off and
// watches again from where it was on a 429, instead of relisting.
func TestListerWatcherTurnsTransientErrorsInto429(t *testing.T) {
	hub := newFakeHub("hub", script{header: "s", end: unavailable})
	hub.snapshot = []*informerhubv1.SnapshotResponse{{ResumeToken: "s", ResourceVersion: "1", Last: true}}
	lw := serveFakes(t, nil, hub).ListerWatcher(configMaps)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := lw.ListWithContext(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	w, err := lw.WatchWithContext(ctx, metav1.ListOptions{ResourceVersion: "1"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	e := <-w.ResultChan()
	if status, ok := e.Object.(*metav1.Status); e.Type != watch.Error || !ok || !apierrors.IsTooManyRequests(apierrors.FromObject(status)) {
		t.Fatalf("after UNAVAILABLE got %s %v, want a 429 error event", e.Type, e.Object)
	}
}

// TestListerWatcherSkipsADeadReplica opens watches with one replica down:
// whichever replica a client starts on, the watch opens.
func TestListerWatcherSkipsADeadReplica(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 8 {
		alive := newFakeHub("alive")
		alive.snapshot = []*informerhubv1.SnapshotResponse{{ResumeToken: "s", ResourceVersion: "1", Last: true}}
		dead := &fakeHub{name: "dead", dead: true}
		lw := serveFakes(t, nil, alive, dead).ListerWatcher(configMaps)
		if _, err := lw.ListWithContext(ctx, metav1.ListOptions{}); err != nil {
			t.Fatalf("client %d: List: %v", i, err)
		}
		w, err := lw.WatchWithContext(ctx, metav1.ListOptions{ResourceVersion: "1"})
		if err != nil {
			t.Fatalf("client %d: Watch: %v", i, err)
		}
		alive.next(t)
		w.Stop()
	}
}

// TestListerWatcherPassesAnyFieldSelectorAndTheFilter: the informer's List
// and Watch ask the hub with sel's filter and with field selectors on any
// field (the hub selects as the API server would), combined with the
// reflector's own.
func TestListerWatcherPassesAnyFieldSelectorAndTheFilter(t *testing.T) {
	hub := newFakeHub("hub")
	hub.snapshot = []*informerhubv1.SnapshotResponse{{ResumeToken: "s", ResourceVersion: "1", Last: true}}
	sel := hubclient.Selector{Resource: schema.GroupVersionResource{Version: "v1", Resource: "pods"}, Namespace: "ns",
		FieldSelector: "spec.nodeName=node-1", Filter: `object.status.phase != "Succeeded"`}
	lw := serveFakes(t, nil, hub).ListerWatcher(sel)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts := metav1.ListOptions{FieldSelector: "status.phase!=Failed"}
	if _, err := lw.ListWithContext(ctx, opts); err != nil {
		t.Fatal(err)
	}
	opts.ResourceVersion = "1"
	w, err := lw.WatchWithContext(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	want := &informerhubv1.ResourceSelector{Version: "v1", Resource: "pods", Namespace: "ns",
		FieldSelector: "spec.nodeName=node-1,status.phase!=Failed", Filter: `object.status.phase != "Succeeded"`}
	if diff := cmp.Diff(want, hub.snapshotRequests()[0].GetSelector(), protocmp.Transform()); diff != "" {
		t.Errorf("List's selector (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, hub.next(t).GetSelector(), protocmp.Transform()); diff != "" {
		t.Errorf("Watch's selector (-want +got):\n%s", diff)
	}
}
