package informerhub_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/informerhub/upstream"
)

// eventLine is what tests compare of an event.
func eventLine(t *testing.T, ev *informerhub.Event) string {
	t.Helper()
	line := ev.Type.String()
	if ev.Object != "" {
		line += " " + ev.Object
	}
	if ev.PreviousObject != "" {
		line += " previous " + ev.PreviousObject
	}
	return line
}

func nextLines(t *testing.T, s *informerhub.Subscription, n int) []string {
	t.Helper()
	var lines []string
	for range n {
		ev, err := s.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, eventLine(t, ev))
	}
	return lines
}

func TestFilterEntersAndLeaves(t *testing.T) {
	c := newFakeCluster(t)
	h := newHub(t, c, informerhub.Config{})
	s := watch(t, h, informerhub.WatchRequest{
		Selector: informerhub.Selector{Filter: `object.data.v == "on"`},
		Fields:   []string{"data"},
	})
	c.cms().Add(configMap("ns", "a", nil, "off"))
	c.cms().Modify(configMap("ns", "a", nil, "on"))  // enters
	c.cms().Modify(configMap("ns", "a", nil, "on"))  // stays (a new version)
	c.cms().Modify(configMap("ns", "a", nil, "off")) // leaves
	c.cms().Add(configMap("ns", "b", nil, "on"))
	c.cms().Delete(configMap("ns", "b", nil, "on"))
	want := []string{
		`ADDED {"metadata":{"name":"a","namespace":"ns","uid":"ns/a","resourceVersion":"2"},"data":{"v":"on"}}`,
		// Projected on data, which did not change: not sent.
		// The last state that matched, at the version of the change.
		`DELETED {"data":{"v":"on"},"metadata":{"name":"a","namespace":"ns","resourceVersion":"4","uid":"ns/a"}}`,
		`ADDED {"metadata":{"name":"b","namespace":"ns","uid":"ns/b","resourceVersion":"5"},"data":{"v":"on"}}`,
		`DELETED {"metadata":{"name":"b","namespace":"ns","uid":"ns/b","resourceVersion":"6"},"data":{"v":"on"}}`,
	}
	if diff := cmp.Diff(want, nextLines(t, s, len(want))); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func TestProjectionSkipsModificationsOfOtherFields(t *testing.T) {
	c := newFakeCluster(t)
	c.cms().Add(configMap("ns", "a", nil, "1"))
	h := newHub(t, c, informerhub.Config{})
	s := watch(t, h, informerhub.WatchRequest{Fields: []string{"metadata.labels"}, IncludePrevious: true})
	c.cms().Modify(configMap("ns", "a", nil, "2"))                           // data only: skipped
	c.cms().Modify(configMap("ns", "a", map[string]string{"app": "x"}, "3")) // labels
	c.cms().Modify(configMap("ns", "a", map[string]string{"app": "x"}, "4")) // data only: skipped
	c.cms().Delete(configMap("ns", "a", map[string]string{"app": "x"}, "4"))
	want := []string{
		`MODIFIED {"metadata":{"name":"a","namespace":"ns","uid":"ns/a","resourceVersion":"3","labels":{"app":"x"}}} previous {"metadata":{"name":"a","namespace":"ns","uid":"ns/a","resourceVersion":"2"}}`,
		`DELETED {"metadata":{"name":"a","namespace":"ns","uid":"ns/a","resourceVersion":"5","labels":{"app":"x"}}}`,
	}
	var got []string
	var modified *informerhub.Event
	for range want {
		ev, err := s.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == informerhub.EventModified {
			modified = ev
		}
		got = append(got, eventLine(t, ev))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
	// The skipped modification after it is covered by the next event's
	// token: resuming from the MODIFIED yields the DELETED, and nothing of
	// the skipped one.
	r := watch(t, h, informerhub.WatchRequest{Fields: []string{"metadata.labels"}, ResumeToken: modified.ResumeToken})
	if diff := cmp.Diff(want[1:], nextLines(t, r, 1)); diff != "" {
		t.Errorf("resumed after the MODIFIED (-want +got):\n%s", diff)
	}
}

func TestIncludePreviousCarriesTheStateBefore(t *testing.T) {
	c := newFakeCluster(t)
	c.cms().Add(configMap("ns", "a", nil, "1"))
	h := newHub(t, c, informerhub.Config{})
	s := watch(t, h, informerhub.WatchRequest{IncludePrevious: true})
	c.cms().Modify(configMap("ns", "a", nil, "2"))
	ev, err := s.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(ev.Object, `"v":"2"`) || !strings.Contains(ev.PreviousObject, `"v":"1"`) || !strings.Contains(ev.PreviousObject, `"resourceVersion":"1"`) {
		t.Errorf("MODIFIED: object %s, previous %s; want v 2 after v 1 at resourceVersion 1", ev.Object, ev.PreviousObject)
	}
	plain := watch(t, h, informerhub.WatchRequest{ResumeToken: s.ResumeToken()})
	c.cms().Modify(configMap("ns", "a", nil, "3"))
	if ev, err := plain.Next(context.Background()); err != nil || ev.PreviousObject != "" {
		t.Errorf("without IncludePrevious: previous %q (%v), want none", ev.PreviousObject, err)
	}
}

// TestEventsAreBuiltOncePerForm checks that each change is projected and
// encoded once per distinct form, however many subscribers share it.
func TestEventsAreBuiltOncePerForm(t *testing.T) {
	c := newFakeCluster(t)
	var encoded [informerhub.MaxEncodings]atomic.Int64
	h := newHub(t, c, informerhub.Config{EncodeEvent: func(ev *informerhub.Event) informerhub.Encoded {
		encoded[ev.Encoding].Add(1)
		return nil
	}})
	forms := []informerhub.WatchRequest{
		{},
		{Encoding: 1},
		{Fields: []string{"data"}},
		{Fields: []string{"data"}, Encoding: 1},
		{Fields: []string{"data"}, IncludePrevious: true},
	}
	var subs []*informerhub.Subscription
	for _, form := range forms {
		for range 10 {
			subs = append(subs, watch(t, h, form))
		}
	}
	const changes = 5
	for i := range changes {
		c.cms().Add(configMap("ns", fmt.Sprint("c", i), nil, "x"))
	}
	for _, s := range subs {
		nextLines(t, s, changes)
	}
	// Encoding 0: the plain, the projected, and the projected with
	// previous state; encoding 1: the plain and the projected.
	if got := [2]int64{encoded[0].Load(), encoded[1].Load()}; got != [2]int64{3 * changes, 2 * changes} {
		t.Errorf("events encoded per encoding: %v, want %v", got, [2]int64{3 * changes, 2 * changes})
	}
}

func TestLimitsOnDistinctFiltersAndProjections(t *testing.T) {
	c := newFakeCluster(t)
	h := newHub(t, c, informerhub.Config{MaxFiltersPerResource: 2, MaxProjectionsPerResource: 1})
	ctx := context.Background()
	filter := func(i int) informerhub.WatchRequest {
		return informerhub.WatchRequest{Selector: informerhub.Selector{Resource: configMaps, Filter: fmt.Sprintf("object.metadata.name != %q", strconv.Itoa(i))}}
	}
	a := watch(t, h, filter(1))
	watch(t, h, filter(2))
	watch(t, h, filter(2)) // the same expression: no more
	_, err := h.Watch(ctx, filter(3))
	var limit *informerhub.LimitError
	if !errors.As(err, &limit) || limit.Limit != informerhub.LimitFilters || !errors.Is(err, informerhub.ErrLimitExceeded) {
		t.Fatalf("a third distinct filter: %v, want a LimitError on %s", err, informerhub.LimitFilters)
	}
	a.Close()
	if _, err := h.Watch(ctx, filter(3)); err != nil {
		t.Fatalf("after one closed: %v", err)
	}

	watch(t, h, informerhub.WatchRequest{Fields: []string{"data"}})
	watch(t, h, informerhub.WatchRequest{Fields: []string{".data"}, IncludePrevious: true}) // the same projection
	_, err = h.Watch(ctx, informerhub.WatchRequest{Selector: informerhub.Selector{Resource: configMaps}, Fields: []string{"metadata.labels"}})
	if !errors.As(err, &limit) || limit.Limit != informerhub.LimitProjections {
		t.Fatalf("a second distinct projection: %v, want a LimitError on %s", err, informerhub.LimitProjections)
	}
}

func TestFiltersDecodeEachChangeOnce(t *testing.T) {
	c := newFakeCluster(t)
	h := newHub(t, c, informerhub.Config{})
	var subs []*informerhub.Subscription
	for i := range 10 {
		for range 10 {
			subs = append(subs, watch(t, h, informerhub.WatchRequest{Selector: informerhub.Selector{
				Filter: fmt.Sprintf(`object.data.v != "%d"`, i),
			}}))
		}
	}
	before := informerhub.FilterDecodes(h)
	const changes = 20
	for i := range changes {
		if i < 10 {
			c.cms().Add(configMap("ns", fmt.Sprint("c", i), nil, "x"))
		} else {
			c.cms().Modify(configMap("ns", fmt.Sprint("c", i-10), nil, "y"))
		}
	}
	for _, s := range subs {
		nextLines(t, s, changes)
	}
	if n := informerhub.FilterDecodes(h) - before; n != changes {
		t.Errorf("%d changes past 10 distinct filters of 10 subscribers each decoded %d objects, want one each", changes, n)
	}
}

// TestViewEventsCountAgainstTheHistoryBytes checks that however many forms
// subscribers ask for, the events kept for them fill at most as many bytes
// again as the history's records, without evicting any, even when the
// records fill theirs; and that subscribers still receive every event once
// they are no longer kept.
func TestViewEventsCountAgainstTheHistoryBytes(t *testing.T) {
	c := newFakeCluster(t)
	// The records alone (40 creations, each its record's overhead: their
	// objects are the state's) fill it.
	const maxBytes = 8 << 10
	h := newHub(t, c, informerhub.Config{HistoryBytes: maxBytes, MaxProjectionsPerResource: 64})
	var subs []*informerhub.Subscription
	for i := range 20 {
		// Projections that keep the whole object, each distinct.
		subs = append(subs, watch(t, h, informerhub.WatchRequest{Fields: []string{"data", "metadata", fmt.Sprint("x", i)}, Encoding: informerhub.Encoding(i % 2)}))
	}
	const changes = 40
	big := strings.Repeat("x", 1000)
	for i := range changes {
		c.cms().Add(configMap("ns", fmt.Sprint("c", i), nil, big))
	}
	for _, s := range subs {
		if got := nextLines(t, s, changes); !strings.Contains(got[changes-1], fmt.Sprintf(`"name":"c%d"`, changes-1)) {
			t.Fatalf("last event: %s", got[changes-1])
		}
	}
	for _, st := range h.Stats() {
		if st.Resource != configMaps {
			continue
		}
		// The records hold about maxBytes; the events kept for views as
		// much again at most, but not nothing.
		if st.HistoryBytes <= maxBytes+maxBytes/2 {
			t.Errorf("the history holds %d events in %d bytes: no events are kept for the views", st.HistoryEvents, st.HistoryBytes)
		}
		if st.HistoryBytes > 2*maxBytes {
			t.Errorf("the history holds %d bytes, more than twice its %d", st.HistoryBytes, maxBytes)
		}
	}
}

// TestResubscribingReusesTheRecordsEvents checks that subscribers of one
// form, one after the other, share the events kept on the records, however
// often the form's last subscriber left in between.
func TestResubscribingReusesTheRecordsEvents(t *testing.T) {
	c := newFakeCluster(t)
	h := newHub(t, c, informerhub.Config{})
	first := watch(t, h, informerhub.WatchRequest{})
	start := first.ResumeToken()
	const changes = 20
	for i := range changes {
		c.cms().Add(configMap("ns", fmt.Sprint("c", i), nil, "x"))
	}
	nextLines(t, first, changes)
	for range 10 {
		s := watch(t, h, informerhub.WatchRequest{Fields: []string{"data"}, ResumeToken: start})
		nextLines(t, s, changes)
		s.Close()
	}
	if n := informerhub.MaxViewSlots(h, configMaps); n != 1 {
		t.Errorf("records hold up to %d events of one form, want 1", n)
	}
}

// TestFilterEvaluationsPerChangeAreBoundedByDistinctFilters checks that a
// change costs each distinct filter one evaluation per state of its object,
// however many groups (selectors) share the filter.
func TestFilterEvaluationsPerChangeAreBoundedByDistinctFilters(t *testing.T) {
	c := newFakeCluster(t)
	const filters = 32
	h := newHub(t, c, informerhub.Config{MaxFiltersPerResource: filters})
	var subs []*informerhub.Subscription
	for i := range filters {
		for _, labels := range []string{"", "app", "!tier"} { // three groups per filter
			subs = append(subs, watch(t, h, informerhub.WatchRequest{Selector: informerhub.Selector{
				LabelSelector: labels, Filter: fmt.Sprintf(`object.data.v != "%d"`, i),
			}}))
		}
	}
	before := informerhub.FilterEvaluations(h)
	c.cms().Add(configMap("ns", "a", map[string]string{"app": "x"}, "v"))
	c.cms().Modify(configMap("ns", "a", map[string]string{"app": "x"}, "w"))
	for _, s := range subs {
		nextLines(t, s, 2)
	}
	// The ADDED: one state; the MODIFIED: the new one (the previous one's
	// results are the ADDED's, cached on its object... but only 16 of
	// them), so at most 32 + 2 × 32.
	if n := informerhub.FilterEvaluations(h) - before; n > 3*filters {
		t.Errorf("two changes past %d distinct filters in %d groups cost %d evaluations, want at most %d", filters, 3*filters, n, 3*filters)
	}
}

// TestAFilterThatCannotDecideSelectsAndSaysWhy checks that an object on
// which a filter's evaluation fails or exceeds its cost is sent, marked
// with why, in every path (live, initial events, snapshots), ends no
// stream and refuses nothing; and that each state of an object costs each
// filter one evaluation, however many ask.
func TestAFilterThatCannotDecideSelectsAndSaysWhy(t *testing.T) {
	c := newFakeCluster(t)
	h := newHub(t, c, informerhub.Config{MaxFilterCost: 100})
	costly := informerhub.Selector{Resource: configMaps, Filter: `object.data.v.matches("^(a|b)*c$")`}
	failing := informerhub.Selector{Resource: configMaps, Filter: `object.data.mode == "on"`} // no data.mode: "no such key"
	costlySub := watch(t, h, informerhub.WatchRequest{Selector: costly})
	failingSub := watch(t, h, informerhub.WatchRequest{Selector: failing})

	c.cms().Add(configMap("ns", "small", nil, "ab")) // the costly filter decides: no match
	c.cms().Add(configMap("ns", "big", nil, strings.Repeat("ab", 5000)))
	checkMarked := func(who string, e *informerhub.Event, typ informerhub.EventType, name, reason string) {
		t.Helper()
		if got := toEv(t, e); got.Type != typ.String() || got.Key != "ns/"+name || !strings.Contains(e.FilterError, reason) {
			t.Fatalf("%s got %v with FilterError %q, want %s of ns/%s marked %q", who, got, e.FilterError, typ, name, reason)
		}
	}
	checkMarked("the costly filter's subscriber", next(t, costlySub), informerhub.EventAdded, "big", "cost limit")
	checkMarked("the failing filter's subscriber", next(t, failingSub), informerhub.EventAdded, "small", "no such key")
	checkMarked("the failing filter's subscriber", next(t, failingSub), informerhub.EventAdded, "big", "no such key")

	// The streams go on. A change that makes the costly filter decide is a
	// MODIFIED, as it selected the previous state: marked for that state.
	// The next is decided on both states: unmarked.
	c.cms().Modify(configMap("ns", "big", nil, "abc"))
	checkMarked("the costly filter's subscriber", next(t, costlySub), informerhub.EventModified, "big", "cost limit")
	c.cms().Modify(configMap("ns", "big", nil, "abbc"))
	if e := next(t, costlySub); toEv(t, e).Type != "MODIFIED" || e.FilterError != "" {
		t.Fatalf("the costly filter's subscriber after big changed again: %v, FilterError %q; want an unmarked MODIFIED", toEv(t, e), e.FilterError)
	}
	c.cms().Modify(configMap("ns", "big", nil, strings.Repeat("ab", 5000)))
	checkMarked("the costly filter's subscriber", next(t, costlySub), informerhub.EventModified, "big", "cost limit")

	// The same selector is not refused; its initial events and a snapshot
	// mark big too. Neither evaluates the filter on it again: its result is
	// cached on the object.
	before := informerhub.FilterEvaluations(h)
	again := watch(t, h, informerhub.WatchRequest{Selector: costly, SendInitialEvents: true})
	checkMarked("a new Watch of the costly filter", next(t, again), informerhub.EventAdded, "big", "cost limit")
	if e := next(t, again); !e.InitialEventsEnd {
		t.Fatalf("after the initial events: %v, want their end", toEv(t, e))
	}
	snap, err := h.Snapshot(context.Background(), informerhub.SnapshotRequest{Selector: costly})
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	page, err := snap.NextPage(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Objects) != 1 || len(page.FilterErrors) != 1 || !strings.Contains(page.FilterErrors[0], "cost limit") || !page.Last {
		t.Fatalf("the snapshot's page: %d objects, filter errors %q, last %v; want big, marked", len(page.Objects), page.FilterErrors, page.Last)
	}
	if n := informerhub.FilterEvaluations(h) - before; n != 0 {
		t.Errorf("initial events and a snapshot evaluated the filter %d times, want 0 (cached on the object)", n)
	}
	if st := h.Stats()[0]; st.FilterErrors != 7 {
		t.Errorf("FilterErrors = %d, want 7: big's two costly states for the costly filter, and for the failing one small and big's four states", st.FilterErrors)
	}
}

// TestAnObjectEndsNoStream checks that whatever object someone writes, no
// stream ends and no selector is refused: the subscribers whose selector
// selects it get it marked, the others nothing. And that the feed does not
// evaluate a filter on objects its holders' namespace, label and field
// selectors leave out. The selectors test labels' existence, which the
// dispatch index cannot narrow: every change visits both groups.
func TestAnObjectEndsNoStream(t *testing.T) {
	c := newFakeCluster(t)
	h := newHub(t, c, informerhub.Config{MaxFilterCost: 100})
	const expr = `object.data.v.matches("^(a|b)*c$")`
	having := func(label string) informerhub.Selector {
		return informerhub.Selector{Resource: configMaps, LabelSelector: label, Filter: expr}
	}
	subTeam := watch(t, h, informerhub.WatchRequest{Selector: having("team")})
	subOwner := watch(t, h, informerhub.WatchRequest{Selector: having("owner")})
	plain := watch(t, h, informerhub.WatchRequest{})
	big := strings.Repeat("ab", 5000)

	// A big object that no holder's labels select: not evaluated.
	before := informerhub.FilterEvaluations(h)
	c.cms().Add(configMap("ns", "nobody", nil, big))
	next(t, plain)
	if n := informerhub.FilterEvaluations(h) - before; n != 0 {
		t.Errorf("an object no holder's labels select cost %d evaluations, want 0", n)
	}

	// One that owner's selector selects: owner's subscriber gets it marked
	// and goes on, as does team's.
	c.cms().Add(configMap("ns", "owned", map[string]string{"owner": "x"}, big))
	next(t, plain)
	if e := next(t, subOwner); toEv(t, e).Key != "ns/owned" || e.FilterError == "" {
		t.Fatalf("owner's subscriber: %v, FilterError %q; want ns/owned, marked", toEv(t, e), e.FilterError)
	}
	watch(t, h, informerhub.WatchRequest{Selector: having("owner")}) // not refused
	c.cms().Add(configMap("ns", "small", map[string]string{"team": "y", "owner": "y"}, "abc"))
	for _, s := range []*informerhub.Subscription{subTeam, subOwner} {
		if e := next(t, s); toEv(t, e).Key != "ns/small" || e.Type != informerhub.EventAdded || e.FilterError != "" {
			t.Fatalf("a subscriber after owner's object: %v, FilterError %q; want the ADDED of ns/small", toEv(t, e), e.FilterError)
		}
	}
}

// TestLimitsPerOwner checks that one owner's subscriptions hold at most
// MaxFiltersPerOwner distinct filters and MaxProjectionsPerOwner distinct
// projections on a resource type, leaving the rest to others.
func TestLimitsPerOwner(t *testing.T) {
	c := newFakeCluster(t)
	h := newHub(t, c, informerhub.Config{MaxFiltersPerOwner: 2, MaxProjectionsPerOwner: 1})
	ctx := context.Background()
	req := func(owner string, i int, fields ...string) informerhub.WatchRequest {
		return informerhub.WatchRequest{Owner: owner, Fields: fields, Selector: informerhub.Selector{
			Resource: configMaps, Filter: fmt.Sprintf("object.metadata.name != %q", strconv.Itoa(i))}}
	}
	watch(t, h, req("alice", 1))
	watch(t, h, req("alice", 2))
	watch(t, h, req("alice", 2)) // one she holds: no more
	var limit *informerhub.LimitError
	if _, err := h.Watch(ctx, req("alice", 3)); !errors.As(err, &limit) || limit.Limit != informerhub.LimitFiltersPerOwner {
		t.Fatalf("alice's third distinct filter: %v, want a LimitError on %s", err, informerhub.LimitFiltersPerOwner)
	}
	watch(t, h, req("bob", 3)) // others are not held back
	watch(t, h, req("", 4))    // nor is no one

	a := watch(t, h, req("carol", 1, "data"))
	if _, err := h.Watch(ctx, req("carol", 1, "metadata.labels")); !errors.As(err, &limit) || limit.Limit != informerhub.LimitProjectionsPerOwner {
		t.Fatalf("carol's second distinct projection: %v, want a LimitError on %s", err, informerhub.LimitProjectionsPerOwner)
	}
	a.Close()
	watch(t, h, req("carol", 1, "metadata.labels")) // once her first is closed
}

// TestAnObjectThatCannotBeProjectedEndsTheCallsThatAskForIt checks that an
// object whose JSON the hub cannot project ends, with an *ObjectError, the
// subscriptions and snapshots that ask for a projection of it, rather than
// send it whole; counted in Stats. The others receive it as it came.
func TestAnObjectThatCannotBeProjectedEndsTheCallsThatAskForIt(t *testing.T) {
	c := newFakeCluster(t)
	h := newHub(t, c, informerhub.Config{})
	projected := watch(t, h, informerhub.WatchRequest{Fields: []string{"data"}})
	whole := watch(t, h, informerhub.WatchRequest{})

	bad := &upstream.Object{JSON: []byte(`{"metadata":{"name":"bad","namespace":"ns"},"data":{"v":`)}
	bad.Name, bad.Namespace, bad.ResourceVersion = "bad", "ns", "1"
	c.cms().Add(bad)
	var objErr *informerhub.ObjectError
	if _, err := projected.Next(context.Background()); !errors.As(err, &objErr) || objErr.Name != "bad" || objErr.Namespace != "ns" {
		t.Fatalf("the projected subscription: %v, want an ObjectError on ns/bad", err)
	}
	if e := next(t, whole); e.Object != string(bad.JSON) {
		t.Fatalf("the whole subscription got %q, want the object as it came", e.Object)
	}
	snap, err := h.Snapshot(context.Background(), informerhub.SnapshotRequest{Selector: informerhub.Selector{Resource: configMaps}, Fields: []string{"data"}})
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	if _, err := snap.NextPage(context.Background()); !errors.As(err, &objErr) {
		t.Fatalf("a projected snapshot: %v, want an ObjectError", err)
	}
	if n := h.Stats()[0].ObjectErrors; n != 2 {
		t.Errorf("ObjectErrors = %d, want 2: the live event's, and the snapshot's", n)
	}
}

// TestEverNewViewsDoNotGrowTheHistory checks that callers asking, one after
// another, for ever new projections of the same changes do not grow each
// record by a slot per view without bound: slots count in the history's
// budget for views, and past it callers build their events themselves.
func TestEverNewViewsDoNotGrowTheHistory(t *testing.T) {
	c := newFakeCluster(t)
	const historyBytes = 64 << 10
	h := newHub(t, c, informerhub.Config{HistoryBytes: historyBytes})
	s := watch(t, h, informerhub.WatchRequest{})
	c.cms().Add(configMap("ns", "first", nil, "v"))
	token := next(t, s).ResumeToken
	const records = 10
	for i := range records {
		c.cms().Add(configMap("ns", fmt.Sprint(i), nil, "v"))
	}
	informerhub.WaitForResourceVersion(h, configMaps, records+1)
	const views = 2000 // at most historyBytes/ViewSlotSize (682) slots fit
	for i := range views {
		v := watch(t, h, informerhub.WatchRequest{ResumeToken: token, Fields: []string{fmt.Sprintf("data.k%d", i)}})
		for range records {
			next(t, v)
		}
		v.Close()
	}
	if n, most := informerhub.ViewSlots(h, configMaps), historyBytes/informerhub.ViewSlotSize; n > most {
		t.Errorf("the history's records hold %d view slots after %d views, want at most %d", n, views, most)
	}
}
