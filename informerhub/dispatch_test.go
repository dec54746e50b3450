package informerhub_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/informerhub/hubtest"
)

// refSelector is a selector as the test computes it, without the hub.
type refSelector struct {
	namespace, labels, fields, filter string
}

func (r refSelector) matches(p *corev1.Pod) bool {
	if r.namespace != "" && p.Namespace != r.namespace {
		return false
	}
	if r.labels != "" {
		sel, err := labels.Parse(r.labels)
		if err != nil || !sel.Matches(labels.Set(p.Labels)) {
			return false
		}
	}
	if r.fields != "" {
		set := fields.Set{"metadata.name": p.Name, "metadata.namespace": p.Namespace, "spec.nodeName": p.Spec.NodeName, "status.phase": string(p.Status.Phase)}
		if !fields.ParseSelectorOrDie(r.fields).Matches(set) {
			return false
		}
	}
	switch r.filter {
	case "":
	case `object.metadata.name.endsWith("1")`:
		return strings.HasSuffix(p.Name, "1")
	case `object.spec.nodeName == "n2" || object.status.phase == "Failed"`:
		return p.Spec.NodeName == "n2" || p.Status.Phase == corev1.PodFailed
	default:
		panic("no reference for filter " + r.filter)
	}
	return true
}

// TestIndexedDispatchDeliversWhatEachSelectorSelects runs random changes of
// pods past subscribers of many selectors, indexed by every kind of trigger
// (name, field, label, namespace) and not at all, and checks that each
// receives exactly what its selector selects, enter and leave included, as
// computed without the hub.
func TestIndexedDispatchDeliversWhatEachSelectorSelects(t *testing.T) {
	c := newFakeCluster(t)
	pods := c.Source(hubtest.Pods)
	rng := rand.New(rand.NewPCG(13, 8))
	namespaces, nodes, apps := []string{"a", "b"}, []string{"n1", "n2", "n3"}, []string{"x", "y", ""}
	phases := []corev1.PodPhase{corev1.PodPending, corev1.PodRunning, corev1.PodFailed}
	randomPod := func(ns, name string) *corev1.Pod {
		var l map[string]string
		if app := apps[rng.IntN(len(apps))]; app != "" {
			l = map[string]string{"app": app}
		}
		return hubtest.Pod(ns, name, l, nodes[rng.IntN(len(nodes))], phases[rng.IntN(len(phases))])
	}
	objects := map[string]*corev1.Pod{}
	for i := range 6 {
		p := randomPod(namespaces[i%2], fmt.Sprint("p", i))
		pods.Add(p)
		objects[p.Namespace+"/"+p.Name] = p
	}
	h := newHub(t, c, informerhub.Config{QueueSize: 4000, HistorySize: 10000})

	var refs []refSelector
	for _, ns := range []string{"", "a"} {
		for _, l := range []string{"", "app=x", "app in (x,y)", "app!=y"} {
			for _, f := range []string{"", "spec.nodeName=n1", "metadata.name=p1", "spec.nodeName!=n2,status.phase=Running", "metadata.namespace=b"} {
				refs = append(refs, refSelector{namespace: ns, labels: l, fields: f})
			}
		}
	}
	refs = append(refs,
		refSelector{filter: `object.metadata.name.endsWith("1")`},
		refSelector{labels: "app=y", filter: `object.spec.nodeName == "n2" || object.status.phase == "Failed"`},
		refSelector{fields: "spec.nodeName=n3", filter: `object.metadata.name.endsWith("1")`},
	)
	type subscriber struct {
		ref  refSelector
		sub  *informerhub.Subscription
		want []string
	}
	var subs []*subscriber
	for _, ref := range refs {
		for range 2 { // two subscribers of each selector share its group
			sub := watch(t, h, informerhub.WatchRequest{Selector: informerhub.Selector{
				Resource: hubtest.Pods, Namespace: ref.namespace, LabelSelector: ref.labels, FieldSelector: ref.fields, Filter: ref.filter,
			}})
			subs = append(subs, &subscriber{ref: ref, sub: sub})
		}
	}

	var lastRV string
	for range 400 {
		ns, name := namespaces[rng.IntN(2)], fmt.Sprint("p", rng.IntN(8))
		key := ns + "/" + name
		prev := objects[key]
		var cur *corev1.Pod
		switch {
		case prev == nil:
			cur = randomPod(ns, name)
			pods.Add(cur)
		case rng.IntN(5) == 0:
			// A deleted object's final state is its last one, at a new
			// version.
			gone := prev.DeepCopy()
			pods.Delete(gone)
			lastRV = gone.ResourceVersion
			for _, s := range subs {
				if s.ref.matches(prev) {
					s.want = append(s.want, "DELETED "+key+" "+gone.ResourceVersion)
				}
			}
			delete(objects, key)
			continue
		default:
			cur = randomPod(ns, name)
			pods.Modify(cur)
		}
		lastRV = cur.ResourceVersion
		objects[key] = cur
		for _, s := range subs {
			was, is := prev != nil && s.ref.matches(prev), s.ref.matches(cur)
			switch {
			case was && is:
				s.want = append(s.want, "MODIFIED "+key+" "+cur.ResourceVersion)
			case is:
				s.want = append(s.want, "ADDED "+key+" "+cur.ResourceVersion)
			case was:
				s.want = append(s.want, "DELETED "+key+" "+cur.ResourceVersion)
			}
		}
	}
	rv, _ := strconv.ParseUint(lastRV, 10, 64)
	informerhub.WaitForResourceVersion(h, hubtest.Pods, rv)

	delivered := 0
	for i, s := range subs {
		n := informerhub.Pending(s.sub)
		var got []string
		for range n {
			ev, err := s.sub.Next(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			u := decodePod(t, ev.Object)
			got = append(got, fmt.Sprintf("%s %s/%s %s", ev.Type, u.Namespace, u.Name, ev.ResourceVersion))
		}
		delivered += len(got)
		if diff := cmp.Diff(s.want, got); diff != "" {
			t.Errorf("subscriber %d %+v (-want +got):\n%s", i, s.ref, diff)
		}
	}
	if delivered == 0 {
		t.Fatal("no subscriber received anything: the test tests nothing")
	}
}

// TestDispatchVisitsOnlyTheGroupsAChangeConcerns checks the cost model:
// subscribers each on one object's name, or one node's pods, cost a change
// one group, however many of them there are.
func TestDispatchVisitsOnlyTheGroupsAChangeConcerns(t *testing.T) {
	tests := []struct {
		name     string
		selector func(i int) informerhub.Selector
		change   func(c *fakeCluster, i, round int) uint64
	}{
		{
			name: "one object each, by name",
			selector: func(i int) informerhub.Selector {
				return informerhub.Selector{FieldSelector: fmt.Sprint("metadata.name=cm-", i)}
			},
			change: func(c *fakeCluster, i, round int) uint64 {
				cm := configMap("ns", fmt.Sprint("cm-", i), nil, fmt.Sprint(round))
				c.cms().Modify(cm)
				rv, _ := strconv.ParseUint(cm.ResourceVersion, 10, 64)
				return rv
			},
		},
		{
			name: "node agents, by spec.nodeName",
			selector: func(i int) informerhub.Selector {
				return informerhub.Selector{Resource: hubtest.Pods, FieldSelector: fmt.Sprint("spec.nodeName=node-", i)}
			},
			change: func(c *fakeCluster, i, round int) uint64 {
				p := hubtest.Pod("ns", fmt.Sprint("pod-", i), map[string]string{"round": fmt.Sprint(round)}, fmt.Sprint("node-", i), corev1.PodRunning)
				c.Source(hubtest.Pods).Modify(p)
				rv, _ := strconv.ParseUint(p.ResourceVersion, 10, 64)
				return rv
			},
		},
		{
			name: "one label value each",
			selector: func(i int) informerhub.Selector {
				return informerhub.Selector{LabelSelector: fmt.Sprint("owner=o-", i)}
			},
			change: func(c *fakeCluster, i, round int) uint64 {
				cm := configMap("ns", fmt.Sprint("cm-", i), map[string]string{"owner": fmt.Sprint("o-", i)}, fmt.Sprint(round))
				c.cms().Modify(cm)
				rv, _ := strconv.ParseUint(cm.ResourceVersion, 10, 64)
				return rv
			},
		},
	}
	const n, rounds = 200, 3
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newFakeCluster(t)
			for i := range n {
				c.cms().Add(configMap("ns", fmt.Sprint("cm-", i), map[string]string{"owner": fmt.Sprint("o-", i)}, ""))
				c.Source(hubtest.Pods).Add(hubtest.Pod("ns", fmt.Sprint("pod-", i), nil, fmt.Sprint("node-", i), corev1.PodRunning))
			}
			h := newHub(t, c, informerhub.Config{})
			resource := tt.selector(0).Resource
			if resource.Empty() {
				resource = configMaps
			}
			subs := make([]*informerhub.Subscription, n)
			for i := range n {
				sel := tt.selector(i)
				sel.Resource = resource
				subs[i] = watch(t, h, informerhub.WatchRequest{Selector: sel})
			}
			var rv uint64
			for round := range rounds {
				for i := range n {
					rv = tt.change(c, i, round)
				}
			}
			informerhub.WaitForResourceVersion(h, resource, rv)
			visits, groups := informerhub.DispatchVisits(h, resource)
			if groups != n {
				t.Errorf("%d groups for %d distinct selectors", groups, n)
			}
			if want := uint64(n * rounds); visits != want {
				t.Errorf("%d changes visited %d groups, want %d: one each", n*rounds, visits, want)
			}
			for i, s := range subs {
				if got := informerhub.Pending(s); got != rounds {
					t.Fatalf("subscriber %d has %d events waiting, want %d", i, got, rounds)
				}
			}
		})
	}
}

// TestSubscribersOfOneSelectorShareAGroup checks that a change is matched
// once per selector, however many subscribers share it.
func TestSubscribersOfOneSelectorShareAGroup(t *testing.T) {
	c := newFakeCluster(t)
	h := newHub(t, c, informerhub.Config{})
	var subs []*informerhub.Subscription
	for range 50 {
		// Equal selectors, spelt differently.
		subs = append(subs, watch(t, h, informerhub.WatchRequest{Selector: informerhub.Selector{LabelSelector: "tier in (a),app", FieldSelector: "metadata.namespace=ns,metadata.name!=x"}}))
		subs = append(subs, watch(t, h, informerhub.WatchRequest{Selector: informerhub.Selector{LabelSelector: "app,tier=a", FieldSelector: "metadata.name!=x,metadata.namespace=ns"}}))
	}
	cm := configMap("ns", "c", map[string]string{"app": "", "tier": "a"}, "")
	c.cms().Add(cm)
	rv, _ := strconv.ParseUint(cm.ResourceVersion, 10, 64)
	informerhub.WaitForResourceVersion(h, configMaps, rv)
	visits, groups := informerhub.DispatchVisits(h, configMaps)
	if groups != 1 || visits != 1 {
		t.Errorf("%d groups visited %d times for one change, want 1 and 1", groups, visits)
	}
	if got := slices.IndexFunc(subs, func(s *informerhub.Subscription) bool { return informerhub.Pending(s) != 1 }); got >= 0 {
		t.Errorf("subscriber %d has %d events waiting, want 1", got, informerhub.Pending(subs[got]))
	}
}

func decodePod(t *testing.T, obj string) *corev1.Pod {
	t.Helper()
	var p corev1.Pod
	if err := json.Unmarshal([]byte(obj), &p); err != nil {
		t.Fatal(err)
	}
	return &p
}

// TestShardSubscribersCostOneVisitPerChange: 16 subscribers, each of one
// shard of the uids, take every change between them, one each, and a
// change visits the one group whose shard holds it, not the 16.
func TestShardSubscribersCostOneVisitPerChange(t *testing.T) {
	const shards, n, rounds = 16, 200, 3
	c := newFakeCluster(t)
	for i := range n {
		c.cms().Add(configMap("ns", fmt.Sprint("cm-", i), nil, ""))
	}
	h := newHub(t, c, informerhub.Config{})
	subs := make([]*informerhub.Subscription, shards)
	for i := range shards {
		end := fmt.Sprintf("'0x%016x'", uint64(i+1)<<60)
		if i == shards-1 {
			end = "'0x10000000000000000'"
		}
		subs[i] = watch(t, h, informerhub.WatchRequest{Selector: informerhub.Selector{Resource: configMaps,
			ShardSelector: fmt.Sprintf("shardRange(object.metadata.uid, '0x%016x', %s)", uint64(i)<<60, end)}})
	}
	var rv uint64
	for round := range rounds {
		for i := range n {
			cm := configMap("ns", fmt.Sprint("cm-", i), nil, fmt.Sprint(round))
			c.cms().Modify(cm)
			rv, _ = strconv.ParseUint(cm.ResourceVersion, 10, 64)
		}
	}
	informerhub.WaitForResourceVersion(h, configMaps, rv)
	visits, groups := informerhub.DispatchVisits(h, configMaps)
	if groups != shards {
		t.Errorf("%d groups for %d shards", groups, shards)
	}
	if want := uint64(n * rounds); visits != want {
		t.Errorf("%d changes visited %d groups, want %d: one each", n*rounds, visits, want)
	}
	total := 0
	for _, s := range subs {
		total += informerhub.Pending(s)
	}
	if total != n*rounds {
		t.Errorf("the shards received %d events between them, want %d: each change once", total, n*rounds)
	}
}
