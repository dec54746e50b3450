package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/informerhub/informerhub/test/checker"
)

// A kind is a resource type of the workload, and how its objects look.
type kind struct {
	gvr schema.GroupVersionResource
	// object is the object i of a namespace in state st, as JSON fields
	// besides the metadata.
	object func(ns, name string, st state) map[string]any
}

var (
	configMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	coreEvents = schema.GroupVersionResource{Version: "v1", Resource: "events"}
)

// The kinds of the workload: ConfigMaps, for most promises; core Events,
// for a built-in type's own field (reason); and widgets, a custom
// resource with a selectable field (spec.color).
var (
	kindConfigMaps = &kind{gvr: configMaps, object: func(_, _ string, st state) map[string]any {
		data := map[string]any{"payload": st.payload, "other": st.other}
		if st.n != "" {
			data["n"] = st.n
		}
		return map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "data": data}
	}}
	kindEvents = &kind{gvr: coreEvents, object: func(ns, name string, st state) map[string]any {
		return map[string]any{
			"apiVersion":     "v1",
			"kind":           "Event",
			"involvedObject": map[string]any{"kind": "ConfigMap", "namespace": ns, "name": name},
			"reason":         st.hotOrCold(),
			"type":           "Normal",
			"message":        st.payload,
			"source":         map[string]any{"component": "conformance"},
		}
	}}
	kindWidgets = &kind{gvr: widgets, object: func(_, _ string, st state) map[string]any {
		return map[string]any{
			"apiVersion": widgets.GroupVersion().String(),
			"kind":       "Widget",
			"spec":       map[string]any{"color": st.redOrBlue(), "n": st.n, "payload": st.payload},
		}
	}}
	kinds = []*kind{kindConfigMaps, kindEvents, kindWidgets}
)

// state is what varies in an object of the workload from round to round.
type state struct {
	app     string // its label app: "web" or "db"
	n       string // a number, "x", or "" (none): a filter on it may not decide
	flip    bool   // reason Hot (events) and color red (widgets) when set
	payload string // large, so that a few events fill a stream's buffers
	other   string // changes alone in some rounds: no path a projection keeps
	touch   int    // an annotation's value: changes alone in some rounds
}

func (st state) hotOrCold() string {
	if st.flip {
		return "Hot"
	}
	return "Cold"
}

func (st state) redOrBlue() string {
	if st.flip {
		return "red"
	}
	return "blue"
}

// The sizes of an object's payload: large, so that three events fill the
// 64 KiB stream window of a client and the 64 KiB a gRPC stream buffers,
// and a reader that stops makes the hub's sends block; or small.
const (
	largePayload = 40 << 10
	smallPayload = 256
)

// stateOf is object i's state in round r, with a payload of payloadBytes.
func stateOf(i, r, payloadBytes int) state {
	st := state{app: "web", flip: (i+r)%2 == 0, other: fmt.Sprint("o", r), touch: r}
	if (i+r)%3 == 0 {
		st.app = "db"
	}
	switch {
	case (i+2*r)%7 == 3:
		st.n = "x"
	case (i+2*r)%5 == 4:
	default:
		st.n = strconv.Itoa(i + 3*r)
	}
	st.payload = fmt.Sprintf("%d/%d:", i, r) + strings.Repeat("p", payloadBytes)
	return st
}

// scenario is one path test's workload: objects of every kind in two
// namespaces of its own, labelled with its run, which change round by
// round, and the API server's own record of every change of every kind
// (checker.Reference), started before the first.
type scenario struct {
	t        *testing.T
	run      string // the value of every object's label "run"
	nsA, nsB string
	// nsTicks holds objects no probe selects (see reach).
	nsTicks string
	objects int // per kind and namespace
	payload int // bytes of each object's payload
	round   int
	alive   map[objectID]bool
	// lastRV is the resourceVersion of each kind's last change.
	lastRV map[*kind]uint64
	refs   map[*kind]*checker.Reference
	// versions is each object's resourceVersion, as its last write
	// returned it: the scenario is its objects' only writer.
	versions map[objectID]string
	// client writes the objects (through the control plane's shared API
	// server, or another sharing its etcd); ctx bounds the scenario.
	client dynamic.Interface
	ctx    context.Context
}

type objectID struct {
	kind *kind
	ns   string
	i    int
}

var runs atomic.Uint64

// newScenario creates a scenario's namespaces and objects (round 0), and
// starts the references first; payload is the bytes of each object's
// payload (largePayload, smallPayload).
func newScenario(t *testing.T, payload int) *scenario {
	t.Helper()
	id := runs.Add(1)
	s := &scenario{
		t: t, run: fmt.Sprint("r", id), nsA: fmt.Sprintf("conf-%d-a", id), nsB: fmt.Sprintf("conf-%d-b", id), nsTicks: fmt.Sprintf("conf-%d-ticks", id),
		objects: 6, payload: payload, alive: map[objectID]bool{}, lastRV: map[*kind]uint64{}, refs: map[*kind]*checker.Reference{},
		versions: map[objectID]string{}, client: dyn,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	s.ctx = ctx
	if *fullSize {
		s.objects = 60
	}
	for _, ns := range []string{s.nsA, s.nsB, s.nsTicks} {
		if _, err := kube.CoreV1().Namespaces().Create(s.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range kinds {
		ref, err := checker.StartReference(context.Background(), dyn, k.gvr, "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := ref.Stop(); err != nil {
				t.Errorf("the reference of %s: %v", k.gvr.Resource, err)
			}
		})
		s.refs[k] = ref
	}
	for _, k := range kinds {
		for _, ns := range []string{s.nsA, s.nsB} {
			for i := range s.objects {
				s.create(objectID{k, ns, i})
			}
		}
	}
	return s
}

func (s *scenario) name(id objectID) string { return fmt.Sprint("o", id.i) }

// body is object id's whole body in the current round.
func (s *scenario) body(id objectID) *unstructured.Unstructured {
	st := stateOf(id.i, s.round, s.payload)
	obj := id.kind.object(id.ns, s.name(id), st)
	obj["metadata"] = map[string]any{
		"name": s.name(id), "namespace": id.ns,
		"labels":      map[string]any{"run": s.run, "app": st.app},
		"annotations": map[string]any{"touch": strconv.Itoa(st.touch)},
	}
	return &unstructured.Unstructured{Object: obj}
}

func (s *scenario) resource(id objectID) dynamic.ResourceInterface {
	return s.client.Resource(id.kind.gvr).Namespace(id.ns)
}

func (s *scenario) create(id objectID) {
	s.t.Helper()
	obj, err := s.resource(id).Create(s.ctx, s.body(id), metav1.CreateOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	s.alive[id] = true
	s.wrote(id, obj)
}

// wrote records what a write of object id returned.
func (s *scenario) wrote(id objectID, obj *unstructured.Unstructured) {
	s.t.Helper()
	rv, err := strconv.ParseUint(obj.GetResourceVersion(), 10, 64)
	if err != nil {
		s.t.Fatal(err)
	}
	s.versions[id] = obj.GetResourceVersion()
	s.lastRV[id.kind] = max(s.lastRV[id.kind], rv)
}

// churn makes n rounds of changes: each object changes what probes select
// it by, or only what they do not keep (an annotation), or goes (and
// comes back the round after).
func (s *scenario) churn(n int) {
	s.t.Helper()
	for range n {
		s.round++
		for _, k := range kinds {
			for _, ns := range []string{s.nsA, s.nsB} {
				for i := range s.objects {
					s.change(objectID{k, ns, i})
				}
			}
		}
	}
}

func (s *scenario) change(id objectID) {
	s.t.Helper()
	switch {
	case !s.alive[id]:
		s.create(id)
	case (id.i+s.round)%6 == 5:
		// A delete's version is one the kind's next write passes.
		if err := s.resource(id).Delete(s.ctx, s.name(id), metav1.DeleteOptions{}); err != nil {
			s.t.Fatal(err)
		}
		s.alive[id] = false
	case (id.i+s.round)%4 == 3:
		b, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{"touch": strconv.Itoa(s.round)}}})
		if err != nil {
			s.t.Fatal(err)
		}
		obj, err := s.resource(id).Patch(s.ctx, s.name(id), types.MergePatchType, b, metav1.PatchOptions{})
		if err != nil {
			s.t.Fatal(err)
		}
		s.wrote(id, obj)
	default:
		// The whole object: data.n goes when its state has none.
		body := s.body(id)
		body.SetResourceVersion(s.versions[id])
		obj, err := s.resource(id).Update(s.ctx, body, metav1.UpdateOptions{})
		if err != nil {
			s.t.Fatal(err)
		}
		s.wrote(id, obj)
	}
}

// settle writes a marker of every kind (the last change of each), and
// waits until the references have recorded everything: their
// resourceVersions are then where every probe's stream must reach.
func (s *scenario) settle() {
	s.t.Helper()
	for _, k := range kinds {
		id := objectID{k, s.nsB, 1000 + s.round}
		s.create(id)
		if err := s.refs[k].WaitFor(s.ctx, strconv.FormatUint(s.lastRV[k], 10)); err != nil {
			s.t.Fatal(err)
		}
	}
}

// reach makes the reference of k record everything up to rv, a version a
// stream reached (a hub's bookmark, at a version of another kind's
// change, or of a relist), past k's last change.
func (s *scenario) reach(t *testing.T, k *kind, rv uint64) {
	t.Helper()
	reach(t, s.refs[k], k, s.nsTicks, rv)
}

// reach makes ref, a reference of k, record everything up to rv: it
// creates objects of k in ns, which no probe selects, until ref has.
func reach(t *testing.T, ref *checker.Reference, k *kind, ns string, rv uint64) {
	t.Helper()
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		err := ref.WaitFor(ctx, strconv.FormatUint(rv, 10))
		cancel()
		if err == nil {
			return
		}
		if ref.Err() != nil || i == 100 {
			t.Fatalf("the reference of %s does not reach %d: %v", k.gvr.Resource, rv, err)
		}
		tick := &unstructured.Unstructured{Object: k.object(ns, "tick", stateOf(0, i, 0))}
		tick.SetNamespace(ns)
		tick.SetGenerateName("tick-") // no label, in no probe's namespace
		if _, err := dyn.Resource(k.gvr).Namespace(ns).Create(context.Background(), tick, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// ctxFor bounds a step of a test (a call, a wait), so that a hang fails
// the test with where it hung rather than ending the binary at -timeout.
func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}
