package informerhub_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/informerhub/hubtest"
)

// counted is Counts as tests compare them.
type counted struct {
	Groups map[string]uint64
	Total  uint64
}

func countedOf(c *informerhub.Counts) counted { return counted{Groups: c.Groups, Total: c.Total} }

func count(t *testing.T, h *informerhub.Hub, req informerhub.CountRequest) *informerhub.CountSubscription {
	t.Helper()
	if req.Selector.Resource.Empty() {
		req.Selector.Resource = configMaps
	}
	s, err := h.Count(context.Background(), req)
	if err != nil {
		t.Fatalf("Count(%+v): %v", req, err)
	}
	t.Cleanup(s.Close)
	return s
}

// nextCounts returns the next counts, failing the test after a generous
// bound so that a bug shows as a failure, not a hang.
func nextCounts(t *testing.T, s *informerhub.CountSubscription) *informerhub.Counts {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := s.Next(ctx)
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return c
}

// countReader reads a CountSubscription, keeping the counts it read last.
type countReader struct {
	s    *informerhub.CountSubscription
	last *informerhub.Counts
}

// await reads counts until they are want, and fails the test with the
// last ones read if they do not become so within a generous bound. Counts
// that do not change are not sent again: the counts read last count too.
func (r *countReader) await(t *testing.T, want counted) *informerhub.Counts {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		if r.last != nil && cmp.Equal(countedOf(r.last), want) {
			return r.last
		}
		c, err := r.s.Next(ctx)
		if err != nil {
			got := "none"
			if r.last != nil {
				got = fmt.Sprint(countedOf(r.last))
			}
			t.Fatalf("counts did not become %v: %v; the last were %s", want, err, got)
		}
		r.last = c
	}
}

// TestCountsFollowChanges counts ConfigMaps with a label selector, grouped
// each way, through adds, changes of the group and of other fields,
// objects entering and leaving the selection, and deletions. After each
// step the counts become those of a model of the objects, computed apart.
func TestCountsFollowChanges(t *testing.T) {
	type cm struct {
		ns, name string
		labels   map[string]string
		data     string
	}
	group := map[string]func(cm) string{
		"":            func(cm) string { return "" },
		"namespace":   func(o cm) string { return o.ns },
		"label:app":   func(o cm) string { return o.labels["app"] },
		"data.v":      func(o cm) string { return o.data },
		`data["v"]`:   func(o cm) string { return o.data },
		"label:other": func(cm) string { return "" },
	}
	for groupBy, groupOf := range group {
		t.Run(fmt.Sprintf("group_by %q", groupBy), func(t *testing.T) {
			c := newFakeCluster(t)
			h := newHub(t, c, informerhub.Config{CountInterval: time.Nanosecond})
			model := map[string]cm{}
			put := func(o cm) {
				key := o.ns + "/" + o.name
				obj := configMap(o.ns, o.name, o.labels, o.data)
				if _, ok := model[key]; ok {
					c.cms().Modify(obj)
				} else {
					c.cms().Add(obj)
				}
				model[key] = o
			}
			del := func(ns, name string) {
				o := model[ns+"/"+name]
				c.cms().Delete(configMap(o.ns, o.name, o.labels, o.data))
				delete(model, ns+"/"+name)
			}
			want := func() counted {
				w := counted{}
				if groupBy != "" {
					w.Groups = map[string]uint64{}
				}
				for _, o := range model {
					if o.labels["keep"] != "yes" {
						continue
					}
					w.Total++
					if w.Groups != nil {
						w.Groups[groupOf(o)]++
					}
				}
				return w
			}
			put(cm{"a", "1", map[string]string{"keep": "yes", "app": "web"}, "x"})
			put(cm{"a", "2", map[string]string{"keep": "yes", "app": "db"}, "y"})
			put(cm{"b", "1", map[string]string{"keep": "yes", "app": "web"}, "x"})
			put(cm{"b", "2", map[string]string{"app": "web"}, "x"})

			s := count(t, h, informerhub.CountRequest{Selector: informerhub.Selector{LabelSelector: "keep=yes"}, GroupBy: groupBy})
			r := &countReader{s: s}
			first := r.await(t, want())
			if first.ResourceVersion != "4" {
				t.Errorf("the first counts are at resourceVersion %q, want 4", first.ResourceVersion)
			}
			steps := []struct {
				name string
				do   func()
			}{
				{"an object without the label", func() { put(cm{"a", "3", map[string]string{"keep": "yes"}, ""}) }},
				{"a label changes", func() { put(cm{"a", "1", map[string]string{"keep": "yes", "app": "db"}, "x"}) }},
				{"the data changes", func() { put(cm{"a", "2", map[string]string{"keep": "yes", "app": "db"}, "z"}) }},
				{"an object enters the selection", func() { put(cm{"b", "2", map[string]string{"keep": "yes", "app": "web"}, "w"}) }},
				{"an object leaves it", func() { put(cm{"b", "1", map[string]string{"app": "web"}, "x"}) }},
				{"an object is deleted", func() { del("a", "2") }},
				{"an object not selected is deleted", func() { del("b", "1") }},
				{"an object is added to the leftovers' group", func() { put(cm{"b", "3", map[string]string{"keep": "yes", "app": "web"}, "w"}) }},
				{"the last of a group is deleted", func() { del("a", "3") }},
			}
			for _, step := range steps {
				step.do()
				got := r.await(t, want())
				if groupBy == "" && got.Groups != nil {
					t.Fatalf("after %s: groups %v without group_by", step.name, got.Groups)
				}
				for g, n := range got.Groups {
					if n == 0 {
						t.Fatalf("after %s: group %q is at zero, want it left out", step.name, g)
					}
				}
			}
		})
	}
}

// TestCountGroupValues: a value groups as the string it is, or as its
// compact JSON; nothing or null there groups as "".
func TestCountGroupValues(t *testing.T) {
	obj := `{"metadata":{"namespace":"ns","labels":{"app.kubernetes.io/name":"web"}},
		"spec":{"s":"text","n":1.50,"big":12345678901234567890,"b":true,"null":null,"o":{"z":1,"a":"<&>"},"l":["x",2],
		"containers":[{"image":"nginx"},{"name":"no-image"},{"image":"redis"},"not an object",[{"image":"nested"}]]}}`
	for _, tt := range []struct{ groupBy, want string }{
		{"", ""},
		{"namespace", "ns"},
		{"label:app.kubernetes.io/name", "web"},
		{"label:missing", ""},
		{"spec.s", "text"},
		{"spec.n", "1.50"},
		{"spec.big", "12345678901234567890"},
		{"spec.b", "true"},
		{"spec.null", ""},
		{"spec.missing", ""},
		{"spec.s.deeper", ""},
		{"spec.o", `{"a":"<&>","z":1}`},
		{"spec.l", `["x",2]`},
		{"spec.containers.image", `["nginx","redis",["nested"]]`},
		{`metadata.labels["app.kubernetes.io/name"]`, "web"},
	} {
		got, err := informerhub.GroupOf(tt.groupBy, obj)
		if err != nil || got != tt.want {
			t.Errorf("group_by %q: %q, %v; want %q", tt.groupBy, got, err, tt.want)
		}
	}
}

// TestCountGroupsPodsByPhaseAndImages counts Pods by a status field and by
// a path through a list, through changes of both.
func TestCountGroupsPodsByPhaseAndImages(t *testing.T) {
	c := newFakeCluster(t)
	src := c.Source(pods)
	h := newHub(t, c, informerhub.Config{CountInterval: time.Nanosecond})
	src.Add(hubtest.Pod("a", "1", nil, "", corev1.PodPending))
	src.Add(hubtest.Pod("a", "2", nil, "", corev1.PodPending))
	byPhase := &countReader{s: count(t, h, informerhub.CountRequest{Selector: informerhub.Selector{Resource: pods}, GroupBy: "status.phase"})}
	byImages := &countReader{s: count(t, h, informerhub.CountRequest{Selector: informerhub.Selector{Resource: pods}, GroupBy: "spec.containers.image"})}
	byPhase.await(t, counted{Groups: map[string]uint64{"Pending": 2}, Total: 2})
	byImages.await(t, counted{Groups: map[string]uint64{`["nginx"]`: 2}, Total: 2})

	src.Modify(hubtest.Pod("a", "1", nil, "node", corev1.PodRunning))
	byPhase.await(t, counted{Groups: map[string]uint64{"Pending": 1, "Running": 1}, Total: 2})
	two := hubtest.Pod("a", "2", nil, "", corev1.PodPending)
	two.Spec.Containers = append(two.Spec.Containers, corev1.Container{Name: "sidecar", Image: "envoy"})
	src.Modify(two)
	byImages.await(t, counted{Groups: map[string]uint64{`["nginx"]`: 1, `["nginx","envoy"]`: 1}, Total: 2})
	src.Delete(hubtest.Pod("a", "1", nil, "node", corev1.PodRunning))
	byPhase.await(t, counted{Groups: map[string]uint64{"Pending": 1}, Total: 1})
	byImages.await(t, counted{Groups: map[string]uint64{`["nginx","envoy"]`: 1}, Total: 1})
}

// TestCountersAreShared: callers with the same resource type, selection
// (however written) and grouping share one counter, one subscription of
// the feed, and the very Counts it publishes; the last to leave stops it
// (and goleak, in TestMain, checks that its goroutines ended).
func TestCountersAreShared(t *testing.T) {
	c := newFakeCluster(t)
	h := newHub(t, c, informerhub.Config{})
	c.cms().Add(configMap("a", "1", map[string]string{"app": "web"}, ""))
	ctx := context.Background()
	open := func(labels, groupBy string) *informerhub.CountSubscription {
		s, err := h.Count(ctx, informerhub.CountRequest{Selector: informerhub.Selector{Resource: configMaps, LabelSelector: labels}, GroupBy: groupBy})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	one := open("app=web", "namespace")
	two := open("app in (web)", "namespace")
	if n, live := informerhub.Counters(h), informerhub.LiveSubscribers(h, configMaps); n != 1 || live > 1 {
		t.Fatalf("two callers of one count run %d counters and %d live subscribers, want 1 of each at most", n, live)
	}
	first, second := nextCounts(t, one), nextCounts(t, two)
	if first != second {
		t.Fatalf("the callers of one counter got distinct counts %v and %v, want the same shared Counts", first, second)
	}
	other := open("app=web", "label:app")
	if n := informerhub.Counters(h); n != 2 {
		t.Fatalf("%d counters for two groupings, want 2", n)
	}
	(&countReader{s: other}).await(t, counted{Groups: map[string]uint64{"web": 1}, Total: 1})

	one.Close()
	if n := informerhub.Counters(h); n != 2 {
		t.Fatalf("%d counters after one of two callers left, want 2", n)
	}
	c.cms().Add(configMap("b", "1", map[string]string{"app": "web"}, ""))
	(&countReader{s: two, last: second}).await(t, counted{Groups: map[string]uint64{"a": 1, "b": 1}, Total: 2})
	two.Close()
	other.Close()
	if n, live := informerhub.Counters(h), informerhub.LiveSubscribers(h, configMaps); n != 0 || live != 0 {
		t.Fatalf("%d counters and %d live subscribers after every caller left, want none", n, live)
	}
	if _, err := two.Next(ctx); !errors.Is(err, informerhub.ErrSubscriptionClosed) {
		t.Fatalf("Next after Close: %v, want ErrSubscriptionClosed", err)
	}
}

// TestCloseEndsABlockedNext: Close from another goroutine ends a Next
// waiting for counts that do not change.
func TestCloseEndsABlockedNext(t *testing.T) {
	c := newFakeCluster(t)
	h := newHub(t, c, informerhub.Config{})
	s := count(t, h, informerhub.CountRequest{})
	nextCounts(t, s)
	ended := make(chan error, 1)
	go func() {
		_, err := s.Next(context.Background())
		ended <- err
	}()
	s.Close()
	select {
	case err := <-ended:
		if !errors.Is(err, informerhub.ErrSubscriptionClosed) {
			t.Fatalf("Next: %v, want ErrSubscriptionClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Next did not return after Close")
	}
}

// TestCountsArePaced runs in a synctest bubble, where time is fake: new
// counts come at most once per CountInterval, with every change since the
// last together, and at once when the last are older than that.
func TestCountsArePaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval = time.Second
		c := newFakeCluster(t)
		h := newHub(t, c, informerhub.Config{CountInterval: interval})
		c.cms().Add(configMap("a", "0", nil, ""))
		s := count(t, h, informerhub.CountRequest{GroupBy: "namespace"})
		if got := countedOf(nextCounts(t, s)); got.Total != 1 {
			t.Fatalf("the first counts are %v, want 1 object", got)
		}
		start := time.Now()

		// Three changes at once, right after the first counts: one
		// response, an interval after them, with all three.
		for i := range 3 {
			c.cms().Add(configMap("b", fmt.Sprint(i), nil, ""))
		}
		synctest.Wait() // counted, not yet published
		got := nextCounts(t, s)
		if waited := time.Since(start); waited != interval {
			t.Errorf("new counts came %v after the last, want the interval, %v", waited, interval)
		}
		if want := (counted{Groups: map[string]uint64{"a": 1, "b": 3}, Total: 4}); !cmp.Equal(countedOf(got), want) {
			t.Fatalf("counts %v, want %v: the three changes together", countedOf(got), want)
		}

		// A change long after the last counts is published at once. (In
		// the bubble, Sleep only moves the fake clock on.)
		time.Sleep(10 * interval)
		start = time.Now()
		c.cms().Add(configMap("c", "0", nil, ""))
		got = nextCounts(t, s)
		if waited := time.Since(start); waited != 0 {
			t.Errorf("counts after a quiet while came %v after the change, want at once", waited)
		}
		if got.Total != 5 {
			t.Fatalf("counts %v, want 5 objects", countedOf(got))
		}

		// A change undone within the interval publishes nothing: the next
		// counts are those of the next change, at once.
		c.cms().Add(configMap("d", "0", nil, ""))
		c.cms().Delete(configMap("d", "0", nil, ""))
		synctest.Wait()
		time.Sleep(10 * interval)
		start = time.Now()
		c.cms().Add(configMap("e", "0", nil, ""))
		got = nextCounts(t, s)
		if want := (counted{Groups: map[string]uint64{"a": 1, "b": 3, "c": 1, "e": 1}, Total: 6}); !cmp.Equal(countedOf(got), want) || time.Since(start) != 0 {
			t.Fatalf("counts %v %v after the change, want %v at once", countedOf(got), time.Since(start), want)
		}
	})
}

// TestCountEndsWhenItsFeedStops: a counter whose feed stops fails every
// caller with why; the next Count starts a fresh one.
func TestCountEndsWhenItsFeedStops(t *testing.T) {
	c := newFakeCluster(t)
	h := newHub(t, c, informerhub.Config{})
	c.cms().Add(configMap("a", "1", nil, ""))
	one := count(t, h, informerhub.CountRequest{})
	two := count(t, h, informerhub.CountRequest{})
	nextCounts(t, one)
	if err := informerhub.PanicInProcess(h, configMaps); err == nil {
		t.Fatal("the handler did not fail")
	}
	for _, s := range []*informerhub.CountSubscription{one, two} {
		await(t, s.Done(), "the counter failing")
		_, err := s.Next(context.Background())
		var resErr *informerhub.ResourceError
		if !errors.As(err, &resErr) || !errors.Is(err, s.Err()) {
			t.Fatalf("Next: %v (Err: %v), want the feed's ResourceError", err, s.Err())
		}
	}
	if n := informerhub.Counters(h); n != 0 {
		t.Fatalf("%d counters after it failed, want none", n)
	}
	again := count(t, h, informerhub.CountRequest{})
	if got := countedOf(nextCounts(t, again)); got.Total != 1 {
		t.Fatalf("a fresh counter counted %v, want 1 object", got)
	}

	h.Close()
	if _, err := again.Next(context.Background()); !errors.Is(err, informerhub.ErrClosed) {
		t.Fatalf("Next after the hub closed: %v, want ErrClosed", err)
	}
	if _, err := h.Count(context.Background(), informerhub.CountRequest{Selector: informerhub.Selector{Resource: configMaps}}); !errors.Is(err, informerhub.ErrClosed) {
		t.Fatalf("Count after the hub closed: %v, want ErrClosed", err)
	}
}

// TestCountRefusesAGroupingItCannotRead: group_by is "", "namespace",
// "label:<key>" with a valid key, or a path.
func TestCountRefusesAGroupingItCannotRead(t *testing.T) {
	c := newFakeCluster(t)
	h := newHub(t, c, informerhub.Config{})
	for _, bad := range []string{"label:", "label:not a key", "label:-x", "status..phase", "spec.containers[0]", "status.phase.", string(make([]byte, 600))} {
		if err := informerhub.CheckGroupBy(bad); err == nil {
			t.Errorf("CheckGroupBy(%.20q) accepted it", bad)
		}
		_, err := h.Count(context.Background(), informerhub.CountRequest{Selector: informerhub.Selector{Resource: configMaps}, GroupBy: bad})
		var reqErr *informerhub.RequestError
		if !errors.As(err, &reqErr) || reqErr.Field != informerhub.FieldGroupBy || !errors.Is(err, informerhub.ErrInvalidRequest) {
			t.Errorf("Count with group_by %.20q: %v, want a RequestError on %s", bad, err, informerhub.FieldGroupBy)
		}
	}
	for _, good := range []string{"", "namespace", "label:app", "label:app.kubernetes.io/name", "status.phase", `metadata.annotations["example.com/team"]`, `["namespace"]`} {
		if err := informerhub.CheckGroupBy(good); err != nil {
			t.Errorf("CheckGroupBy(%q): %v", good, err)
		}
	}
	if n := informerhub.Counters(h); n != 0 {
		t.Fatalf("%d counters after refused requests, want none", n)
	}
}

// TestACounterCountsWithinItsOwnersLimits: the counter a request starts
// subscribes as its owner, whose distinct filters are limited; a caller
// that shares a running counter adds none.
func TestACounterCountsWithinItsOwnersLimits(t *testing.T) {
	c := newFakeCluster(t)
	h := newHub(t, c, informerhub.Config{MaxFiltersPerOwner: 1})
	filtered := func(expr, owner string) informerhub.CountRequest {
		return informerhub.CountRequest{Selector: informerhub.Selector{Resource: configMaps, Filter: expr}, GroupBy: "label:a", Owner: owner}
	}
	count(t, h, filtered("has(object.data)", "alice"))
	_, err := h.Count(context.Background(), filtered("!has(object.data)", "alice"))
	var limit *informerhub.LimitError
	if !errors.As(err, &limit) || limit.Limit != informerhub.LimitFiltersPerOwner {
		t.Fatalf("a second filter of alice's: %v, want her filter limit", err)
	}
	count(t, h, filtered("!has(object.data)", "bob"))
	count(t, h, filtered("!has(object.data)", "alice")) // bob's counter
	if n := informerhub.Counters(h); n != 2 {
		t.Fatalf("%d counters, want 2", n)
	}
}

// TestACountOfTooManyGroupsEnds: a Count whose objects fall in more groups
// than Config.MaxCountGroups, or with a group value longer than
// MaxCountGroupBytes, fails (at its start, or when a change makes it so),
// rather than hold and send ever more.
func TestACountOfTooManyGroupsEnds(t *testing.T) {
	c := newFakeCluster(t)
	h := newHub(t, c, informerhub.Config{MaxCountGroups: 2})
	c.cms().Add(configMap("ns", "a", map[string]string{"g": "1"}, "1"))
	c.cms().Add(configMap("ns", "b", map[string]string{"g": "2"}, "1"))
	byG := count(t, h, informerhub.CountRequest{GroupBy: "label:g"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var err error
	for err == nil { // the counts of the two groups, then the failure
		var counts *informerhub.Counts
		if counts, err = byG.Next(ctx); err == nil && counts.Total == 2 {
			c.cms().Add(configMap("ns", "c", map[string]string{"g": "3"}, "1"))
		}
	}
	var limit *informerhub.LimitError
	if !errors.As(err, &limit) || limit.Limit != informerhub.LimitCountGroups || limit.Max != 2 {
		t.Fatalf("a third group: %v, want the %s limit", err, informerhub.LimitCountGroups)
	}

	byName := count(t, h, informerhub.CountRequest{GroupBy: "metadata.name"})
	_, err = byName.Next(ctx)
	if !errors.As(err, &limit) || limit.Limit != informerhub.LimitCountGroups {
		t.Fatalf("three groups at the start: %v, want the %s limit", err, informerhub.LimitCountGroups)
	}
	c.cms().Add(configMap("ns2", "long", map[string]string{"g": "1"}, strings.Repeat("x", informerhub.MaxCountGroupBytes)))
	long := count(t, h, informerhub.CountRequest{Selector: informerhub.Selector{Resource: configMaps, Namespace: "ns2"}, GroupBy: "data"})
	for err = nil; err == nil; { // at its start, or once the feed has it
		_, err = long.Next(ctx)
	}
	if !errors.As(err, &limit) || limit.Limit != informerhub.LimitCountGroupBytes {
		t.Fatalf("a long group value: %v, want the %s limit", err, informerhub.LimitCountGroupBytes)
	}
}

// TestACountThatFallsBehindCountsAfresh: a counter whose subscription the
// history overtook (here before the counter read anything: once its
// initial events are counted, the changes after them are gone) neither
// replays from the API server nor ends its callers: it counts afresh from
// a new subscription, so a shard's count holds its shard only.
func TestACountThatFallsBehindCountsAfresh(t *testing.T) {
	c := newFakeCluster(t)
	c.cms().Add(configMap("ns", "first", nil, ""))
	h := newHub(t, c, informerhub.Config{HistorySize: 4, QueueSize: 2, CountInterval: time.Millisecond})
	watch(t, h, informerhub.WatchRequest{}) // runs the feed
	ctx := context.Background()
	req := informerhub.CountRequest{Selector: informerhub.Selector{Resource: configMaps, ShardSelector: lowerHalf}}
	// want counts the shard's objects; rv is the version of the last
	// change, and last that of the shard's last.
	want, rv, last := uint64(0), uint64(1), uint64(0)
	add := func(ns string, n int) {
		for i := range n {
			name := fmt.Sprint(i * 7919) // names whose hashes spread over both halves
			c.cms().Add(configMap(ns, name, nil, ""))
			rv++
			if inLowerHalf(ns + "/" + name) {
				want, last = want+1, rv
			}
		}
		informerhub.WaitForResourceVersion(h, configMaps, rv)
	}
	if inLowerHalf("ns/first") {
		want, last = 1, 1
	}
	add("a", 20)
	sub, err := informerhub.CountingSubscription(ctx, h, req)
	if err != nil {
		t.Fatal(err)
	}
	add("b", 8) // past the history, before the counter reads
	s, err := informerhub.StartCounter(h, sub, req)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// The recount's subscription goes live before the next changes: else
	// they could pass the history (of 4) while it reads its initial
	// events, and it would fall behind and count afresh once more. It is
	// then the one live subscriber: the first counting subscription fell
	// behind in b, and the watch above, never read, long before.
	awaitCondition(t, func() bool { return informerhub.LiveSubscribers(h, configMaps) == 1 }, "the recount's subscription live")
	add("c", 8) // counted live
	// The counts of the last change the shard selects, or a later one.
	for {
		counts := nextCounts(t, s)
		if v, _ := strconv.ParseUint(counts.ResourceVersion, 10, 64); v < last {
			continue
		}
		if counts.Total != want {
			t.Fatalf("the shard counts %d objects at resourceVersion %s, want %d", counts.Total, counts.ResourceVersion, want)
		}
		break
	}
	if st := statsOf(t, h); st.Recounts != 1 || st.Replays != 0 {
		t.Errorf("Recounts = %d, Replays = %d: want the counter to have counted afresh once, without a replay", st.Recounts, st.Replays)
	}
}

// TestRecountsBackOff: a counter that falls behind again and again waits
// longer before each recount, from a second to thirty, doubling, however
// long each count took before it fell behind; one that kept up for longer
// than that recounts at once again.
func TestRecountsBackOff(t *testing.T) {
	var (
		backoff   time.Duration
		recounted bool
		got       []time.Duration
	)
	fellBehind := func(keptUp time.Duration) {
		backoff = informerhub.NextRecountBackoff(backoff, recounted, keptUp)
		got = append(got, backoff)
		recounted = true
	}
	fellBehind(time.Hour) // the first count: a recount at once
	for range 7 {
		fellBehind(time.Second)
	}
	fellBehind(0)                // a count that never completed
	fellBehind(31 * time.Second) // kept up for half a minute
	fellBehind(time.Second)
	s := time.Second
	want := []time.Duration{0, s, 2 * s, 4 * s, 8 * s, 16 * s, 30 * s, 30 * s, 30 * s, 0, s}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the recounts' waits (-want +got):\n%s", diff)
	}
}
