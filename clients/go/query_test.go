package hubclient_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	hubclient "github.com/informerhub/informerhub/clients/go"
	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
)

// projected is a ConfigMap as a hub sends it projected to "data": its
// identity and its data, with the members in the order given (a hub keeps
// the API server's order, which LIST items and watch events need not share).
func projected(name, rv, data string, identityFirst bool) string {
	identity := `"metadata":{"name":"` + name + `","namespace":"ns","uid":"uid-` + name + `","resourceVersion":"` + rv + `"}`
	if identityFirst {
		return `{"apiVersion":"v1","kind":"ConfigMap",` + identity + `,"data":{"v":"` + data + `","n":1.50}}`
	}
	return `{"data":{"n":1.50,"v":"` + data + `"},` + identity + `,"kind":"ConfigMap","apiVersion":"v1"}`
}

func event(t informerhubv1.EventType, object, rv, token string) *informerhubv1.WatchResponse {
	return &informerhubv1.WatchResponse{Type: t, Object: object, ResourceVersion: rv, ResumeToken: token}
}

const (
	addedType    = informerhubv1.EventType_EVENT_TYPE_ADDED
	modifiedType = informerhubv1.EventType_EVENT_TYPE_MODIFIED
)

// TestWatchAsksWithItsFilterFieldsAndPreviousOnEveryStream: the first
// stream, a reconnection and a re-sync's listing all carry the selector's
// filter and field selector, the projection and IncludePrevious; MODIFIED
// events carry the previous state the hub sent.
func TestWatchAsksWithItsFilterFieldsAndPreviousOnEveryStream(t *testing.T) {
	prev, now := projected("a", "1", "x", true), projected("a", "2", "y", true)
	changed := event(modifiedType, now, "2", "t2")
	changed.PreviousObject = prev
	hub := newFakeHub("hub",
		script{header: "i0", responses: []*informerhubv1.WatchResponse{event(addedType, prev, "1", "i-a"), initialEnd("1", "t1")}, end: unavailable},
		script{header: "t1", responses: []*informerhubv1.WatchResponse{changed}, end: expired},
		script{header: "r0", responses: []*informerhubv1.WatchResponse{event(addedType, now, "2", "r-a"), initialEnd("2", "r-end")}},
	)
	sel := configMaps
	sel.FieldSelector = "metadata.name!=skipped"
	sel.Filter = `has(object.data) && object.data.v != "z"`
	fields := []string{"data", `metadata.labels["app.kubernetes.io/name"]`}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := serveFakes(t, nil, hub).Watch(ctx, sel, hubclient.WatchOptions{SendInitialEvents: true, Fields: fields, IncludePrevious: true})
	defer w.Close()
	fields[0] = "changed by the caller after Watch"

	for range 2 { // the initial event and its end
		next(t, w)
	}
	e, err := w.Next()
	if err != nil {
		t.Fatal(err)
	}
	if e.Type != hubclient.Modified || string(e.Object) != now || string(e.Previous) != prev {
		t.Fatalf("got %s %s previous %s, want the MODIFIED with the previous state the hub sent", e.Type, e.Object, e.Previous)
	}
	if e := next(t, w); e.Type != hubclient.Bookmark || !e.Resync {
		t.Fatalf("got %v, want the end of a re-sync that found nothing changed", e)
	}

	wantSelector := &informerhubv1.ResourceSelector{Version: "v1", Resource: "configmaps", Namespace: "ns",
		FieldSelector: "metadata.name!=skipped", Filter: `has(object.data) && object.data.v != "z"`}
	want := []*informerhubv1.WatchRequest{
		{Selector: wantSelector, SendInitialEvents: true, Fields: []string{"data", `metadata.labels["app.kubernetes.io/name"]`}, IncludePrevious: true},
		{Selector: wantSelector, ResumeToken: "t1", Fields: []string{"data", `metadata.labels["app.kubernetes.io/name"]`}, IncludePrevious: true},
		{Selector: wantSelector, SendInitialEvents: true, Fields: []string{"data", `metadata.labels["app.kubernetes.io/name"]`}, IncludePrevious: true},
	}
	if diff := cmp.Diff(want, hub.watchRequests(), protocmp.Transform()); diff != "" {
		t.Fatalf("requests (-want +got):\n%s", diff)
	}
}

// TestResyncComparesWhatTheCallerWasSent: with a projection, the hub sends a
// MODIFIED only when the fields asked for change, so a re-sync reports an
// object as modified only when what the caller was sent differs, not when
// its resourceVersion alone does (unless the fields ask for it). Without a
// projection every change was sent, and resourceVersions tell.
func TestResyncComparesWhatTheCallerWasSent(t *testing.T) {
	for _, tt := range []struct {
		name     string
		fields   []string
		modified []string
	}{
		{name: "a projection", fields: []string{"data"}, modified: []string{"b"}},
		{name: "a projection with metadata", fields: []string{"data", "metadata"}, modified: []string{"a", "b"}},
		{name: "a projection with the resourceVersion", fields: []string{"metadata.resourceVersion"}, modified: []string{"a", "b"}},
		{name: "a projection with the resourceVersion in brackets", fields: []string{`.metadata['resourceVersion']`}, modified: []string{"a", "b"}},
		{name: "a projection with other metadata", fields: []string{"metadata.labels", "data"}, modified: []string{"b"}},
		{name: "no projection", modified: []string{"a", "b"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			hub := newFakeHub("hub",
				script{header: "i0", responses: []*informerhubv1.WatchResponse{
					event(addedType, projected("a", "1", "x", true), "1", "i-a"),
					event(addedType, projected("b", "1", "x", true), "1", "i-b"),
					initialEnd("1", "t1"),
				}, end: expired},
				script{header: "r0", responses: []*informerhubv1.WatchResponse{
					// a: another resourceVersion (a change of fields not
					// asked for), its members in another order.
					event(addedType, projected("a", "5", "x", false), "5", "r-a"),
					// b: what was asked for changed.
					event(addedType, projected("b", "6", "y", true), "6", "r-b"),
					initialEnd("6", "r-end"),
				}},
			)
			w := startWatch(t, serveFakes(t, nil, hub), hubclient.WatchOptions{SendInitialEvents: true, Fields: tt.fields})
			for range 3 {
				next(t, w)
			}
			var modified []string
			for e := next(t, w); e.Type != hubclient.Bookmark; e = next(t, w) {
				if e.Type != hubclient.Modified || !e.Resync {
					t.Fatalf("re-sync delivered %v, want MODIFIED only", e)
				}
				modified = append(modified, e.Name)
			}
			if diff := cmp.Diff(tt.modified, modified); diff != "" {
				t.Fatalf("objects the re-sync reports modified (-want +got):\n%s", diff)
			}
		})
	}
}

// TestResyncWithIncludePreviousCarriesTheLastDeliveredState: a MODIFIED of
// a re-sync carries the state the watch delivered last as Previous, and a
// DELETED that state whole; ADDED carries no Previous.
func TestResyncWithIncludePreviousCarriesTheLastDeliveredState(t *testing.T) {
	a1, a2, a4 := projected("a", "1", "x", true), projected("a", "2", "y", true), projected("a", "4", "z", true)
	b1, c3 := projected("b", "1", "x", true), projected("c", "3", "x", true)
	changed := event(modifiedType, a2, "2", "t2")
	changed.PreviousObject = a1
	hub := newFakeHub("hub",
		script{header: "i0", responses: []*informerhubv1.WatchResponse{
			event(addedType, a1, "1", "i-a"), event(addedType, b1, "1", "i-b"), initialEnd("1", "t1"), changed,
		}, end: expired},
		script{header: "r0", responses: []*informerhubv1.WatchResponse{
			event(addedType, a4, "4", "r-a"), event(addedType, c3, "3", "r-c"), initialEnd("4", "r-end"),
		}},
	)
	w := startWatch(t, serveFakes(t, nil, hub), hubclient.WatchOptions{SendInitialEvents: true, Fields: []string{"data"}, IncludePrevious: true})
	for range 4 {
		next(t, w)
	}
	type resynced struct{ Type, Object, Previous string }
	var got []resynced
	for {
		e, err := w.Next()
		if err != nil {
			t.Fatal(err)
		}
		if e.Type == hubclient.Bookmark {
			break
		}
		got = append(got, resynced{string(e.Type), string(e.Object), string(e.Previous)})
	}
	want := []resynced{
		{Type: "DELETED", Object: b1},
		{Type: "MODIFIED", Object: a4, Previous: a2},
		{Type: "ADDED", Object: c3},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("re-sync (-want +got):\n%s", diff)
	}
}

// TestResyncWithoutIncludePreviousDeletesWithTheIdentity: without the
// delivered state, a re-sync's DELETED says which object, and no more.
func TestResyncWithoutIncludePreviousDeletesWithTheIdentity(t *testing.T) {
	hub := newFakeHub("hub",
		script{header: "i0", responses: []*informerhubv1.WatchResponse{event(addedType, projected("a", "1", "x", true), "1", "i-a"), initialEnd("1", "t1")}, end: expired},
		script{header: "r0", responses: []*informerhubv1.WatchResponse{initialEnd("4", "r-end")}},
	)
	w := startWatch(t, serveFakes(t, nil, hub), hubclient.WatchOptions{SendInitialEvents: true, Fields: []string{"data"}})
	for range 2 {
		next(t, w)
	}
	e, err := w.Next()
	if err != nil {
		t.Fatal(err)
	}
	var object map[string]any
	if err := json.Unmarshal(e.Object, &object); err != nil {
		t.Fatal(err)
	}
	if _, hasData := object["data"]; e.Type != hubclient.Deleted || hasData || e.Previous != nil {
		t.Fatalf("got %s %s (previous %s), want a DELETED with the identity only", e.Type, e.Object, e.Previous)
	}
}

func TestSnapshotWithFields(t *testing.T) {
	hub := newFakeHub("hub")
	hub.snapshot = []*informerhubv1.SnapshotResponse{{Objects: []string{projected("a", "1", "x", true)}, ResumeToken: "s", ResourceVersion: "1", Last: true}}
	c := serveFakes(t, nil, hub)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sel := configMaps
	sel.Filter = "true"
	snap, err := c.SnapshotWithOptions(ctx, sel, hubclient.SnapshotOptions{Fields: []string{"data"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Objects) != 1 || string(snap.Objects[0]) != projected("a", "1", "x", true) || snap.ResumeToken != "s" {
		t.Fatalf("snapshot %+v", snap)
	}
	if _, err := c.Snapshot(ctx, configMaps); err != nil {
		t.Fatal(err)
	}
	want := []*informerhubv1.SnapshotRequest{
		{Selector: &informerhubv1.ResourceSelector{Version: "v1", Resource: "configmaps", Namespace: "ns", Filter: "true"}, Fields: []string{"data"}},
		{Selector: &informerhubv1.ResourceSelector{Version: "v1", Resource: "configmaps", Namespace: "ns"}},
	}
	if diff := cmp.Diff(want, hub.snapshotRequests(), protocmp.Transform()); diff != "" {
		t.Fatalf("snapshot requests (-want +got):\n%s", diff)
	}
}

func TestListResourcesHasSelectableFields(t *testing.T) {
	hub := newFakeHub("hub")
	hub.resources = &informerhubv1.ListResourcesResponse{Resources: []*informerhubv1.Resource{{
		Version: "v1", Resource: "pods", Kind: "Pod", Namespaced: true,
		SelectableFields: []string{"metadata.name", "metadata.namespace", "spec.nodeName", "status.phase"},
	}, {
		Group: "example.com", Version: "v1", Resource: "widgets", Kind: "Widget", Namespaced: true,
		PrinterColumns: []*informerhubv1.PrinterColumn{{Name: "Ready", Type: "string", Description: "ready?", Priority: 1,
			JsonPath: `.status.conditions[?(@.type=="Ready")].status`}},
	}}}
	resources, err := serveFakes(t, nil, hub).ListResources(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(resources) != 2 || !cmp.Equal(resources[0].SelectableFields, []string{"metadata.name", "metadata.namespace", "spec.nodeName", "status.phase"}) {
		t.Fatalf("resources %+v", resources)
	}
	want := []hubclient.PrinterColumn{{Name: "Ready", Type: "string", Description: "ready?", Priority: 1, JSONPath: `.status.conditions[?(@.type=="Ready")].status`}}
	if diff := cmp.Diff(want, resources[1].PrinterColumns); diff != "" || resources[0].PrinterColumns != nil {
		t.Errorf("printer columns (-want +got):\n%s\npods: %v", diff, resources[0].PrinterColumns)
	}
}

// TestTooManyDistinctIsRetried: a hub that refuses a watch because too many
// distinct filters or projections are in use on the resource type may
// accept it once others have gone; the watch retries after a backoff.
func TestTooManyDistinctIsRetried(t *testing.T) {
	tooMany, err := status.New(codes.ResourceExhausted, "64 distinct filters are in use on configmaps").WithDetails(
		&errdetails.ErrorInfo{Reason: "TOO_MANY_DISTINCT", Domain: "informerhub.io", Metadata: map[string]string{"limit": "max-filters-per-resource"}})
	if err != nil {
		t.Fatal(err)
	}
	hub := newFakeHub("hub",
		script{end: tooMany.Err()},
		script{header: "t0", responses: []*informerhubv1.WatchResponse{added("a", "1", "t1")}},
	)
	sel := configMaps
	sel.Filter = "true"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := serveFakes(t, nil, hub).Watch(ctx, sel, hubclient.WatchOptions{})
	defer w.Close()
	if e := next(t, w); e.Name != "a" {
		t.Fatalf("got %v, want the event of the second attempt", e)
	}
	if reqs := hub.watchRequests(); len(reqs) != 2 || reqs[1].GetSelector().GetFilter() != "true" {
		t.Fatalf("requests %v, want the same watch asked again", reqs)
	}
}
