package conformance

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"fmt"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/test/checker"
)

var podCertificateRequests = schema.GroupVersionResource{Group: "certificates.k8s.io", Version: "v1", Resource: "podcertificaterequests"}

// createPodCertificateRequest creates a PodCertificateRequest in ns, with
// a stub CSR of an Ed25519 key, as the API server's validation wants one.
func createPodCertificateRequest(t *testing.T, ns, name string) *unstructured.Unstructured {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, priv)
	if err != nil {
		t.Fatal(err)
	}
	podUID := "pod-uid-" + name
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "certificates.k8s.io/v1", "kind": "PodCertificateRequest",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"signerName": "example.com/signer", "podName": "pod-" + name, "podUID": podUID,
			"serviceAccountName": "default", "serviceAccountUID": "sa-uid", "nodeName": "node-1", "nodeUID": "node-uid",
			"maxExpirationSeconds": int64(86400), "stubPKCS10Request": csr,
		},
	}}
	created, err := dyn.Resource(podCertificateRequests).Namespace(ns).Create(context.Background(), obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

// createNamespace creates a namespace of the test's, named name and a
// number.
func createNamespace(t *testing.T, name string) string {
	t.Helper()
	name = fmt.Sprintf("%s-%d", name, runs.Add(1))
	if _, err := kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return name
}

// TestANamespacedReplayOfATypeWithoutANamespaceField: PodCertificateRequests
// are namespaced, yet their API server refuses metadata.namespace as a
// field. A Watch of one namespace, resumed on another hub, replays from
// the namespace's own path, and gets that namespace's changes, exactly.
func TestANamespacedReplayOfATypeWithoutANamespaceField(t *testing.T) {
	ns, other := createNamespace(t, "pcr"), createNamespace(t, "pcr-other")
	createPodCertificateRequest(t, ns, "a")
	createPodCertificateRequest(t, other, "x")
	sel := &informerhubv1.ResourceSelector{Group: podCertificateRequests.Group, Version: podCertificateRequests.Version,
		Resource: podCertificateRequests.Resource, Namespace: ns}
	first := startHub(t, cluster.Config, hubConfig())
	stream, err := grpcDialer(t, first.Addr).Watch(context.Background(), &informerhubv1.WatchRequest{Selector: sel, SendInitialEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	var token string
	for {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetInitialEventsEnd() {
			token = resp.GetResumeToken()
			break
		}
	}
	first.Stop()
	b := createPodCertificateRequest(t, ns, "b")
	createPodCertificateRequest(t, other, "y")
	if err := dyn.Resource(podCertificateRequests).Namespace(ns).Delete(context.Background(), "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	second := startHub(t, cluster.Config, hubConfig())
	resumed, err := grpcDialer(t, second.Addr).Watch(context.Background(), &informerhubv1.WatchRequest{Selector: sel, ResumeToken: token})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(got) < 2 {
		resp, err := resumed.Recv()
		if err != nil {
			t.Fatalf("the resumed Watch after %q: %s", got, statusOf(err))
		}
		if resp.GetType() == informerhubv1.EventType_EVENT_TYPE_BOOKMARK {
			continue
		}
		e, err := checker.FromWatchResponse(resp)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, e.Type+" "+e.Namespace+"/"+e.Name)
	}
	if want := []string{"ADDED " + ns + "/" + b.GetName(), "DELETED " + ns + "/a"}; !cmp.Equal(got, want) {
		t.Errorf("resumed on another hub: %q, want %q", got, want)
	}
	if n := statsOfGVR(second.Hub, podCertificateRequests).Replays; n != 1 {
		t.Errorf("%d replays, want the token replayed from the API server", n)
	}
}

// gadgets is a custom resource whose selectable field spec.color the test
// takes away while a stream that selects by it runs.
var gadgets = schema.GroupVersionResource{Group: widgets.Group, Version: "v1", Resource: "gadgets"}

// TestAFieldTheAPIServerStopsServingIsEvaluatedInTheReplay: a stream that
// selects gadgets by spec.color, catching up, goes on past a CRD update
// that takes the field away from the API server's field selectors: when
// the history moves past it and it replays from the API server, which
// refuses the field now, the hub evaluates the field itself, as it does
// live, and the stream goes on, exactly.
func TestAFieldTheAPIServerStopsServingIsEvaluatedInTheReplay(t *testing.T) {
	crd := widgetCRD("gadgets", "Gadget", ".spec.color")
	if err := installCRD(context.Background(), crd, gadgets, "spec.color=red"); err != nil {
		t.Fatal(err)
	}
	s := newScenario(t, largePayload)
	kindGadgets := &kind{gvr: gadgets, object: func(ns, name string, st state) map[string]any {
		obj := kindWidgets.object(ns, name, st)
		obj["kind"] = "Gadget"
		return obj
	}}
	ref, err := checker.StartReference(context.Background(), dyn, gadgets, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ref.Stop() })
	s.refs[kindGadgets] = ref
	for i := range s.objects {
		s.create(objectID{kindGadgets, s.nsA, i})
	}
	// An API server without a watch cache: the update of a CRD starts its
	// watch cache over, which then answers 410 to what came before; etcd
	// serves every version it has not compacted.
	apiserver := etcdAPIServer(t)
	hubsAPIServer := dynamic.NewForConfigOrDie(apiserver.Config)
	cfg := hubConfig()
	cfg.HistorySize = 32
	h := startHub(t, apiserver.Config, cfg)
	p := probe{row: rowCRDFields, kind: kindGadgets,
		request: func(s *scenario) *informerhubv1.WatchRequest {
			return watchOf(kindGadgets, &informerhubv1.ResourceSelector{Namespace: s.nsA, FieldSelector: "spec.color=red"})
		},
		options: func(s *scenario) checker.Options {
			return checker.Options{Namespace: s.nsA, FieldSelector: "spec.color=red", Match: fieldIs("spec", "color", "red")}
		}}
	r := newProbeRun(t, s, p, grpcDialer(t, h.Addr))
	_, token, rv := snapshotEvents(t, r.ctx, r.client, r.req)
	r.from = rv
	churn := func(rounds int) {
		for range rounds {
			s.round++
			for i := range s.objects {
				s.change(objectID{kindGadgets, s.nsA, i})
			}
		}
	}
	churn(4) // 24 changes: the history holds them
	r.open(token, false)
	r.awaitEvents(1)
	r.pause()

	// The field goes from the CRD; the API server refuses it once it has
	// loaded the update.
	cur, err := dyn.Resource(crds).Get(context.Background(), crd.GetName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	versions, _, _ := unstructured.NestedSlice(cur.Object, "spec", "versions")
	delete(versions[0].(map[string]any), "selectableFields")
	if err := unstructured.SetNestedSlice(cur.Object, versions, "spec", "versions"); err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(crds).Update(context.Background(), cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the hub's API server refuses spec.color", func() bool {
		_, err := hubsAPIServer.Resource(gadgets).List(context.Background(), metav1.ListOptions{FieldSelector: "spec.color=red", Limit: 1})
		return apierrors.IsBadRequest(err)
	})
	before := statsOfGVR(h.Hub, gadgets)
	churn(8) // 48 more: past the history of 32
	r.resume()
	s.create(objectID{kindGadgets, s.nsA, 1000}) // the last change
	if err := ref.WaitFor(context.Background(), strconv.FormatUint(s.lastRV[kindGadgets], 10)); err != nil {
		t.Fatal(err)
	}
	r.settled()
	if n := statsOfGVR(h.Hub, gadgets).Replays - before.Replays; n != 1 {
		t.Errorf("%d replays, want the stream to have replayed from the API server", n)
	}
	tr := r.tr.Copy()
	s.reach(t, kindGadgets, reachOf(tr))
	if err := checker.Check(ref, tr, checker.Options{Namespace: s.nsA, Match: fieldIs("spec", "color", "red"), FromResourceVersion: r.from}); err != nil {
		t.Error(err)
	}
}
