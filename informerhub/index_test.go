package informerhub_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/informerhub/informerhub/informerhub"
)

// The tests of the label index compare snapshots and initial events with
// what the fake API server holds, filtered and ordered by the test itself:
// an index may change what the hub examines, never what it returns.

// indexedObjects is enough objects for the hub to index a label key.
const indexedObjects = informerhub.LabelIndexMinObjects + 176

// indexSelectors are label selectors the index serves (k=v, k==v, k in (v))
// and ones it does not, alone and combined with other requirements, a
// namespace and field selectors.
var indexSelectors = []informerhub.Selector{
	{},
	{LabelSelector: "sel=yes"},
	{LabelSelector: "sel==yes"},
	{LabelSelector: "sel in (yes)"},
	{LabelSelector: "sel in (yes,maybe)"},
	{LabelSelector: "sel=yes,app=web"},
	{LabelSelector: "sel=yes,app!=web"},
	{LabelSelector: "sel=yes,sel in (yes,maybe)"},
	{LabelSelector: "sel=yes,sel!=yes"},
	{LabelSelector: "app=web,tier=3"},
	{LabelSelector: "sel=no"},
	{LabelSelector: "tier=9"},
	{LabelSelector: "sel notin (yes)"},
	{LabelSelector: "!sel"},
	{LabelSelector: "tier"},
	{Namespace: "ns-0", LabelSelector: "sel=yes"},
	{Namespace: "ns-1", LabelSelector: "sel=yes"},
	{Namespace: "ns-2", LabelSelector: "app=db"},
	{LabelSelector: "sel=yes", FieldSelector: "metadata.name!=cm-00300"},
	{LabelSelector: "tier=3", FieldSelector: "metadata.namespace=ns-3"},
}

// describe names a selector in test names and messages.
func describe(sel informerhub.Selector) string {
	return fmt.Sprintf("namespace=%q labels=%q fields=%q", sel.Namespace, sel.LabelSelector, sel.FieldSelector)
}

// indexedConfigMap returns object i of the tests' clusters: one in a
// hundred is sel=yes (gen shifts which), and one in seven has no labels.
func indexedConfigMap(i, gen int) *corev1.ConfigMap {
	var l map[string]string
	if i%7 != 3 {
		l = map[string]string{
			"app":  []string{"web", "db", "cache"}[(i+gen)%3],
			"tier": strconv.Itoa(i % 10),
		}
		if (i+gen*50)%100 == 0 {
			l["sel"] = "yes"
		}
	}
	return configMap(fmt.Sprint("ns-", i%4), fmt.Sprintf("cm-%05d", i), l, fmt.Sprint("g", gen))
}

// indexCluster returns a cluster of n objects, a hub on it, and a syncer.
func indexCluster(t *testing.T, n int, cfg informerhub.Config) (*fakeCluster, *informerhub.Hub, *syncer) {
	t.Helper()
	c := newFakeCluster(t)
	for i := range n {
		c.cms().Add(indexedConfigMap(i, 0))
	}
	h := newHub(t, c, cfg)
	return c, h, &syncer{c: c, s: watch(t, h, informerhub.WatchRequest{})}
}

// syncer makes sure the hub has every change made so far: it writes a
// marker and waits for its event, which comes after them.
type syncer struct {
	c *fakeCluster
	s *informerhub.Subscription
	n int
}

func (y *syncer) sync(t *testing.T) {
	t.Helper()
	y.n++
	marker := configMap("zz", "marker", nil, strconv.Itoa(y.n))
	if y.n == 1 {
		y.c.cms().Add(marker)
	} else {
		y.c.cms().Modify(marker)
	}
	for {
		if e := toEv(t, nextChange(t, y.s)); e.Key == "zz/marker" && e.Data == marker.Data["v"] {
			return
		}
	}
}

// listed returns the objects of the fake API server that sel selects, in
// the order of snapshots, as namespace/name=data.
func listed(t *testing.T, c *fakeCluster, sel informerhub.Selector) []string {
	t.Helper()
	list, err := c.cms().List(metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ls, err := labels.Parse(sel.LabelSelector)
	if err != nil {
		t.Fatal(err)
	}
	fs, err := fields.ParseSelector(sel.FieldSelector)
	if err != nil {
		t.Fatal(err)
	}
	var cms []*corev1.ConfigMap
	for _, item := range list.(*corev1.List).Items {
		cm := item.Object.(*corev1.ConfigMap)
		if (sel.Namespace == "" || cm.Namespace == sel.Namespace) && ls.Matches(labels.Set(cm.Labels)) &&
			fs.Matches(fields.Set{"metadata.name": cm.Name, "metadata.namespace": cm.Namespace}) {
			cms = append(cms, cm)
		}
	}
	slices.SortFunc(cms, func(a, b *corev1.ConfigMap) int {
		if a.Namespace != b.Namespace {
			return strings.Compare(a.Namespace, b.Namespace)
		}
		return strings.Compare(a.Name, b.Name)
	})
	var out []string
	for _, cm := range cms {
		out = append(out, cm.Namespace+"/"+cm.Name+"="+cm.Data["v"])
	}
	return out
}

// snapshotPages reads a whole snapshot, and returns its pages and the
// objects it examined.
func snapshotPages(t *testing.T, h *informerhub.Hub, sel informerhub.Selector) (pages [][]string, examined int) {
	t.Helper()
	sel.Resource = configMaps
	snap, err := h.Snapshot(context.Background(), informerhub.SnapshotRequest{Selector: sel})
	if err != nil {
		t.Fatalf("Snapshot(%s): %v", describe(sel), err)
	}
	defer snap.Close()
	for {
		got, err := snap.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		objs, last := got.Objects, got.Last
		page := []string{}
		for _, o := range objs {
			var cm corev1.ConfigMap
			if err := json.Unmarshal([]byte(o), &cm); err != nil {
				t.Fatal(err)
			}
			page = append(page, cm.Namespace+"/"+cm.Name+"="+cm.Data["v"])
		}
		pages = append(pages, page)
		if last {
			return pages, informerhub.SnapshotExamined(snap)
		}
	}
}

// pagesOf splits objects as a snapshot with pages of size objects does.
func pagesOf(objects []string, size int) [][]string {
	pages := [][]string{}
	for len(objects) > size {
		pages, objects = append(pages, objects[:size]), objects[size:]
	}
	if objects == nil {
		objects = []string{}
	}
	return append(pages, objects)
}

// initialEvents reads a subscription's initial events, as
// namespace/name=data, and returns them and the token of the last one.
func initialEvents(t *testing.T, s *informerhub.Subscription, max int) (objects []string, token string, end bool) {
	t.Helper()
	for len(objects) < max {
		e := toEv(t, nextChange(t, s))
		if e.End {
			return objects, "", true
		}
		if e.Type != "ADDED" {
			t.Fatalf("initial event %v", e)
		}
		objects = append(objects, e.Key+"="+e.Data)
	}
	return objects, s.ResumeToken(), false
}

// checkAgainstList compares every selector's snapshot and initial events
// with the fake API server's objects, and the feed's index with its state.
func checkAgainstList(t *testing.T, c *fakeCluster, h *informerhub.Hub, pageSize int) {
	t.Helper()
	if err := informerhub.CheckLabelIndex(h, configMaps); err != nil {
		t.Fatal(err)
	}
	for _, sel := range indexSelectors {
		want := listed(t, c, sel)
		got, _ := snapshotPages(t, h, sel)
		if diff := cmp.Diff(pagesOf(want, pageSize), got); diff != "" {
			t.Errorf("snapshot of %s (-want +got):\n%s", describe(sel), diff)
		}
		sel.Resource = configMaps
		s, err := h.Watch(context.Background(), informerhub.WatchRequest{Selector: sel, SendInitialEvents: true})
		if err != nil {
			t.Fatal(err)
		}
		initial, _, _ := initialEvents(t, s, len(want)+1)
		s.Close()
		if diff := cmp.Diff(want, initial); diff != "" {
			t.Errorf("initial events of %s (-want +got):\n%s", describe(sel), diff)
		}
	}
}

// TestLabelIndexAgreesWithTheObjects follows the index through every kind
// of change: snapshots and initial events, with and without indexable
// requirements, must return exactly the selected objects, in pages as a
// scan makes them.
func TestLabelIndexAgreesWithTheObjects(t *testing.T) {
	const pageSize = 7
	c, h, y := indexCluster(t, indexedObjects, informerhub.Config{SnapshotPageSize: pageSize})
	y.sync(t)
	steps := []struct {
		name   string
		change func()
	}{{
		name:   "initial list",
		change: func() {},
	}, {
		name: "adds",
		change: func() {
			for i := indexedObjects; i < indexedObjects+60; i++ {
				c.cms().Add(indexedConfigMap(i, 0))
			}
		},
	}, {
		name: "label changes: objects enter and leave sel=yes, change app",
		change: func() {
			for i := 0; i < indexedObjects; i += 25 {
				c.cms().Modify(indexedConfigMap(i, 1))
			}
		},
	}, {
		name: "changes that keep the labels",
		change: func() {
			for i := 50; i < indexedObjects; i += 100 {
				cm := indexedConfigMap(i, 1)
				cm.Data["v"] = "same labels"
				c.cms().Modify(cm)
			}
		},
	}, {
		name: "deletes",
		change: func() {
			for i := 0; i < indexedObjects; i += 30 {
				c.cms().Delete(indexedConfigMap(i, 0))
			}
		},
	}, {
		name: "a value no object carries any more",
		change: func() {
			for i := 0; i < indexedObjects+60; i++ {
				if i%7 != 3 && i%10 == 9 {
					cm := indexedConfigMap(i, 0)
					cm.Labels["tier"] = "nine"
					c.cms().Modify(cm)
				}
			}
		},
	}, {
		name: "relist",
		change: func() {
			for i := 1; i < indexedObjects; i += 50 {
				c.cms().ModifyDropWatch(indexedConfigMap(i, 2))
			}
			for i := 2; i < indexedObjects; i += 100 {
				c.cms().DeleteDropWatch(indexedConfigMap(i, 0))
			}
			for i := 100000; i < 100000+300; i += 50 {
				c.cms().AddDropWatch(indexedConfigMap(i, 0))
			}
			c.cms().ResetWatch()
		},
	}}
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			step.change()
			y.sync(t)
			checkAgainstList(t, c, h, pageSize)
		})
	}
	if got, want := informerhub.IndexedLabelKeys(h, configMaps), []string{"app", "sel", "tier"}; !slices.Equal(got, want) {
		t.Fatalf("indexed keys %q, want %q", got, want)
	}
}

// TestLabelIndexRollsBackToAToken asks for initial events at a resume
// token: the index tree they read is rolled back through the history, like
// the state, including a relist's batch.
func TestLabelIndexRollsBackToAToken(t *testing.T) {
	c, h, y := indexCluster(t, indexedObjects, informerhub.Config{})
	y.sync(t)
	snapshotPages(t, h, informerhub.Selector{LabelSelector: "sel=yes"}) // builds the index
	token := y.s.ResumeToken()
	want := map[string][]string{}
	for _, sel := range indexSelectors {
		want[describe(sel)] = listed(t, c, sel)
	}

	for i := 0; i < indexedObjects; i += 25 {
		c.cms().Modify(indexedConfigMap(i, 1)) // enter or leave sel=yes, change app
	}
	for i := 0; i < indexedObjects; i += 100 {
		c.cms().Delete(indexedConfigMap(i, 1))
		c.cms().Add(indexedConfigMap(i, 2))
	}
	for i := indexedObjects; i < indexedObjects+300; i += 10 {
		c.cms().Add(indexedConfigMap(i, 0))
	}
	y.sync(t)
	for i := 3; i < indexedObjects; i += 50 {
		c.cms().ModifyDropWatch(indexedConfigMap(i, 2))
	}
	c.cms().DeleteDropWatch(indexedConfigMap(200, 2))
	c.cms().ResetWatch()
	y.sync(t)
	if err := informerhub.CheckLabelIndex(h, configMaps); err != nil {
		t.Fatal(err)
	}

	for _, sel := range indexSelectors {
		want := want[describe(sel)]
		t.Run(describe(sel), func(t *testing.T) {
			sel.Resource = configMaps
			// Read the initial events in parts, resuming from the last
			// one's token, which names the object after which to go on.
			var got []string
			tok := token
			for range len(want) + 2 {
				s, err := h.Watch(context.Background(), informerhub.WatchRequest{Selector: sel, ResumeToken: tok, SendInitialEvents: true})
				if err != nil {
					t.Fatal(err)
				}
				part, next, end := initialEvents(t, s, 3)
				s.Close()
				got = append(got, part...)
				if end {
					break
				}
				tok = next
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("initial events at the token (-want +got):\n%s", diff)
			}
		})
	}
}

// TestLabelIndexIsUsed checks that a selective snapshot or initial events
// examine the objects with the label, not the whole state, and pick the
// most selective of the indexed requirements.
func TestLabelIndexIsUsed(t *testing.T) {
	c, h, y := indexCluster(t, indexedObjects, informerhub.Config{})
	y.sync(t)
	state := indexedObjects + 1 // and the marker
	selected := len(listed(t, c, informerhub.Selector{LabelSelector: "sel=yes"}))
	web := len(listed(t, c, informerhub.Selector{LabelSelector: "app=web"}))
	tests := []struct {
		selector string
		examined int // by the snapshot, and by initial events
	}{
		{"sel in (yes,maybe)", state}, // not indexable
		{"sel=yes", selected},
		{"app=web", web},
		{"app=web,sel=yes", selected},
		{"sel=yes,app=web", selected},
		{"app=web,sel=no", 0},
		{"app=web,tier=1", web}, // app is indexed: tier is not, not for this
	}
	for _, tt := range tests {
		t.Run(tt.selector, func(t *testing.T) {
			sel := informerhub.Selector{LabelSelector: tt.selector}
			if _, examined := snapshotPages(t, h, sel); examined != tt.examined {
				t.Errorf("the snapshot examined %d objects, want %d", examined, tt.examined)
			}
			want := listed(t, c, sel)
			if len(want) == 0 {
				return // the cursor is gone when the first event, the last, comes
			}
			sel.Resource = configMaps
			s := watch(t, h, informerhub.WatchRequest{Selector: sel, SendInitialEvents: true})
			if got, _, _ := initialEvents(t, s, len(want)); !slices.Equal(got, want) {
				t.Fatalf("initial events differ from the objects:\n%s", cmp.Diff(want, got))
			}
			if examined := informerhub.InitialEventsExamined(s); examined != tt.examined {
				t.Errorf("initial events examined %d objects, want %d", examined, tt.examined)
			}
		})
	}
	if got, want := informerhub.IndexedLabelKeys(h, configMaps), []string{"app", "sel"}; !slices.Equal(got, want) {
		t.Fatalf("indexed keys %q, want %q", got, want)
	}
}

// TestSnapshotOfAnIndexEndsWithItsLastPage: a selection that fills its
// pages exactly, read from a label index (whose every object it selects),
// ends with its last full page, not with an empty one after it.
func TestSnapshotOfAnIndexEndsWithItsLastPage(t *testing.T) {
	const n = 3000
	selected := 0
	for i := range n {
		if indexedConfigMap(i, 0).Labels["tier"] == "1" {
			selected++
		}
	}
	pageSize := selected
	if selected%2 == 0 {
		pageSize = selected / 2
	}
	if pageSize <= informerhub.CursorBatch {
		t.Fatalf("pages of %d objects: a page must be more than a cursor's batch", pageSize)
	}
	c, h, y := indexCluster(t, n, informerhub.Config{SnapshotPageSize: pageSize})
	y.sync(t)
	sel := informerhub.Selector{LabelSelector: "tier=1"}
	want := pagesOf(listed(t, c, sel), pageSize)
	if len(want[len(want)-1]) != pageSize {
		t.Fatalf("pages of %v objects: the last is not full", pageLengths(want))
	}
	for _, read := range []string{"building the index", "from the index"} {
		if got, _ := snapshotPages(t, h, sel); !cmp.Equal(want, got) {
			t.Errorf("%s: pages of %v objects, want %v", read, pageLengths(got), pageLengths(want))
		}
	}
}

func pageLengths(pages [][]string) []int {
	var n []int
	for _, p := range pages {
		n = append(n, len(p))
	}
	return n
}

// TestLabelIndexIsBounded: a feed indexes at most MaxLabelIndexKeys keys,
// and none on a small state; selectors on other keys are scanned, with the
// same results.
func TestLabelIndexIsBounded(t *testing.T) {
	t.Run("small state", func(t *testing.T) {
		c, h, _ := indexCluster(t, 200, informerhub.Config{})
		sel := informerhub.Selector{LabelSelector: "sel=yes"}
		pages, examined := snapshotPages(t, h, sel)
		if diff := cmp.Diff(pagesOf(listed(t, c, sel), informerhub.DefaultSnapshotPageSize), pages); diff != "" {
			t.Fatalf("snapshot (-want +got):\n%s", diff)
		}
		if examined != 200 {
			t.Fatalf("examined %d objects, want all 200", examined)
		}
		if keys := informerhub.IndexedLabelKeys(h, configMaps); len(keys) != 0 {
			t.Fatalf("indexed %q on a small state", keys)
		}
	})

	t.Run("many keys", func(t *testing.T) {
		c := newFakeCluster(t)
		const keys = informerhub.MaxLabelIndexKeys + 2
		for i := range indexedObjects {
			l := map[string]string{}
			for k := range keys {
				l[fmt.Sprintf("k%02d", k)] = strconv.Itoa((i + k) % 50)
			}
			c.cms().Add(configMap("ns", fmt.Sprintf("cm-%05d", i), l, ""))
		}
		h := newHub(t, c, informerhub.Config{})
		for k := range keys {
			sel := informerhub.Selector{LabelSelector: fmt.Sprintf("k%02d=7", k)}
			pages, examined := snapshotPages(t, h, sel)
			want := listed(t, c, sel)
			if diff := cmp.Diff(pagesOf(want, informerhub.DefaultSnapshotPageSize), pages); diff != "" {
				t.Fatalf("snapshot of %s (-want +got):\n%s", sel.LabelSelector, diff)
			}
			wantExamined := len(want)
			if k >= informerhub.MaxLabelIndexKeys {
				wantExamined = indexedObjects
			}
			if examined != wantExamined {
				t.Errorf("snapshot of %s examined %d objects, want %d", sel.LabelSelector, examined, wantExamined)
			}
		}
		if got := informerhub.IndexedLabelKeys(h, configMaps); len(got) != informerhub.MaxLabelIndexKeys {
			t.Fatalf("indexed %d keys (%q), want %d", len(got), got, informerhub.MaxLabelIndexKeys)
		}
		// A selector on an unindexed key and an indexed one reads the
		// indexed one's tree.
		sel := informerhub.Selector{LabelSelector: fmt.Sprintf("k%02d=7,k00=7", keys-1)}
		pages, examined := snapshotPages(t, h, sel)
		if diff := cmp.Diff(pagesOf(listed(t, c, sel), informerhub.DefaultSnapshotPageSize), pages); diff != "" {
			t.Fatalf("snapshot of %s (-want +got):\n%s", sel.LabelSelector, diff)
		}
		if want := len(listed(t, c, informerhub.Selector{LabelSelector: "k00=7"})); examined != want {
			t.Errorf("snapshot of %s examined %d objects, want %d", sel.LabelSelector, examined, want)
		}
		if err := informerhub.CheckLabelIndex(h, configMaps); err != nil {
			t.Fatal(err)
		}
	})
}

// TestRaceLabelIndexesBuiltWhileTheStateChanges builds indexes of three
// keys, each by two requests at once, while the informer takes changes
// that move objects between their values: the builds read their clones of
// the state as the feed writes it (the race detector watches), and the
// indexes installed follow the changes made meanwhile.
func TestRaceLabelIndexesBuiltWhileTheStateChanges(t *testing.T) {
	c, h, y := indexCluster(t, indexedObjects, informerhub.Config{})
	y.sync(t)
	var changes sync.WaitGroup
	changes.Go(func() {
		for gen := 1; gen <= 3; gen++ {
			for i := 0; i < indexedObjects; i += 9 {
				c.cms().Modify(indexedConfigMap(i, gen))
			}
		}
	})
	var requests sync.WaitGroup
	for _, sel := range []string{"app=web", "tier=3", "sel=yes", "app=db", "tier=4", "sel=yes"} {
		requests.Go(func() {
			s, err := h.Snapshot(context.Background(), informerhub.SnapshotRequest{Selector: informerhub.Selector{Resource: configMaps, LabelSelector: sel}})
			if err != nil {
				t.Error(err)
				return
			}
			s.Close()
		})
	}
	requests.Wait()
	changes.Wait()
	y.sync(t)
	if got, want := informerhub.IndexedLabelKeys(h, configMaps), []string{"app", "sel", "tier"}; !slices.Equal(got, want) {
		t.Fatalf("indexed keys %q, want %q", got, want)
	}
	if err := informerhub.CheckLabelIndex(h, configMaps); err != nil {
		t.Fatal(err)
	}
}
