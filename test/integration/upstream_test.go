package integration

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/informerhub"
)

// apiServerMetric sums the samples of a metric of the API server whose
// labels include all of want.
func apiServerMetric(t *testing.T, name string, want map[string]string) float64 {
	t.Helper()
	raw, err := kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctxFor(t))
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	scanner := bufio.NewScanner(bytes.NewReader(raw))
	scanner.Buffer(nil, 1<<20)
lines:
	for scanner.Scan() {
		line := scanner.Text()
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		for k, v := range want {
			if !strings.Contains(line, k+`="`+v+`"`) {
				continue lines
			}
		}
		value, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		sum += value
	}
	return sum
}

func upstreamWatches(t *testing.T, resource string) float64 {
	return apiServerMetric(t, "apiserver_longrunning_requests", map[string]string{"verb": "WATCH", "resource": resource})
}

func upstreamLists(t *testing.T, resource string) float64 {
	return apiServerMetric(t, "apiserver_request_total", map[string]string{"verb": "LIST", "resource": resource})
}

// eventually polls cond until it holds. Only for waiting on things outside
// the hub's control that offer no notification (the API server's metrics,
// discovery); never to wait for the hub itself.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestOneUpstreamWatchPerResource subscribes 100 streams and 10 snapshots,
// with different namespaces and selectors, to one resource type, and reads
// the API server's own metrics: one watch, and no LIST per subscriber.
func TestOneUpstreamWatchPerResource(t *testing.T) {
	const resource = "podtemplates" // nothing else in the test cluster watches these
	var namespaces []string
	for range 4 {
		namespaces = append(namespaces, namespace(t))
	}
	for i, ns := range namespaces {
		_, err := kube.CoreV1().PodTemplates(ns).Create(bgCtx(), &corev1.PodTemplate{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("pt-", i), Labels: map[string]string{"i": fmt.Sprint(i)}},
			Template:   corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	baseline := upstreamWatches(t, resource)
	h := startHub(t, informerhub.Config{})

	subscribe := func(i int) {
		sel := &informerhubv1.ResourceSelector{Version: "v1", Resource: resource, Namespace: namespaces[i%4]}
		switch i % 3 {
		case 1:
			sel.Namespace, sel.LabelSelector = "", fmt.Sprint("i=", i%4)
		case 2:
			sel.FieldSelector = "metadata.name!=x"
		}
		stream, _ := openWatch(t, h.client, &informerhubv1.WatchRequest{Selector: sel, SendInitialEvents: true})
		initialEvents(t, stream) // the subscription is established
	}
	subscribe(0)
	if got := upstreamWatches(t, resource); got != baseline+1 {
		t.Fatalf("one subscriber: the API server serves %v watches on %s, want %v", got, resource, baseline+1)
	}
	lists := upstreamLists(t, resource)
	for i := 1; i < 100; i++ {
		subscribe(i)
	}
	for i := range 10 {
		snap, err := h.client.Snapshot(ctxFor(t), &informerhubv1.SnapshotRequest{Selector: &informerhubv1.ResourceSelector{Version: "v1", Resource: resource, Namespace: namespaces[i%4]}})
		if err != nil {
			t.Fatal(err)
		}
		if err := readStream(snap.Recv).end(t); err != nil {
			t.Fatal(err)
		}
	}
	if got := upstreamWatches(t, resource); got != baseline+1 {
		t.Errorf("100 subscribers: the API server serves %v watches on %s, want %v", got, resource, baseline+1)
	}
	if got := upstreamLists(t, resource); got != lists {
		t.Errorf("100 subscribers and 10 snapshots made %v LIST calls, want none", got-lists)
	}

	resources, err := h.client.ListResources(ctxFor(t), &informerhubv1.ListResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	all, err := kube.CoreV1().PodTemplates("").List(ctxFor(t), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resources.Resources {
		if r.Group == "" && r.Version == "v1" && r.Resource == resource {
			if !r.InformerActive || r.Subscribers != 100 || r.CachedObjects != uint64(len(all.Items)) || r.Kind != "PodTemplate" || !r.Namespaced {
				t.Errorf("ListResources reports %v, want an active informer, 100 subscribers, %d objects", r, len(all.Items))
			}
			return
		}
	}
	t.Errorf("ListResources does not list %s", resource)
}

// TestIdleInformerStopsItsUpstreamWatch checks that the informer's watch on
// the API server ends once its last subscriber has been gone for the idle
// timeout.
func TestIdleInformerStopsItsUpstreamWatch(t *testing.T) {
	const resource = "limitranges"
	baseline := upstreamWatches(t, resource)
	h := startHub(t, informerhub.Config{IdleTimeout: 200 * time.Millisecond})
	stream, cancel := openWatch(t, h.client, &informerhubv1.WatchRequest{
		Selector: &informerhubv1.ResourceSelector{Version: "v1", Resource: resource}, SendInitialEvents: true})
	initialEvents(t, stream)
	if got := upstreamWatches(t, resource); got != baseline+1 {
		t.Fatalf("with a subscriber: %v watches, want %v", got, baseline+1)
	}
	cancel()
	eventually(t, "the API server no longer serves the hub's watch", func() bool { return upstreamWatches(t, resource) == baseline })
	resources, err := h.Resources(ctxFor(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resources {
		if r.Resource.Resource == resource && r.InformerActive {
			t.Fatalf("ListResources still reports an active informer for %s", resource)
		}
	}
}

var crds = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// createSchemalessCRD defines a namespaced custom resource of group/v1
// whose objects may hold anything (x-kubernetes-preserve-unknown-fields),
// deleted when t ends.
func createSchemalessCRD(t *testing.T, group, plural, singular, kind string) *unstructured.Unstructured {
	t.Helper()
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata":   map[string]any{"name": plural + "." + group},
		"spec": map[string]any{
			"group": group,
			"names": map[string]any{"plural": plural, "singular": singular, "kind": kind, "listKind": kind + "List"},
			"scope": "Namespaced",
			"versions": []any{map[string]any{
				"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
			}},
		},
	}}
	if _, err := dyn.Resource(crds).Create(ctxFor(t), crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dyn.Resource(crds).Delete(bgCtx(), crd.GetName(), metav1.DeleteOptions{}) })
	return crd
}

// TestCustomResourceDefinedAtRunTime defines a CRD after the hub has started
// and has already answered NOT_FOUND for it: the hub must find it through
// discovery and stream its objects, without a restart. Deleting the CRD
// ends the stream with NOT_FOUND instead of leaving it waiting forever.
func TestCustomResourceDefinedAtRunTime(t *testing.T) {
	const group = "test.informerhub.io"
	widgets := schema.GroupVersionResource{Group: group, Version: "v1", Resource: "widgets"}
	h := startHub(t, informerhub.Config{})
	sel := &informerhubv1.ResourceSelector{Group: group, Version: "v1", Resource: "widgets"}
	stream, _ := openWatch(t, h.client, &informerhubv1.WatchRequest{Selector: sel})
	if err := stream.end(t); status.Code(err) != codes.NotFound {
		t.Fatalf("before the CRD exists: %v, want NOT_FOUND", err)
	}

	crd := createSchemalessCRD(t, group, "widgets", "widget", "Widget")

	// Discovery learns of the CRD a moment after it is created; a client
	// retries NOT_FOUND until then.
	ns := namespace(t)
	sel.Namespace = ns
	var widgetsStream *streamReader[informerhubv1.WatchResponse]
	eventually(t, "the hub serves the new resource", func() bool {
		stream, _ := openWatch(t, h.client, &informerhubv1.WatchRequest{Selector: sel, SendInitialEvents: true})
		resp, err := func() (*informerhubv1.WatchResponse, error) {
			select {
			case resp, ok := <-stream.responses:
				if ok {
					return resp, nil
				}
				return nil, <-stream.err
			case <-time.After(30 * time.Second):
				return nil, fmt.Errorf("no response")
			}
		}()
		if status.Code(err) == codes.NotFound {
			return false
		}
		if err != nil || !resp.InitialEventsEnd {
			t.Fatalf("watching the new resource: %v %v", resp, err)
		}
		widgetsStream = stream
		return true
	})
	widget := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": group + "/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w1"},
		"spec":     map[string]any{"size": int64(3)},
	}}
	created, err := dyn.Resource(widgets).Namespace(ns).Create(ctxFor(t), widget, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	resp := widgetsStream.next(t)
	if resp.Type != informerhubv1.EventType_EVENT_TYPE_ADDED || resp.ResourceVersion != created.GetResourceVersion() ||
		!strings.Contains(resp.Object, `"spec":{"size":3}`) {
		t.Fatalf("got %v, want the ADDED widget", resp)
	}

	if err := dyn.Resource(crds).Delete(ctxFor(t), crd.GetName(), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		resp, ok := <-widgetsStream.responses
		if !ok {
			break
		}
		if resp.Type != informerhubv1.EventType_EVENT_TYPE_DELETED && resp.Type != informerhubv1.EventType_EVENT_TYPE_BOOKMARK {
			t.Fatalf("after the CRD's deletion: %v", resp)
		}
	}
	if err := <-widgetsStream.err; status.Code(err) != codes.NotFound {
		t.Fatalf("the stream of a deleted CRD ended with %v, want NOT_FOUND", err)
	}
}
