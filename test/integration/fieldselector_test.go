package integration

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/informerhub"
)

// A fieldCase is one field of one resource type's field selectors, and how
// to make objects whose field has a value.
type fieldCase struct {
	gvr   schema.GroupVersionResource
	field string    // as the selectors name it (an alias, maybe)
	v0    string    // two values an object's field can have
	v1    string    //
	make  makeFunc  // creates an object named name whose field is value
	set   applyFunc // changes an existing object's field to value; nil if it cannot change
	// objectName is the name make gives the object; nil: name itself.
	objectName func(name, value string) string
	// inNamespace is the namespace the case's objects must be in; "": one
	// of the case's own.
	inNamespace string
	// sameForAll is set for a field whose value is v0 for every object:
	// the != selection is always empty, and no object can enter it.
	sameForAll bool
}

type (
	makeFunc  func(t *testing.T, ns, name, value string)
	applyFunc func(t *testing.T, ns, name, value string)
)

func (c fieldCase) namespaced() bool { return !clusterScoped[c.gvr.Resource] }

func (c fieldCase) nameOf(name, value string) string {
	if c.objectName != nil {
		return c.objectName(name, value)
	}
	return name
}

var clusterScoped = map[string]bool{
	"nodes": true, "namespaces": true, "certificatesigningrequests": true, "clustertrustbundles": true,
	"resourceslices": true, "persistentvolumes": true, "widgets": false,
}

// resource returns the dynamic client of the case's resource type, in ns
// when it is namespaced.
func (c fieldCase) resource(ns string) dynamic.ResourceInterface {
	if c.namespaced() {
		return dyn.Resource(c.gvr).Namespace(ns)
	}
	return dyn.Resource(c.gvr)
}

func (c fieldCase) selector(ns, fieldSelector string) *informerhubv1.ResourceSelector {
	sel := &informerhubv1.ResourceSelector{Group: c.gvr.Group, Version: c.gvr.Version, Resource: c.gvr.Resource, FieldSelector: fieldSelector}
	if c.namespaced() {
		sel.Namespace = ns
	}
	return sel
}

// uniqueNames gives each case's cluster-scoped objects names of their own.
var uniqueNames atomic.Int64

// TestFieldSelectorsMeanWhatTheAPIServerMeans checks every field the hub
// supports on built-in types against the API server itself: for each, a
// selector on a value and one excluding it, the hub's Snapshot equals the
// API server's LIST at the snapshot's version, and the hub's Watch from
// there equals the API server's watch with the same selector through
// creates, deletes, and (for fields that can change) objects entering and
// leaving the selection.
func TestFieldSelectorsMeanWhatTheAPIServerMeans(t *testing.T) {
	h := startHub(t, informerhub.Config{})
	for _, c := range builtinFieldCases(t) {
		t.Run(c.gvr.Resource+"."+c.gvr.Group+"/"+c.field, func(t *testing.T) {
			checkFieldCase(t, h, c)
		})
	}
}

// checkFieldCase compares the hub with the API server on one field.
func checkFieldCase(t *testing.T, h *hub, c fieldCase) {
	t.Helper()
	ns := c.inNamespace
	if ns == "" {
		ns = namespace(t)
	}
	prefix := fmt.Sprintf("fs%d-", uniqueNames.Add(1))
	name := func(s string) string { return prefix + s }
	c.make(t, ns, name("o0"), c.v0)
	c.make(t, ns, name("o1"), c.v1)
	c.make(t, ns, name("o2"), c.v0)
	last, err := c.resource(ns).Get(ctxFor(t), c.nameOf(name("o2"), c.v0), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	type run struct {
		fieldSelector string
		marker        string
		markerValue   string
		hub           *streamReader[informerhubv1.WatchResponse]
		api           watch.Interface
	}
	// Each value selected, and the first excluded: between them they tell
	// apart every way of computing the field that is not the API server's
	// (a default of "" where it says "false" shows in =false).
	runs := []*run{
		{fieldSelector: c.field + "=" + c.v0, marker: name("m-eq"), markerValue: c.v0},
		{fieldSelector: c.field + "!=" + c.v0, marker: name("m-ne"), markerValue: c.v1},
		{fieldSelector: c.field + "=" + c.v1, marker: name("m-eq1"), markerValue: c.v1},
	}
	if c.sameForAll {
		// Its other selections are empty now and forever: the snapshots
		// show it.
		for _, r := range runs[1:] {
			if snap, rv, _ := hubSnapshot(t, h, c.selector(ns, r.fieldSelector)); len(snap) != 0 ||
				len(apiList(t, c.resource(ns), rv, r.fieldSelector)) != 0 {
				t.Fatalf("%s selects objects", r.fieldSelector)
			}
		}
		runs = runs[:1]
	}
	for _, r := range runs {
		// The hub's informer may be behind the writes above: its snapshot
		// is of some point in time, the LIST compared with it of the same;
		// one from before the writes would compare nothing.
		snap, rv, token := hubSnapshotAfter(t, h, c.selector(ns, r.fieldSelector), last.GetResourceVersion())
		list := apiList(t, c.resource(ns), rv, r.fieldSelector)
		if diff := cmp.Diff(list, snap); diff != "" {
			t.Fatalf("%s: the hub's snapshot differs from the API server's LIST at %s (-api +hub):\n%s", r.fieldSelector, rv, diff)
		}
		if len(list) == 0 {
			t.Fatalf("%s: the LIST selects nothing: the case tests nothing", r.fieldSelector)
		}
		r.hub, _ = openStartedWatch(t, h.client, &informerhubv1.WatchRequest{Selector: c.selector(ns, r.fieldSelector), ResumeToken: token})
		w, err := c.resource(ns).Watch(ctxFor(t), metav1.ListOptions{ResourceVersion: rv, FieldSelector: r.fieldSelector})
		if err != nil {
			t.Fatalf("the API server's watch with %s: %v", r.fieldSelector, err)
		}
		t.Cleanup(w.Stop)
		r.api = w
	}

	if c.set != nil {
		c.set(t, ns, name("o1"), c.v0) // enters the = selection, leaves the != one
		c.set(t, ns, name("o0"), c.v1) // the other way round
	}
	if err := c.resource(ns).Delete(ctxFor(t), c.nameOf(name("o2"), c.v0), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c.make(t, ns, name("o3"), c.v1)
	for _, r := range runs {
		c.make(t, ns, r.marker, r.markerValue)
		r.marker = c.nameOf(r.marker, r.markerValue)
	}
	for _, r := range runs {
		want := apiChangesUntil(t, r.api, r.marker)
		if len(want) == 0 {
			t.Fatalf("%s: the API server's watch saw no change: the case tests nothing", r.fieldSelector)
		}
		if diff := cmp.Diff(want, hubChangesUntil(t, r.hub, r.marker)); diff != "" {
			t.Fatalf("%s: the hub's watch differs from the API server's (-api +hub):\n%s", r.fieldSelector, diff)
		}
	}
}

// hubSnapshot takes a whole snapshot: its objects as initial events (by
// name), its resourceVersion and token.
func hubSnapshot(t *testing.T, h *hub, sel *informerhubv1.ResourceSelector) (objects []change, rv, token string) {
	t.Helper()
	stream, err := h.client.Snapshot(ctxFor(t), &informerhubv1.SnapshotRequest{Selector: sel})
	if err != nil {
		t.Fatal(err)
	}
	for {
		page, err := stream.Recv()
		if err != nil {
			t.Fatalf("Snapshot(%v): %v", sel, err)
		}
		for _, o := range page.Objects {
			objects = append(objects, hubChange(t, &informerhubv1.WatchResponse{Type: informerhubv1.EventType_EVENT_TYPE_ADDED, Object: o}))
		}
		if page.Last {
			slices.SortFunc(objects, func(a, b change) int { return strings.Compare(a.Name, b.Name) })
			return objects, page.ResourceVersion, page.ResumeToken
		}
	}
}

// hubSnapshotAfter is hubSnapshot at resourceVersion rv or later, once the
// hub's informer has reached it.
func hubSnapshotAfter(t *testing.T, h *hub, sel *informerhubv1.ResourceSelector, rv string) (objects []change, snapRV, token string) {
	t.Helper()
	eventually(t, "a snapshot at "+rv+" or later", func() bool {
		objects, snapRV, token = hubSnapshot(t, h, sel)
		return atoi(snapRV) >= atoi(rv)
	})
	return objects, snapRV, token
}

// apiList lists with a field selector at exactly rv, as initial events.
func apiList(t *testing.T, ri dynamic.ResourceInterface, rv, fieldSelector string) []change {
	t.Helper()
	list, err := ri.List(ctxFor(t), metav1.ListOptions{ResourceVersion: rv, ResourceVersionMatch: metav1.ResourceVersionMatchExact, FieldSelector: fieldSelector})
	if err != nil {
		t.Fatalf("LIST with %s at %s: %v", fieldSelector, rv, err)
	}
	return listedChanges(t, list)
}

// create makes an object from its JSON form, and sets its status when
// given one (the API server ignores status on create).
func create(t *testing.T, gvr schema.GroupVersionResource, ns string, obj map[string]any, status map[string]any) {
	t.Helper()
	u := &unstructured.Unstructured{Object: obj}
	ri := fieldCase{gvr: gvr}.resource(ns)
	created, err := ri.Create(ctxFor(t), u, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating %s %s: %v", gvr.Resource, u.GetName(), err)
	}
	if status != nil {
		created.Object["status"] = status
		if _, err := ri.UpdateStatus(ctxFor(t), created, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("setting the status of %s %s: %v", gvr.Resource, u.GetName(), err)
		}
	}
}

// update changes an object with edit, retrying on conflicts.
func update(t *testing.T, ri dynamic.ResourceInterface, name string, status bool, edit func(u *unstructured.Unstructured)) {
	t.Helper()
	for {
		u, err := ri.Get(ctxFor(t), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		edit(u)
		if status {
			_, err = ri.UpdateStatus(ctxFor(t), u, metav1.UpdateOptions{})
		} else {
			_, err = ri.Update(ctxFor(t), u, metav1.UpdateOptions{})
		}
		if err == nil {
			return
		}
		if !strings.Contains(err.Error(), "the object has been modified") {
			t.Fatalf("updating %s: %v", name, err)
		}
	}
}

func obj(apiVersion, kind, ns, name string, fields map[string]any) map[string]any {
	meta := map[string]any{"name": name}
	if ns != "" {
		meta["namespace"] = ns
	}
	o := map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": meta}
	for k, v := range fields {
		o[k] = v
	}
	return o
}

// setPath sets a value at a dotted path of an object.
func setPath(u *unstructured.Unstructured, value any, path ...string) {
	if err := unstructured.SetNestedField(u.Object, value, path...); err != nil {
		panic(err)
	}
}

var (
	pods       = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	coreEvents = schema.GroupVersionResource{Version: "v1", Resource: "events"}
	events     = schema.GroupVersionResource{Group: "events.k8s.io", Version: "v1", Resource: "events"}
)

// pod makes a pod, whose field with sets to the value.
func pod(with func(spec, status map[string]any, value string)) makeFunc {
	return func(t *testing.T, ns, name, value string) {
		t.Helper()
		spec := map[string]any{"containers": []any{map[string]any{"name": "app", "image": "nginx"}}}
		status := map[string]any{}
		with(spec, status, value)
		if len(status) == 0 {
			status = nil
		}
		create(t, pods, ns, obj("v1", "Pod", ns, name, map[string]any{"spec": spec}), status)
	}
}

func podStatus(key string) applyFunc {
	return func(t *testing.T, ns, name, value string) {
		t.Helper()
		update(t, dyn.Resource(pods).Namespace(ns), name, true, func(u *unstructured.Unstructured) { setPath(u, value, "status", key) })
	}
}

// coreEvent makes a core/v1 Event about a pod.
func coreEvent(field func(e map[string]any, value string)) makeFunc {
	return func(t *testing.T, ns, name, value string) {
		t.Helper()
		e := map[string]any{
			"involvedObject": map[string]any{"kind": "Pod", "namespace": ns, "name": "p", "apiVersion": "v1"},
			"reason":         "Started",
			"message":        "it started",
			"type":           "Normal",
			"source":         map[string]any{"component": "kubelet"},
		}
		field(e, value)
		create(t, coreEvents, ns, obj("v1", "Event", ns, name, e), nil)
	}
}

// eventsV1Event makes an events.k8s.io/v1 Event.
func eventsV1Event(field func(e map[string]any, value string)) makeFunc {
	return func(t *testing.T, ns, name, value string) {
		t.Helper()
		e := map[string]any{
			"eventTime":           time.Now().UTC().Format("2006-01-02T15:04:05.000000Z"),
			"reportingController": "example.com/ctrl",
			"reportingInstance":   "ctrl-1",
			"action":              "Scale",
			"reason":              "Scaled",
			"type":                "Normal",
			"note":                "scaled it",
			"regarding":           map[string]any{"kind": "Pod", "namespace": ns, "name": "p", "apiVersion": "v1"},
		}
		field(e, value)
		create(t, events, ns, obj("events.k8s.io/v1", "Event", ns, name, e), nil)
	}
}

func nested(path ...string) func(e map[string]any, value string) {
	return func(e map[string]any, value string) {
		m := e
		for _, p := range path[:len(path)-1] {
			next, ok := m[p].(map[string]any)
			if !ok {
				next = map[string]any{}
				m[p] = next
			}
			m = next
		}
		m[path[len(path)-1]] = value
	}
}

// builtinFieldCases is every field of a built-in type that the hub
// supports, beyond metadata.name and metadata.namespace (which the other
// tests select on throughout), with one cluster-scoped type that has only
// those, whose metadata.namespace the API server accepts and finds "". The
// unsupported ones (a namespaced type that refuses metadata.namespace
// among them) are in TestUnsupportedFieldsAreRefusedAsTheAPIServerRefusesThem.
func builtinFieldCases(t *testing.T) []fieldCase {
	var cases []fieldCase
	podSpec := func(field, key string, v0, v1 string) fieldCase {
		return fieldCase{gvr: pods, field: field, v0: v0, v1: v1, make: pod(func(spec, _ map[string]any, v string) { spec[key] = v })}
	}
	cases = append(cases,
		podSpec("spec.nodeName", "nodeName", "node-a", "node-b"),
		podSpec("spec.host", "nodeName", "node-a", "node-b"), // the API server's alias of spec.nodeName
		podSpec("spec.restartPolicy", "restartPolicy", "Always", "Never"),
		podSpec("spec.schedulerName", "schedulerName", "default-scheduler", "custom-scheduler"),
		podSpec("spec.serviceAccountName", "serviceAccountName", "sa-a", "sa-b"),
		fieldCase{gvr: pods, field: "spec.hostNetwork", v0: "true", v1: "false", make: pod(func(spec, _ map[string]any, v string) {
			spec["hostNetwork"] = v == "true"
		})},
		fieldCase{gvr: pods, field: "status.phase", v0: "Running", v1: "Failed",
			make: pod(func(_, status map[string]any, v string) { status["phase"] = v }), set: podStatus("phase")},
		fieldCase{gvr: pods, field: "status.nominatedNodeName", v0: "node-a", v1: "node-b",
			make: pod(func(_, status map[string]any, v string) { status["nominatedNodeName"] = v }), set: podStatus("nominatedNodeName")},
		fieldCase{gvr: pods, field: "status.podIP", v0: "10.0.0.1", v1: "10.0.0.2", make: pod(func(_, status map[string]any, v string) {
			status["podIP"], status["podIPs"] = v, []any{map[string]any{"ip": v}}
		})},
		// Accepted, never computed: "" for every pod.
		fieldCase{gvr: pods, field: "status.podIPs", v0: "", v1: "10.0.0.2", sameForAll: true, make: pod(func(_, status map[string]any, v string) {
			if v != "" {
				status["podIP"], status["podIPs"] = v, []any{map[string]any{"ip": v}}
			}
		})},
	)

	// An event's involvedObject.namespace is its own namespace, or "" in
	// the default namespace (for cluster-scoped objects).
	cases = append(cases, fieldCase{gvr: coreEvents, field: "involvedObject.namespace", v0: "", v1: "default", inNamespace: "default",
		make: coreEvent(nested("involvedObject", "namespace"))})
	for _, f := range []struct{ field, v0, v1 string }{
		{"involvedObject.kind", "Pod", "Node"},
		{"involvedObject.name", "p-a", "p-b"},
		{"involvedObject.uid", "uid-a", "uid-b"},
		{"involvedObject.apiVersion", "v1", "apps/v1"},
		{"involvedObject.resourceVersion", "1", "2"},
		{"involvedObject.fieldPath", "spec.containers{a}", "spec.containers{b}"},
		{"reason", "Started", "Killing"},
		{"type", "Normal", "Warning"},
	} {
		path := strings.Split(f.field, ".")
		cases = append(cases, fieldCase{gvr: coreEvents, field: f.field, v0: f.v0, v1: f.v1, make: coreEvent(nested(path...))})
	}
	cases = append(cases,
		fieldCase{gvr: coreEvents, field: "reportingComponent", v0: "example.com/a", v1: "example.com/b", make: coreEvent(func(e map[string]any, v string) {
			e["reportingComponent"], e["reportingInstance"] = v, "i-1"
		})},
		// source is source.component, or else reportingComponent.
		fieldCase{gvr: coreEvents, field: "source", v0: "kubelet", v1: "example.com/ctrl", make: coreEvent(func(e map[string]any, v string) {
			if v == "kubelet" {
				e["source"] = map[string]any{"component": v}
				return
			}
			delete(e, "source")
			e["reportingComponent"], e["reportingInstance"] = v, "i-1"
		})},
	)
	for _, f := range []struct{ field, v0, v1 string }{
		{"regarding.kind", "Pod", "Node"},
		{"regarding.namespace", "ns-a", "ns-b"},
		{"regarding.name", "p-a", "p-b"},
		{"regarding.uid", "uid-a", "uid-b"},
		{"regarding.apiVersion", "v1", "apps/v1"},
		{"regarding.resourceVersion", "1", "2"},
		{"regarding.fieldPath", "spec.containers{a}", "spec.containers{b}"},
		{"reportingController", "example.com/a", "example.com/b"},
		{"reason", "Scaled", "Killed"},
		{"type", "Normal", "Warning"},
	} {
		path := strings.Split(f.field, ".")
		cases = append(cases, fieldCase{gvr: events, field: f.field, v0: f.v0, v1: f.v1, make: eventsV1Event(nested(path...))})
	}

	secrets := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	services := schema.GroupVersionResource{Version: "v1", Resource: "services"}
	rcs := schema.GroupVersionResource{Version: "v1", Resource: "replicationcontrollers"}
	nodes := schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
	namespaces := schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	jobs := schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}
	csrs := schema.GroupVersionResource{Group: "certificates.k8s.io", Version: "v1", Resource: "certificatesigningrequests"}
	ctbs := schema.GroupVersionResource{Group: "certificates.k8s.io", Version: "v1", Resource: "clustertrustbundles"}
	slices := schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "resourceslices"}
	pcrs := schema.GroupVersionResource{Group: "certificates.k8s.io", Version: "v1", Resource: "podcertificaterequests"}
	pvs := schema.GroupVersionResource{Version: "v1", Resource: "persistentvolumes"}
	podTemplate := func(restartPolicy string) map[string]any {
		return map[string]any{
			"metadata": map[string]any{"labels": map[string]any{"app": "x"}},
			"spec":     map[string]any{"restartPolicy": restartPolicy, "containers": []any{map[string]any{"name": "app", "image": "nginx"}}},
		}
	}
	caPEM := testCA(t)
	cases = append(cases,
		fieldCase{gvr: secrets, field: "type", v0: "Opaque", v1: "example.com/custom", make: func(t *testing.T, ns, name, value string) {
			create(t, secrets, ns, obj("v1", "Secret", ns, name, map[string]any{"type": value, "stringData": map[string]any{"k": "v"}}), nil)
		}},
		fieldCase{gvr: services, field: "spec.type", v0: "ClusterIP", v1: "ExternalName", make: service},
		// Headless services have clusterIP None; ExternalName ones none.
		fieldCase{gvr: services, field: "spec.clusterIP", v0: "None", v1: "", make: func(t *testing.T, ns, name, value string) {
			if value == "None" {
				create(t, services, ns, obj("v1", "Service", ns, name, map[string]any{"spec": map[string]any{
					"clusterIP": "None", "selector": map[string]any{"app": "x"}, "ports": []any{map[string]any{"port": int64(80)}},
				}}), nil)
				return
			}
			service(t, ns, name, "ExternalName")
		}},
		fieldCase{gvr: rcs, field: "status.replicas", v0: "0", v1: "2", make: func(t *testing.T, ns, name, value string) {
			create(t, rcs, ns, obj("v1", "ReplicationController", ns, name, map[string]any{"spec": map[string]any{
				"replicas": int64(0), "selector": map[string]any{"app": "x"}, "template": podTemplate("Always"),
			}}), map[string]any{"replicas": atoi(value)})
		}, set: func(t *testing.T, ns, name, value string) {
			update(t, dyn.Resource(rcs).Namespace(ns), name, true, func(u *unstructured.Unstructured) { setPath(u, atoi(value), "status", "replicas") })
		}},
		fieldCase{gvr: jobs, field: "status.successful", v0: "0", v1: "1", make: func(t *testing.T, ns, name, value string) {
			create(t, jobs, ns, obj("batch/v1", "Job", ns, name, map[string]any{"spec": map[string]any{"template": podTemplate("Never")}}), nil)
			if value != "0" {
				update(t, dyn.Resource(jobs).Namespace(ns), name, true, func(u *unstructured.Unstructured) {
					setPath(u, atoi(value), "status", "succeeded")
					setPath(u, time.Now().UTC().Format(time.RFC3339), "status", "startTime")
				})
			}
		}},
		fieldCase{gvr: nodes, field: "spec.unschedulable", v0: "true", v1: "false", make: func(t *testing.T, _, name, value string) {
			create(t, nodes, "", obj("v1", "Node", "", name, map[string]any{"spec": map[string]any{"unschedulable": value == "true"}}), nil)
		}, set: func(t *testing.T, _, name, value string) {
			update(t, dyn.Resource(nodes), name, false, func(u *unstructured.Unstructured) { setPath(u, value == "true", "spec", "unschedulable") })
		}},
		// Without a namespace controller, a deleted namespace stays
		// Terminating.
		fieldCase{gvr: namespaces, field: "status.phase", v0: "Active", v1: "Terminating", make: func(t *testing.T, _, name, value string) {
			create(t, namespaces, "", obj("v1", "Namespace", "", name, nil), nil)
			if value == "Terminating" {
				if err := dyn.Resource(namespaces).Delete(ctxFor(t), name, metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
			}
		}},
		fieldCase{gvr: csrs, field: "spec.signerName", v0: "example.com/a", v1: "example.com/b", make: func(t *testing.T, _, name, value string) {
			create(t, csrs, "", obj("certificates.k8s.io/v1", "CertificateSigningRequest", "", name, map[string]any{"spec": map[string]any{
				"request": testCSR(t), "signerName": value, "usages": []any{"digital signature"},
			}}), nil)
		}},
		fieldCase{gvr: ctbs, field: "spec.signerName", v0: "example.com/a", v1: "example.com/b", make: func(t *testing.T, _, name, value string) {
			create(t, ctbs, "", obj("certificates.k8s.io/v1", "ClusterTrustBundle", "", bundleName(name, value), map[string]any{"spec": map[string]any{
				"signerName": value, "trustBundle": caPEM,
			}}), nil)
		}, objectName: bundleName},
		fieldCase{gvr: slices, field: "spec.nodeName", v0: "node-a", v1: "", make: resourceSlice(func(spec map[string]any, v string) {
			if v == "" {
				spec["allNodes"] = true
				return
			}
			spec["nodeName"] = v
		})},
		fieldCase{gvr: slices, field: "spec.driver", v0: "a.example.com", v1: "b.example.com", make: resourceSlice(func(spec map[string]any, v string) { spec["driver"] = v })},
		fieldCase{gvr: slices, field: "spec.pool.name", v0: "pool-a", v1: "pool-b", make: resourceSlice(func(spec map[string]any, v string) {
			spec["pool"].(map[string]any)["name"] = v
		})},
		fieldCase{gvr: pcrs, field: "spec.signerName", v0: "example.com/a", v1: "example.com/b", make: podCertificateRequest(func(spec map[string]any, v string) { spec["signerName"] = v })},
		fieldCase{gvr: pcrs, field: "spec.podName", v0: "pod-a", v1: "pod-b", make: podCertificateRequest(func(spec map[string]any, v string) { spec["podName"] = v })},
		fieldCase{gvr: pcrs, field: "spec.nodeName", v0: "node-a", v1: "node-b", make: podCertificateRequest(func(spec map[string]any, v string) { spec["nodeName"] = v })},
		// A cluster-scoped type with the API server's default fields:
		// metadata.namespace is accepted, and "" for every object.
		fieldCase{gvr: pvs, field: "metadata.namespace", v0: "", v1: "x", sameForAll: true, make: func(t *testing.T, _, name, _ string) {
			create(t, pvs, "", obj("v1", "PersistentVolume", "", name, map[string]any{"spec": map[string]any{
				"capacity": map[string]any{"storage": "1Gi"}, "accessModes": []any{"ReadWriteOnce"}, "hostPath": map[string]any{"path": "/tmp/" + name},
			}}), nil)
		}},
	)
	// The pods of spec.serviceAccountName need their service accounts.
	for i := range cases {
		if cases[i].field == "spec.serviceAccountName" {
			make := cases[i].make
			cases[i].make = func(t *testing.T, ns, name, value string) {
				createServiceAccount(t, ns, value)
				make(t, ns, name, value)
			}
		}
	}
	return cases
}

// bundleName names a ClusterTrustBundle after its signer, as the API
// requires.
func bundleName(name, signer string) string { return strings.ReplaceAll(signer, "/", ":") + ":" + name }

func service(t *testing.T, ns, name, typ string) {
	t.Helper()
	spec := map[string]any{"type": typ}
	if typ == "ExternalName" {
		spec["externalName"] = "example.com"
	} else {
		spec["ports"] = []any{map[string]any{"port": int64(80)}}
	}
	create(t, schema.GroupVersionResource{Version: "v1", Resource: "services"}, ns, obj("v1", "Service", ns, name, map[string]any{"spec": spec}), nil)
}

func resourceSlice(field func(spec map[string]any, v string)) makeFunc {
	return func(t *testing.T, _, name, value string) {
		t.Helper()
		spec := map[string]any{
			"driver":   "a.example.com",
			"pool":     map[string]any{"name": "pool-a", "generation": int64(1), "resourceSliceCount": int64(1)},
			"nodeName": "node-a",
		}
		field(spec, value)
		if _, all := spec["allNodes"]; all {
			delete(spec, "nodeName")
		}
		create(t, schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "resourceslices"}, "",
			obj("resource.k8s.io/v1", "ResourceSlice", "", name, map[string]any{"spec": spec}), nil)
	}
}

// podCertificateRequest makes a PodCertificateRequest whose field sets to
// the value, with the empty stub CSR kubelets send.
func podCertificateRequest(field func(spec map[string]any, v string)) makeFunc {
	return func(t *testing.T, ns, name, value string) {
		t.Helper()
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		stub, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, priv)
		if err != nil {
			t.Fatal(err)
		}
		spec := map[string]any{
			"signerName": "example.com/a", "podName": "pod-a", "podUID": "00000000-0000-0000-0000-00000000000a",
			"serviceAccountName": "default", "serviceAccountUID": "00000000-0000-0000-0000-00000000000b",
			"nodeName": "node-a", "nodeUID": "00000000-0000-0000-0000-00000000000c",
			"stubPKCS10Request": base64.StdEncoding.EncodeToString(stub),
		}
		field(spec, value)
		create(t, schema.GroupVersionResource{Group: "certificates.k8s.io", Version: "v1", Resource: "podcertificaterequests"}, ns,
			obj("certificates.k8s.io/v1", "PodCertificateRequest", ns, name, map[string]any{"spec": spec}), nil)
	}
}

func createServiceAccount(t *testing.T, ns, name string) {
	t.Helper()
	_, err := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}).Namespace(ns).
		Create(ctxFor(t), &unstructured.Unstructured{Object: obj("v1", "ServiceAccount", ns, name, nil)}, metav1.CreateOptions{})
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
}

func atoi(s string) int64 {
	var n int64
	fmt.Sscan(s, &n)
	return n
}

// testCSR returns a certificate signing request, base64-encoded as the
// API's request field wants it (a []byte in JSON).
func testCSR(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "test"}}, key)
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Trim(string(data), `"`)
}

// testCA returns a self-signed CA certificate in PEM.
func testCA(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// TestUnsupportedFieldsAreRefusedAsTheAPIServerRefusesThem checks that the
// hub refuses what the API server refuses, naming what it supports.
func TestUnsupportedFieldsAreRefusedAsTheAPIServerRefusesThem(t *testing.T) {
	h := startHub(t, informerhub.Config{})
	for _, tt := range []struct {
		gvr           schema.GroupVersionResource
		fieldSelector string
		inMessage     string
	}{
		{pods, "spec.containers=x", "supported fields: metadata.name, metadata.namespace, spec.hostNetwork, spec.nodeName"},
		{schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, "metadata.namespace=x", "cluster-scoped"},
		{events, "involvedObject.kind=Pod", "regarding.kind"},
		{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "replicasets"}, "status.replicas=1", "supported fields: metadata.name, metadata.namespace"},
		{schema.GroupVersionResource{Group: "certificates.k8s.io", Version: "v1", Resource: "podcertificaterequests"}, "metadata.namespace=x", "supported fields: metadata.name, spec.nodeName"},
	} {
		sel := fieldCase{gvr: tt.gvr}.selector("", tt.fieldSelector)
		_, apiErr := fieldCase{gvr: tt.gvr}.resource("").List(ctxFor(t), metav1.ListOptions{FieldSelector: tt.fieldSelector, Limit: 1})
		if apiErr == nil {
			t.Errorf("the API server accepts %s on %s: the hub should too", tt.fieldSelector, tt.gvr.Resource)
			continue
		}
		stream, err := h.client.Snapshot(ctxFor(t), &informerhubv1.SnapshotRequest{Selector: sel})
		if err == nil {
			_, err = stream.Recv()
		}
		checkStatus(t, err, codes.InvalidArgument, "INVALID_ARGUMENT", informerhub.FieldFieldSelector, tt.inMessage)
	}
}

var widgets = schema.GroupVersionResource{Group: "fieldselectors.example.com", Version: "v1", Resource: "widgets"}

// widgetCRD is a namespaced CRD whose version v1 selects on the given
// fields.
func widgetCRD(selectable ...string) *unstructured.Unstructured {
	var fields []any
	for _, f := range selectable {
		fields = append(fields, map[string]any{"jsonPath": f})
	}
	prop := func(typ string) map[string]any { return map[string]any{"type": typ} }
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": widgets.Resource + "." + widgets.Group},
		"spec": map[string]any{
			"group": widgets.Group, "scope": "Namespaced",
			"names": map[string]any{"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
			"versions": []any{map[string]any{
				"name": "v1", "served": true, "storage": true, "selectableFields": fields,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "properties": map[string]any{
					"spec": map[string]any{"type": "object", "properties": map[string]any{
						"color": prop("string"), "size": prop("integer"), "enabled": prop("boolean"),
					}},
				}}},
			}},
		},
	}}
}

func widget(field string, value func(string) any) makeFunc {
	return func(t *testing.T, ns, name, v string) {
		t.Helper()
		create(t, widgets, ns, obj(widgets.GroupVersion().String(), "Widget", ns, name, map[string]any{"spec": map[string]any{field: value(v)}}), nil)
	}
}

func setWidget(field string, value func(string) any) applyFunc {
	return func(t *testing.T, ns, name, v string) {
		t.Helper()
		update(t, dyn.Resource(widgets).Namespace(ns), name, false, func(u *unstructured.Unstructured) { setPath(u, value(v), "spec", field) })
	}
}

// selectableFields returns what the hub's ListResources says a field
// selector may name on a resource type; nil when it does not list it.
func selectableFields(t *testing.T, h *hub, gvr schema.GroupVersionResource) []string {
	t.Helper()
	resp, err := h.client.ListResources(ctxFor(t), &informerhubv1.ListResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resp.Resources {
		if r.Group == gvr.Group && r.Version == gvr.Version && r.Resource == gvr.Resource {
			return r.SelectableFields
		}
	}
	return nil
}

// TestCustomResourceSelectableFields checks field selectors on a custom
// resource's selectableFields against the API server, before and after a
// CRD update adds one, while a subscriber watches throughout.
func TestCustomResourceSelectableFields(t *testing.T) {
	h := startHub(t, informerhub.Config{})
	crd, err := dyn.Resource(crds).Create(ctxFor(t), widgetCRD(".spec.color", ".spec.size"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dyn.Resource(crds).Delete(bgCtx(), crd.GetName(), metav1.DeleteOptions{}) })
	eventually(t, "the hub lists the widgets' selectable fields", func() bool {
		return slices.Equal(selectableFields(t, h, widgets), []string{"metadata.name", "metadata.namespace", "spec.color", "spec.size"})
	})
	text := func(v string) any { return v }
	number := func(v string) any { return atoi(v) }
	boolean := func(v string) any { return v == "true" }
	for _, c := range []fieldCase{
		{gvr: widgets, field: "spec.color", v0: "red", v1: "blue", make: widget("color", text), set: setWidget("color", text)},
		{gvr: widgets, field: "spec.size", v0: "3", v1: "5", make: widget("size", number), set: setWidget("size", number)},
	} {
		t.Run(c.field, func(t *testing.T) { checkFieldCase(t, h, c) })
	}

	// A subscriber on spec.color watches while the CRD gains spec.enabled.
	ns := namespace(t)
	widget("color", text)(t, ns, "before", "red")
	before, err := dyn.Resource(widgets).Namespace(ns).Get(ctxFor(t), "before", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	snap, rv, token := hubSnapshotAfter(t, h, fieldCase{gvr: widgets}.selector(ns, "spec.color=red"), before.GetResourceVersion())
	if len(snap) != 1 {
		t.Fatalf("snapshot of spec.color=red: %v", snap)
	}
	subscriber, _ := openStartedWatch(t, h.client, &informerhubv1.WatchRequest{Selector: fieldCase{gvr: widgets}.selector(ns, "spec.color=red"), ResumeToken: token})

	update(t, dyn.Resource(crds), crd.GetName(), false, func(u *unstructured.Unstructured) {
		versions, _, _ := unstructured.NestedSlice(u.Object, "spec", "versions")
		v := versions[0].(map[string]any)
		v["selectableFields"] = append(v["selectableFields"].([]any), map[string]any{"jsonPath": ".spec.enabled"})
		if err := unstructured.SetNestedSlice(u.Object, versions, "spec", "versions"); err != nil {
			t.Fatal(err)
		}
	})
	eventually(t, "the hub lists spec.enabled", func() bool {
		return slices.Contains(selectableFields(t, h, widgets), "spec.enabled")
	})
	eventually(t, "the API server selects on spec.enabled", func() bool {
		_, err := dyn.Resource(widgets).Namespace(ns).List(ctxFor(t), metav1.ListOptions{FieldSelector: "spec.enabled=true"})
		return err == nil
	})
	t.Run("spec.enabled added by an update of the CRD", func(t *testing.T) {
		checkFieldCase(t, h, fieldCase{gvr: widgets, field: "spec.enabled", v0: "true", v1: "false", make: widget("enabled", boolean), set: setWidget("enabled", boolean)})
	})

	// The subscriber of spec.color saw every change the API server's watch
	// did, across the CRD's update.
	widget("color", text)(t, ns, "after", "red")
	setWidget("color", text)(t, ns, "before", "blue")
	widget("color", text)(t, ns, "marker", "red")
	// The API server ends its watches of a custom resource when its CRD
	// changes, and the new storage's watch cache starts after the change:
	// the reference watches again from where it got through the API server
	// that reads etcd (as the hub's informer relists, unseen by its
	// subscribers).
	reference := dynamic.NewForConfigOrDie(etcdAPIServer(t).Config)
	var want []change
	for done := false; !done; {
		api, err := reference.Resource(widgets).Namespace(ns).Watch(ctxFor(t), metav1.ListOptions{ResourceVersion: rv, FieldSelector: "spec.color=red"})
		if err != nil {
			t.Fatal(err)
		}
		for e := range api.ResultChan() {
			if e.Type == watch.Error {
				t.Fatalf("the API server's watch: %v", e.Object)
			}
			c := apiChange(t, e)
			rv = c.RV
			if c.Name == "marker" {
				done = true
				break
			}
			want = append(want, c)
		}
		api.Stop()
	}
	if len(want) != 2 {
		t.Fatalf("the API server's watch saw %v, want the ADDED of after and the DELETED of before", want)
	}
	if diff := cmp.Diff(want, hubChangesUntil(t, subscriber, "marker")); diff != "" {
		t.Fatalf("the subscriber of spec.color across the CRD's update (-api +hub):\n%s", diff)
	}
}
