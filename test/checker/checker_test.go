package checker

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// cm is an event of ConfigMap ns/name at rv, labelled app, holding data.
func cm(typ, name string, rv int, app, data string) Event {
	raw, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "data": map[string]any{"v": data},
		"metadata": map[string]any{"namespace": "ns", "name": name, "uid": name + "-uid",
			"resourceVersion": strconv.Itoa(rv), "labels": map[string]any{"app": app}}})
	e := Event{Type: typ, ResourceVersion: strconv.Itoa(rv)}
	if err := e.setObject(raw); err != nil {
		panic(err)
	}
	return e
}

func bookmark(rv int, end bool) Event {
	return Event{Type: Bookmark, ResourceVersion: strconv.Itoa(rv), InitialEventsEnd: end}
}

// testReference is a LIST at 10 of a (app=web) and b (app=db), then:
// a modified, c created, b starts and a stops matching app=web, c deleted,
// b modified, and a bookmark at 20.
func testReference(t *testing.T) *Reference {
	ref := newReference("", 10, []Event{cm(Added, "a", 5, "web", "a0"), cm(Added, "b", 7, "db", "b0")})
	for _, e := range []Event{
		cm(Modified, "a", 11, "web", "a1"), cm(Added, "c", 12, "web", "c0"), cm(Modified, "b", 13, "web", "b1"),
		cm(Modified, "a", 14, "db", "a2"), cm(Deleted, "c", 15, "web", "c0"), cm(Modified, "b", 16, "web", "b2"),
		bookmark(20, false),
	} {
		if err := ref.record(e); err != nil {
			t.Fatal(err)
		}
	}
	return ref
}

// good is what a watch of app=web with initial events gets of testReference.
var good = []Event{
	cm(Added, "a", 5, "web", "a0"), bookmark(10, true),
	cm(Modified, "a", 11, "web", "a1"), cm(Added, "c", 12, "web", "c0"), cm(Added, "b", 13, "web", "b1"),
	cm(Deleted, "a", 14, "web", "a1"), // stopped matching: the last matching state, at the change's version
	cm(Deleted, "c", 15, "web", "c0"), cm(Modified, "b", 16, "web", "b2"), bookmark(20, false),
}

// relisted is what a subscriber gets when the hub relists at 16 after
// the initial events: a (in its last state the hub had) no longer matches,
// b does, and c came and went unseen.
var relisted = []Event{
	cm(Added, "a", 5, "web", "a0"), bookmark(10, true),
	func() Event { e := cm(Deleted, "a", 5, "web", "a0"); e.ResourceVersion = "16"; return e }(),
	cm(Added, "b", 16, "web", "b2"), bookmark(20, false),
}

// stream is a segment for transcript: the token it opens with, its events.
type stream struct {
	token  string
	events []Event
}

// transcript records streams, giving each event a token that names it.
func transcript(streams ...stream) *Transcript {
	var tr Transcript
	for _, s := range streams {
		tr.Open(s.token)
		for _, e := range s.events {
			e.ResumeToken = tokenOf(e)
			tr.Record(e)
		}
		tr.Close(nil)
	}
	return &tr
}

func tokenOf(e Event) string { return e.Type + "/" + e.Name + "/" + e.ResourceVersion }

// edit returns a copy of events with events[i:j] replaced by with.
func edit(events []Event, i, j int, with ...Event) []Event {
	return slices.Concat(events[:i], with, events[j:])
}

func TestCheck(t *testing.T) {
	web := Options{LabelSelector: "app=web", InitialEvents: true}
	from10 := Options{LabelSelector: "app=web", FromResourceVersion: "10"}
	relist := Options{LabelSelector: "app=web", InitialEvents: true, Relisted: true}
	for _, tc := range []struct {
		name    string
		opts    Options
		streams []stream
		want    string // a substring of the error; "" for none
	}{
		{"exact", web, []stream{{"", good}}, ""},
		{"resumed", web, []stream{{"", good[:4]}, {tokenOf(good[3]), good[4:]}}, ""},
		{"resumed inside initial events", web, []stream{{"", good[:1]}, {tokenOf(good[0]), good[1:]}}, ""},
		{"from a version", from10, []stream{{"", good[2:]}}, ""},
		{"fresh start", Options{LabelSelector: "app=web"}, []stream{{"", good[4:]}}, ""},
		{"all objects", Options{FromResourceVersion: "13"}, []stream{{"", []Event{
			cm(Modified, "a", 14, "db", "a2"), cm(Deleted, "c", 15, "web", "c0"), cm(Modified, "b", 16, "web", "b2")}}}, ""},

		{"initial event missing", web, []stream{{"", good[1:]}}, "initial events at resourceVersion 10: missing ns/a"},
		{"initial events too old", web, []stream{{"", edit(good, 1, 2, bookmark(8, true))}}, "started the reference too late"},
		{"initial event twice", web, []stream{{"", edit(good, 1, 1, good[0])}}, "among the initial events"},
		{"gap", web, []stream{{"", edit(good, 3, 4)}}, "missing 1 change(s) before ADDED ns/b"},
		{"duplicate", web, []stream{{"", edit(good, 3, 3, good[2])}}, "got MODIFIED ns/a (uid a-uid, resourceVersion 11) again"},
		{"reordered", web, []stream{{"", edit(good, 3, 5, good[4], good[3])}}, "got ADDED ns/c (uid c-uid, resourceVersion 12) again"},
		{"invented", web, []stream{{"", edit(good, 3, 3, cm(Modified, "a", 12, "web", "x"))}}, "which the reference does not have"},
		{"enter as MODIFIED", web, []stream{{"", edit(good, 4, 5, cm(Modified, "b", 13, "web", "b1"))}}, "want ADDED ns/b"},
		{"leave in the new state", web, []stream{{"", edit(good, 5, 6, cm(Deleted, "a", 14, "db", "a2"))}}, "object (-want +got)"},
		{"from the wrong version", Options{LabelSelector: "app=web", FromResourceVersion: "9"}, []stream{{"", good[2:]}}, "too late"},
		{"resumed, skipping", web, []stream{{"", good[:4]}, {tokenOf(good[3]), good[5:]}}, "segment 1, event 4: missing 1 change(s)"},
		{"resumed, repeating", web, []stream{{"", good[:4]}, {tokenOf(good[3]), good[3:]}}, "segment 1, event 4: got ADDED ns/c (uid c-uid, resourceVersion 12) again"},
		{"resumed from an unknown token", web, []stream{{"", good[:4]}, {"bogus", good[4:]}}, "a token the transcript had not received"},
		{"bookmark going back", web, []stream{{"", edit(good, 5, 5, bookmark(12, false))}}, "bookmark at 12 is older than resourceVersion 13"},
		{"bookmark ahead of a change", web, []stream{{"", edit(good, 4, 4, bookmark(13, false))}}, "bookmark at 13 passes ADDED ns/b"},
		{"relisted in exact mode", web, []stream{{"", relisted}}, "which the reference does not have"},

		{"relisted", relist, []stream{{"", relisted}}, ""},
		{"relisted, every change", relist, []stream{{"", good}}, ""},
		{"relisted, ADDED twice", relist, []stream{{"", edit(relisted, 2, 2, cm(Added, "a", 11, "web", "a1"))}}, "but the subscriber has ns/a"},
		{"relisted, phantom", relist, []stream{{"", edit(relisted, 2, 2, cm(Modified, "a", 5, "web", "a0"))}}, "a phantom"},
		{"relisted, invented state", relist, []stream{{"", edit(relisted, 2, 2, cm(Modified, "a", 12, "web", "a1"))}}, "a state the reference never saw"},
		{"relisted, wrong object", relist, []stream{{"", edit(relisted, 2, 2, cm(Modified, "a", 11, "web", "x"))}}, "unlike the reference's"},
		{"relisted, going back", relist, []stream{{"", edit(relisted, 4, 4, cm(Modified, "b", 13, "web", "b1"))}}, "after resourceVersion 16 of the object"},
		{"relisted, DELETED of absent", relist, []stream{{"", edit(relisted, 4, 4, cm(Deleted, "c", 15, "web", "c0"))}}, "an object the subscriber does not have"},
		{"relisted, deletion missed", relist, []stream{{"", edit(relisted, 2, 3)}}, "final state at resourceVersion 20: unexpected ns/a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Check(testReference(t), transcript(tc.streams...), tc.opts)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Check: %v\nwant an error with %q", err, tc.want)
			}
		})
	}
}

func TestCheckNeedsTheReference(t *testing.T) {
	ref := testReference(t)
	if err := Check(ref, transcript(stream{"", []Event{bookmark(21, false)}}), Options{}); err == nil || !strings.Contains(err.Error(), "WaitFor") {
		t.Errorf("Check past the reference: %v, want an error", err)
	}
	ref.namespace = "other"
	if err := Check(ref, transcript(stream{"", good}), Options{Namespace: "ns"}); err == nil {
		t.Errorf("Check of another namespace: no error")
	}
}

func TestEvents(t *testing.T) {
	raw := `{"kind":"ConfigMap","apiVersion":"v1","data":{"n":1.50,"i":7},"metadata":{"resourceVersion":"5","name":"a",` +
		`"namespace":"ns","uid":"u","labels":{"app":"web"},"managedFields":[{"manager":"m"}]}}`
	hub, err := FromWatchResponse(&informerhubv1.WatchResponse{Type: informerhubv1.EventType_EVENT_TYPE_ADDED, Object: raw,
		ResourceVersion: "5", ResumeToken: "t"})
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON([]byte(raw)); err != nil {
		t.Fatal(err)
	}
	api, err := FromAPIEvent(watch.Event{Type: watch.Added, Object: u})
	if err != nil {
		t.Fatal(err)
	}
	want := Event{Type: Added, Namespace: "ns", Name: "a", UID: "u", ResourceVersion: "5", Labels: map[string]string{"app": "web"},
		Object: `{"apiVersion":"v1","data":{"i":7,"n":1.5},"kind":"ConfigMap","metadata":{"labels":{"app":"web"},"name":"a","namespace":"ns","resourceVersion":"5","uid":"u"}}`}
	if diff := cmp.Diff(want, api); diff != "" {
		t.Errorf("FromAPIEvent (-want +got):\n%s", diff)
	}
	want.ResumeToken = "t"
	if diff := cmp.Diff(want, hub); diff != "" {
		t.Errorf("FromWatchResponse (-want +got):\n%s", diff)
	}
	if _, err := FromWatchResponse(&informerhubv1.WatchResponse{Type: informerhubv1.EventType_EVENT_TYPE_BOOKMARK, ResourceVersion: "x"}); err == nil {
		t.Error("FromWatchResponse of a bad resourceVersion: no error")
	}
	_, err = FromAPIEvent(watch.Event{Type: watch.Error, Object: &metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired}})
	if !apierrors.IsResourceExpired(err) {
		t.Errorf("FromAPIEvent of an ERROR: %v, want the 410 it carries", err)
	}
}

var configMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

// fakeClient is a dynamic client of one resource that serves LIST pages
// from list (a page, its resourceVersion, the continue token of the next)
// and WATCH from watch. Other methods panic.
type fakeClient struct {
	dynamic.NamespaceableResourceInterface
	list  func(metav1.ListOptions) (page []Event, listRV, next string)
	watch func(metav1.ListOptions) (watch.Interface, error)
}

func (f *fakeClient) Resource(schema.GroupVersionResource) dynamic.NamespaceableResourceInterface {
	return f
}
func (f *fakeClient) Namespace(string) dynamic.ResourceInterface { return f }

func (f *fakeClient) List(_ context.Context, opts metav1.ListOptions) (*unstructured.UnstructuredList, error) {
	page, listRV, next := f.list(opts)
	l := &unstructured.UnstructuredList{Object: map[string]any{}}
	l.SetResourceVersion(listRV)
	l.SetContinue(next)
	for _, e := range page {
		l.Items = append(l.Items, *unstructuredOf(e))
	}
	return l, nil
}

func (f *fakeClient) Watch(_ context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return f.watch(opts)
}

func TestReference(t *testing.T) {
	type opened struct {
		from string
		w    *watch.FakeWatcher
	}
	watches := make(chan opened, 1)
	failed := false
	client := &fakeClient{list: func(opts metav1.ListOptions) ([]Event, string, string) {
		if opts.Continue == "" {
			return []Event{cm(Added, "a", 5, "web", "a0")}, "10", "page2"
		}
		return []Event{cm(Added, "b", 7, "db", "b0")}, "10", ""
	}, watch: func(opts metav1.ListOptions) (watch.Interface, error) {
		if !failed { // the API server is down at first
			failed = true
			return nil, errors.New("connection refused")
		}
		w := watch.NewFakeWithChanSize(10, false)
		watches <- opened{opts.ResourceVersion, w}
		return w, nil
	}}
	ref, err := StartReference(t.Context(), client, configMaps, "")
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Stop()
	if got := ref.ResourceVersion(); got != "10" {
		t.Errorf("ResourceVersion() = %s, want 10", got)
	}
	if got := len(ref.initial); got != 2 {
		t.Errorf("the LIST has %d objects, want 2 (of two pages)", got)
	}
	w := <-watches
	if w.from != "10" {
		t.Errorf("watch from %s, want 10", w.from)
	}
	w.w.Modify((unstructuredOf(cm(Modified, "a", 11, "web", "a1"))))
	w.w.Action(watch.Bookmark, (unstructuredOf(bookmark(12, false))))
	w.w.Stop() // the API server closes the watch: reopen from the bookmark
	if w = <-watches; w.from != "12" {
		t.Errorf("watch reopened from %s, want 12", w.from)
	}
	w.w.Add((unstructuredOf(cm(Added, "c", 13, "web", "c0"))))
	if err := ref.WaitFor(t.Context(), "13"); err != nil {
		t.Fatal(err)
	}
	want := []Event{cm(Modified, "a", 11, "web", "a1"), cm(Added, "c", 13, "web", "c0")}
	if diff := cmp.Diff(want, ref.Changes()); diff != "" {
		t.Errorf("Changes() (-want +got):\n%s", diff)
	}
	w.w.Error(&metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired})
	if err := ref.WaitFor(t.Context(), "14"); !apierrors.IsResourceExpired(err) {
		t.Errorf("WaitFor after a 410: %v, want the 410", err)
	}
	if err := ref.Stop(); !apierrors.IsResourceExpired(err) {
		t.Errorf("Stop after a 410: %v, want the 410", err)
	}
}

func TestReferenceStop(t *testing.T) {
	client := &fakeClient{list: func(metav1.ListOptions) ([]Event, string, string) { return nil, "10", "" },
		watch: func(metav1.ListOptions) (watch.Interface, error) { return watch.NewFake(), nil }}
	ref, err := StartReference(context.Background(), client, configMaps, "ns")
	if err != nil {
		t.Fatal(err)
	}
	if err := ref.Stop(); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if err := ref.WaitFor(context.Background(), "11"); err == nil {
		t.Error("WaitFor past a stopped reference: no error")
	}
}

func unstructuredOf(e Event) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"kind": "ConfigMap", "apiVersion": "v1"}}
	if e.Type == Bookmark {
		u.SetResourceVersion(e.ResourceVersion)
	} else {
		_ = json.Unmarshal([]byte(e.Object), &u.Object)
	}
	return u
}

func TestCheckState(t *testing.T) {
	ref := testReference(t)
	var lists []string
	client := &fakeClient{list: func(opts metav1.ListOptions) ([]Event, string, string) {
		lists = append(lists, opts.ResourceVersion+"/"+string(opts.ResourceVersionMatch))
		changes, _ := ref.history()
		state := ref.stateAt(changes, rv(opts.ResourceVersion))
		sel, _ := newSelector(Options{LabelSelector: opts.LabelSelector})
		maps.DeleteFunc(state, func(_ objKey, e Event) bool { selected, _ := sel.matches(e); return !selected })
		return slices.Collect(maps.Values(state)), opts.ResourceVersion, ""
	}}
	opts := Options{LabelSelector: "app=web", InitialEvents: true}
	if err := CheckState(t.Context(), client, configMaps, transcript(stream{"", good}), opts); err != nil {
		t.Errorf("CheckState: %v", err)
	}
	if want := []string{"20/Exact"}; !slices.Equal(lists, want) {
		t.Errorf("LISTs %v, want %v", lists, want)
	}
	err := CheckState(t.Context(), client, configMaps, transcript(stream{"", edit(good, 6, 7)}), opts)
	if err == nil || !strings.Contains(err.Error(), "unexpected ns/c") {
		t.Errorf("CheckState of a transcript without c's deletion: %v, want an error", err)
	}
}

func TestTranscript(t *testing.T) {
	var tr Transcript
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 100 {
			tr.Record(Event{Type: Bookmark, ResourceVersion: strconv.Itoa(i), ResumeToken: strconv.Itoa(i)})
		}
		tr.Close(errors.New("cut"))
		tr.Open("99")
	})
	for range 100 {
		_, _ = tr.LastToken(), tr.Events()
	}
	wg.Wait()
	if got := tr.LastToken(); got != "99" {
		t.Errorf("LastToken() = %q, want 99", got)
	}
	if got := len(tr.Events()); got != 100 {
		t.Errorf("%d events, want 100", got)
	}
}
