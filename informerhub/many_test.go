package informerhub_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/informerhub/hubtest"
)

// manyEv is a WatchMany event in a form tests compare: its watch, and the
// event as ev has it (any kind of object: only its key and data).
type manyEv struct {
	Index int
	ev
}

func toManyEv(t *testing.T, me *informerhub.ManyEvent) manyEv {
	t.Helper()
	e := me.Event
	out := manyEv{Index: me.Index, ev: ev{Type: e.Type.String(), RV: e.ResourceVersion, End: e.InitialEventsEnd}}
	if e.Type == informerhub.EventBookmark {
		out.RV = ""
		return out
	}
	var obj struct {
		Metadata struct{ Namespace, Name string }
		Data     map[string]string
	}
	if err := json.Unmarshal([]byte(e.Object), &obj); err != nil {
		t.Fatalf("event object: %v: %s", err, e.Object)
	}
	out.Key, out.Data = obj.Metadata.Namespace+"/"+obj.Metadata.Name, obj.Data["v"]
	return out
}

func watchMany(t *testing.T, h *informerhub.Hub, req informerhub.WatchManyRequest) *informerhub.ManySubscription {
	t.Helper()
	m, err := h.WatchMany(context.Background(), req)
	if err != nil {
		t.Fatalf("WatchMany: %v", err)
	}
	t.Cleanup(m.Close)
	return m
}

// nextMany returns the next event that is not a periodic bookmark; the
// bound only turns a hang into a failure.
func nextMany(t *testing.T, m *informerhub.ManySubscription) *informerhub.ManyEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		me, err := m.Next(ctx)
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		if me.Event.Type != informerhub.EventBookmark || me.Event.InitialEventsEnd {
			return me
		}
	}
}

// collectMany reads until it has seen each watch's marker object (by key),
// and returns every watch's events before its marker, per watch.
func collectMany(t *testing.T, m *informerhub.ManySubscription, markers map[int]string) map[int][]manyEv {
	t.Helper()
	out := map[int][]manyEv{}
	seen := 0
	for seen < len(markers) {
		e := toManyEv(t, nextMany(t, m))
		if e.Key == markers[e.Index] {
			seen++
			continue
		}
		out[e.Index] = append(out[e.Index], e)
	}
	return out
}

func cmWatch() informerhub.WatchRequest {
	return informerhub.WatchRequest{Selector: informerhub.Selector{Resource: configMaps}}
}

func podWatch() informerhub.WatchRequest {
	return informerhub.WatchRequest{Selector: informerhub.Selector{Resource: pods}}
}

func nsWatch() informerhub.WatchRequest {
	return informerhub.WatchRequest{Selector: informerhub.Selector{Resource: namespaces}}
}

func withInitial(w informerhub.WatchRequest) informerhub.WatchRequest {
	w.SendInitialEvents = true
	return w
}

// TestWatchManySendsEveryInitialEventFirst: the watches with initial events
// send them in the order of the watches, and nothing else comes before the
// last one's end, which alone carries InitialEventsEnd; then the changes
// of every watch come as they happen, each watch's in its order.
func TestWatchManySendsEveryInitialEventFirst(t *testing.T) {
	c := newFakeCluster(t)
	c.cms().Add(configMap("ns", "a", nil, "1"))
	c.cms().Add(configMap("ns", "b", nil, "1"))
	c.Source(pods).Add(hubtest.Pod("ns", "p", nil, "", "Pending"))
	h := newHub(t, c, informerhub.Config{})
	m := watchMany(t, h, informerhub.WatchManyRequest{Watches: []informerhub.WatchRequest{
		nsWatch(), withInitial(cmWatch()), withInitial(podWatch()),
	}})
	// A change of the watch without initial events, before they end.
	c.Source(namespaces).Add(hubtest.Namespace("n1"))
	var got []manyEv
	for range 5 {
		me := nextMany(t, m)
		got = append(got, toManyEv(t, me))
		if me.InitialEventsEnd != (len(got) == 5) {
			t.Fatalf("event %d %+v: InitialEventsEnd %v", len(got), got[len(got)-1], me.InitialEventsEnd)
		}
	}
	want := []string{"1 ADDED ns/a", "1 ADDED ns/b", "1 BOOKMARK / end", "2 ADDED ns/p", "2 BOOKMARK / end"}
	if g := describeMany(got); !slices.Equal(g, want) {
		t.Fatalf("initial events:\n%s\nwant\n%s", strings.Join(g, "\n"), strings.Join(want, "\n"))
	}
	// Then the namespace's change, held back so far, and the others'.
	c.cms().Modify(configMap("ns", "a", nil, "2"))
	c.cms().Add(configMap("ns", "z", nil, "marker"))
	c.Source(pods).Add(hubtest.Pod("ns", "z", nil, "", "Pending"))
	c.Source(namespaces).Add(hubtest.Namespace("z"))
	byWatch := collectMany(t, m, map[int]string{0: "/z", 1: "ns/z", 2: "ns/z"})
	for i, want := range map[int][]string{0: {"0 ADDED /n1"}, 1: {"1 MODIFIED ns/a"}, 2: nil} {
		if g := describeMany(byWatch[i]); !slices.Equal(g, want) {
			t.Errorf("watch %d: %q, want %q", i, g, want)
		}
	}
}

func describeMany(evs []manyEv) []string {
	var out []string
	for _, e := range evs {
		s := fmt.Sprintf("%d %s %s", e.Index, e.Type, e.Key)
		if e.Type == "BOOKMARK" {
			s = fmt.Sprintf("%d BOOKMARK /", e.Index)
		}
		if e.End {
			s += " end"
		}
		out = append(out, s)
	}
	return out
}

// TestWatchManyResumesEveryWatchExactly: the composite token of any event
// resumes every watch right after it, mid initial events too; a request
// that drops a watch, adds one or changes one's selector resumes the rest,
// and the new ones start as their own fields say.
func TestWatchManyResumesEveryWatchExactly(t *testing.T) {
	c := newFakeCluster(t)
	for i := range 3 {
		c.cms().Add(configMap("ns", fmt.Sprint("cm", i), nil, "1"))
	}
	h := newHub(t, c, informerhub.Config{})
	watches := []informerhub.WatchRequest{withInitial(cmWatch()), podWatch()}
	m := watchMany(t, h, informerhub.WatchManyRequest{Watches: watches})
	first := nextMany(t, m) // cm0 of the initial events
	m.Close()

	// Resumed inside the initial events: the rest of them, then their end,
	// whatever send_initial_events says now.
	c.Source(pods).Add(hubtest.Pod("ns", "p1", nil, "", "Pending"))
	resumed := watchMany(t, h, informerhub.WatchManyRequest{Watches: []informerhub.WatchRequest{cmWatch(), podWatch()}, ResumeToken: first.ResumeToken})
	var got []manyEv
	for len(got) < 4 {
		me := nextMany(t, resumed)
		got = append(got, toManyEv(t, me))
		if me.InitialEventsEnd != (len(got) == 3) {
			t.Fatalf("event %d: InitialEventsEnd %v", len(got), me.InitialEventsEnd)
		}
	}
	want := []string{"0 ADDED ns/cm1", "0 ADDED ns/cm2", "0 BOOKMARK / end", "1 ADDED ns/p1"}
	if g := describeMany(got); !slices.Equal(g, want) {
		t.Fatalf("resumed inside initial events:\n%s\nwant\n%s", strings.Join(g, "\n"), strings.Join(want, "\n"))
	}
	last := resumed.ResumeToken()
	resumed.Close()

	// Changes while no one watches; then the cm watch is dropped, a
	// namespaces watch added, and a pods watch of a label kept (a new
	// identity: from now).
	c.cms().Modify(configMap("ns", "cm1", nil, "2"))
	c.Source(pods).Modify(hubtest.Pod("ns", "p1", map[string]string{"x": "1"}, "", "Pending"))
	c.Source(pods).Add(hubtest.Pod("ns", "p2", nil, "", "Pending"))
	// The feed has them (the pods' third change): the new watch starts
	// after them, and sees none.
	informerhub.WaitForResourceVersion(h, pods, 3)
	again := watchMany(t, h, informerhub.WatchManyRequest{ResumeToken: last, Watches: []informerhub.WatchRequest{
		nsWatch(), podWatch(),
		{Selector: informerhub.Selector{Resource: pods, LabelSelector: "x=1"}},
	}})
	c.Source(namespaces).Add(hubtest.Namespace("z"))
	c.Source(pods).Add(hubtest.Pod("ns", "z", map[string]string{"x": "1"}, "", "Pending"))
	byWatch := collectMany(t, again, map[int]string{0: "/z", 1: "ns/z", 2: "ns/z"})
	for i, want := range map[int][]string{0: nil, 1: {"1 MODIFIED ns/p1", "1 ADDED ns/p2"}, 2: nil} {
		if g := describeMany(byWatch[i]); !slices.Equal(g, want) {
			t.Errorf("watch %d: %q, want %q", i, g, want)
		}
	}
}

// TestWatchManyOwnTokenWins: a watch's own resume token resumes it, not
// the composite's entry for it.
func TestWatchManyOwnTokenWins(t *testing.T) {
	c := newFakeCluster(t)
	h := newHub(t, c, informerhub.Config{})
	single := watch(t, h, cmWatch())
	own := single.ResumeToken()
	c.cms().Add(configMap("ns", "a", nil, "1"))
	nextChange(t, single) // the feed has it: the WatchMany starts after it
	m := watchMany(t, h, informerhub.WatchManyRequest{Watches: []informerhub.WatchRequest{cmWatch()}})
	c.cms().Add(configMap("ns", "b", nil, "1"))
	if e := toManyEv(t, nextMany(t, m)); e.Key != "ns/b" {
		t.Fatalf("got %+v, want ns/b", e)
	}
	composite := m.ResumeToken()
	w := cmWatch()
	w.ResumeToken = own
	resumed := watchMany(t, h, informerhub.WatchManyRequest{Watches: []informerhub.WatchRequest{w}, ResumeToken: composite})
	c.cms().Add(configMap("ns", "z", nil, "marker"))
	if g := describeMany(collectMany(t, resumed, map[int]string{0: "ns/z"})[0]); !slices.Equal(g, []string{"0 ADDED ns/a", "0 ADDED ns/b"}) {
		t.Fatalf("resumed from its own token: %q", g)
	}
}

// TestWatchManyRefusesBadRequests: each error names the watch, and the
// field within the request.
func TestWatchManyRefusesBadRequests(t *testing.T) {
	c := newFakeCluster(t)
	h := newHub(t, c, informerhub.Config{})
	cmToken := watch(t, h, cmWatch()).ResumeToken()
	good := watchMany(t, h, informerhub.WatchManyRequest{Watches: []informerhub.WatchRequest{cmWatch(), podWatch()}}).ResumeToken()
	head, _, _ := strings.Cut(good, ".")
	badNS := podWatch()
	badNS.Selector.Namespace = "Not_A_Namespace"
	podTok := podWatch()
	podTok.ResumeToken = cmToken
	for _, tc := range []struct {
		name   string
		req    informerhub.WatchManyRequest
		field  string
		index  int // -1: none
		reason string
	}{
		{"no watches", informerhub.WatchManyRequest{}, informerhub.FieldWatches, -1, "between 1 and"},
		{"a bad selector", informerhub.WatchManyRequest{Watches: []informerhub.WatchRequest{cmWatch(), badNS}}, "watches[1].selector.namespace", 1, ""},
		{"a watch's token of another resource", informerhub.WatchManyRequest{Watches: []informerhub.WatchRequest{podTok}}, "watches[0].resume_token", 0, "issued for"},
		{"garbage", informerhub.WatchManyRequest{Watches: []informerhub.WatchRequest{cmWatch()}, ResumeToken: "x.y"}, "resume_token", -1, "not a WatchMany resume token"},
		{"a Watch's token", informerhub.WatchManyRequest{Watches: []informerhub.WatchRequest{cmWatch()}, ResumeToken: cmToken}, "resume_token", -1, "of one watch"},
		{"missing tokens", informerhub.WatchManyRequest{Watches: []informerhub.WatchRequest{cmWatch()}, ResumeToken: head + ".x"}, "resume_token", -1, "not a WatchMany"},
		{"an entry's token mangled", informerhub.WatchManyRequest{Watches: []informerhub.WatchRequest{cmWatch()}, ResumeToken: head + ".x.y"}, "resume_token", 0, "not a resume token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := h.WatchMany(context.Background(), tc.req)
			if err == nil {
				m.Close()
				t.Fatal("accepted")
			}
			var reqErr *informerhub.RequestError
			if !errors.As(err, &reqErr) || reqErr.Field != tc.field || !strings.Contains(reqErr.Reason, tc.reason) {
				t.Fatalf("got %v, want a RequestError on %s saying %q", err, tc.field, tc.reason)
			}
			var we *informerhub.WatchError
			if got := -1; errors.As(err, &we) && we.Index != tc.index || !errors.As(err, &we) && tc.index != got {
				t.Fatalf("got %v, want the error of watch %d", err, tc.index)
			}
		})
	}
}

// TestWatchManyEndsWithTheFailedWatch: a watch whose informer cannot go on
// ends the stream with its error and its index.
func TestWatchManyEndsWithTheFailedWatch(t *testing.T) {
	c := newFakeCluster(t)
	h := newHub(t, c, informerhub.Config{MaxUpstreamFailure: 300 * time.Millisecond})
	m := watchMany(t, h, informerhub.WatchManyRequest{Watches: []informerhub.WatchRequest{cmWatch(), podWatch()}})
	c.Source(pods).Add(hubtest.Pod("ns", "p", nil, "", "Pending")) // on the watch the reset ends
	if e := toManyEv(t, nextMany(t, m)); e.Key != "ns/p" {
		t.Fatalf("got %+v", e)
	}
	c.Unreachable(pods, true)
	c.Source(pods).ResetWatch()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var err error
	for err == nil {
		_, err = m.Next(ctx)
	}
	var we *informerhub.WatchError
	if !errors.As(err, &we) || we.Index != 1 || !errors.Is(err, informerhub.ErrUnavailable) {
		t.Fatalf("got %v, want watch 1's ErrUnavailable", err)
	}
	if !errors.Is(m.Err(), informerhub.ErrUnavailable) {
		t.Fatalf("Err() = %v", m.Err())
	}
}

// FuzzCompositeToken: whatever the resume token, WatchMany neither panics
// nor hangs.
func FuzzCompositeToken(f *testing.F) {
	f.Add("")
	f.Add("AQIAAAAAAAAAAQAAAAAAAAACl-bpMQ.a.b")
	f.Add(strings.Repeat(".", 10000))
	c := hubtest.NewCluster(f)
	h := informerhub.New(informerhub.Config{}, c, c)
	defer h.Close()
	f.Fuzz(func(t *testing.T, tok string) {
		m, err := h.WatchMany(context.Background(), informerhub.WatchManyRequest{
			Watches: []informerhub.WatchRequest{{Selector: informerhub.Selector{Resource: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}}}}, ResumeToken: tok})
		if err == nil {
			m.Close()
		}
	})
}

// TestWatchManyReplaysMoreWatchesThanItsOwnersSlots: a WatchMany of more
// watches to replay than its owner has replay slots starts (the replays
// beyond them open their upstream watch when first read, once the others
// gave their slots back) and replays each watch exactly; it would wait
// forever for slots its own unread replays hold otherwise.
func TestWatchManyReplaysMoreWatchesThanItsOwnersSlots(t *testing.T) {
	c := newFakeCluster(t)
	h := newHub(t, c, informerhub.Config{HistorySize: 5, MaxReplaysPerOwner: 2})
	s := watch(t, h, cmWatch())
	c.cms().Add(configMap("ns", "first", nil, "1"))
	old := next(t, s).ResumeToken
	for i := range 20 { // out of the history
		c.cms().Add(configMap("ns", fmt.Sprint("c", i), nil, "1"))
		next(t, s)
	}
	var watches []informerhub.WatchRequest
	for i := range 3 {
		watches = append(watches, informerhub.WatchRequest{Selector: informerhub.Selector{Resource: configMaps, LabelSelector: fmt.Sprintf("x!=%d", i)},
			ResumeToken: old, Owner: "alice"})
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m, err := h.WatchMany(ctx, informerhub.WatchManyRequest{Watches: watches})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	c.cms().Add(configMap("ns", "z", nil, "marker"))
	byWatch := collectMany(t, m, map[int]string{0: "ns/z", 1: "ns/z", 2: "ns/z"})
	for i := range 3 {
		if got := len(byWatch[i]); got != 20 {
			t.Errorf("watch %d replayed %d changes, want 20: %q", i, got, describeMany(byWatch[i]))
		}
	}
}

// TestWatchManyMatchesWatchesByWhatTheySend: a token's entries go to the
// watches that send the same events: an equivalent selector ("x=1" and
// "x in (1)") resumes its entry, and a watch with a projection is not resumed
// from the entry of one without, nor the reverse.
func TestWatchManyMatchesWatchesByWhatTheySend(t *testing.T) {
	c := newFakeCluster(t)
	// No bookmark moves the projected watch past the change it drops.
	h := newHub(t, c, informerhub.Config{BookmarkInterval: time.Hour})
	projected := informerhub.WatchRequest{Selector: informerhub.Selector{Resource: configMaps, LabelSelector: "x=1"}, Fields: []string{"metadata.labels"}}
	whole := informerhub.WatchRequest{Selector: informerhub.Selector{Resource: configMaps, LabelSelector: "x=1"}}
	m := watchMany(t, h, informerhub.WatchManyRequest{Watches: []informerhub.WatchRequest{projected, whole}})
	c.cms().Add(configMap("ns", "a", map[string]string{"x": "1"}, "1"))
	for range 2 {
		nextMany(t, m)
	}
	// A change of data alone: the whole watch sends it, the projected one
	// does not; then the projected watch's entry is older.
	c.cms().Modify(configMap("ns", "a", map[string]string{"x": "1"}, "2"))
	if e := toManyEv(t, nextMany(t, m)); e.Index != 1 || e.Type != "MODIFIED" {
		t.Fatalf("got %+v, want the whole watch's MODIFIED", e)
	}
	token := m.ResumeToken()
	m.Close()
	c.cms().Modify(configMap("ns", "a", map[string]string{"x": "1"}, "3"))

	// The projected watch dropped; the whole one, written "x in (1)",
	// resumes its own entry: the change since, nothing repeated.
	equivalent := whole
	equivalent.Selector.LabelSelector = "x in (1)"
	resumed := watchMany(t, h, informerhub.WatchManyRequest{ResumeToken: token, Watches: []informerhub.WatchRequest{equivalent}})
	c.cms().Add(configMap("ns", "z", map[string]string{"x": "1"}, "marker"))
	got := collectMany(t, resumed, map[int]string{0: "ns/z"})[0]
	if len(got) != 1 || got[0].Type != "MODIFIED" || got[0].Data != "3" {
		t.Fatalf("the whole watch resumed with %+v, want the MODIFIED to 3 alone", got)
	}
}

// TestATokenOfInitialEventsResumesAnEquivalentSelector: a token taken
// during initial events resumes them with the same selection however it is
// written ("x=1" and "x in (1)" are one, as the proto promises), in a
// WatchMany and in a Watch.
func TestATokenOfInitialEventsResumesAnEquivalentSelector(t *testing.T) {
	c := newFakeCluster(t)
	for i := range 3 {
		c.cms().Add(configMap("ns", fmt.Sprint(i), map[string]string{"x": "1"}, ""))
	}
	h := newHub(t, c, informerhub.Config{})
	written := informerhub.Selector{Resource: configMaps, LabelSelector: "x=1"}
	equivalent := informerhub.Selector{Resource: configMaps, LabelSelector: "x in (1)"}
	m := watchMany(t, h, informerhub.WatchManyRequest{Watches: []informerhub.WatchRequest{{Selector: written, SendInitialEvents: true}}})
	first := nextMany(t, m)
	if first.Event.Type != informerhub.EventAdded || first.InitialEventsEnd {
		t.Fatalf("first event %v, want an initial ADDED", toManyEv(t, first))
	}
	m.Close()

	resumedMany := watchMany(t, h, informerhub.WatchManyRequest{
		Watches: []informerhub.WatchRequest{{Selector: equivalent}}, ResumeToken: first.ResumeToken})
	var keys []string
	for {
		e := nextMany(t, resumedMany)
		if e.InitialEventsEnd {
			break
		}
		keys = append(keys, toManyEv(t, e).Key)
	}
	if want := []string{"ns/1", "ns/2"}; !slices.Equal(keys, want) {
		t.Errorf("the WatchMany resumed with %q continued its initial events with %v, want %v", equivalent.LabelSelector, keys, want)
	}

	resumed := watch(t, h, informerhub.WatchRequest{Selector: equivalent, ResumeToken: first.Event.ResumeToken})
	if e := toEv(t, next(t, resumed)); e.Key != "ns/1" {
		t.Errorf("the Watch resumed with %q continued its initial events with %v, want ns/1", equivalent.LabelSelector, e)
	}
}
