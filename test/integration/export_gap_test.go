package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/protocol"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/cloudevents/sdk-go/v2/types"
	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hubclient "github.com/informerhub/informerhub/clients/go"
	"github.com/informerhub/informerhub/export"
	"github.com/informerhub/informerhub/informerhub"
)

// exported is a change as a consumer of an export reads it.
type exported struct {
	Type     string // ADDED, MODIFIED, DELETED, GAP_START, GAP_END
	Object   []byte // nil for a marker
	Replaces bool   // a GAP_END's Informerhub-Gap-Replaces
}

// consumerState applies what a consumer read, as docs/export.md tells a
// consumer to, and returns the objects it ends up holding (name → uid and
// resourceVersion), and how many gaps it saw.
func consumerState(t *testing.T, changes []exported) (map[string]string, int) {
	t.Helper()
	held := map[string]string{}
	var listed map[string]bool // since the GAP_START
	gaps := 0
	for _, c := range changes {
		switch c.Type {
		case string(export.GapStart):
			listed = map[string]bool{}
			continue
		case string(export.GapEnd):
			gaps++
			if c.Replaces {
				for name := range held {
					if !listed[name] {
						delete(held, name)
					}
				}
			}
			listed = nil
			continue
		}
		var meta struct {
			Metadata struct{ Name, UID, ResourceVersion string }
		}
		if err := json.Unmarshal(c.Object, &meta); err != nil {
			t.Fatalf("a %s's object %q: %v", c.Type, c.Object, err)
		}
		m := meta.Metadata
		if c.Type == "DELETED" {
			delete(held, m.Name)
		} else {
			held[m.Name] = m.UID + "@" + m.ResourceVersion
		}
		if listed != nil {
			listed[m.Name] = true
		}
	}
	return held, gaps
}

// jetStreamExported reads every message of stream, in order.
func jetStreamExported(ctx context.Context, t *testing.T, stream jetstream.Stream) []exported {
	t.Helper()
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []exported
	for seq := uint64(1); seq <= info.State.LastSeq; seq++ {
		msg, err := stream.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, exported{msg.Header.Get(export.HeaderType), msg.Data, msg.Header.Get(export.HeaderGapReplaces) == "true"})
	}
	return out
}

// kafkaExported reads every committed record of topic, by partition, in
// order.
func kafkaExported(ctx context.Context, t *testing.T, brokers []string, topic string) map[int32][]exported {
	t.Helper()
	out := map[int32][]exported{}
	kafkaCommitted(ctx, t, brokers, topic, func(r *kgo.Record) {
		out[r.Partition] = append(out[r.Partition], exported{recordHeader(r, export.HeaderType), r.Value,
			recordHeader(r, export.HeaderGapReplaces) == "true"})
	})
	return out
}

// TestAGapIsExportedAsItsDifferencesBetweenMarkers exports a namespace's
// ConfigMaps to JetStream, Kafka and CloudEvents, then stops the exporter
// while objects are deleted, changed, created and deleted and created again
// under one name, past the hub's history (10 changes, in memory) and the
// API server's (compacted, with no watch cache). Restarted, the exporter
// cannot resume: each sink receives a GAP_START, the differences and a
// GAP_END, and a consumer that applies them ends up holding what the API
// server lists. JetStream and Kafka can read back what their consumers
// hold, so the differences are exact, deletions included; the CloudEvents
// receiver gets every object, and a GAP_END that says so (as at the
// route's first start, with no checkpoint). Started again,
// the exporter resumes after the GAP_END, with no gap. The Kafka route
// projects its objects (fields).
func TestAGapIsExportedAsItsDifferencesBetweenMarkers(t *testing.T) {
	ctx := ctxFor(t)
	ns := namespace(t)
	h := startHubAt(t, etcdAPIServer(t).Config, informerhub.Config{HistorySize: 10})
	client := sdkClient(t, h.addr)
	selector := hubclient.Selector{Resource: configMaps, Namespace: ns}

	_, js, stream := startJetStream(ctx, t, jetstream.StreamConfig{Name: "GAP", Subjects: []string{"k8s.>"}})
	subject, err := export.ParseSubject("k8s.{{.Type}}.{{.Namespace}}.{{.Name}}")
	if err != nil {
		t.Fatal(err)
	}
	const topic = "gap"
	brokers := startKafka(t, topic, 3)
	receiver := &ceReceiver{markers: true}
	p, err := cloudevents.NewHTTP(cloudevents.WithTarget(startCEReceiver(t, receiver)))
	if err != nil {
		t.Fatal(err)
	}
	ce, err := cloudevents.NewClient(p)
	if err != nil {
		t.Fatal(err)
	}
	checkpoint := t.TempDir() + "/checkpoint"

	sinks := func() map[string]export.Sink {
		k := &export.Kafka{Options: []kgo.Opt{kgo.SeedBrokers(brokers...)}, Topic: topic, CheckpointTopic: topic + ".informerhub-checkpoint",
			Route: "kafka", Cluster: "test"}
		t.Cleanup(k.Close)
		return map[string]export.Sink{
			"jetstream":   &export.JetStream{JS: js, Stream: "GAP", Subject: subject, Cluster: "test", Resource: configMaps},
			"kafka":       k,
			"cloudevents": &export.CloudEvents{Client: ce, Cluster: "test", Checkpoint: export.FileCheckpoint{Path: checkpoint}},
		}
	}
	metrics := export.NewMetrics(prometheus.NewRegistry())
	start := func() (stop func()) {
		var stops []func()
		for name, sink := range sinks() {
			var fields []string
			if name == "kafka" {
				fields = []string{"data"} // a projection
			}
			stops = append(stops, runRoute(ctx, t, &export.Route{Name: name, Selector: selector, Fields: fields, Sink: sink, MaxBatch: 4,
				Retry: 20 * time.Millisecond, Log: testLogger(t), Metrics: metrics}, client))
		}
		return func() {
			for _, stop := range stops {
				stop()
			}
		}
	}
	ceExported := func() []exported {
		receiver.mu.Lock()
		defer receiver.mu.Unlock()
		var out []exported
		seen := map[string]bool{}
		for _, e := range receiver.received {
			if seen[e.ID()] {
				continue // a repeat, under the same id
			}
			seen[e.ID()] = true
			c := exported{Object: e.Data()}
			switch e.Type() {
			case export.TypeGapStart:
				c.Type = string(export.GapStart)
			case export.TypeGapEnd:
				c.Type = string(export.GapEnd)
				replaces, err := types.ToBool(e.Extensions()[export.ExtensionGapReplaces])
				c.Replaces = err == nil && replaces
			default:
				c.Type = map[string]string{"io.informerhub.object.added": "ADDED", "io.informerhub.object.modified": "MODIFIED",
					"io.informerhub.object.deleted": "DELETED"}[e.Type()]
			}
			out = append(out, c)
		}
		return out
	}
	kafkaState := func() (map[string]string, int) {
		state, gaps := map[string]string{}, 0
		for _, changes := range kafkaExported(ctx, t, brokers, topic) {
			for _, c := range changes {
				if bytes.Contains(c.Object, []byte(`"managedFields"`)) {
					t.Fatalf("the Kafka route projects on data, and exported %s", c.Object)
				}
			}
			// Each partition holds its objects' changes and every marker.
			s, g := consumerState(t, changes)
			for name, v := range s {
				state[name] = v
			}
			gaps = max(gaps, g)
		}
		return state, gaps
	}
	states := func() map[string]func() (map[string]string, int) {
		return map[string]func() (map[string]string, int){
			"jetstream":   func() (map[string]string, int) { return consumerState(t, jetStreamExported(ctx, t, stream)) },
			"kafka":       kafkaState,
			"cloudevents": func() (map[string]string, int) { return consumerState(t, ceExported()) },
		}
	}
	listed := func() map[string]string {
		list, err := kube.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, cm := range list.Items {
			out[cm.Name] = string(cm.UID) + "@" + cm.ResourceVersion
		}
		return out
	}
	// caughtUp waits until every sink's consumer holds what the API
	// server lists, after gaps gaps (the CloudEvents route's start is
	// one more: its receiver cannot say what it holds).
	caughtUp := func(gaps int) {
		t.Helper()
		want := listed()
		for name, state := range states() {
			gaps := gaps
			if name == "cloudevents" {
				gaps++
			}
			var got map[string]string
			var seen int
			waitUntil(ctx, t, func() string {
				return fmt.Sprintf("%s: after %d gaps (want %d), the consumer holds (-api +consumer):\n%s", name, seen, gaps, cmp.Diff(want, got))
			}, func() bool {
				got, seen = state()
				return seen == gaps && cmp.Equal(want, got)
			})
		}
	}

	cms := kube.CoreV1().ConfigMaps(ns)
	for i := range 10 {
		createConfigMap(t, ns, fmt.Sprint("cm-", i), nil, "0")
	}
	stop := start()
	caughtUp(0)
	stop()

	// While the exporter is down: 3 deleted, 3 changed (20 times each), 3
	// created, and one deleted and created again under its name.
	for i := range 3 {
		if err := cms.Delete(ctx, fmt.Sprint("cm-", i), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for n := range 20 {
		for i := 3; i < 6; i++ {
			updateConfigMap(t, ns, fmt.Sprint("cm-", i), nil, fmt.Sprint(n+1))
		}
	}
	for i := 10; i < 13; i++ {
		createConfigMap(t, ns, fmt.Sprint("cm-", i), nil, "0")
	}
	if err := cms.Delete(ctx, "cm-9", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-9"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.Compact(ctx); err != nil {
		t.Fatal(err)
	}

	stop = start()
	caughtUp(1)
	stop()

	// The differences from what JetStream holds: 4 deletions (cm-9's
	// old uid among them), 3 changes, 4 creations.
	msgs := jetStreamExported(ctx, t, stream)
	var gap []string
	for i := len(msgs) - 1; i >= 0 && msgs[i].Type != string(export.GapStart); i-- {
		gap = append([]string{msgs[i].Type}, gap...)
	}
	count := map[string]int{}
	for _, typ := range gap {
		count[typ]++
	}
	if want := map[string]int{"DELETED": 4, "MODIFIED": 3, "ADDED": 4, "GAP_END": 1}; !cmp.Equal(want, count) {
		t.Errorf("JetStream's gap holds %v, want %v: %v", count, want, gap)
	}
	if last := ceExported(); !last[len(last)-1].Replaces {
		t.Error("the CloudEvents GAP_END does not say that the gap listed every object")
	}

	// Resumed after the GAP_END: no new gap.
	stop = start()
	updateConfigMap(t, ns, "cm-5", nil, "after")
	caughtUp(1)
	stop()
}

// refusingReceiver is a CloudEvents receiver that refuses every request
// while refusing is set.
type refusingReceiver struct {
	ceReceiver
	refusing atomic.Bool
}

func (r *refusingReceiver) receive(e cloudevents.Event) protocol.Result {
	if r.refusing.Load() {
		return cehttp.NewResult(http.StatusServiceUnavailable, "refusing, as a test")
	}
	return r.ceReceiver.receive(e)
}

// gauge reads a gauge of reg's with the label route; 0 until the route
// has started.
func gauge(t *testing.T, reg *prometheus.Registry, name, route string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "route" && l.GetValue() == route {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return 0
}

// TestAnExportOutlastsASinkThatRefuses: once a route has published a
// change, its CloudEvents receiver refuses every request for 3 s (a minute
// in make soak) while 300 changes are made. Meanwhile the route holds no more than two batches, its lag in
// seconds grows past the refusal and is reported; afterwards the receiver
// gets every change, in order, and the lag is back to 0.
func TestAnExportOutlastsASinkThatRefuses(t *testing.T) {
	refusal := 3 * time.Second
	if *fullSize {
		refusal = time.Minute
	}
	churn := newExportChurn(t)
	ctx, ns := churn.ctx, churn.ns
	h := startHub(t, informerhub.Config{})
	client := sdkClient(t, h.addr)
	receiver := &refusingReceiver{}
	url := serveCE(t, receiver.receive)
	sp, err := cloudevents.NewHTTP(cloudevents.WithTarget(url))
	if err != nil {
		t.Fatal(err)
	}
	ce, err := cloudevents.NewClient(sp)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	const maxBatch = 16
	route := &export.Route{Name: "refused", Selector: hubclient.Selector{Resource: configMaps, Namespace: ns},
		Sink:     &export.CloudEvents{Client: ce, Cluster: "test", Checkpoint: export.FileCheckpoint{Path: t.TempDir() + "/checkpoint"}},
		MaxBatch: maxBatch, Retry: 20 * time.Millisecond, Log: testLogger(t), Metrics: export.NewMetrics(reg)}
	stop := runRoute(ctx, t, route, client)
	defer stop()
	receiver.waitGapEnds(ctx, t, 1) // the route's start, with no checkpoint

	// Once the route holds a position, the receiver refuses.
	createConfigMap(t, ns, "marker", nil, "")
	waitUntil(ctx, t, func() string { return "the receiver did not get the first change" }, func() bool { return receiver.count() == 1 })
	receiver.refusing.Store(true)
	const objects, changes = 10, 300
	refusedAt := time.Now()
	churn.write(objects, changes)
	maxHeld := 0.0
	waitUntil(ctx, t, func() string { return "the lag never reached the refusal's length" }, func() bool {
		maxHeld = max(maxHeld, gauge(t, reg, "informerhub_export_lag_changes", "refused"))
		return time.Since(refusedAt) > refusal && gauge(t, reg, "informerhub_export_lag_seconds", "refused") >= refusal.Seconds()/2
	})
	churn.writes.Wait()
	if maxHeld > 2*maxBatch {
		t.Errorf("while refused, the route held %v changes: more than two batches of %d", maxHeld, maxBatch)
	}
	receiver.refusing.Store(false)
	want := churn.want(1 + changes)
	waitUntil(ctx, t, func() string { return fmt.Sprintf("the receiver got %d changes of %d", receiver.count(), len(want)) },
		func() bool { return receiver.count() >= len(want) })
	var got []exportedChange
	receiver.mu.Lock()
	for _, e := range receiver.received {
		var meta struct{ Metadata struct{ Name string } }
		if err := json.Unmarshal(e.Data(), &meta); err != nil {
			t.Fatal(err)
		}
		typ := map[string]string{"io.informerhub.object.added": "ADDED", "io.informerhub.object.modified": "MODIFIED",
			"io.informerhub.object.deleted": "DELETED"}[e.Type()]
		rv, _ := types.ToString(e.Extensions()[export.ExtensionResourceVersion])
		got = append(got, exportedChange{typ, meta.Metadata.Name, rv})
	}
	receiver.mu.Unlock()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the receiver's changes differ from the API server's watch (-api +receiver):\n%s", diff)
	}
	waitUntil(ctx, t, func() string { return "the lag is not back to 0" }, func() bool {
		return gauge(t, reg, "informerhub_export_lag_seconds", "refused") == 0 && gauge(t, reg, "informerhub_export_lag_changes", "refused") == 0
	})
}
