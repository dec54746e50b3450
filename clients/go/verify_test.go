package hubclient_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	hubclient "github.com/informerhub/informerhub/clients/go"
	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
)

// listedStore lists through lw, as a reflector does, into a store it
// returns: "a" at resourceVersion 10.
func listedStore(t *testing.T, h *fakeHub) (*hubclient.ListerWatcher, cache.Store) {
	t.Helper()
	h.snapshot = []*informerhubv1.SnapshotResponse{{Objects: []string{cm("a", "10", "uid-a")}, ResumeToken: "t10", ResourceVersion: "10", Last: true}}
	lw := serveFakes(t, nil, h).ListerWatcher(hubclient.Selector{Resource: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Namespace: "ns"})
	list, err := lw.ListWithContext(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	for _, o := range list.(*metav1.List).Items {
		if err := store.Add(o.Object); err != nil {
			t.Fatal(err)
		}
	}
	return lw, store
}

// snapshotOfA is a snapshot page of "a" alone, at rv.
func snapshotOfA(rv string) []*informerhubv1.SnapshotResponse {
	return []*informerhubv1.SnapshotResponse{{Objects: []string{cm("a", rv, "uid-a")}, ResumeToken: "t" + rv, ResourceVersion: rv, Last: true}}
}

// A digest no store matches: the hub's state moved on.
var otherDigest = &informerhubv1.DigestResponse{Count: 1, Digest: "00000000000000000000000000000001", ResourceVersion: "10", ResumeToken: "t10"}

// TestVerifyCacheNamesAnObjectTheStoreHoldsStaleWhileItKeepsChanging: the
// store missed every change of "a", which changes between the two
// snapshots too: still a difference.
func TestVerifyCacheNamesAnObjectTheStoreHoldsStaleWhileItKeepsChanging(t *testing.T) {
	h := newFakeHub("hub")
	lw, store := listedStore(t, h)
	h.mu.Lock()
	h.digest = otherDigest
	h.snapshotAt = func(n int) []*informerhubv1.SnapshotResponse { return snapshotOfA([]string{"10", "20", "30"}[n-1]) }
	h.mu.Unlock()
	report, err := lw.VerifyCache(t.Context(), store)
	if err != nil {
		t.Fatal(err)
	}
	want := []hubclient.CacheDifference{{Namespace: "ns", Name: "a", StoreUID: "uid-a", StoreResourceVersion: "10", HubUID: "uid-a", HubResourceVersion: "30"}}
	if diff := cmp.Diff(want, report.Differences); diff != "" {
		t.Errorf("differences (-want +got):\n%s", diff)
	}
}

// TestVerifyCacheSeesNoDifferenceInAStoreThatMovedOn: between the two
// snapshots the store applied "a"'s change, and the hub has a newer one:
// the store is behind, not wrong.
func TestVerifyCacheSeesNoDifferenceInAStoreThatMovedOn(t *testing.T) {
	h := newFakeHub("hub")
	lw, store := listedStore(t, h)
	h.mu.Lock()
	h.digest = otherDigest
	h.snapshotAt = func(n int) []*informerhubv1.SnapshotResponse {
		if n == 3 { // the second of VerifyCache's
			a := &unstructured.Unstructured{}
			if err := a.UnmarshalJSON([]byte(cm("a", "20", "uid-a"))); err != nil {
				t.Error(err)
			}
			if err := store.Update(a); err != nil {
				t.Error(err)
			}
		}
		return snapshotOfA([]string{"10", "20", "30"}[n-1])
	}
	h.mu.Unlock()
	report, err := lw.VerifyCache(t.Context(), store)
	if err != nil || !report.Consistent() {
		t.Errorf("VerifyCache of a store behind the hub: %+v, %v; want no differences", report, err)
	}
}

// TestVerifyCacheTakesAMatchAtTheHubsCurrentPosition: where the hub no
// longer keeps the store's position, a store equal to its current state is
// consistent, with no Snapshot.
func TestVerifyCacheTakesAMatchAtTheHubsCurrentPosition(t *testing.T) {
	h := newFakeHub("hub")
	lw, store := listedStore(t, h)
	var d hubclient.Digest
	d.Add("ns", "a", "uid-a", "10")
	h.mu.Lock()
	h.digest = &informerhubv1.DigestResponse{Count: 1, Digest: d.String(), ResourceVersion: "15", ResumeToken: "t15", Moved: true}
	h.mu.Unlock()
	report, err := lw.VerifyCache(t.Context(), store)
	if err != nil || !report.Consistent() || report.ResourceVersion != "15" {
		t.Errorf("VerifyCache: %+v, %v; want consistent at 15", report, err)
	}
	if n := len(h.snapshotRequests()); n != 1 {
		t.Errorf("%d Snapshots, want the list's alone", n)
	}
}

// TestVerifyCacheSeesNoDifferenceInANameCreatedAgain: the store applied
// "a"'s deletion before the first snapshot, which still has it, and the
// second has "a" created again, which the store has not applied yet: the
// store is behind both times, not missing an object.
func TestVerifyCacheSeesNoDifferenceInANameCreatedAgain(t *testing.T) {
	h := newFakeHub("hub")
	lw, store := listedStore(t, h)
	h.mu.Lock()
	h.digest = otherDigest
	h.snapshotAt = func(n int) []*informerhubv1.SnapshotResponse {
		switch n {
		case 2: // VerifyCache's first
			if err := store.Delete(store.List()[0]); err != nil {
				t.Error(err)
			}
			return snapshotOfA("10")
		case 3:
			return []*informerhubv1.SnapshotResponse{{Objects: []string{cm("a", "30", "uid-a2")}, ResumeToken: "t30", ResourceVersion: "30", Last: true}}
		}
		return snapshotOfA("10")
	}
	h.mu.Unlock()
	report, err := lw.VerifyCache(t.Context(), store)
	if err != nil || !report.Consistent() {
		t.Errorf("VerifyCache of a store behind a name created again: %+v, %v; want no differences", report, err)
	}
}

// TestVerifyCacheNamesAnObjectMissingFromTheStore: the store lacks "a",
// which the hub holds, the same object, in both snapshots.
func TestVerifyCacheNamesAnObjectMissingFromTheStore(t *testing.T) {
	h := newFakeHub("hub")
	lw, store := listedStore(t, h)
	if err := store.Delete(store.List()[0]); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	h.digest = otherDigest
	h.snapshotAt = func(n int) []*informerhubv1.SnapshotResponse { return snapshotOfA([]string{"10", "20", "30"}[n-1]) }
	h.mu.Unlock()
	report, err := lw.VerifyCache(t.Context(), store)
	if err != nil {
		t.Fatal(err)
	}
	want := []hubclient.CacheDifference{{Namespace: "ns", Name: "a", HubUID: "uid-a", HubResourceVersion: "30"}}
	if diff := cmp.Diff(want, report.Differences); diff != "" {
		t.Errorf("differences (-want +got):\n%s", diff)
	}
}
