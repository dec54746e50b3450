package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/google/go-cmp/cmp"

	hubclient "github.com/informerhub/informerhub/clients/go"
	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/test/checker"
)

var (
	secrets       = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	namespacesGVR = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
)

// manyWorkload changes ConfigMaps and Secrets in a namespace, and
// Namespaces of a label, at random.
type manyWorkload struct {
	t       *testing.T
	cms     *workload
	ns      string
	label   map[string]string
	rnd     *rand.Rand
	secrets []string // the live Secrets
	nss     []string // the Namespaces of the label
	next    int
}

func (w *manyWorkload) step(n int) {
	w.t.Helper()
	ctx := ctxFor(w.t)
	for range n {
		w.next++
		switch r := w.rnd.IntN(10); {
		case r < 4:
			w.cms.step(1)
		case r < 6 || len(w.secrets) < 2:
			name := fmt.Sprint("s-", w.next)
			if _, err := kube.CoreV1().Secrets(w.ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name},
				StringData: map[string]string{"v": fmt.Sprint(w.next)}}, metav1.CreateOptions{}); err != nil {
				w.t.Fatal(err)
			}
			w.secrets = append(w.secrets, name)
		case r < 7:
			i := w.rnd.IntN(len(w.secrets))
			if err := kube.CoreV1().Secrets(w.ns).Delete(ctx, w.secrets[i], metav1.DeleteOptions{}); err != nil {
				w.t.Fatal(err)
			}
			w.secrets = append(w.secrets[:i], w.secrets[i+1:]...)
		case r < 8 || len(w.nss) == 0:
			w.createNamespace(fmt.Sprint(w.ns, "-", w.next))
		default:
			// Namespaces are not deleted: without a namespace controller
			// they would stay Terminating. Annotations change instead.
			name := w.nss[w.rnd.IntN(len(w.nss))]
			patch := fmt.Sprintf(`{"metadata":{"annotations":{"v":"%d"}}}`, w.next)
			if _, err := kube.CoreV1().Namespaces().Patch(ctx, name, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
				w.t.Fatal(err)
			}
		}
	}
}

func (w *manyWorkload) createNamespace(name string) {
	w.t.Helper()
	if _, err := kube.CoreV1().Namespaces().Create(ctxFor(w.t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: w.label}}, metav1.CreateOptions{}); err != nil {
		w.t.Fatal(err)
	}
	w.nss = append(w.nss, name)
}

// markers creates an object of each type, named as the markers
// readManyUntil waits for.
func (w *manyWorkload) markers(round int) []string {
	w.t.Helper()
	cm := w.cms.marker()
	secret := fmt.Sprint("marker-", round)
	if _, err := kube.CoreV1().Secrets(w.ns).Create(ctxFor(w.t), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secret}}, metav1.CreateOptions{}); err != nil {
		w.t.Fatal(err)
	}
	ns := fmt.Sprint(w.ns, "-marker-", round)
	w.createNamespace(ns)
	return []string{cm, secret, ns}
}

// readMany opens a WatchMany, records each watch's events in its
// transcript, and reads until stop says so (given the watch and the
// event); it returns the last composite token received.
func readMany(t *testing.T, client informerhubv1.InformerHubServiceClient, req *informerhubv1.WatchManyRequest, trs []*checker.Transcript, stop func(int, checker.Event, *informerhubv1.WatchManyResponse) bool) string {
	t.Helper()
	ctx, cancel := context.WithCancel(ctxFor(t))
	defer cancel()
	stream, err := client.WatchMany(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range trs {
		tr.Open(tr.LastToken())
	}
	r := readStream(stream.Recv)
	for {
		resp := r.next(t)
		checkResponse(t, resp.Event)
		if resp.ResumeToken == "" {
			t.Fatalf("a response without a composite token: %v", resp)
		}
		e, err := checker.FromWatchResponse(resp.Event)
		if err != nil {
			t.Fatal(err)
		}
		trs[resp.Index].Record(e)
		if stop(int(resp.Index), e, resp) {
			for _, tr := range trs {
				tr.Close(nil)
			}
			return resp.ResumeToken
		}
	}
}

// TestWatchManyMatchesEachAPIServerWatch: one WatchMany of ConfigMaps and
// Secrets in a namespace and of labelled Namespaces (cluster-scoped),
// with initial events, under churn of all three: cut off mid-stream and
// resumed with its last composite token, then resumed again after the hub
// restarted on its history dir. Each watch's events, across the three
// streams, are exactly that type's API server watch.
func TestWatchManyMatchesEachAPIServerWatch(t *testing.T) {
	ns := namespace(t)
	w := &manyWorkload{t: t, cms: newWorkload(t, ns, 5), ns: ns, label: map[string]string{"watchmany": ns},
		rnd: rand.New(rand.NewPCG(7, uint64(len(ns))))}
	w.step(20)
	refs := []*checker.Reference{startReference(t, ns), startReferenceOf(t, secrets, ns), startReferenceOf(t, namespacesGVR, "")}
	opts := []checker.Options{{Namespace: ns, InitialEvents: true}, {Namespace: ns, InitialEvents: true}, {LabelSelector: "watchmany=" + ns, InitialEvents: true}}
	req := &informerhubv1.WatchManyRequest{Watches: []*informerhubv1.WatchRequest{
		{Selector: watchSelector(ns), SendInitialEvents: true},
		{Selector: &informerhubv1.ResourceSelector{Version: "v1", Resource: "secrets", Namespace: ns}, SendInitialEvents: true},
		{Selector: &informerhubv1.ResourceSelector{Version: "v1", Resource: "namespaces", LabelSelector: "watchmany=" + ns}, SendInitialEvents: true},
	}}
	trs := []*checker.Transcript{{}, {}, {}}
	dir := t.TempDir()
	h1, stop1 := startDurableHub(t, cluster.Config, dir, informerhub.Config{})

	// Cut off a few changes after the initial events.
	afterEnd := -1
	token := readMany(t, h1.client, req, trs, func(_ int, _ checker.Event, resp *informerhubv1.WatchManyResponse) bool {
		if resp.InitialEventsEnd {
			afterEnd = 0
			w.step(30) // while the stream runs: its reader buffers
		} else if afterEnd >= 0 {
			afterEnd++
		}
		return afterEnd == 10
	})
	w.step(20) // while no one watches

	// Resumed on the same hub, up to a marker of each type.
	resumed := &informerhubv1.WatchManyRequest{Watches: req.Watches, ResumeToken: token}
	token = readMany(t, h1.client, resumed, trs, untilMarkers(w.markers(1)))
	w.step(10)
	stop1()
	w.step(10) // while the hub is down

	h2, _ := startDurableHub(t, cluster.Config, dir, informerhub.Config{})
	resumed.ResumeToken = token
	markers := w.markers(2)
	readMany(t, h2.client, resumed, trs, untilMarkers(markers))

	for i := range trs {
		checkTranscript(t, refs[i], trs[i], opts[i])
	}
}

// untilMarkers stops a readMany once each watch has received its marker.
func untilMarkers(markers []string) func(int, checker.Event, *informerhubv1.WatchManyResponse) bool {
	seen := make([]bool, len(markers))
	left := len(markers)
	return func(i int, e checker.Event, _ *informerhubv1.WatchManyResponse) bool {
		if e.Name == markers[i] && !seen[i] {
			seen[i] = true
			left--
		}
		return left == 0
	}
}

// TestSDKWatchManySurvivesAHubRestart: the SDK's ManyWatcher of ConfigMaps
// and Secrets reconnects by itself across a hub restart, and each watch's
// state ends equal to the API server's, with no change lost.
func TestSDKWatchManySurvivesAHubRestart(t *testing.T) {
	ns := namespace(t)
	createSecret := func(name string) {
		if _, err := kube.CoreV1().Secrets(ns).Create(ctxFor(t), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		createConfigMap(t, ns, fmt.Sprint("cm-", i), nil, "v0")
		createSecret(fmt.Sprint("s-", i))
	}
	hub := startRestartableHub(t, informerhub.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m := sdkClient(t, hub.addr).WatchMany(ctx, []hubclient.ManyWatch{
		{Selector: hubclient.Selector{Resource: configMaps, Namespace: ns}, Options: hubclient.WatchOptions{SendInitialEvents: true}},
		{Selector: hubclient.Selector{Resource: secrets, Namespace: ns}, Options: hubclient.WatchOptions{SendInitialEvents: true}},
	}, "")
	defer m.Close()
	states := []clientState{{}, {}}
	next := func() hubclient.ManyEvent {
		t.Helper()
		e, err := m.Next() // ctx bounds it
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		out := sdkEvent{Type: e.Type}
		if e.Object != nil {
			var obj metav1.PartialObjectMetadata
			if err := json.Unmarshal(e.Object, &obj); err != nil {
				t.Fatal(err)
			}
			out.Name, out.UID, out.RV = obj.Name, string(obj.UID), obj.ResourceVersion
		}
		states[e.Index].apply(out)
		return e
	}
	for !next().AllInitialEventsEnd {
	}

	hub.kill()
	updateConfigMap(t, ns, "cm-0", nil, "v1")
	if err := kube.CoreV1().Secrets(ns).Delete(ctxFor(t), "s-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	createSecret("new")
	hub.start()
	deleteConfigMap(t, ns, "cm-2") // after the restart
	createConfigMap(t, ns, "marker", nil, "")
	createSecret("marker")
	for seen := 0; seen < 2; {
		if e := next(); e.Type == hubclient.Added && strings.Contains(string(e.Object), `"name":"marker"`) {
			seen++
		}
	}
	secretsState := clientState{}
	list, err := kube.CoreV1().Secrets(ns).List(ctxFor(t), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list.Items {
		secretsState[s.Name] = [2]string{s.ResourceVersion, string(s.UID)}
	}
	for i, want := range []clientState{apiState(t, ns), secretsState} {
		if diff := cmp.Diff(want, states[i]); diff != "" {
			t.Errorf("watch %d's state differs from the API server's (-api +client):\n%s", i, diff)
		}
	}
}
