package informerhub_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/informerhub/hubtest"
)

// relistFixture is a hub whose pods the test lists itself: the informer's
// source lists nothing and watches nothing (QuietSource), and the test
// hands the feed lists (ProcessList, PrepareList) and changes
// (ProcessRaw), keeping the pods the hub holds.
type relistFixture struct {
	t     *testing.T
	h     *informerhub.Hub
	state map[string]*corev1.Pod // by namespace/name
	rv    uint64
}

func newRelistFixture(t *testing.T, cfg informerhub.Config) *relistFixture {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	h := informerhub.New(cfg, hubtest.NewCluster(t), informerhub.QuietSource(1))
	t.Cleanup(h.Close)
	return &relistFixture{t: t, h: h, state: map[string]*corev1.Pod{}, rv: 1}
}

// version gives p the next resourceVersion.
func (fx *relistFixture) version(p *corev1.Pod) *corev1.Pod {
	fx.rv++
	p.ResourceVersion = strconv.FormatUint(fx.rv, 10)
	return p
}

func rawPod(t *testing.T, p *corev1.Pod) informerhub.RawChange {
	t.Helper()
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	rv, _ := strconv.ParseUint(p.ResourceVersion, 10, 64)
	return informerhub.RawChange{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID), RV: rv, Labels: p.Labels, JSON: string(b)}
}

// relistChange is one difference of a relist, as the test computes it.
type relistChange struct {
	typ       string
	obj, prev *corev1.Pod
}

// list returns list as the feed's next list, and the differences the
// feed must find: first the pods that are gone, in namespace and name
// order, then the list's, in its order; and the pods become the state.
func (fx *relistFixture) list(list []*corev1.Pod) (raw []informerhub.RawChange, rv uint64, changes []relistChange) {
	listed := map[string]bool{}
	for _, p := range list {
		listed[p.Namespace+"/"+p.Name] = true
	}
	for _, key := range slices.Sorted(maps.Keys(fx.state)) {
		if !listed[key] {
			changes = append(changes, relistChange{typ: "DELETED", obj: fx.state[key], prev: fx.state[key]})
		}
	}
	next := map[string]*corev1.Pod{}
	for _, p := range list {
		key := p.Namespace + "/" + p.Name
		old := fx.state[key]
		switch {
		case old == nil:
			changes = append(changes, relistChange{typ: "ADDED", obj: p})
		case old.UID != p.UID:
			changes = append(changes, relistChange{typ: "DELETED", obj: old, prev: old}, relistChange{typ: "ADDED", obj: p})
		case old.ResourceVersion != p.ResourceVersion:
			changes = append(changes, relistChange{typ: "MODIFIED", obj: p, prev: old})
		}
		next[key] = p
		raw = append(raw, rawPod(fx.t, p))
	}
	fx.state = next
	fx.rv++
	return raw, fx.rv, changes
}

// relistSubscriber is a subscription of a reference selector, and the
// events it is to receive, as "TYPE namespace/name resourceVersion" of the
// object each carries.
type relistSubscriber struct {
	ref  refSelector
	sub  *informerhub.Subscription
	want []string
}

// expect adds what the subscriber sees of a change: an object entering its
// selector is ADDED, one leaving it DELETED in its previous state.
func (s *relistSubscriber) expect(c relistChange) {
	key := func(p *corev1.Pod) string { return p.Namespace + "/" + p.Name + " " + p.ResourceVersion }
	was, is := c.prev != nil && s.ref.matches(c.prev), c.typ != "DELETED" && s.ref.matches(c.obj)
	switch {
	case c.typ == "DELETED" && was:
		s.want = append(s.want, "DELETED "+key(c.prev))
	case was && is:
		s.want = append(s.want, "MODIFIED "+key(c.obj))
	case is:
		s.want = append(s.want, "ADDED "+key(c.obj))
	case was: // its last matching state, at the version that left it
		s.want = append(s.want, "DELETED "+c.prev.Namespace+"/"+c.prev.Name+" "+c.obj.ResourceVersion)
	}
}

// check reads the events the subscriber is to receive, and compares them.
func (s *relistSubscriber) check(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var got []string
	for len(got) < len(s.want) {
		ev, err := s.sub.Next(ctx)
		if err != nil {
			t.Fatalf("%+v: %v, after %q", s.ref, err, got)
		}
		if ev.Type == informerhub.EventBookmark {
			continue
		}
		p := decodePod(t, ev.Object)
		got = append(got, fmt.Sprintf("%s %s/%s %s", ev.Type, p.Namespace, p.Name, p.ResourceVersion))
	}
	if diff := cmp.Diff(s.want, got); diff != "" {
		t.Fatalf("%+v (-want +got):\n%s", s.ref, diff)
	}
	s.want = nil
}

// TestARelistDeliversWhatEachSelectorSelects relists random pods past
// subscribers of many selectors, filters included, whose queues hold two
// changes, so that they fall behind within each relist and read the rest
// from the history; and between a relist's preparation and its recording
// (PrepareList), subscribers of new selectors go live, the subscribers of
// a selector leave, or the state changes. Each subscriber receives exactly
// what its selector selects of each relist's differences, enter and leave
// included, in the batch's order, as computed without the hub.
func TestARelistDeliversWhatEachSelectorSelects(t *testing.T) {
	fx := newRelistFixture(t, informerhub.Config{QueueSize: 2, BookmarkInterval: time.Hour})
	rng := rand.New(rand.NewPCG(5, 21))
	nodes, apps := []string{"n1", "n2", "n3"}, []string{"x", "y", ""}
	phases := []corev1.PodPhase{corev1.PodPending, corev1.PodRunning, corev1.PodFailed}
	randomPod := func(ns, name string, uid types.UID) *corev1.Pod {
		var l map[string]string
		if app := apps[rng.IntN(len(apps))]; app != "" {
			l = map[string]string{"app": app}
		}
		p := hubtest.Pod(ns, name, l, nodes[rng.IntN(len(nodes))], phases[rng.IntN(len(phases))])
		p.UID = uid
		return fx.version(p)
	}

	var refs []refSelector
	for _, ns := range []string{"", "a"} {
		for _, l := range []string{"", "app=x", "app!=y"} {
			for _, f := range []string{"", "spec.nodeName=n1", "metadata.name=p1", "spec.nodeName!=n2,status.phase=Running"} {
				refs = append(refs, refSelector{namespace: ns, labels: l, fields: f})
			}
		}
	}
	refs = append(refs,
		refSelector{filter: `object.metadata.name.endsWith("1")`},
		refSelector{labels: "app=y", filter: `object.spec.nodeName == "n2" || object.status.phase == "Failed"`},
		refSelector{fields: "spec.nodeName=n3", filter: `object.metadata.name.endsWith("1")`},
		refSelector{namespace: "b", filter: `object.spec.nodeName == "n2" || object.status.phase == "Failed"`},
	)
	var subs []*relistSubscriber
	subscribe := func(ref refSelector) {
		for range 2 { // two subscribers of each selector share its group
			sub := watch(t, fx.h, informerhub.WatchRequest{Selector: informerhub.Selector{
				Resource: hubtest.Pods, Namespace: ref.namespace, LabelSelector: ref.labels, FieldSelector: ref.fields, Filter: ref.filter,
			}})
			subs = append(subs, &relistSubscriber{ref: ref, sub: sub})
		}
	}
	// A third of the selectors, filters among them, go live only between a
	// relist's preparation and its recording.
	var late []refSelector
	for i, ref := range refs {
		if i%3 == 1 {
			late = append(late, ref)
		} else {
			subscribe(ref)
		}
	}

	uids := 0
	newUID := func() types.UID {
		uids++
		return types.UID(fmt.Sprint("uid-", uids))
	}
	delivered := 0
	for round := range 12 {
		// The next list: each pod kept, changed, recreated or gone, and
		// new ones, in random order.
		var list []*corev1.Pod
		for _, key := range slices.Sorted(maps.Keys(fx.state)) {
			old := fx.state[key]
			switch rng.IntN(5) {
			case 0: // gone
			case 1:
				list = append(list, old)
			case 2:
				list = append(list, randomPod(old.Namespace, old.Name, newUID()))
			default:
				list = append(list, randomPod(old.Namespace, old.Name, old.UID))
			}
		}
		for range 2 + rng.IntN(5) {
			ns, name := []string{"a", "b"}[rng.IntN(2)], fmt.Sprint("p", rng.IntN(10))
			if fx.state[ns+"/"+name] == nil && !slices.ContainsFunc(list, func(p *corev1.Pod) bool { return p.Namespace == ns && p.Name == name }) {
				list = append(list, randomPod(ns, name, newUID()))
			}
		}
		rng.Shuffle(len(list), func(i, j int) { list[i], list[j] = list[j], list[i] })

		mode := []string{"at once", "new selectors meanwhile", "a selector left meanwhile", "the state changed meanwhile"}[round%4]
		var (
			raw     []informerhub.RawChange
			rv      uint64
			changes []relistChange
			record  func() error
		)
		switch mode {
		case "at once":
			raw, rv, changes = fx.list(list)
			record = func() error { return informerhub.ProcessList(fx.h, hubtest.Pods, rv, raw) }
		case "the state changed meanwhile":
			// The feed takes a change of a pod after the list was prepared
			// against the state before it; the list holds the change.
			key := slices.Sorted(maps.Keys(fx.state))[0]
			old := fx.state[key]
			changed := randomPod(old.Namespace, old.Name, old.UID)
			if i := slices.IndexFunc(list, func(p *corev1.Pod) bool { return p.Namespace == old.Namespace && p.Name == old.Name }); i >= 0 {
				list[i] = changed
			} else {
				list = append(list, changed)
			}
			fx.state[key] = changed
			raw, rv, changes = fx.list(list)
			changes = append([]relistChange{{typ: "MODIFIED", obj: changed, prev: old}}, changes...)
			record = informerhub.PrepareList(fx.h, hubtest.Pods, rv, raw)
			if err := informerhub.ProcessRaw(fx.h, hubtest.Pods, rawPod(t, changed)); err != nil {
				t.Fatal(err)
			}
		default:
			raw, rv, changes = fx.list(list)
			record = informerhub.PrepareList(fx.h, hubtest.Pods, rv, raw)
		}
		switch mode {
		case "new selectors meanwhile":
			if len(late) > 0 {
				n := min(3, len(late))
				for _, ref := range late[:n] {
					subscribe(ref)
				}
				late = late[n:]
			}
		case "a selector left meanwhile":
			gone := subs[rng.IntN(len(subs))].ref
			subs = slices.DeleteFunc(subs, func(s *relistSubscriber) bool {
				if s.ref == gone {
					s.sub.Close()
					return true
				}
				return false
			})
		}
		for _, s := range subs {
			for _, c := range changes {
				s.expect(c)
			}
		}
		if err := record(); err != nil {
			t.Fatal(err)
		}
		for _, s := range subs {
			delivered += len(s.want)
			s.check(t)
		}
		t.Logf("round %d (%s): %d differences", round, mode, len(changes))
	}
	if delivered == 0 {
		t.Fatal("no subscriber received anything: the test tests nothing")
	}
	if len(late) > 0 {
		t.Fatalf("%d selectors never went live", len(late))
	}
}

// TestARelistEvaluatesItsFiltersBeforeTheLock: the filters a relist's
// differences need are evaluated as it is prepared, before the feed's
// lock, and recording it evaluates none; but for the filters of
// selectors that went live in between, which it evaluates under the lock,
// as it would a live change's. Its log line says how long it held the
// lock.
func TestARelistEvaluatesItsFiltersBeforeTheLock(t *testing.T) {
	logged := &relistLog{}
	fx := newRelistFixture(t, informerhub.Config{Logger: slog.New(logged), BookmarkInterval: time.Hour})
	running := &relistSubscriber{ref: refSelector{filter: `object.spec.nodeName == "n2" || object.status.phase == "Failed"`}}
	running.sub = watch(t, fx.h, informerhub.WatchRequest{Selector: informerhub.Selector{Resource: hubtest.Pods, Filter: running.ref.filter}})
	phases := []corev1.PodPhase{corev1.PodRunning, corev1.PodFailed}
	var pods []*corev1.Pod
	for i := range 10 {
		pods = append(pods, fx.version(hubtest.Pod("a", fmt.Sprint("p", i), nil, "n1", phases[i%2])))
	}
	raw, rv, changes := fx.list(pods)
	if err := informerhub.ProcessList(fx.h, hubtest.Pods, rv, raw); err != nil {
		t.Fatal(err)
	}
	for _, c := range changes {
		running.expect(c)
	}
	running.check(t)

	// Every pod changes phase.
	for i, p := range pods {
		p = p.DeepCopy()
		p.Status.Phase = phases[(i+1)%2]
		pods[i] = fx.version(p)
	}
	raw, rv, changes = fx.list(pods)
	before := informerhub.FilterEvaluations(fx.h)
	record := informerhub.PrepareList(fx.h, hubtest.Pods, rv, raw)
	prepared := informerhub.FilterEvaluations(fx.h) - before
	// The previous states' results are cached on them: only the new ones
	// are evaluated.
	if prepared != uint64(len(pods)) {
		t.Fatalf("%d evaluations preparing the relist, want %d: one per new state", prepared, len(pods))
	}
	if err := record(); err != nil {
		t.Fatal(err)
	}
	if under := informerhub.FilterEvaluations(fx.h) - before - prepared; under != 0 {
		t.Fatalf("%d evaluations recording the relist, want none", under)
	}
	for _, c := range changes {
		running.expect(c)
	}
	running.check(t)

	// A selector with a filter of its own goes live between the next
	// relist's preparation and its recording.
	for i, p := range pods {
		p = p.DeepCopy()
		p.Status.Phase = phases[i%2]
		pods[i] = fx.version(p)
	}
	raw, rv, changes = fx.list(pods)
	record = informerhub.PrepareList(fx.h, hubtest.Pods, rv, raw)
	late := &relistSubscriber{ref: refSelector{filter: `object.metadata.name.endsWith("1")`}}
	late.sub = watch(t, fx.h, informerhub.WatchRequest{Selector: informerhub.Selector{Resource: hubtest.Pods, Filter: late.ref.filter}})
	before = informerhub.FilterEvaluations(fx.h)
	if err := record(); err != nil {
		t.Fatal(err)
	}
	// Both states of each pod, never evaluated with the new filter.
	if under := informerhub.FilterEvaluations(fx.h) - before; under != uint64(2*len(pods)) {
		t.Fatalf("%d evaluations recording the relist for a selector that went live meanwhile, want %d", under, 2*len(pods))
	}
	for _, s := range []*relistSubscriber{running, late} {
		for _, c := range changes {
			s.expect(c)
		}
		s.check(t)
	}
	if held, n := logged.longest(); n != 3 || held <= 0 {
		t.Fatalf("%d relists logged, the longest holding the lock %v; want 3, and how long", n, held)
	}
}

// relistLog is a slog.Handler that keeps the longest lockHeld of the
// "informer relisted" lines, and drops everything.
type relistLog struct {
	mu     sync.Mutex
	held   time.Duration
	logged int
}

func (l *relistLog) Enabled(_ context.Context, level slog.Level) bool { return level >= slog.LevelInfo }

func (l *relistLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "informer relisted" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "lockHeld" {
			l.mu.Lock()
			l.held = max(l.held, a.Value.Duration())
			l.logged++
			l.mu.Unlock()
		}
		return true
	})
	return nil
}

func (l *relistLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *relistLog) WithGroup(string) slog.Handler      { return l }

// longest returns the longest lockHeld logged since reset, and how many
// relists logged one.
func (l *relistLog) longest() (time.Duration, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held, l.logged
}

func (l *relistLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held, l.logged = 0, 0
}
