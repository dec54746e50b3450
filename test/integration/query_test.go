package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/informerhub"
)

// A query is a subscription's filter, projection and previous state, and
// what they mean computed without the hub: the reference each hub stream is
// compared with.
type query struct {
	name     string
	filter   string                                  // CEL, for the hub
	selected func(u *unstructured.Unstructured) bool // the same, in Go
	// undecided, when set, tells the objects on which the filter errs: they
	// are selected, and marked (filter_error).
	undecided func(u *unstructured.Unstructured) bool
	fields    []string // dotted paths
	previous  bool
}

// queryChange is an event as these tests compare it.
type queryChange struct {
	Type      string
	Name      string
	RV        string
	Object    string // canonical JSON
	Previous  string
	Undecided bool // marked with a filter_error
}

func (q query) request(ns string) *informerhubv1.WatchRequest {
	sel := watchSelector(ns)
	sel.Filter = q.filter
	return &informerhubv1.WatchRequest{Selector: sel, Fields: q.fields, IncludePrevious: q.previous}
}

func (q query) selects(u *unstructured.Unstructured) bool {
	return q.selected == nil || q.selected(u) || q.undecides(u)
}

func (q query) undecides(u *unstructured.Unstructured) bool {
	return q.undecided != nil && q.undecided(u)
}

// project is the projection of q.fields, by hand.
func (q query) project(t *testing.T, u *unstructured.Unstructured, rv string) string {
	t.Helper()
	o := u.Object
	if len(q.fields) > 0 {
		o = map[string]any{"apiVersion": u.GetAPIVersion(), "kind": u.GetKind()}
		meta := map[string]any{"name": u.GetName(), "namespace": u.GetNamespace(), "uid": string(u.GetUID()), "resourceVersion": u.GetResourceVersion()}
		o["metadata"] = meta
		for _, f := range q.fields {
			path := strings.Split(f, ".")
			if v, ok, _ := unstructured.NestedFieldNoCopy(u.Object, path...); ok {
				if err := unstructured.SetNestedField(o, runtimeDeepCopy(v), path...); err != nil {
					t.Fatal(err)
				}
			}
		}
	} else {
		o = u.DeepCopy().Object
	}
	if rv != "" {
		if err := unstructured.SetNestedField(o, rv, "metadata", "resourceVersion"); err != nil {
			t.Fatal(err)
		}
	}
	data, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	return canonicalJSON(t, data)
}

func runtimeDeepCopy(v any) any {
	return (&unstructured.Unstructured{Object: map[string]any{"v": v}}).DeepCopy().Object["v"]
}

// sameFields reports whether two states agree on the query's fields.
func (q query) sameFields(t *testing.T, a, b *unstructured.Unstructured) bool {
	t.Helper()
	strip := func(u *unstructured.Unstructured) string {
		c := u.DeepCopy()
		c.SetResourceVersion("")
		return q.project(t, c, "")
	}
	return strip(a) == strip(b)
}

// reference turns the API server's unfiltered watch of a namespace into
// what a subscriber of q must receive, from the state it holds.
type reference struct {
	q     query
	state map[string]*unstructured.Unstructured
}

func (r *reference) apply(t *testing.T, e watch.Event) *queryChange {
	t.Helper()
	u := e.Object.(*unstructured.Unstructured)
	prev := r.state[u.GetName()]
	was, is := prev != nil && r.q.selects(prev), e.Type != watch.Deleted && r.q.selects(u)
	if e.Type == watch.Deleted {
		delete(r.state, u.GetName())
	} else {
		r.state[u.GetName()] = u
	}
	c := &queryChange{Name: u.GetName(), RV: u.GetResourceVersion()}
	// Marked when the filter could not decide on a state that made the
	// event.
	switch {
	case was && is:
		if len(r.q.fields) > 0 && r.q.sameFields(t, prev, u) {
			return nil
		}
		c.Type, c.Object = "MODIFIED", r.q.project(t, u, "")
		if r.q.previous {
			c.Previous = r.q.project(t, prev, "")
		}
		c.Undecided = r.q.undecides(u) || r.q.undecides(prev)
	case is:
		c.Type, c.Object, c.Undecided = "ADDED", r.q.project(t, u, ""), r.q.undecides(u)
	case was && e.Type == watch.Deleted:
		c.Type, c.Object, c.Undecided = "DELETED", r.q.project(t, u, ""), r.q.undecides(prev)
	case was:
		// The last state that matched, at the version of the change.
		c.Type, c.Object, c.Undecided = "DELETED", r.q.project(t, prev, u.GetResourceVersion()), r.q.undecides(prev)
	default:
		return nil
	}
	return c
}

// untilMarker reads the API server's watch up to the ADDED of marker,
// returning what the reference makes of it.
func (r *reference) untilMarker(t *testing.T, w watch.Interface, marker string) []queryChange {
	t.Helper()
	var out []queryChange
	for e := range w.ResultChan() {
		switch e.Type {
		case watch.Bookmark:
			continue
		case watch.Error:
			t.Fatalf("the API server's watch: %v", e.Object)
		}
		c := r.apply(t, e)
		if c == nil {
			continue
		}
		if c.Name == marker && c.Type == "ADDED" {
			return out
		}
		out = append(out, *c)
	}
	t.Fatal("the API server's watch ended")
	return nil
}

// listed is the state at exactly rv, by the API server, and what a
// subscriber of q holds of it: its initial events.
func (r *reference) list(t *testing.T, ns, rv string) []queryChange {
	t.Helper()
	list, err := dyn.Resource(configMaps).Namespace(ns).List(ctxFor(t), metav1.ListOptions{ResourceVersion: rv, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
	if err != nil {
		t.Fatal(err)
	}
	r.state = map[string]*unstructured.Unstructured{}
	var out []queryChange
	for i := range list.Items {
		u := &list.Items[i]
		u.SetAPIVersion("v1")
		u.SetKind("ConfigMap")
		r.state[u.GetName()] = u
		if r.q.selects(u) {
			out = append(out, queryChange{Type: "ADDED", Name: u.GetName(), RV: u.GetResourceVersion(), Object: r.q.project(t, u, ""), Undecided: r.q.undecides(u)})
		}
	}
	slices.SortFunc(out, func(a, b queryChange) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func hubQueryChange(t *testing.T, resp *informerhubv1.WatchResponse) queryChange {
	t.Helper()
	c := hubChange(t, resp)
	qc := queryChange{Type: c.Type, Name: c.Name, RV: c.RV, Object: c.Object, Undecided: resp.FilterError != ""}
	if resp.PreviousObject != "" {
		qc.Previous = canonicalJSON(t, []byte(resp.PreviousObject))
	}
	if resp.Type != informerhubv1.EventType_EVENT_TYPE_MODIFIED && resp.PreviousObject != "" {
		t.Fatalf("a %v with a previous object", resp.Type)
	}
	return qc
}

// hubQueryChangesUntil reads a hub stream up to the ADDED of marker, with
// the token of each change.
func hubQueryChangesUntil(t *testing.T, r *streamReader[informerhubv1.WatchResponse], marker string) (changes []queryChange, tokens []string) {
	t.Helper()
	hubResponsesUntil(t, r, marker, func(resp *informerhubv1.WatchResponse) change {
		c := hubQueryChange(t, resp)
		changes, tokens = append(changes, c), append(tokens, resp.ResumeToken)
		return change{Type: c.Type, Name: c.Name}
	})
	return changes[:len(changes)-1], tokens
}

func dataIsOn(u *unstructured.Unstructured) bool {
	v, ok, _ := unstructured.NestedString(u.Object, "data", "v")
	return ok && v == "on"
}

var queries = []query{
	{name: "filter", filter: `has(object.data) && object.data.v == "on"`, selected: dataIsOn},
	{name: "filter fields previous", filter: `has(object.data) && object.data.v == "on"`, selected: dataIsOn, fields: []string{"data"}, previous: true},
	{name: "fields", fields: []string{"metadata.labels"}},
	{name: "previous", previous: true},
	// An evaluation that errs (no data.v, or no labels, where the other
	// side is not false) selects, marked.
	{name: "filter erring", filter: `object.data.v == "on" && object.metadata.labels.team == "a"`, selected: func(u *unstructured.Unstructured) bool {
		return dataIsOn(u) && u.GetLabels()["team"] == "a"
	}, undecided: func(u *unstructured.Unstructured) bool {
		v, hasV, _ := unstructured.NestedString(u.Object, "data", "v")
		team, hasTeam := u.GetLabels()["team"]
		// CEL's && is false when either side is, whatever the other.
		return (!hasV || !hasTeam) && !(hasV && v != "on") && !(hasTeam && team != "a")
	}},
}

// TestQueriesFollowTheAPIServer checks filters, projections and previous
// state against a reference computed from the API server's own LIST and
// watch: initial events, snapshots, live changes (objects entering and
// leaving a filter, modifications of fields a projection drops), resumes
// from the hub's history, and resumes by replay after the hub restarted,
// when its history no longer reaches the token.
func TestQueriesFollowTheAPIServer(t *testing.T) {
	ns := namespace(t)
	put := func(name, v string, labels map[string]string) {
		if _, err := kube.CoreV1().ConfigMaps(ns).Get(bgCtx(), name, metav1.GetOptions{}); err != nil {
			createConfigMap(t, ns, name, labels, v)
			return
		}
		updateConfigMap(t, ns, name, labels, v)
	}
	for i := range 6 {
		put(fmt.Sprint("cm-", i), []string{"on", "off"}[i%2], map[string]string{"team": []string{"a", "b"}[i/3]})
	}
	// One object without data.v: filters that read it err on it.
	if _, err := kube.CoreV1().ConfigMaps(ns).Create(bgCtx(), configMapWithoutData(ns, "bare"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	hub := startRestartableHub(t, informerhub.Config{})
	client := informerhubv1.NewInformerHubServiceClient(dial(t, hub.addr))

	type run struct {
		q      query
		ref    *reference
		api    watch.Interface
		hub    *streamReader[informerhubv1.WatchResponse]
		phase1 []queryChange
		tokens []string
	}
	var runs []*run
	for _, q := range queries {
		r := &run{q: q, ref: &reference{q: q}}
		req := q.request(ns)
		req.SendInitialEvents = true
		r.hub, _ = openWatch(t, client, req)
		var initial []queryChange
		var end *informerhubv1.WatchResponse
		for end == nil {
			resp := r.hub.next(t)
			if resp.InitialEventsEnd {
				end = resp
				continue
			}
			initial = append(initial, hubQueryChange(t, resp))
		}
		if diff := cmp.Diff(r.ref.list(t, ns, end.ResourceVersion), initial); diff != "" {
			t.Fatalf("%s: initial events (-reference +hub):\n%s", q.name, diff)
		}
		w, err := dyn.Resource(configMaps).Namespace(ns).Watch(ctxFor(t), metav1.ListOptions{ResourceVersion: end.ResourceVersion})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		r.api = w

		// A snapshot of the same query equals the reference's LIST at
		// its version.
		snap, err := client.Snapshot(ctxFor(t), &informerhubv1.SnapshotRequest{Selector: q.request(ns).Selector, Fields: q.fields})
		if err != nil {
			t.Fatal(err)
		}
		var objects []queryChange
		var rv string
		for {
			page, err := snap.Recv()
			if err != nil {
				t.Fatal(err)
			}
			if len(page.FilterErrors) != 0 && len(page.FilterErrors) != len(page.Objects) {
				t.Fatalf("%s: a snapshot page of %d objects and %d filter errors", q.name, len(page.Objects), len(page.FilterErrors))
			}
			for i, o := range page.Objects {
				resp := &informerhubv1.WatchResponse{Type: informerhubv1.EventType_EVENT_TYPE_ADDED, Object: o}
				if len(page.FilterErrors) > 0 {
					resp.FilterError = page.FilterErrors[i]
				}
				objects = append(objects, hubQueryChange(t, resp))
			}
			if rv = page.ResourceVersion; page.Last {
				break
			}
		}
		snapRef := &reference{q: q}
		if diff := cmp.Diff(snapRef.list(t, ns, rv), objects); diff != "" {
			t.Fatalf("%s: snapshot (-reference +hub):\n%s", q.name, diff)
		}
		runs = append(runs, r)
	}

	// Phase 1, live.
	put("cm-0", "off", map[string]string{"team": "a"})           // leaves the filter
	put("cm-1", "on", map[string]string{"team": "a"})            // enters it
	put("cm-2", "on", map[string]string{"team": "b", "x": "y"})  // labels only
	put("cm-2", "on", map[string]string{"team": "b", "x": "y2"}) // labels only
	put("cm-4", "on", map[string]string{"team": "b"})            // data only, enters
	put("bare", "on", nil)                                       // now has data.v
	deleteConfigMap(t, ns, "cm-3")
	put("cm-6", "on", map[string]string{"team": "a"})
	put("marker-1", "on", map[string]string{"team": "a"})
	for _, r := range runs {
		want := r.ref.untilMarker(t, r.api, "marker-1")
		if len(want) == 0 {
			t.Fatalf("%s: the reference has no change: the case tests nothing", r.q.name)
		}
		r.phase1, r.tokens = hubQueryChangesUntil(t, r.hub, "marker-1")
		if diff := cmp.Diff(want, r.phase1); diff != "" {
			t.Fatalf("%s: live changes (-reference +hub):\n%s", r.q.name, diff)
		}
	}

	// Resumed from the hub's history, from each change of phase 1.
	for _, r := range runs {
		for i, token := range r.tokens[:len(r.tokens)-1] {
			req := r.q.request(ns)
			req.ResumeToken = token
			resumed, cancel := openWatch(t, client, req)
			got, _ := hubQueryChangesUntil(t, resumed, "marker-1")
			cancel()
			if diff := cmp.Diff(r.phase1[i+1:], got, cmpopts.EquateEmpty()); diff != "" {
				t.Fatalf("%s: resumed after change %d (-reference +hub):\n%s", r.q.name, i, diff)
			}
		}
	}

	// Phase 2: the hub restarts and its history begins after these
	// changes; resuming from marker-1 replays them from the API server.
	hub.kill()
	put("cm-1", "off", map[string]string{"team": "a"})                 // leaves the filter
	put("cm-2", "on", map[string]string{"team": "b", "x": "y3"})       // labels only
	put("cm-5", "on", map[string]string{"team": "b"})                  // enters
	put("cm-6", "on", map[string]string{"team": "a", "note": "more"})  // labels only, stays in
	put("cm-6", "on2", map[string]string{"team": "a", "note": "more"}) // leaves
	deleteConfigMap(t, ns, "cm-4")
	put("cm-7", "on", map[string]string{"team": "a"})
	hub.start()
	resumed := make([]*streamReader[informerhubv1.WatchResponse], len(runs))
	for i, r := range runs {
		req := r.q.request(ns)
		req.ResumeToken = r.tokens[len(r.tokens)-1]
		resumed[i], _ = openStartedWatch(t, client, req)
	}
	put("cm-0", "on", map[string]string{"team": "a"}) // after the restart: from the new history
	put("marker-2", "on", map[string]string{"team": "a"})
	for i, r := range runs {
		want := r.ref.untilMarker(t, r.api, "marker-2")
		got, _ := hubQueryChangesUntil(t, resumed[i], "marker-2")
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("%s: replayed after a restart (-reference +hub):\n%s", r.q.name, diff)
		}
	}
	var replays uint64
	for _, st := range hub.hub.Stats() {
		replays += st.Replays
	}
	if replays < uint64(len(runs)) {
		t.Errorf("%d replays for %d resumed streams: the restart did not put their tokens out of the history", replays, len(runs))
	}
}

// TestBadQueriesAreRefusedWithTheirField checks the answer to each kind of
// bad filter, projection and format: its code, reason and field.
func TestBadQueriesAreRefusedWithTheirField(t *testing.T) {
	h := startHub(t, informerhub.Config{MaxFiltersPerResource: 1, MaxFilterLength: 200})
	ns := namespace(t)
	// watchErr opens a Watch and returns what refused it, or nil once the
	// subscription exists (its headers carry its start token).
	watchErr := func(req *informerhubv1.WatchRequest) error {
		if req.Selector == nil {
			req.Selector = watchSelector(ns)
		}
		ctx, cancel := context.WithCancel(ctxFor(t))
		defer cancel()
		stream, err := h.client.Watch(ctx, req)
		if err != nil {
			return err
		}
		if md, err := stream.Header(); err == nil && len(md.Get("resume-token")) > 0 {
			return nil
		}
		_, err = stream.Recv()
		return err
	}
	withFilter := func(expr string) *informerhubv1.WatchRequest {
		sel := watchSelector(ns)
		sel.Filter = expr
		return &informerhubv1.WatchRequest{Selector: sel}
	}
	for _, tt := range []struct {
		name      string
		req       *informerhubv1.WatchRequest
		code      codes.Code
		reason    string
		field     string
		inMessage string
	}{
		{"a CEL syntax error", withFilter(`object.data.v ==`), codes.InvalidArgument, "INVALID_ARGUMENT", "selector.filter", "ERROR: <input>:1:17: Syntax error"},
		{"a CEL type error", withFilter(`object.metadata.name == "a" && 1 + "b" == 2`), codes.InvalidArgument, "INVALID_ARGUMENT", "selector.filter", "found no matching overload for '_+_'"},
		{"an undeclared name", withFilter(`pod.metadata.name == "a"`), codes.InvalidArgument, "INVALID_ARGUMENT", "selector.filter", "undeclared reference to 'pod'"},
		{"not a bool", withFilter(`object.metadata.name`), codes.InvalidArgument, "INVALID_ARGUMENT", "selector.filter", "must evaluate to bool"},
		{"too long", withFilter(`object.metadata.name == "` + strings.Repeat("a", 200) + `"`), codes.InvalidArgument, "INVALID_ARGUMENT", "selector.filter", "at most 200 are allowed"},
		{"a computed regex pattern", withFilter(`object.data.v.matches(object.data.pattern)`), codes.InvalidArgument, "INVALID_ARGUMENT", "selector.filter", "must be a string literal"},
		{"too costly", withFilter(`object.data.all(k, object.data.all(j, k == j || object.data[k] != object.data[j]))`), codes.InvalidArgument, "INVALID_ARGUMENT", "selector.filter", "estimated cost"},
		{"an empty path", &informerhubv1.WatchRequest{Fields: []string{"status..phase"}}, codes.InvalidArgument, "INVALID_ARGUMENT", "fields", "empty step"},
		{"a list index", &informerhubv1.WatchRequest{Fields: []string{"spec.containers[0].image"}}, codes.InvalidArgument, "INVALID_ARGUMENT", "fields", "list indexes are not supported"},
		{"an unknown object format", &informerhubv1.WatchRequest{ObjectFormat: 7}, codes.InvalidArgument, "INVALID_ARGUMENT", "object_format", "OBJECT_FORMAT_STRUCT"},
		{"an unsupported field", &informerhubv1.WatchRequest{Selector: &informerhubv1.ResourceSelector{Version: "v1", Resource: "pods", FieldSelector: "spec.containers.image=x"}},
			codes.InvalidArgument, "INVALID_ARGUMENT", "selector.field_selector", "spec.nodeName"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			checkStatus(t, watchErr(tt.req), tt.code, tt.reason, tt.field, tt.inMessage)
		})
	}

	// One distinct filter per resource type at once here: a second is
	// refused while the first is in use.
	_, cancel := openStartedWatch(t, h.client, withFilter(`object.metadata.name != "x"`))
	defer cancel()
	err := watchErr(withFilter(`object.metadata.name != "y"`))
	checkStatus(t, err, codes.ResourceExhausted, "TOO_MANY_DISTINCT", "", "max-filters-per-resource")
	if errorInfo(t, err).Metadata["limit"] != informerhub.LimitFilters {
		t.Errorf("ErrorInfo %v does not name the limit", errorInfo(t, err))
	}
	if err := watchErr(withFilter(`object.metadata.name != "x"`)); err != nil {
		t.Errorf("the filter in use, again: %v", err)
	}
}

// TestAnObjectThatCostsAFilterItsLimitEndsNoStream checks, on objects of
// the API server, that an object on which a filter exceeds its runtime
// cost (one anybody who may write in the namespace can make) ends no
// stream and refuses no selector: the streams whose selector selects it
// receive it marked with filter_error, and go on; a new Watch and a
// Snapshot of the same selector mark it too; a stream of the same filter
// in another namespace never sees it.
func TestAnObjectThatCostsAFilterItsLimitEndsNoStream(t *testing.T) {
	h := startHub(t, informerhub.Config{MaxFilterCost: 1000})
	costly, other := namespace(t), namespace(t)
	const expr = `object.data.v.matches("^(a|b)*c$")`
	selectorIn := func(ns string) *informerhubv1.ResourceSelector {
		sel := watchSelector(ns)
		sel.Filter = expr
		return sel
	}
	nextChange := func(r *streamReader[informerhubv1.WatchResponse]) *informerhubv1.WatchResponse {
		t.Helper()
		for {
			if resp := r.next(t); resp.Type != informerhubv1.EventType_EVENT_TYPE_BOOKMARK {
				return resp
			}
		}
	}
	checkEvent := func(who string, resp *informerhubv1.WatchResponse, name string, marked bool) {
		t.Helper()
		c := hubChange(t, resp)
		if c.Type != "ADDED" || c.Name != name || (resp.FilterError != "") != marked || marked && !strings.Contains(resp.FilterError, "cost limit") {
			t.Fatalf("%s: %+v with filter_error %q; want the ADDED of %s, marked %v", who, c, resp.FilterError, name, marked)
		}
	}
	inCostly, _ := openStartedWatch(t, h.client, &informerhubv1.WatchRequest{Selector: selectorIn(costly)})
	inOther, _ := openStartedWatch(t, h.client, &informerhubv1.WatchRequest{Selector: selectorIn(other)})

	// 20,000 bytes: a match would cost about 2,000 × its pattern's cost.
	createConfigMap(t, costly, "big", nil, strings.Repeat("ab", 10000))
	checkEvent("the stream in the object's namespace", nextChange(inCostly), "big", true)
	createConfigMap(t, costly, "small", nil, "abc")
	checkEvent("the stream in the object's namespace, after it", nextChange(inCostly), "small", false)

	again, _ := openWatch(t, h.client, &informerhubv1.WatchRequest{Selector: selectorIn(costly), SendInitialEvents: true})
	checkEvent("a new Watch's initial events", again.next(t), "big", true)
	checkEvent("a new Watch's initial events", again.next(t), "small", false)
	snap, err := h.client.Snapshot(ctxFor(t), &informerhubv1.SnapshotRequest{Selector: selectorIn(costly)})
	if err != nil {
		t.Fatal(err)
	}
	var names, filterErrors []string
	for {
		page, err := snap.Recv()
		if err != nil {
			t.Fatal(err)
		}
		for i, o := range page.Objects {
			names = append(names, hubChange(t, &informerhubv1.WatchResponse{Object: o}).Name)
			if len(page.FilterErrors) > 0 {
				filterErrors = append(filterErrors, page.FilterErrors[i])
			} else {
				filterErrors = append(filterErrors, "")
			}
		}
		if page.Last {
			break
		}
	}
	if !slices.Equal(names, []string{"big", "small"}) || !strings.Contains(filterErrors[0], "cost limit") || filterErrors[1] != "" {
		t.Fatalf("the snapshot: objects %v with filter errors %q; want big (marked) and small", names, filterErrors)
	}

	createConfigMap(t, other, "small", nil, "abc")
	checkEvent("the stream in the other namespace", nextChange(inOther), "small", false)
}

func configMapWithoutData(ns, name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
}
