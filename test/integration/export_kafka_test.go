package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	hubclient "github.com/informerhub/informerhub/clients/go"
	"github.com/informerhub/informerhub/export"
	"github.com/informerhub/informerhub/informerhub"
)

// kafkaCommitted reads, as a consumer of committed records, every record
// of topic up to its partitions' last stable offsets, and calls each with
// them, in order in each partition. It keeps the control records, which
// end every transaction, to see where a partition ends.
func kafkaCommitted(ctx context.Context, t *testing.T, brokers []string, topic string, each func(*kgo.Record)) {
	t.Helper()
	admin, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ends, err := kadm.NewClient(admin).ListCommittedOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	left, from := map[int32]int64{}, map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
		from[o.Partition] = kgo.NewOffset().AtStart()
	})
	consumer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	for len(left) > 0 {
		fetches := consumer.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s: partitions %v not read to their end", topic, left)
		}
		for _, err := range fetches.Errors() {
			t.Fatalf("reading %s: %v", topic, err)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			if end, ok := left[r.Partition]; !ok || r.Offset >= end {
				return // past the end read to
			} else if r.Offset == end-1 {
				delete(left, r.Partition)
			}
			if !r.Attrs.IsControl() {
				each(r)
			}
		})
	}
}

// recordHeader is a record's header key, or "".
func recordHeader(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// kafkaChanges reads every committed change in topic, by object name, in
// order, and how many there are.
func kafkaChanges(ctx context.Context, t *testing.T, brokers []string, topic string) (map[string][]exportedChange, int) {
	t.Helper()
	out, n := map[string][]exportedChange{}, 0
	kafkaCommitted(ctx, t, brokers, topic, func(r *kgo.Record) {
		var meta struct{ Metadata struct{ Name string } }
		if err := json.Unmarshal(r.Value, &meta); err != nil {
			t.Fatalf("the record at %s/%d@%d: %v", topic, r.Partition, r.Offset, err)
		}
		name := meta.Metadata.Name
		out[name] = append(out[name], exportedChange{recordHeader(r, export.HeaderType), name, recordHeader(r, export.HeaderResourceVersion)})
		n++
	})
	return out, n
}

// TestExportToKafkaHoldsEveryChangeOnceThroughRestarts exports a
// namespace's ConfigMaps to a Kafka topic (kfake, three partitions) while
// they change, stopping the exporter abruptly five times (in the middle of
// its publishing) and starting another in its place, and restarting the
// hub once under it: a consumer of committed records sees exactly the API
// server's own watch's changes, each once, in order for each object.
func TestExportToKafkaHoldsEveryChangeOnceThroughRestarts(t *testing.T) {
	churn := newExportChurn(t)
	ctx, ns := churn.ctx, churn.ns
	h := startRestartableHub(t, informerhub.Config{})
	client := sdkClient(t, h.addr)
	const topic = "configmaps"
	brokers := startKafka(t, topic, 3)
	// Each start is another exporter, as after a crash: its producer
	// fences the one before, which is left as it was until the test ends.
	exporter := func() *export.Route {
		sink := &export.Kafka{Options: []kgo.Opt{kgo.SeedBrokers(brokers...)}, Topic: topic, CheckpointTopic: topic + ".informerhub-checkpoint",
			Route: "configmaps", Cluster: "test"}
		t.Cleanup(sink.Close)
		return &export.Route{Name: "configmaps", Selector: hubclient.Selector{Resource: configMaps, Namespace: ns},
			Sink: sink, MaxBatch: 16, Retry: 20 * time.Millisecond, Log: testLogger(t)}
	}
	held := func() int {
		_, n := kafkaChanges(ctx, t, brokers, topic)
		return n
	}
	waitHeld := func(n int) {
		t.Helper()
		waitUntil(ctx, t, func() string { return fmt.Sprintf("the topic holds %d changes, not %d", held(), n) }, func() bool { return held() >= n })
	}

	stop := runRoute(ctx, t, exporter(), client)
	createConfigMap(t, ns, "marker", nil, "")
	waitHeld(1)
	const objects, changes = 10, 300
	churn.write(objects, changes)
	for i, at := range []int{20, 60, 100, 150, 200} {
		waitHeld(at)
		if i == 3 { // under the running exporter
			h.kill()
			h.start() // on the same address, where the client reconnects
		}
		stop()
		stop = runRoute(ctx, t, exporter(), client)
	}
	want := churn.want(1 + changes)
	waitHeld(len(want))
	stop()
	wantByName := map[string][]exportedChange{}
	for _, c := range want {
		wantByName[c.Name] = append(wantByName[c.Name], c)
	}
	got, n := kafkaChanges(ctx, t, brokers, topic)
	if diff := cmp.Diff(wantByName, got); diff != "" || n != len(want) {
		t.Fatalf("the topic's %d changes differ from the API server's watch's %d (-api +topic):\n%s", n, len(want), diff)
	}
}
