package export

import (
	"context"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"k8s.io/apimachinery/pkg/runtime/schema"

	hubclient "github.com/informerhub/informerhub/clients/go"
)

// The tests' topics: the changes' (three partitions), the checkpoint's.
const (
	testTopic      = "configmaps"
	testCheckpoint = "configmaps.informerhub-checkpoint"
)

// kafkaCluster starts an in-process Kafka (kfake) with the tests' topics,
// closed when the test ends.
func kafkaCluster(t *testing.T, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	opts = append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(3, testTopic), kfake.SeedTopics(1, testCheckpoint)}, opts...)
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// kafkaSink is a sink of route "configmaps" on c, closed when the test
// ends.
func kafkaSink(t *testing.T, c *kfake.Cluster) *Kafka {
	t.Helper()
	s := &Kafka{Options: []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, Topic: testTopic, CheckpointTopic: testCheckpoint,
		Route: "configmaps", Cluster: "test"}
	t.Cleanup(s.Close)
	return s
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// configMapChange is a change of ConfigMap demo/name, with its object,
// at resourceVersion rv; its resume token is "t<rv>".
func configMapChange(typ hubclient.EventType, name, uid string, rv int, data string) Change {
	object := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q,"namespace":"demo","uid":%q,"resourceVersion":"%d"},"data":{"v":%q}}`,
		name, uid, rv, data)
	return Change{Type: typ, Resource: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Namespace: "demo", Name: name,
		UID: uid, ResourceVersion: fmt.Sprint(rv), Object: []byte(object), ResumeToken: fmt.Sprint("t", rv)}
}

// churn is n changes over objects ConfigMaps: each created, then modified
// in turn, the last of each deleted.
func churn(objects, n int) []Change {
	var out []Change
	for i := range n {
		name := fmt.Sprint("cm-", i%objects)
		typ := hubclient.Modified
		switch {
		case i < objects:
			typ = hubclient.Added
		case i >= n-objects:
			typ = hubclient.Deleted
		}
		out = append(out, configMapChange(typ, name, "uid-"+name, 100+i, fmt.Sprint(i)))
	}
	return out
}

// committed reads every committed record of topic as a consumer would:
// a kgo consumer reading committed records, up to the partitions' end
// offsets. It keeps the control records to see where a partition ends,
// and returns the others by partition.
func committed(ctx context.Context, t *testing.T, c *kfake.Cluster, topic string) map[int32][]*kgo.Record {
	t.Helper()
	admin, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ends, err := kadm.NewClient(admin).ListEndOffsets(ctx, topic)
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
	consumer, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	out := map[int32][]*kgo.Record{}
	for len(left) > 0 {
		fetches := consumer.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("reading %s: partitions %v not read to their end", topic, left)
		}
		for _, err := range fetches.Errors() {
			t.Fatalf("reading %s: %v", topic, err)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			if r.Offset >= left[r.Partition]-1 {
				delete(left, r.Partition)
			}
			if !r.Attrs.IsControl() {
				out[r.Partition] = append(out[r.Partition], r)
			}
		})
	}
	return out
}

// byObject is what records say, by object uid: each change's type and
// resourceVersion, in order.
func byObject(records map[int32][]*kgo.Record) map[string][]string {
	out := map[string][]string{}
	for _, rs := range records {
		for _, r := range rs {
			if r.Key != nil {
				out[string(r.Key)] = append(out[string(r.Key)], string(header(r, HeaderType))+"@"+string(header(r, HeaderResourceVersion)))
			}
		}
	}
	return out
}

func changesByObject(changes []Change) map[string][]string {
	out := map[string][]string{}
	for _, c := range changes {
		out[c.UID] = append(out[c.UID], string(c.Type)+"@"+c.ResourceVersion)
	}
	return out
}

// after is what follows the change whose resume token is token.
func after(changes []Change, token string) []Change {
	if token == "" {
		return changes
	}
	i := slices.IndexFunc(changes, func(c Change) bool { return c.ResumeToken == token })
	if i < 0 {
		panic("no change has token " + token)
	}
	return changes[i+1:]
}

// TestKafkaHoldsEachChangeOnceThroughCrashes publishes a route's changes
// while its exporter crashes: once in the middle of a transaction (its
// producer abandoned with records written and uncommitted) and replaced by
// another exporter, once with its context ended as its records are being
// written. A consumer of committed records sees each change once, in
// order per object.
func TestKafkaHoldsEachChangeOnceThroughCrashes(t *testing.T) {
	ctx := testCtx(t)
	c := kafkaCluster(t)
	all := churn(6, 60)
	publish := func(s *Kafka, changes []Change) {
		t.Helper()
		if n, err := s.Publish(ctx, changes); err != nil || n != len(changes) {
			t.Fatalf("publishing %d changes: %d, %v", len(changes), n, err)
		}
	}
	resume := func(s *Kafka) string {
		t.Helper()
		token, err := s.Resume(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return token
	}

	first := kafkaSink(t, c)
	if token := resume(first); token != "" {
		t.Fatalf("an empty checkpoint topic resumes from %q", token)
	}
	publish(first, all[:10])
	publish(first, all[10:15])
	// A crash in the middle of a transaction: its records are written,
	// never committed.
	if err := first.producer.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	records, err := first.records(ctx, all[15:25], map[int]string{})
	if err != nil {
		t.Fatal(err)
	}
	if err := first.producer.ProduceSync(ctx, records...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	first.producer.Close()
	first.producer = nil

	// Another exporter of the route takes over.
	second := kafkaSink(t, c)
	token := resume(second)
	if token != all[14].ResumeToken {
		t.Fatalf("resumed from %q, not %q, after the last committed change", token, all[14].ResumeToken)
	}
	publish(second, after(all, token)[:10])

	// Its context ends while its records are being written.
	stopped, stop := context.WithCancel(ctx)
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		stop()
		return nil, nil, false
	})
	n, err := second.Publish(stopped, after(all, resume(second))[:10])
	stop()
	t.Logf("the publish whose context ended: %d, %v", n, err)
	if err == nil && n != 10 || err != nil && n != 0 {
		t.Fatalf("a publish acknowledged %d of 10 changes, with %v: all or nothing", n, err)
	}
	for token = resume(second); token != all[len(all)-1].ResumeToken; token = resume(second) {
		rest := after(all, token)
		publish(second, rest[:min(7, len(rest))])
	}

	if diff := cmp.Diff(changesByObject(all), byObject(committed(ctx, t, c, testTopic))); diff != "" {
		t.Fatalf("the committed records differ from the changes (-changes +records):\n%s", diff)
	}
	// The checkpoints are committed with their changes alone.
	var tokens []string
	for _, r := range committed(ctx, t, c, testCheckpoint)[0] {
		tokens = append(tokens, string(r.Value))
	}
	if want := []string{"t109", "t114", "t124"}; !slices.Equal(tokens[:3], want) {
		t.Errorf("the first checkpoints are %v, not %v", tokens[:3], want)
	}
}

// TestKafkaMarkersLandOnEveryPartition publishes a gap: its GAP_START and
// GAP_END are on each partition, in order with that partition's changes.
func TestKafkaMarkersLandOnEveryPartition(t *testing.T) {
	ctx := testCtx(t)
	c := kafkaCluster(t)
	s := kafkaSink(t, c)
	if _, err := s.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	before := churn(8, 8) // ADDED, one per object
	gap := []Change{{Type: GapStart, ResumeToken: "gap-start"}}
	for i, c := range before {
		c = configMapChange(hubclient.Modified, c.Name, c.UID, 200+i, "listed")
		c.Resync = true
		gap = append(gap, c)
	}
	gap = append(gap, Change{Type: GapEnd, ResourceVersion: "300", ResumeToken: "gap-end", Replaces: true})
	for _, batch := range [][]Change{before, gap} {
		if _, err := s.Publish(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	records := committed(ctx, t, c, testTopic)
	if len(records) != 3 {
		t.Fatalf("records on %d partitions, not 3", len(records))
	}
	for p, rs := range records {
		var got []string
		for _, r := range rs {
			typ := string(header(r, HeaderType))
			switch {
			case r.Key == nil && (r.Value != nil || typ != string(GapStart) && typ != string(GapEnd)):
				t.Errorf("partition %d: a record without a key: %s", p, typ)
			case typ == string(GapEnd) && (string(header(r, HeaderGapReplaces)) != "true" || string(header(r, HeaderResumeToken)) != "gap-end"):
				t.Errorf("partition %d: the GAP_END's headers %v", p, r.Headers)
			case typ == string(hubclient.Modified) && string(header(r, HeaderFromRelist)) != "true":
				t.Errorf("partition %d: a change of the gap is not marked %s", p, HeaderFromRelist)
			}
			got = append(got, typ)
		}
		// Each partition: its objects' ADDED, then the gap around their
		// MODIFIED.
		objects := strings.Count(strings.Join(got, " "), "ADDED")
		want := slices.Repeat([]string{"ADDED"}, objects)
		want = append(want, "GAP_START")
		want = append(want, slices.Repeat([]string{"MODIFIED"}, objects)...)
		want = append(want, "GAP_END")
		if !slices.Equal(got, want) {
			t.Errorf("partition %d holds %v, not %v", p, got, want)
		}
	}
}

// TestKafkaHeldIsTheLastStateOfEachObjectNotDeleted publishes changes,
// some deleting, one recreating an object under a new uid, one too large
// for a record: Held is the last state of each object not deleted, read
// from the records, the large one's from its identity header.
func TestKafkaHeldIsTheLastStateOfEachObjectNotDeleted(t *testing.T) {
	ctx := testCtx(t)
	c := kafkaCluster(t)
	s := kafkaSink(t, c)
	s.MaxRecordBytes = 2048
	if _, err := s.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	changes := []Change{
		configMapChange(hubclient.Added, "a", "a-1", 1, ""),
		configMapChange(hubclient.Added, "b", "b-1", 2, ""),
		configMapChange(hubclient.Modified, "a", "a-1", 3, "x"),
		configMapChange(hubclient.Added, "c", "c-1", 4, ""),
		configMapChange(hubclient.Deleted, "b", "b-1", 5, ""),
		configMapChange(hubclient.Deleted, "a", "a-1", 6, "x"),
		configMapChange(hubclient.Added, "a", "a-2", 7, "again"),
		configMapChange(hubclient.Added, "large", "large-1", 8, strings.Repeat("x", 4096)),
		{Type: GapStart, ResumeToken: "gap"}, // no object: not held
	}
	for i := 0; i < len(changes); i += 3 {
		if _, err := s.Publish(ctx, changes[i:i+3]); err != nil {
			t.Fatal(err)
		}
	}
	held, err := s.Held(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[ObjectKey]Held{}
	for _, i := range []int{3, 6, 7} {
		identity, err := IdentityOf(changes[i].Object)
		if err != nil {
			t.Fatal(err)
		}
		want[ObjectKey{"demo", changes[i].Name}] = Held{UID: changes[i].UID, ResourceVersion: changes[i].ResourceVersion, Identity: identity}
	}
	if diff := cmp.Diff(want, held); diff != "" {
		t.Fatalf("held (-want +got):\n%s", diff)
	}
}

// TestKafkaAFencedExporterStopsForGood starts two exporters of one route:
// the first one's next publish fails, saying it was fenced, and no retry
// can fix it; the second one publishes.
func TestKafkaAFencedExporterStopsForGood(t *testing.T) {
	ctx := testCtx(t)
	c := kafkaCluster(t)
	first, second := kafkaSink(t, c), kafkaSink(t, c)
	changes := churn(2, 4)
	if _, err := first.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := first.Publish(ctx, changes[:1]); err != nil {
		t.Fatal(err)
	}
	if token, err := second.Resume(ctx); err != nil || token != changes[0].ResumeToken {
		t.Fatalf("the second exporter resumes from %q, %v", token, err)
	}
	n, err := first.Publish(ctx, changes[1:2])
	if n != 0 || !permanent(err) || !strings.Contains(err.Error(), "fenced") {
		t.Fatalf("the fenced exporter published %d changes, with %v", n, err)
	}
	t.Log(err)
	if _, err := second.Publish(ctx, changes[1:]); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(changesByObject(changes), byObject(committed(ctx, t, c, testTopic))); diff != "" {
		t.Fatalf("the committed records differ from the changes (-changes +records):\n%s", diff)
	}
}

// TestKafkaPublishesATooLargeObjectsChangeWithoutIt publishes a change
// whose object is larger than the topic takes, and one larger than the
// topic came to take after the exporter started: both are published
// without their objects, saying so, in order with the others.
func TestKafkaPublishesATooLargeObjectsChangeWithoutIt(t *testing.T) {
	ctx := testCtx(t)
	c := kafkaCluster(t, kfake.BrokerConfigs(map[string]string{"message.max.bytes": "8192"}))
	s := kafkaSink(t, c)
	if _, err := s.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if s.batchMax != 8192 {
		t.Errorf("the sink's limit is %d, not the broker's 8192", s.batchMax)
	}
	small := configMapChange(hubclient.Added, "small", "small", 1, "")
	// Objects that do not compress, as the broker measures the batches
	// compressed.
	noise := func(n int) string {
		b := make([]byte, n)
		_, _ = rand.NewChaCha8([32]byte{}).Read(b)
		return base64.StdEncoding.EncodeToString(b)
	}
	large := configMapChange(hubclient.Added, "large", "large", 2, noise(7500))
	if _, err := s.Publish(ctx, []Change{small, large}); err != nil {
		t.Fatal(err)
	}
	// The topic comes to take less than the sink read.
	admin := kadm.NewClient(s.admin)
	value := "2048"
	resps, err := admin.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "max.message.bytes", Value: &value}}, testTopic)
	if err == nil {
		_, err = resps.On(testTopic, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	// The first change of the batch fits, the second does not: only the
	// second is published without its object.
	before := configMapChange(hubclient.Modified, "small", "small", 3, "")
	medium := configMapChange(hubclient.Modified, "small", "small", 4, noise(2000))
	after := configMapChange(hubclient.Modified, "small", "small", 5, "")
	if _, err := s.Publish(ctx, []Change{before, medium, after}); err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, rs := range committed(ctx, t, c, testTopic) {
		for _, r := range rs {
			omitted := string(header(r, HeaderObjectOmitted))
			if (omitted == "") != (r.Value != nil) || omitted != "" && header(r, HeaderObjectIdentity) == nil {
				t.Errorf("the record of %s@%s: value %d bytes, %s %q", r.Key, header(r, HeaderResourceVersion), len(r.Value), HeaderObjectOmitted, omitted)
			}
			got[string(r.Key)] = append(got[string(r.Key)], fmt.Sprintf("%s %s", header(r, HeaderResourceVersion), omitted))
			t.Logf("%s@%s: %s", r.Key, header(r, HeaderResourceVersion), omitted)
		}
	}
	want := map[string][]string{
		"small": {"1 ", "3 ", "4 topic configmaps refused the record as too large (MESSAGE_TOO_LARGE); the object is 2805 bytes", "5 "},
		"large": {"2 the record would be 10405 bytes (the object 10137), above the limit of 8192 for topic configmaps"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("the records (-want +got):\n%s", diff)
	}
}

// TestKafkaSaysWhichTopicToCreate resumes a route whose topic, then whose
// checkpoint topic, does not exist: a permanent error, naming it.
func TestKafkaSaysWhichTopicToCreate(t *testing.T) {
	ctx := testCtx(t)
	c := kafkaCluster(t)
	for _, missing := range []string{"topic", "checkpoint"} {
		s := kafkaSink(t, c)
		if missing == "topic" {
			s.Topic = "nowhere"
		} else {
			s.CheckpointTopic = "nowhere"
		}
		_, err := s.Resume(ctx)
		if !permanent(err) || !strings.Contains(err.Error(), "kafka topic nowhere does not exist: create it") {
			t.Errorf("a missing %s: %v", missing, err)
		}
		t.Log(err)
	}
}
