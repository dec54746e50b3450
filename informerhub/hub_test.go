package informerhub_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/informerhub/upstream"
)

func TestInitialEventsThenChanges(t *testing.T) {
	c := newFakeCluster(t)
	c.cms().Add(configMap("b", "1", nil, "b1"))
	c.cms().Add(configMap("a", "2", nil, "a2"))
	c.cms().Add(configMap("a", "1", nil, "a1"))
	h := newHub(t, c, informerhub.Config{})

	s := watch(t, h, informerhub.WatchRequest{SendInitialEvents: true})
	var initial []ev
	for {
		e := toEv(t, next(t, s))
		initial = append(initial, e)
		if e.End {
			break
		}
	}
	want := []ev{
		{Type: "ADDED", Key: "a/1", Data: "a1", RV: "3"},
		{Type: "ADDED", Key: "a/2", Data: "a2", RV: "2"},
		{Type: "ADDED", Key: "b/1", Data: "b1", RV: "1"},
		{Type: "BOOKMARK", End: true},
	}
	if diff := cmp.Diff(want, initial); diff != "" {
		t.Fatalf("initial events (-want +got):\n%s", diff)
	}

	c.cms().Modify(configMap("a", "1", nil, "a1'"))
	c.cms().Delete(configMap("a", "2", nil, "a2"))
	c.cms().Add(configMap("c", "1", nil, "c1"))
	c.cms().Add(configMap("z", "marker", nil, ""))
	want = []ev{
		{Type: "MODIFIED", Key: "a/1", Data: "a1'", RV: "4"},
		{Type: "DELETED", Key: "a/2", Data: "a2", RV: "5"},
		{Type: "ADDED", Key: "c/1", Data: "c1", RV: "6"},
	}
	if diff := cmp.Diff(want, collect(t, s, "z/marker")); diff != "" {
		t.Fatalf("changes (-want +got):\n%s", diff)
	}
}

// TestResumeIsExact disconnects a subscriber after every k-th event, also
// in the middle of the initial events, and checks that the joined stream
// equals the stream of a subscriber that never disconnected.
func TestResumeIsExact(t *testing.T) {
	for _, every := range []int{1, 2, 3, 7} {
		t.Run(fmt.Sprintf("disconnect every %d events", every), func(t *testing.T) {
			c := newFakeCluster(t)
			for i := range 5 {
				c.cms().Add(configMap("ns", fmt.Sprintf("obj-%d", i), nil, "v0"))
			}
			h := newHub(t, c, informerhub.Config{})
			req := informerhub.WatchRequest{SendInitialEvents: true}
			steady := watch(t, h, req)
			resuming := watch(t, h, req)

			for i := range 30 {
				obj := configMap("ns", fmt.Sprintf("obj-%d", i%7), nil, fmt.Sprint("v", i))
				switch {
				case i%5 == 4:
					c.cms().Delete(obj)
				case i%7 < 5 && i < 7:
					c.cms().Modify(obj)
				default:
					c.cms().Add(obj)
				}
			}
			c.cms().Add(configMap("z", "marker", nil, ""))

			want := collect(t, steady, "z/marker")
			var got []ev
			for n := 0; ; n++ {
				e := toEv(t, nextChange(t, resuming))
				if e.Key == "z/marker" {
					break
				}
				got = append(got, e)
				if n%every == 0 {
					token := resuming.ResumeToken()
					resuming.Close()
					resuming = watch(t, h, informerhub.WatchRequest{ResumeToken: token})
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("resumed stream differs from the uninterrupted one (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSelectorsFollowWatchSemantics(t *testing.T) {
	c := newFakeCluster(t)
	web := map[string]string{"app": "web"}
	db := map[string]string{"app": "db"}
	c.cms().Add(configMap("a", "x", web, "1"))
	c.cms().Add(configMap("a", "y", db, "1"))
	c.cms().Add(configMap("b", "x", web, "1"))
	h := newHub(t, c, informerhub.Config{})

	tests := []struct {
		name     string
		selector informerhub.Selector
		marker   string
		want     []ev
	}{{
		name:     "label selector sees objects enter and leave",
		selector: informerhub.Selector{LabelSelector: "app=web"},
		marker:   "a/zmarker",
		want: []ev{
			{Type: "ADDED", Key: "a/x", Data: "1", RV: "1"},
			{Type: "ADDED", Key: "b/x", Data: "1", RV: "3"},
			{Type: "BOOKMARK", End: true},
			// a/x leaves with its last matching state, at the change's version.
			{Type: "DELETED", Key: "a/x", Data: "1", RV: "4"},
			{Type: "ADDED", Key: "a/y", Data: "2", RV: "5"},
			{Type: "MODIFIED", Key: "b/x", Data: "2", RV: "6"},
		},
	}, {
		name:     "namespace",
		selector: informerhub.Selector{Namespace: "a"},
		marker:   "a/zmarker",
		want: []ev{
			{Type: "ADDED", Key: "a/x", Data: "1", RV: "1"},
			{Type: "ADDED", Key: "a/y", Data: "1", RV: "2"},
			{Type: "BOOKMARK", End: true},
			{Type: "MODIFIED", Key: "a/x", Data: "2", RV: "4"},
			{Type: "MODIFIED", Key: "a/y", Data: "2", RV: "5"},
			{Type: "DELETED", Key: "a/x", Data: "2", RV: "7"},
		},
	}, {
		name:     "field selector on name",
		selector: informerhub.Selector{FieldSelector: "metadata.name=x,metadata.namespace!=a"},
		marker:   "z/x",
		want: []ev{
			{Type: "ADDED", Key: "b/x", Data: "1", RV: "3"},
			{Type: "BOOKMARK", End: true},
			{Type: "MODIFIED", Key: "b/x", Data: "2", RV: "6"},
		},
	}}
	var subs []*informerhub.Subscription
	for _, tt := range tests {
		tt.selector.Resource = configMaps
		subs = append(subs, watch(t, h, informerhub.WatchRequest{Selector: tt.selector, SendInitialEvents: true}))
	}
	c.cms().Modify(configMap("a", "x", db, "2"))  // rv 4: leaves app=web
	c.cms().Modify(configMap("a", "y", web, "2")) // rv 5: enters app=web
	c.cms().Modify(configMap("b", "x", web, "2")) // rv 6
	c.cms().Delete(configMap("a", "x", db, "2"))  // rv 7: not app=web any more
	c.cms().Add(configMap("a", "zmarker", web, ""))
	c.cms().Add(configMap("z", "x", web, ""))
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, collect(t, subs[i], tt.marker)); diff != "" {
				t.Fatalf("events (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRelistSendsTrueDifferences makes the hub miss changes (they are never
// broadcast on the watch) and then expire its watch, so it relists: its
// subscribers must get exactly the differences, and no MODIFIED for objects
// that did not change.
func TestRelistSendsTrueDifferences(t *testing.T) {
	c := newFakeCluster(t)
	for _, name := range []string{"keep", "change", "delete", "recreate"} {
		c.cms().Add(configMap("ns", name, nil, "v1"))
	}
	h := newHub(t, c, informerhub.Config{})
	s := watch(t, h, informerhub.WatchRequest{})
	// Once the hub has this change (rv 5), its watch is open: the changes
	// it then misses are missed by that watch, not listed by a watch opened
	// after them.
	c.cms().Add(configMap("ns", "seen", nil, "v1"))
	nextChange(t, s)

	c.cms().ModifyDropWatch(configMap("ns", "change", nil, "v2"))
	c.cms().DeleteDropWatch(configMap("ns", "delete", nil, "v1"))
	c.cms().DeleteDropWatch(configMap("ns", "recreate", nil, "v1"))
	recreated := configMap("ns", "recreate", nil, "v2")
	recreated.UID = "new-uid"
	c.cms().AddDropWatch(recreated)
	c.cms().AddDropWatch(configMap("ns", "new", nil, "v1"))
	c.cms().ResetWatch() // the hub's watch ends and resuming it gets 410: it relists

	var got []ev
	for len(got) < 5 {
		got = append(got, toEv(t, nextChange(t, s)))
	}
	c.cms().Add(configMap("z", "marker", nil, ""))
	if rest := collect(t, s, "z/marker"); len(rest) != 0 {
		t.Fatalf("unexpected events after the relist's differences: %v", rest)
	}
	// The relist is one batch at the list's resourceVersion (10): first the
	// objects that are gone, then the differences in LIST order, which the
	// fake leaves unordered; a recreated object is DELETED, then ADDED.
	if want := (ev{Type: "DELETED", Key: "ns/delete", Data: "v1", RV: "10"}); got[0] != want {
		t.Fatalf("first event = %v, want %v", got[0], want)
	}
	if i := slices.Index(got, ev{Type: "DELETED", Key: "ns/recreate", Data: "v1", RV: "10"}); i < 0 || i+1 >= len(got) ||
		got[i+1] != (ev{Type: "ADDED", Key: "ns/recreate", Data: "v2", RV: "9"}) {
		t.Fatalf("recreated object is not DELETED then ADDED: %v", got)
	}
	rest := slices.Clone(got[1:])
	slices.SortFunc(rest, func(a, b ev) int { return strings.Compare(a.Key+a.Type, b.Key+b.Type) })
	want := []ev{
		{Type: "MODIFIED", Key: "ns/change", Data: "v2", RV: "6"},
		{Type: "ADDED", Key: "ns/new", Data: "v1", RV: "10"},
		{Type: "ADDED", Key: "ns/recreate", Data: "v2", RV: "9"},
		{Type: "DELETED", Key: "ns/recreate", Data: "v1", RV: "10"},
	}
	if diff := cmp.Diff(want, rest); diff != "" {
		t.Fatalf("relist differences (-want +got):\n%s", diff)
	}
}

// TestSlowSubscriberFallsBehindAlone: a subscriber that does not read while
// changes come fills its queue, falls behind, and then reads every change
// from the history, in order, and goes live again; the healthy subscriber
// beside it is not delayed.
func TestSlowSubscriberFallsBehindAlone(t *testing.T) {
	c := newFakeCluster(t)
	h := newHub(t, c, informerhub.Config{QueueSize: 4})
	stalled := watch(t, h, informerhub.WatchRequest{})
	healthy := watch(t, h, informerhub.WatchRequest{})

	// One change at a time, each received by the healthy subscriber before
	// the next: its queue never holds more than one, the stalled one's fills.
	for i := range 20 {
		c.cms().Add(configMap("ns", fmt.Sprint(i), nil, ""))
		if e := toEv(t, nextChange(t, healthy)); e.Key != fmt.Sprint("ns/", i) {
			t.Fatalf("healthy subscriber got %v, want ns/%d", e, i)
		}
	}
	if st := h.Stats(); len(st) != 1 || st[0].FellBehind != 1 || st[0].SlowDisconnects != 0 {
		t.Fatalf("stats %+v, want one subscriber behind and none disconnected", st)
	}
	c.cms().Add(configMap("z", "marker", nil, ""))
	got := collect(t, stalled, "z/marker")
	if len(got) != 20 {
		t.Fatalf("stalled subscriber got %d events, want 20: %v", len(got), got)
	}
	for i, e := range got {
		if e.Key != fmt.Sprint("ns/", i) {
			t.Fatalf("event %d of the stalled subscriber is %v, want ns/%d", i, e, i)
		}
	}
	// Caught up, it goes live again when it next waits for a change (the
	// wait is bounded only so that it returns): its queue is counted, and
	// it gets the next change.
	wait, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := stalled.Next(wait); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("stalled subscriber, caught up: %v, want to wait for the next change", err)
	}
	if n := informerhub.LiveSubscribers(h, configMaps); n != 2 {
		t.Fatalf("%d live subscribers, want both", n)
	}
	c.cms().Add(configMap("z", "after", nil, ""))
	if e := toEv(t, nextChange(t, stalled)); e.Key != "z/after" {
		t.Fatalf("stalled subscriber got %v after catching up, want z/after", e)
	}
}

// TestSubscriberBehindTheHistoryEnds: a subscriber that fell behind and
// whose position the history then dropped ends with a TooSlowError holding
// the token of the last event it received, from which it resumes without
// loss.
func TestSubscriberBehindTheHistoryEnds(t *testing.T) {
	c := newFakeCluster(t)
	h := newHub(t, c, informerhub.Config{HistorySize: 8, QueueSize: 4})
	stalled := watch(t, h, informerhub.WatchRequest{})
	healthy := watch(t, h, informerhub.WatchRequest{})
	for i := range 20 {
		c.cms().Add(configMap("ns", fmt.Sprintf("%02d", i), nil, ""))
		nextChange(t, healthy)
	}
	// Its queue holds the first four; the history now starts at the 13th.
	var last string
	for i := range 4 {
		e := nextChange(t, stalled)
		if got := toEv(t, e); got.Key != fmt.Sprintf("ns/%02d", i) {
			t.Fatalf("queued event %d is %v", i, got)
		}
		last = e.ResumeToken
	}
	err := nextErr(t, stalled)
	var tooSlow *informerhub.TooSlowError
	if !errors.As(err, &tooSlow) || !errors.Is(err, informerhub.ErrSubscriberTooSlow) {
		t.Fatalf("stalled subscriber ended with %v, want a TooSlowError", err)
	}
	if tooSlow.ResumeToken != last {
		t.Fatalf("TooSlowError token is not the last one delivered")
	}
	if st := h.Stats(); st[0].SlowDisconnects != 1 {
		t.Fatalf("%d slow disconnects counted, want 1", st[0].SlowDisconnects)
	}
	// Nothing is lost: resuming from the token delivers every other change.
	c.cms().Add(configMap("z", "marker", nil, ""))
	resumed := watch(t, h, informerhub.WatchRequest{ResumeToken: tooSlow.ResumeToken})
	if got := collect(t, resumed, "z/marker"); len(got) != 16 || got[0].Key != "ns/04" {
		t.Fatalf("resumed subscriber got %v, want ns/04 to ns/19", got)
	}
}

// TestRelistLargerThanTheHistoryEndsNobody: a relist whose differences are
// many times a subscriber's queue, and more than the history's size, lands
// at once; subscribers that were live read all of it, in order, at their
// own pace, and none is ended.
func TestRelistLargerThanTheHistoryEndsNobody(t *testing.T) {
	c := newFakeCluster(t)
	for i := range 60 {
		c.cms().Add(configMap("ns", fmt.Sprintf("%02d", i), nil, "v1"))
	}
	h := newHub(t, c, informerhub.Config{HistorySize: 20, QueueSize: 5})
	var subs []*informerhub.Subscription
	for range 3 {
		subs = append(subs, watch(t, h, informerhub.WatchRequest{}))
	}
	c.cms().Add(configMap("ns", "seen", nil, "v1")) // the hub's watch is open
	for _, s := range subs {
		nextChange(t, s)
	}
	for i := range 60 {
		c.cms().ModifyDropWatch(configMap("ns", fmt.Sprintf("%02d", i), nil, "v2"))
	}
	c.cms().ResetWatch() // the hub relists: 60 differences, three times the history
	for i, s := range subs {
		seen := map[string]bool{}
		for range 60 {
			e := toEv(t, nextChange(t, s))
			if e.Type != "MODIFIED" || e.Data != "v2" || seen[e.Key] {
				t.Fatalf("subscriber %d got %v, want each of the relist's differences once", i, e)
			}
			seen[e.Key] = true
		}
	}
	c.cms().Add(configMap("z", "marker", nil, ""))
	for i, s := range subs {
		if rest := collect(t, s, "z/marker"); len(rest) != 0 {
			t.Fatalf("subscriber %d got more than the relist: %v", i, rest)
		}
	}
	if st := h.Stats(); st[0].SlowDisconnects != 0 || st[0].FellBehind != 3 {
		t.Fatalf("%d fell behind, %d disconnected; want 3 and 0", st[0].FellBehind, st[0].SlowDisconnects)
	}
}

func TestRequestErrors(t *testing.T) {
	c := newFakeCluster(t)
	c.cms().Add(configMap("ns", "a", nil, ""))
	c.cms().Add(configMap("ns", "b", nil, ""))
	h := newHub(t, c, informerhub.Config{HistorySize: 3})

	midInitial := watch(t, h, informerhub.WatchRequest{SendInitialEvents: true, Selector: informerhub.Selector{Resource: configMaps, Namespace: "ns"}})
	next(t, midInitial)
	midInitialToken := midInitial.ResumeToken()

	expiredToken := watch(t, h, informerhub.WatchRequest{}).ResumeToken()
	synced := watch(t, h, informerhub.WatchRequest{})
	for i := range 4 { // more changes than the history holds
		c.cms().Add(configMap("ns", fmt.Sprint(i), nil, ""))
		next(t, synced) // the hub has processed it
	}
	c.Compact(configMaps) // the API server cannot replay the expired token either
	current := watch(t, h, informerhub.WatchRequest{})

	nsToken := watch(t, h, informerhub.WatchRequest{Selector: informerhub.Selector{Resource: namespaces}}).ResumeToken()

	tests := []struct {
		name      string
		req       informerhub.WatchRequest
		wantErr   error
		wantField string
	}{
		{"garbage token", informerhub.WatchRequest{ResumeToken: "not-a-token"}, informerhub.ErrInvalidToken, informerhub.FieldResumeToken},
		{"truncated token", informerhub.WatchRequest{ResumeToken: current.ResumeToken()[:10]}, informerhub.ErrInvalidToken, informerhub.FieldResumeToken},
		{"token of another resource", informerhub.WatchRequest{ResumeToken: nsToken}, informerhub.ErrInvalidToken, informerhub.FieldResumeToken},
		{"expired token", informerhub.WatchRequest{ResumeToken: expiredToken}, informerhub.ErrTokenExpired, ""},
		{"initial-events token with another selector", informerhub.WatchRequest{ResumeToken: midInitialToken}, informerhub.ErrInvalidToken, informerhub.FieldResumeToken},
		{"unknown resource", informerhub.WatchRequest{Selector: informerhub.Selector{Resource: configMaps.GroupVersion().WithResource("nope")}}, informerhub.ErrUnknownResource, ""},
		{"missing version", informerhub.WatchRequest{Selector: informerhub.Selector{Resource: configMaps.GroupResource().WithVersion("")}}, informerhub.ErrInvalidRequest, informerhub.FieldVersion},
		{"a path for a version", informerhub.WatchRequest{Selector: informerhub.Selector{Resource: configMaps.GroupResource().WithVersion("..")}}, informerhub.ErrInvalidRequest, informerhub.FieldVersion},
		{"a path for a group", informerhub.WatchRequest{Selector: informerhub.Selector{Resource: schema.GroupVersionResource{Group: "a/../b", Version: "v1", Resource: "x"}}}, informerhub.ErrInvalidRequest, informerhub.FieldGroup},
		{"a path for a resource", informerhub.WatchRequest{Selector: informerhub.Selector{Resource: configMaps.GroupVersion().WithResource("pods/../../x")}}, informerhub.ErrInvalidRequest, informerhub.FieldResource},
		{"upper case resource", informerhub.WatchRequest{Selector: informerhub.Selector{Resource: configMaps.GroupVersion().WithResource("ConfigMaps")}}, informerhub.ErrInvalidRequest, informerhub.FieldResource},
		{"bad label selector", informerhub.WatchRequest{Selector: informerhub.Selector{Resource: configMaps, LabelSelector: "a in (b"}}, informerhub.ErrInvalidRequest, informerhub.FieldLabelSelector},
		{"unsupported field", informerhub.WatchRequest{Selector: informerhub.Selector{Resource: configMaps, FieldSelector: "spec.nodeName=x"}}, informerhub.ErrInvalidRequest, informerhub.FieldFieldSelector},
		{"namespace field of a cluster-scoped resource", informerhub.WatchRequest{Selector: informerhub.Selector{Resource: namespaces, FieldSelector: "metadata.namespace=x"}}, informerhub.ErrInvalidRequest, informerhub.FieldFieldSelector},
		{"bad namespace", informerhub.WatchRequest{Selector: informerhub.Selector{Resource: configMaps, Namespace: "Not_Valid"}}, informerhub.ErrInvalidRequest, informerhub.FieldNamespace},
		{"namespace on a cluster-scoped resource", informerhub.WatchRequest{Selector: informerhub.Selector{Resource: namespaces, Namespace: "ns"}}, informerhub.ErrInvalidRequest, informerhub.FieldNamespace},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.req.Selector.Resource.Empty() {
				tt.req.Selector.Resource = configMaps
			}
			s, err := h.Watch(context.Background(), tt.req)
			if err == nil {
				s.Close()
				t.Fatalf("Watch succeeded, want %v", tt.wantErr)
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Watch error = %v, want %v", err, tt.wantErr)
			}
			var reqErr *informerhub.RequestError
			if tt.wantField != "" && (!errors.As(err, &reqErr) || reqErr.Field != tt.wantField) {
				t.Fatalf("Watch error = %#v, want a RequestError on %s", err, tt.wantField)
			}
		})
	}
}

func TestSnapshotIsConsistentWithWatch(t *testing.T) {
	c := newFakeCluster(t)
	for i := range 10 {
		c.cms().Add(configMap("ns", fmt.Sprint(i), map[string]string{"even": fmt.Sprint(i%2 == 0)}, "v0"))
	}
	h := newHub(t, c, informerhub.Config{SnapshotPageSize: 2})
	snap, err := h.Snapshot(context.Background(), informerhub.SnapshotRequest{Selector: informerhub.Selector{Resource: configMaps, LabelSelector: "even=true"}})
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()

	// Changes after the snapshot was taken are not in it...
	c.cms().Modify(configMap("ns", "0", map[string]string{"even": "true"}, "v1"))
	c.cms().Delete(configMap("ns", "2", map[string]string{"even": "true"}, "v0"))
	c.cms().Add(configMap("ns", "a", map[string]string{"even": "true"}, "v0"))

	var pages [][]string
	for {
		page, err := snap.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		objs, last := page.Objects, page.Last
		var keys []string
		for _, o := range objs {
			var cm corev1.ConfigMap
			if err := json.Unmarshal([]byte(o), &cm); err != nil {
				t.Fatal(err)
			}
			keys = append(keys, cm.Namespace+"/"+cm.Name)
		}
		pages = append(pages, keys)
		if last {
			break
		}
	}
	want := [][]string{{"ns/0", "ns/2"}, {"ns/4", "ns/6"}, {"ns/8"}}
	if diff := cmp.Diff(want, pages); diff != "" {
		t.Fatalf("snapshot pages (-want +got):\n%s", diff)
	}

	// ...and watching from its token yields exactly them.
	s := watch(t, h, informerhub.WatchRequest{ResumeToken: snap.ResumeToken(), Selector: informerhub.Selector{Resource: configMaps, LabelSelector: "even=true"}})
	c.cms().Add(configMap("z", "marker", map[string]string{"even": "true"}, ""))
	wantEvents := []ev{
		{Type: "MODIFIED", Key: "ns/0", Data: "v1", RV: "11"},
		{Type: "DELETED", Key: "ns/2", Data: "v0", RV: "12"},
		{Type: "ADDED", Key: "ns/a", Data: "v0", RV: "13"},
	}
	if diff := cmp.Diff(wantEvents, collect(t, s, "z/marker")); diff != "" {
		t.Fatalf("watch from the snapshot token (-want +got):\n%s", diff)
	}
}

// TestInitialEventsAtTokenPosition asks for initial events with a resume
// token: they are the state at the token's point in time, followed by the
// changes since.
func TestInitialEventsAtTokenPosition(t *testing.T) {
	c := newFakeCluster(t)
	c.cms().Add(configMap("ns", "a", nil, "v1"))
	h := newHub(t, c, informerhub.Config{})
	token := watch(t, h, informerhub.WatchRequest{}).ResumeToken()
	c.cms().Modify(configMap("ns", "a", nil, "v2"))
	c.cms().Add(configMap("ns", "b", nil, "v1"))
	c.cms().Add(configMap("z", "marker", nil, ""))

	s := watch(t, h, informerhub.WatchRequest{ResumeToken: token, SendInitialEvents: true})
	want := []ev{
		{Type: "ADDED", Key: "ns/a", Data: "v1", RV: "1"},
		{Type: "BOOKMARK", End: true},
		{Type: "MODIFIED", Key: "ns/a", Data: "v2", RV: "2"},
		{Type: "ADDED", Key: "ns/b", Data: "v1", RV: "3"},
	}
	if diff := cmp.Diff(want, collect(t, s, "z/marker")); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
}

func TestOneInformerAndOneEncodingPerChange(t *testing.T) {
	c := newFakeCluster(t)
	var encoded atomic.Int64
	h := newHub(t, c, informerhub.Config{EncodeEvent: func(e *informerhub.Event) informerhub.Encoded {
		if e.Type != informerhub.EventBookmark {
			encoded.Add(1)
		}
		return encodedBytes(e.ResumeToken)
	}})
	var subs []*informerhub.Subscription
	for i := range 50 {
		subs = append(subs, watch(t, h, informerhub.WatchRequest{Selector: informerhub.Selector{Resource: configMaps, Namespace: fmt.Sprint("ns", i%4)}}))
	}
	for i := range 40 {
		c.cms().Add(configMap(fmt.Sprint("ns", i%4), fmt.Sprint(i), nil, ""))
	}
	for i := range 4 {
		c.cms().Add(configMap(fmt.Sprint("ns", i), "marker", nil, ""))
	}
	for i, s := range subs {
		got := collect(t, s, fmt.Sprint("ns", i%4, "/marker"))
		if len(got) != 10 {
			t.Fatalf("subscriber %d got %d events, want 10", i, len(got))
		}
	}
	if n := c.informersStarted(configMaps); n != 1 {
		t.Errorf("%d informers started for 50 subscribers, want 1", n)
	}
	// 44 changes, each encoded once for all its subscribers.
	if n := encoded.Load(); n != 44 {
		t.Errorf("%d events encoded for 44 changes fanned out to 50 subscribers, want 44", n)
	}
}

func TestResources(t *testing.T) {
	c := newFakeCluster(t)
	c.cms().Add(configMap("ns", "a", nil, ""))
	h := newHub(t, c, informerhub.Config{})
	watch(t, h, informerhub.WatchRequest{})
	watch(t, h, informerhub.WatchRequest{})
	got, err := h.Resources(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got[0].RetainedSince.IsZero() {
		t.Errorf("an active resource type has no RetainedSince")
	}
	got[0].RetainedSince = time.Time{}
	want := []informerhub.ResourceStatus{
		{ResourceInfo: upstream.ResourceInfo{Resource: configMaps, Kind: "ConfigMap", Namespaced: true}, InformerActive: true, Subscribers: 2, CachedObjects: 1,
			HistoryResourceVersion: "1", RetainedResourceVersion: "1"},
		{ResourceInfo: upstream.ResourceInfo{Resource: namespaces, Kind: "Namespace"}},
		{ResourceInfo: upstream.ResourceInfo{Resource: pods, Kind: "Pod", Namespaced: true}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("Resources (-want +got):\n%s", diff)
	}
}

func TestEventObjectIsTheCachedJSON(t *testing.T) {
	c := newFakeCluster(t)
	cm := configMap("ns", "a", map[string]string{"k": "v"}, "data")
	c.cms().Add(cm)
	h := newHub(t, c, informerhub.Config{})
	e := next(t, watch(t, h, informerhub.WatchRequest{SendInitialEvents: true}))
	var got corev1.ConfigMap
	if err := json.Unmarshal([]byte(e.Object), &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(cm, &got); diff != "" {
		t.Fatalf("object (-want +got):\n%s", diff)
	}
}

// TestASnapshotStopsWithItsCaller checks that a page of a snapshot whose
// filter selects nothing over a large state scans a batch at a time and
// stops when its context ends, rather than scanning the whole state.
func TestASnapshotStopsWithItsCaller(t *testing.T) {
	c := newFakeCluster(t)
	const objects = 5000
	for i := range objects {
		c.cms().Add(configMap("ns", fmt.Sprintf("cm-%05d", i), nil, "v"))
	}
	h := newHub(t, c, informerhub.Config{})
	watch(t, h, informerhub.WatchRequest{}).Close() // synced
	sel := informerhub.Selector{Resource: configMaps, Filter: `object.metadata.name == "none"`}

	snap, err := h.Snapshot(context.Background(), informerhub.SnapshotRequest{Selector: sel})
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := snap.NextPage(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("NextPage with its context ended: %v, want context.Canceled", err)
	}
	if n := informerhub.SnapshotExamined(snap); n != 0 {
		t.Errorf("NextPage with its context ended examined %d objects, want 0", n)
	}

	// With a live context it goes through, to an empty last page.
	page, err := snap.NextPage(context.Background())
	if err != nil || len(page.Objects) != 0 || !page.Last {
		t.Fatalf("NextPage: %d objects, last %v, %v; want an empty last page", len(page.Objects), page.Last, err)
	}
	if n := informerhub.SnapshotExamined(snap); n != objects {
		t.Errorf("the snapshot examined %d objects, want %d", n, objects)
	}
}

// TestASnapshotReadTooSlowlyDuringChurnEnds checks that a snapshot whose
// caller does not read it while the state changes, which keeps every object
// replaced since it began, counts in the memory budget, and is ended once it
// takes the hub past it: the hub stays within its budget. A snapshot read
// to its end keeps nothing.
func TestASnapshotReadTooSlowlyDuringChurnEnds(t *testing.T) {
	c, h, s := bigObjects(t)
	ctx := context.Background()
	slow, err := h.Snapshot(ctx, informerhub.SnapshotRequest{Selector: informerhub.Selector{Resource: configMaps}})
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()

	for i := range 400 { // 1.6 MiB of objects replaced under the snapshot
		putBig(c, i+10) // 4 KiB replaced each
		next(t, s)
		// The change just made may not be reclaimed for yet (the feed
		// reclaims after it has handed it out): its previous state counts
		// in its record and in the clone.
		if m := h.Memory(); m.History+m.Queues+m.LabelIndexes+m.StateClones > bigBudget+16<<10 {
			t.Fatalf("after change %d: history %d, queues %d, label indexes %d, clones %d: past the budget %d",
				i, m.History, m.Queues, m.LabelIndexes, m.StateClones, bigBudget)
		}
	}
	var limit *informerhub.LimitError
	if _, err := slow.NextPage(ctx); !errors.As(err, &limit) || limit.Limit != informerhub.LimitMemoryBudget {
		t.Fatalf("the slow snapshot's next page: %v, want a LimitError on the memory budget", err)
	}

	read, err := h.Snapshot(ctx, informerhub.SnapshotRequest{Selector: informerhub.Selector{Resource: configMaps}})
	if err != nil {
		t.Fatal(err)
	}
	defer read.Close()
	for page, err := read.NextPage(ctx); !page.Last; page, err = read.NextPage(ctx) {
		if err != nil {
			t.Fatal(err)
		}
	}
	c.cms().Modify(configMap("ns", "0", nil, "after"))
	next(t, s)
	if m := h.Memory(); m.StateClones != 0 {
		t.Errorf("a snapshot read to its end keeps %d bytes", m.StateClones)
	}
}

// TestInitialEventsReadTooSlowlyDuringChurnEnd is the same for a
// subscription's initial events: it ends, and its clone is given back.
func TestInitialEventsReadTooSlowlyDuringChurnEnd(t *testing.T) {
	c, h, s := bigObjects(t)
	slow := watch(t, h, informerhub.WatchRequest{SendInitialEvents: true})
	next(t, slow) // the first of its initial events
	for i := range 400 {
		putBig(c, i+10) // 4 KiB replaced each
		next(t, s)
	}
	var limit *informerhub.LimitError
	for {
		e, err := slow.Next(context.Background())
		if err != nil {
			if !errors.As(err, &limit) || limit.Limit != informerhub.LimitMemoryBudget {
				t.Fatalf("the slow initial events: %v, want a LimitError on the memory budget", err)
			}
			break
		}
		if e.InitialEventsEnd {
			t.Fatal("the slow initial events ended, as if they kept nothing")
		}
	}
	slow.Close()
	if m := h.Memory(); m.StateClones != 0 {
		t.Errorf("the clones keep %d bytes once the slow subscription closed", m.StateClones)
	}
}

// bigBudget is the memory budget of bigObjects' hub.
const bigBudget = 512 << 10

// bigObjects returns a hub within bigBudget whose ConfigMaps ns/0 to ns/9
// hold 4 KiB each (see putBig), with a live subscription that has read them.
func bigObjects(t *testing.T) (*fakeCluster, *informerhub.Hub, *informerhub.Subscription) {
	t.Helper()
	c := newFakeCluster(t)
	h := newHub(t, c, informerhub.Config{MemoryBudget: bigBudget, HistorySize: 10})
	s := watch(t, h, informerhub.WatchRequest{})
	for i := range 10 {
		putBig(c, i)
		next(t, s)
	}
	return c, h, s
}

// TestASnapshotClosedWhileAPageIsRead checks that Close may end a snapshot
// while another goroutine reads a page, as a server whose caller went away
// does (the race detector sees to it).
func TestASnapshotClosedWhileAPageIsRead(t *testing.T) {
	c := newFakeCluster(t)
	for i := range 100 {
		c.cms().Add(configMap("ns", fmt.Sprint(i), nil, "v"))
	}
	h := newHub(t, c, informerhub.Config{})
	snap, err := h.Snapshot(context.Background(), informerhub.SnapshotRequest{Selector: informerhub.Selector{Resource: configMaps}})
	if err != nil {
		t.Fatal(err)
	}
	read := make(chan struct{})
	go func() {
		defer close(read)
		for page, err := snap.NextPage(context.Background()); err == nil && !page.Last; page, err = snap.NextPage(context.Background()) {
		}
	}()
	snap.Close()
	<-read
	if m := h.Memory(); m.StateClones != 0 {
		t.Errorf("a closed snapshot's clone keeps %d bytes", m.StateClones)
	}
}

// TestAMarkedEventIsEncodedOncePerChange: subscribers whose filter cannot
// decide on an object get its events marked (Event.FilterError), and
// those of one filter share the marked event as others share theirs, so
// that objects on which a popular filter fails cost an encoding per
// change, not per subscriber; and that subscribers of another filter or
// form get their own reason and form.
func TestAMarkedEventIsEncodedOncePerChange(t *testing.T) {
	c := newFakeCluster(t)
	var marked atomic.Int64
	h := newHub(t, c, informerhub.Config{EncodeEvent: func(e *informerhub.Event) informerhub.Encoded {
		if e.FilterError != "" {
			marked.Add(1)
		}
		return encodedBytes(e.ResumeToken)
	}})
	failing := informerhub.Selector{Resource: configMaps, Filter: `object.data.mode == "on"`} // no data.mode: "no such key"
	var subs []*informerhub.Subscription
	for range 20 {
		subs = append(subs, watch(t, h, informerhub.WatchRequest{Selector: failing}))
	}
	for i := range 5 {
		c.cms().Add(configMap("ns", fmt.Sprint(i), nil, ""))
	}
	for i, s := range subs {
		for j := range 5 {
			if e := next(t, s); e.FilterError == "" {
				t.Fatalf("subscriber %d, event %d: %v unmarked, want marked", i, j, toEv(t, e))
			}
		}
	}
	if n := marked.Load(); n != 5 {
		t.Errorf("%d marked events encoded for 5 changes fanned out to 20 subscribers of one filter, want 5", n)
	}

	// Beside them, a filter that fails otherwise, and the first filter in
	// another form: each gets its own reason and form, never the shared
	// event of the first.
	other := informerhub.Selector{Resource: configMaps, Filter: `object.data.other == "on"`}
	otherSub := watch(t, h, informerhub.WatchRequest{Selector: other})
	projected := watch(t, h, informerhub.WatchRequest{Selector: failing, Fields: []string{"metadata.name"}})
	c.cms().Add(configMap("ns", "late", nil, ""))
	for _, s := range subs[:3] {
		if e := next(t, s); !strings.Contains(e.FilterError, "mode") || !strings.Contains(e.Object, `"data"`) {
			t.Errorf("a subscriber of the first filter got FilterError %q on %s", e.FilterError, e.Object)
		}
	}
	if e := next(t, otherSub); !strings.Contains(e.FilterError, "other") || strings.Contains(e.FilterError, "mode") {
		t.Errorf("the other filter's subscriber got FilterError %q, want its own reason", e.FilterError)
	}
	if e := next(t, projected); !strings.Contains(e.FilterError, "mode") || strings.Contains(e.Object, `"data"`) {
		t.Errorf("the projected subscriber got FilterError %q on %s, want the reason on its own form", e.FilterError, e.Object)
	}
}
