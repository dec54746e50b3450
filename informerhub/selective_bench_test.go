//go:build unix

package informerhub_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/informerhub/hubtest"
	"github.com/informerhub/informerhub/internal/benchusage"
	"github.com/informerhub/informerhub/server"
)

// The benchmarks of this file and of filter_bench_test.go and
// projection_bench_test.go measure what the hub's query features cost per
// change, in process, on the fake cluster: each iteration is one change,
// received by every subscriber it concerns before the next. The hub runs
// as cmd/informerhub configures it (server.EncodeEvent encodes each event
// once per form), with bookmarks and idle timeouts out of the way. Besides
// ns/op and allocs/op they report
//
//   - cpu-ns/change: the process's CPU time (user and system, every
//     goroutine's) per change, so that it means something on a busy
//     machine. It includes what is the same in every variant: the fake API
//     server, the informer encoding each typed object to JSON (where the
//     hub process decodes the API server's JSON), the subscribers' Next.
//
// The end-to-end harness (test/bench) measures the same cases with the hub
// as a process beside a real API server.

// BenchmarkOneObjectEach measures subscribers that each watch one object:
// N subscribers, each on metadata.name=<its ConfigMap> (4 KiB of data), and
// changes that go round the objects, so each change concerns exactly one
// subscriber. The dispatcher indexes the subscribers' groups by name, so a
// change should cost the same at any N: groups/change counts the
// subscriber groups the change was matched against (1 when only its
// subscriber's is visited).
func BenchmarkOneObjectEach(b *testing.B) {
	for _, n := range []int{50, 500, 5000} {
		b.Run(fmt.Sprintf("subscribers=%d", n), func(b *testing.B) {
			const ns = "bench"
			data := strings.Repeat("x", 4<<10)
			objects := make([]*corev1.ConfigMap, n)
			for i := range objects {
				objects[i] = hubtest.ConfigMap(ns, fmt.Sprintf("cm-%05d", i), map[string]string{"rev": "0"}, data)
			}
			cluster := hubtest.NewCluster(b)
			for _, cm := range objects {
				cluster.ConfigMaps().Add(cm)
			}
			change := func(k int) int {
				// A copy: the fake sets its resourceVersion, and keeps it.
				cm := *objects[k%n]
				cm.Labels = map[string]string{"rev": strconv.Itoa(k + 1)}
				cluster.ConfigMaps().Modify(&cm)
				return 1
			}
			selectiveBench{
				gvr:         hubtest.ConfigMaps,
				subscribers: n,
				request: func(i int) informerhub.WatchRequest {
					return informerhub.WatchRequest{Selector: informerhub.Selector{
						Namespace: ns, FieldSelector: "metadata.name=" + objects[i].Name}}
				},
				change:  change,
				warm:    n,
				measure: groupsVisited(hubtest.ConfigMaps),
			}.run(b, cluster)
		})
	}
}

// BenchmarkNodeAgents measures node agents: pods of about 6 KB (a
// Deployment's, with managedFields; benchusage.Pod) spread over N nodes,
// two per node, and N subscribers, each on spec.nodeName=<its node>, as a
// kubelet watches. Changes go round the pods (a label changes), so each
// concerns exactly one subscriber; groups/change as in
// BenchmarkOneObjectEach.
func BenchmarkNodeAgents(b *testing.B) {
	for _, n := range []int{50, 500, 5000} {
		b.Run(fmt.Sprintf("subscribers=%d", n), func(b *testing.B) {
			const perNode = 2
			template := benchPodTemplate()
			pods := make([]*corev1.Pod, perNode*n)
			for i := range pods {
				pods[i] = podFrom(template, "bench", fmt.Sprintf("agent-%05d", i), benchusage.NodeName(i%n), map[string]string{"rev": "0"})
			}
			cluster, relabel := podCluster(b, pods)
			change := func(k int) int {
				relabel(k)
				return 1
			}
			selectiveBench{
				gvr:         hubtest.Pods,
				subscribers: n,
				request: func(i int) informerhub.WatchRequest {
					return informerhub.WatchRequest{Selector: informerhub.Selector{FieldSelector: "spec.nodeName=" + benchusage.NodeName(i)}}
				},
				change:  change,
				warm:    len(pods),
				measure: groupsVisited(hubtest.Pods),
			}.run(b, cluster)
		})
	}
}

// selectiveBench is one of the query benchmarks: subscribers on a hub, and
// the changes it times.
type selectiveBench struct {
	gvr         schema.GroupVersionResource
	subscribers int
	request     func(i int) informerhub.WatchRequest
	// onEvent, when not nil, is called by subscription i's goroutine with
	// every change it receives.
	onEvent func(i int, ev *informerhub.Event)
	// change makes the k-th change and returns how many deliveries it
	// makes. The benchmarks' changes set the label rev to k+1, a value the
	// object never had, so that every subscriber a change concerns
	// receives it (a projection drops a change to fields it does not
	// keep).
	change func(k int) int
	// warm is the number of changes made before the timing, one of each
	// object: the objects' cached field values and filter results are then
	// those of a running hub.
	warm int
	// measure, when not nil, is called before the timed changes; the
	// function it returns is called after them, with their number, to
	// report what it measured.
	measure func(b *testing.B, hub *informerhub.Hub) func(changes int)
}

func (s selectiveBench) run(b *testing.B, cluster *hubtest.Cluster) {
	hub := newBenchHub(b, cluster)
	defer hub.Close()
	subs := openBenchSubscribers(b, hub, s.gvr, s.subscribers, s.request, s.onEvent)
	defer subs.close()

	k := 0
	for ; k < s.warm; k++ {
		subs.await(b, s.change, k)
	}
	var report func(changes int)
	if s.measure != nil {
		report = s.measure(b, hub)
	}
	changes := 0
	b.ReportAllocs()
	start := benchusage.Now()
	for b.Loop() {
		subs.await(b, s.change, k)
		k++
		changes++
	}
	benchusage.ReportCPUPerChange(b, start, changes)
	if report != nil {
		report(changes)
	}
}

// groupsVisited measures groups/change: the subscriber groups the
// dispatcher matched each change against.
func groupsVisited(gvr schema.GroupVersionResource) func(*testing.B, *informerhub.Hub) func(int) {
	return func(b *testing.B, hub *informerhub.Hub) func(int) {
		visits0, _ := informerhub.DispatchVisits(hub, gvr)
		return func(changes int) {
			visits, _ := informerhub.DispatchVisits(hub, gvr)
			b.ReportMetric(float64(visits-visits0)/float64(changes), "groups/change")
		}
	}
}

// newBenchHub returns a hub on cluster configured as cmd/informerhub
// configures its own, except that bookmarks and idle timeouts never fire.
func newBenchHub(b *testing.B, cluster *hubtest.Cluster) *informerhub.Hub {
	return informerhub.New(informerhub.Config{
		Logger: slog.New(slog.DiscardHandler),
		// Each iteration waits for its deliveries, so a queue holds at
		// most one change: no subscriber overflows.
		QueueSize:        64,
		BookmarkInterval: time.Hour,
		IdleTimeout:      time.Hour,
		EncodeEvent:      server.EncodeEvent,
	}, cluster, cluster)
}

// benchSubscribers are a benchmark's subscriptions, each read by a
// goroutine of its own.
type benchSubscribers struct {
	subs     []*informerhub.Subscription
	wg       sync.WaitGroup
	pending  atomic.Int64  // deliveries the current change still waits for
	received chan struct{} // signalled when pending reaches 0
	failed   chan error
	// stuck bounds the wait for a change's deliveries, so that a change
	// that never arrives fails the benchmark instead of hanging it. It is
	// not synchronisation: deliveries end the wait as soon as they arrive.
	stuck *time.Timer
}

// stuckAfter is far beyond any change's delivery time.
const stuckAfter = time.Minute

// openBenchSubscribers opens n subscriptions of a resource type. onEvent,
// when not nil, is called by subscription i's goroutine with every change
// it receives.
func openBenchSubscribers(b *testing.B, hub *informerhub.Hub, gvr schema.GroupVersionResource, n int,
	request func(i int) informerhub.WatchRequest, onEvent func(i int, ev *informerhub.Event)) *benchSubscribers {
	s := &benchSubscribers{received: make(chan struct{}, 1), failed: make(chan error, n), stuck: time.NewTimer(time.Hour)}
	s.stuck.Stop()
	ctx := context.Background()
	for i := range n {
		req := request(i)
		req.Selector.Resource = gvr
		sub, err := hub.Watch(ctx, req)
		if err != nil {
			s.close()
			b.Fatal(err)
		}
		s.subs = append(s.subs, sub)
		s.wg.Go(func() {
			for {
				ev, err := sub.Next(ctx)
				if err != nil {
					if !errors.Is(err, informerhub.ErrSubscriptionClosed) {
						s.failed <- err
					}
					return
				}
				if ev.Type == informerhub.EventBookmark {
					continue
				}
				if onEvent != nil {
					onEvent(i, ev)
				}
				if s.pending.Add(-1) == 0 {
					s.received <- struct{}{}
				}
			}
		})
	}
	return s
}

// await makes the k-th change and waits until every delivery it makes has
// been received.
func (s *benchSubscribers) await(b *testing.B, change func(k int) int, k int) {
	s.pending.Store(0)
	deliveries := change(k)
	if s.pending.Add(int64(deliveries)) == 0 {
		return // all received already
	}
	s.stuck.Reset(stuckAfter)
	defer s.stuck.Stop()
	select {
	case <-s.received:
	case err := <-s.failed:
		b.Fatalf("a subscriber failed: %v", err)
	case <-s.stuck.C:
		b.Fatalf("change %d: %d of its %d deliveries did not arrive in %v", k, s.pending.Load(), deliveries, stuckAfter)
	}
}

func (s *benchSubscribers) close() {
	for _, sub := range s.subs {
		sub.Close()
	}
	s.wg.Wait()
}

// benchPodTemplate returns a pod of benchusage.Pod's shape as the API
// server serves it: with the status of a pod no kubelet runs yet, and
// managedFields, padded to about benchusage.PodBytes of JSON.
func benchPodTemplate() *corev1.Pod {
	p := benchusage.Pod("bench", "agent-00000", benchusage.NodeName(0), nil, 0)
	p.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
	p.UID = "6f1c2d3e-4b5a-4c7d-8e9f-0a1b2c3d4e5f"
	p.CreationTimestamp = metav1.NewTime(time.Date(2026, 11, 20, 10, 4, 5, 0, time.UTC))
	p.Status = corev1.PodStatus{Phase: corev1.PodPending, QOSClass: corev1.PodQOSBurstable}
	p.Annotations[benchusage.PadAnnotation] = ""
	p.Labels["rev"] = "0"
	spec, err := json.Marshal(p)
	if err != nil {
		panic(err)
	}
	var v map[string]any
	if err := json.Unmarshal(spec, &v); err != nil {
		panic(err)
	}
	delete(v, "status")
	delete(v, "apiVersion")
	delete(v, "kind")
	fields, err := json.Marshal(managedFieldsOf(v))
	if err != nil {
		panic(err)
	}
	p.ManagedFields = []metav1.ManagedFieldsEntry{
		{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1",
			Time: &p.CreationTimestamp, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: fields}},
		{Manager: "bench", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1",
			Time: &p.CreationTimestamp, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:labels":{"f:rev":{}}}}`)}},
	}
	size, err := json.Marshal(p)
	if err != nil {
		panic(err)
	}
	p.Annotations[benchusage.PadAnnotation] = strings.Repeat("p", max(0, benchusage.PodBytes-len(size)))
	return p
}

// managedFieldsOf returns the field set of a JSON value in the form of
// managedFields' fieldsV1: "f:<name>" for members, "k:{...}" for elements of
// lists of objects (keyed by name, as containers, volumes and env are),
// "v:<value>" for elements of lists of strings.
func managedFieldsOf(v any) map[string]any {
	set := map[string]any{}
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			child := managedFieldsOf(x)
			if _, ok := x.(map[string]any); ok && len(child) > 0 {
				child["."] = map[string]any{}
			}
			set["f:"+k] = child
		}
	case []any:
		for i, e := range v {
			switch e := e.(type) {
			case map[string]any:
				key, _ := json.Marshal(map[string]any{"name": e["name"]})
				if e["name"] == nil {
					key = []byte(fmt.Sprintf(`{"index":%d}`, i))
				}
				child := managedFieldsOf(e)
				child["."] = map[string]any{}
				set["k:"+string(key)] = child
			default:
				value, _ := json.Marshal(e)
				set["v:"+string(value)] = map[string]any{}
			}
		}
	}
	return set
}

// podFrom returns a copy of a template pod with its own name, node and
// labels (added to the template's).
func podFrom(template *corev1.Pod, namespace, name, node string, labels map[string]string) *corev1.Pod {
	p := *template
	p.ObjectMeta = *template.ObjectMeta.DeepCopy()
	p.Namespace, p.Name = namespace, name
	p.UID = types.UID(namespace + "/" + name)
	p.Spec.NodeName = node
	maps.Copy(p.Labels, labels)
	return &p
}

// podCluster returns a fake cluster holding pods, and a change that
// relabels the k-th pod (round the pods) with the label rev=k+1.
func podCluster(b *testing.B, pods []*corev1.Pod) (*hubtest.Cluster, func(k int)) {
	cluster := hubtest.NewCluster(b)
	for _, p := range pods {
		cluster.Source(hubtest.Pods).Add(p)
	}
	relabel := func(k int) {
		p := *pods[k%len(pods)]
		p.Labels = withLabel(p.Labels, "rev", strconv.Itoa(k+1))
		cluster.Source(hubtest.Pods).Modify(&p)
	}
	return cluster, relabel
}

// withLabel returns a copy of labels with one label set.
func withLabel(labels map[string]string, key, value string) map[string]string {
	l := maps.Clone(labels)
	l[key] = value
	return l
}
