package export

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DefaultKafkaMaxRecordBytes is the largest record the Kafka sink writes
// unless told otherwise: Kafka's own default (max.message.bytes) is about
// 1 MB.
const DefaultKafkaMaxRecordBytes = 1 << 20

// Kafka publishes a route's changes to a Kafka topic that holds the
// route's records alone, one record per change, keyed by the object's uid
// so that an object's changes stay in order in one partition. A gap's
// markers go to every partition, so that a consumer of any partition
// sees them in order with its changes.
//
// Each Publish is one transaction: the changes and a checkpoint record,
// the resume token of the last change, to the checkpoint topic (key: the
// route's name, partition 0). Consumers that read committed records see a
// batch whole or not at all, and the checkpoint says where the changes
// they see end. Resume starts a producer under the route's transactional
// id, which fences any other (a previous attempt, a zombie exporter) and
// ends the transaction it had open, and then reads the checkpoint.
//
// A Kafka is used by one route, one call at a time; Close it after.
type Kafka struct {
	// Options reach the cluster: kgo.SeedBrokers, and TLS or SASL if it
	// needs them. The sink adds its own producer options.
	Options []kgo.Opt
	// Topic receives the changes; it must exist.
	Topic string
	// CheckpointTopic keeps the route's resume point in partition 0; it
	// must exist, and should be compacted.
	CheckpointTopic string
	// Route names the route: the checkpoint record's key.
	Route string
	// TransactionalID is the producer's; "": informerhub-export-<Route>.
	TransactionalID string
	// Cluster names the cluster in the changes' ids.
	Cluster string
	// MaxRecordBytes is the largest record batch written; 0:
	// DefaultKafkaMaxRecordBytes. The topic's max.message.bytes, when
	// smaller, bounds it too. A change whose record would not fit alone
	// is published without its object.
	MaxRecordBytes int

	admin    *kgo.Client // metadata and reading; made once
	producer *kgo.Client // transactional; made again by each Resume
	// Of the topic, as Resume found it.
	partitions int
	batchMax   int
}

// KafkaRoute is a route's Kafka topics, and how to reach them.
type KafkaRoute struct {
	// Brokers are some of the cluster's brokers, host:port. Required.
	Brokers []string `json:"brokers"`
	// Topic receives the route's changes, and nothing else. Required.
	Topic string `json:"topic"`
	// CheckpointTopic keeps the route's resume point; "":
	// <topic>.informerhub-checkpoint. It should be compacted; one
	// partition suffices (the sink uses partition 0).
	CheckpointTopic string `json:"checkpointTopic,omitempty"`
	// TransactionalID is the route's producer's; "":
	// informerhub-export-<route name>. Another exporter under the same
	// one fences this one.
	TransactionalID string `json:"transactionalID,omitempty"`
	// MaxRecordBytes is the largest record written; 0: 1 MiB.
	MaxRecordBytes int `json:"maxRecordBytes,omitempty"`
}

// Checkpoint is the route's checkpoint topic, its default if none is
// set.
func (k *KafkaRoute) Checkpoint() string {
	if k.CheckpointTopic != "" {
		return k.CheckpointTopic
	}
	return k.Topic + ".informerhub-checkpoint"
}

// checkKafka checks route at's Kafka settings; topics and ids map those
// other routes use to the route's name.
func checkKafka(at, route string, k *KafkaRoute, topics, ids map[string]string) []error {
	var errs []error
	if len(k.Brokers) == 0 {
		errs = append(errs, fmt.Errorf("%s.kafka.brokers: required", at))
	}
	if k.Topic == "" {
		errs = append(errs, fmt.Errorf("%s.kafka.topic: required", at))
	} else if k.Checkpoint() == k.Topic {
		errs = append(errs, fmt.Errorf("%s.kafka.checkpointTopic: the changes' topic; the checkpoint needs one of its own", at))
	}
	for field, topic := range map[string]string{"topic": k.Topic, "checkpointTopic": k.Checkpoint()} {
		if other, taken := topics[topic]; k.Topic != "" && taken {
			errs = append(errs, fmt.Errorf("%s.kafka.%s: %s is route %s's: a topic holds one route's records", at, field, topic, other))
		}
	}
	if k.Topic != "" {
		topics[k.Topic], topics[k.Checkpoint()] = route, route
	}
	id := k.TransactionalID
	if id == "" {
		id = "informerhub-export-" + route
	}
	if other, taken := ids[id]; taken {
		errs = append(errs, fmt.Errorf("%s.kafka.transactionalID: %s is route %s's: the two would fence each other", at, id, other))
	}
	ids[id] = route
	if k.MaxRecordBytes != 0 && k.MaxRecordBytes < 1024 {
		errs = append(errs, fmt.Errorf("%s.kafka.maxRecordBytes: %d is too small to hold a change's headers; at least 1024", at, k.MaxRecordBytes))
	}
	return errs
}

func (s *Kafka) transactionalID() string {
	if s.TransactionalID != "" {
		return s.TransactionalID
	}
	return "informerhub-export-" + s.Route
}

// Close closes the sink's clients.
func (s *Kafka) Close() {
	if s.producer != nil {
		s.producer.Close()
		s.producer = nil
	}
	if s.admin != nil {
		s.admin.Close()
		s.admin = nil
	}
}

// Resume starts a producer, fencing any other of the route's, and reads
// the checkpoint it leaves.
func (s *Kafka) Resume(ctx context.Context) (string, error) {
	if err := s.start(ctx); err != nil {
		return "", err
	}
	token := ""
	err := s.readCommitted(ctx, s.CheckpointTopic, []int32{0}, func(r *kgo.Record) error {
		if string(r.Key) == s.Route {
			token = string(r.Value)
		}
		return nil
	})
	return token, err
}

// start checks the topics, reads the topic's partitions and record limit,
// and starts a transactional producer.
func (s *Kafka) start(ctx context.Context) error {
	if s.admin == nil {
		admin, err := kgo.NewClient(s.Options...)
		if err != nil {
			return fmt.Errorf("%w: kafka: %w", errPermanent, err)
		}
		s.admin = admin
	}
	adm := kadm.NewClient(s.admin)
	details, err := s.topics(ctx, s.Topic, s.CheckpointTopic)
	if err != nil {
		return err
	}
	s.partitions = len(details[s.Topic].Partitions)
	if _, ok := details[s.CheckpointTopic].Partitions[0]; !ok {
		return fmt.Errorf("%w: kafka topic %s has no partition 0", errPermanent, s.CheckpointTopic)
	}
	s.batchMax = s.MaxRecordBytes
	if s.batchMax <= 0 {
		s.batchMax = DefaultKafkaMaxRecordBytes
	}
	// What the topic takes bounds the batches; when its configuration
	// cannot be read, a refusal says so later (Publish). Some answers
	// (kfake's) list the broker's message.max.bytes beside the topic's
	// default: the smaller holds.
	if configs, err := adm.DescribeTopicConfigs(ctx, s.Topic); err == nil {
		if rc, err := configs.On(s.Topic, nil); err == nil {
			for _, c := range rc.Configs {
				isLimit := c.Key == "max.message.bytes" || c.Key == "message.max.bytes"
				if n, err := strconv.Atoi(deref(c.Value)); isLimit && err == nil && n > 0 {
					s.batchMax = min(s.batchMax, n)
				}
			}
		}
	}
	if s.producer != nil {
		s.producer.Close()
		s.producer = nil
	}
	opts := append(slices.Clone(s.Options),
		kgo.TransactionalID(s.transactionalID()),
		kgo.ProducerBatchMaxBytes(int32(max(s.batchMax, 512))),
		kgo.RecordPartitioner(partitioner{checkpoint: s.CheckpointTopic, keys: kgo.StickyKeyPartitioner(nil)}),
	)
	producer, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("%w: kafka: %w", errPermanent, err)
	}
	// Loading the producer id fences the transactional id's earlier
	// producers and ends the transaction one had open: what the topics
	// hold is then settled.
	if _, _, err := producer.ProducerID(ctx); err != nil {
		producer.Close()
		return s.failed(fmt.Sprintf("starting the producer of transactional id %s", s.transactionalID()), err)
	}
	s.producer = producer
	return nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// topics reads the topics' metadata; a topic that does not exist is a
// permanent error.
func (s *Kafka) topics(ctx context.Context, names ...string) (kadm.TopicDetails, error) {
	details, err := kadm.NewClient(s.admin).ListTopics(ctx, names...)
	if err != nil {
		return nil, s.failed("reading the metadata of topics "+fmt.Sprint(names), err)
	}
	for _, name := range names {
		d, ok := details[name]
		switch {
		case !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition):
			what := "the route's changes"
			if name == s.CheckpointTopic {
				what = "the route's checkpoint (compacted; one partition suffices)"
			}
			return nil, fmt.Errorf("%w: kafka topic %s does not exist: create it, for %s", errPermanent, name, what)
		case d.Err != nil:
			return nil, s.failed("reading the metadata of topic "+name, d.Err)
		case len(d.Partitions) == 0:
			return nil, fmt.Errorf("export: kafka topic %s has no partitions", name)
		}
	}
	return details, nil
}

// Publish writes changes and their checkpoint in one transaction: all of
// them, or none.
func (s *Kafka) Publish(ctx context.Context, changes []Change) (int, error) {
	if len(changes) == 0 {
		return 0, nil
	}
	if s.producer == nil {
		if err := s.start(ctx); err != nil {
			return 0, err
		}
	}
	omitted := map[int]string{}
	records, err := s.records(ctx, changes, omitted)
	if err != nil {
		return 0, err
	}
	failed, err := s.transact(ctx, records, false)
	// The topic takes less than the sink read (or its configuration could
	// not be read). A refused batch may hold records that fit: write the
	// changes again one record per batch, and publish each record the
	// topic refuses on its own without its object.
	alone := false
	for errors.Is(err, kerr.MessageTooLarge) && s.producer != nil {
		if alone {
			i, ok := failed.Context.Value(changeIndex{}).(int)
			if _, again := omitted[i]; !ok || again || changes[i].IsMarker() {
				break
			}
			omitted[i] = fmt.Sprintf("topic %s refused the record as too large (MESSAGE_TOO_LARGE); the object is %d bytes", s.Topic, len(changes[i].Object))
		}
		alone = true
		if records, err = s.records(ctx, changes, omitted); err != nil {
			return 0, err
		}
		failed, err = s.transact(ctx, records, true)
	}
	if err != nil {
		return 0, err
	}
	return len(changes), nil
}

// transactionDeadline bounds a transaction, well within the coordinator's
// transaction timeout.
const transactionDeadline = 25 * time.Second

// changeIndex keys, in a record's context, the index of its change in the
// batch.
type changeIndex struct{}

// recordFraming bounds the bytes of a batch of one record, besides the
// record's key, value and headers' keys and values: the batch's header
// (61 bytes), the record's varints and a few per header.
func recordFraming(headers int) int { return 61 + 40 + 10*headers }

// records makes the records of changes and their checkpoint; omitted
// holds, by index, the changes to publish without their objects, and
// why. It adds the changes too large for a record. Each record has ctx,
// which cancels it while it is not sent.
func (s *Kafka) records(ctx context.Context, changes []Change, omitted map[int]string) ([]*kgo.Record, error) {
	var records []*kgo.Record
	for i, c := range changes {
		ctx := context.WithValue(ctx, changeIndex{}, i)
		headers := []kgo.RecordHeader{
			{Key: HeaderID, Value: []byte(c.ID(s.Cluster))},
			{Key: HeaderResumeToken, Value: []byte(c.ResumeToken)},
			{Key: HeaderType, Value: []byte(c.Type)},
			{Key: HeaderResourceVersion, Value: []byte(c.ResourceVersion)},
		}
		if c.FromRelist || c.Resync {
			headers = append(headers, kgo.RecordHeader{Key: HeaderFromRelist, Value: []byte("true")})
		}
		if c.Type == GapEnd && c.Replaces {
			headers = append(headers, kgo.RecordHeader{Key: HeaderGapReplaces, Value: []byte("true")})
		}
		if c.IsMarker() {
			// No key: the partitioner keeps the partition named.
			for p := range s.partitions {
				records = append(records, &kgo.Record{Topic: s.Topic, Partition: int32(p), Headers: headers, Context: ctx})
			}
			continue
		}
		r := &kgo.Record{Topic: s.Topic, Key: []byte(c.UID), Value: c.Object, Headers: headers, Context: ctx}
		why, omit := omitted[i]
		if size := recordSize(r); !omit && size > s.batchMax {
			why, omit = fmt.Sprintf("the record would be %d bytes (the object %d), above the limit of %d for topic %s", size, len(c.Object), s.batchMax, s.Topic), true
			omitted[i] = why
		}
		if omit {
			identity, err := IdentityOf(c.Object)
			if err != nil {
				return nil, errors.Join(errPermanent, err)
			}
			r.Value = nil
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderObjectOmitted, Value: []byte(why)},
				kgo.RecordHeader{Key: HeaderObjectIdentity, Value: identity})
		}
		records = append(records, r)
	}
	return append(records, &kgo.Record{Topic: s.CheckpointTopic, Partition: 0, Key: []byte(s.Route),
		Value: []byte(changes[len(changes)-1].ResumeToken), Context: ctx}), nil
}

func recordSize(r *kgo.Record) int {
	n := len(r.Key) + len(r.Value) + recordFraming(len(r.Headers))
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// transact writes records in one transaction, one record per batch if
// alone; on an error it aborts, and returns the record that failed if
// one did.
func (s *Kafka) transact(ctx context.Context, records []*kgo.Record, alone bool) (failed *kgo.Record, err error) {
	// A transaction that outlives the coordinator's timeout (franz-go's
	// default: 40 s) is aborted by it, and the producer's epoch bumped:
	// its next call would read as fencing by another exporter. End it
	// first, as a failure that is retried.
	ctx, cancel := context.WithTimeout(ctx, transactionDeadline)
	defer cancel()
	p := s.producer
	if err := p.BeginTransaction(); err != nil {
		return nil, s.failed("beginning a transaction", err)
	}
	var produced error
	if alone {
		for _, r := range records {
			if produced = p.ProduceSync(ctx, r).FirstErr(); produced != nil {
				failed = r
				break
			}
		}
	} else {
		for _, res := range p.ProduceSync(ctx, records...) {
			if res.Err != nil {
				failed, produced = res.Record, res.Err
				break
			}
		}
	}
	if produced != nil {
		s.abort(ctx)
		return failed, s.failed(fmt.Sprintf("writing a record to topic %s (the transaction of %d records was aborted)", failed.Topic, len(records)), produced)
	}
	if err := p.EndTransaction(ctx, kgo.TryCommit); err != nil {
		s.abort(ctx)
		return nil, s.failed(fmt.Sprintf("committing the transaction of %d records to topics %s and %s", len(records), s.Topic, s.CheckpointTopic), err)
	}
	return nil, nil
}

// abort aborts the open transaction; a producer that cannot is closed,
// for Resume to start another. It has a while even when ctx has ended
// (the route stopping): an abort is quick, and spares the consumers the
// transaction's timeout.
func (s *Kafka) abort(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err := s.producer.AbortBufferedRecords(ctx)
	if err == nil {
		err = s.producer.EndTransaction(ctx, kgo.TryAbort)
	}
	if err != nil {
		s.producer.Close()
		s.producer = nil
	}
}

// failed says what failed, and whether a retry can fix it: not when
// another producer of the transactional id fenced this one, nor when
// the cluster refuses the exporter's access.
func (s *Kafka) failed(what string, err error) error {
	switch {
	case errors.Is(err, kerr.ProducerFenced), errors.Is(err, kerr.InvalidProducerEpoch):
		return fmt.Errorf("%w: kafka: %s: another exporter with transactional id %s fenced this one: run one exporter per route: %w",
			errPermanent, what, s.transactionalID(), err)
	case errors.Is(err, kerr.TopicAuthorizationFailed), errors.Is(err, kerr.TransactionalIDAuthorizationFailed),
		errors.Is(err, kerr.ClusterAuthorizationFailed), errors.Is(err, kerr.SaslAuthenticationFailed):
		return fmt.Errorf("%w: kafka: %s: the cluster refuses the exporter's access: %w", errPermanent, what, err)
	}
	return fmt.Errorf("export: kafka: %s: %w", what, err)
}

// partitioner puts a record without a key (a gap's marker) and a
// checkpoint in the partition it names, and any other record in the
// partition of its key (Kafka's default hashing, as other clients do).
type partitioner struct {
	checkpoint string
	keys       kgo.Partitioner
}

func (p partitioner) ForTopic(topic string) kgo.TopicPartitioner {
	return topicPartitioner{checkpoint: topic == p.checkpoint, keys: p.keys.ForTopic(topic)}
}

type topicPartitioner struct {
	checkpoint bool
	keys       kgo.TopicPartitioner
}

func (p topicPartitioner) RequiresConsistency(*kgo.Record) bool { return true }

func (p topicPartitioner) Partition(r *kgo.Record, n int) int {
	if p.checkpoint || r.Key == nil {
		return int(r.Partition)
	}
	return p.keys.Partition(r, n)
}

// Held reads the topic's committed records and returns the last state of
// each object whose last change is no DELETED.
func (s *Kafka) Held(ctx context.Context) (map[ObjectKey]Held, error) {
	if s.admin == nil {
		if err := s.start(ctx); err != nil {
			return nil, err
		}
	}
	type state struct {
		key     ObjectKey
		held    Held
		deleted bool
	}
	// By uid, the key: one object's changes are in one partition, in
	// order; another object of the same name is in any.
	last := map[string]state{}
	err := s.readCommitted(ctx, s.Topic, nil, func(r *kgo.Record) error {
		if r.Key == nil {
			return nil // a gap's marker
		}
		object := r.Value
		if object == nil {
			object = header(r, HeaderObjectIdentity)
		}
		var meta struct {
			Metadata struct{ Namespace, Name, UID, ResourceVersion string }
		}
		if err := json.Unmarshal(object, &meta); err != nil {
			return fmt.Errorf("export: kafka: the record at offset %d of %s/%d: its object: %w", r.Offset, r.Topic, r.Partition, err)
		}
		identity, err := IdentityOf(object)
		if err != nil {
			return err
		}
		m := meta.Metadata
		last[string(r.Key)] = state{key: ObjectKey{m.Namespace, m.Name},
			held:    Held{UID: m.UID, ResourceVersion: m.ResourceVersion, Identity: identity},
			deleted: string(header(r, HeaderType)) == "DELETED"}
		return nil
	})
	if err != nil {
		return nil, err
	}
	held := map[ObjectKey]Held{}
	for _, st := range last {
		if st.deleted {
			continue
		}
		// Two objects of one name both held: a deletion was lost in a
		// gap. The newer holds; resourceVersions are etcd's revisions.
		if other, ok := held[st.key]; ok && !newerVersion(st.held.ResourceVersion, other.ResourceVersion) {
			continue
		}
		held[st.key] = st.held
	}
	return held, nil
}

// newerVersion reports whether resourceVersion a is after b, as decimal
// numbers.
func newerVersion(a, b string) bool {
	if len(a) != len(b) {
		return len(a) > len(b)
	}
	return a > b
}

func header(r *kgo.Record, key string) []byte {
	for _, h := range r.Headers {
		if h.Key == key {
			return h.Value
		}
	}
	return nil
}

// readCommitted calls fn with the committed records of topic's
// partitions (all when only is nil), in order, up to each partition's
// last stable offset at the start.
//
// It fetches by hand: only a fetch's own answer says how far it read,
// past the control records and aborted transactions that a consumer
// never returns, which may end a partition.
func (s *Kafka) readCommitted(ctx context.Context, topic string, only []int32, fn func(*kgo.Record) error) error {
	details, err := s.topics(ctx, topic)
	if err != nil {
		return err
	}
	adm := kadm.NewClient(s.admin)
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return s.failed("listing the start offsets of topic "+topic, err)
	}
	ends, err := adm.ListCommittedOffsets(ctx, topic)
	if err != nil {
		return s.failed("listing the last stable offsets of topic "+topic, err)
	}
	detail := details[topic]
	for _, p := range slices.Sorted(func(yield func(int32) bool) {
		for p := range detail.Partitions {
			if (only == nil || slices.Contains(only, p)) && !yield(p) {
				return
			}
		}
	}) {
		start, ok1 := starts.Lookup(topic, p)
		end, ok2 := ends.Lookup(topic, p)
		switch {
		case !ok1 || !ok2:
			return fmt.Errorf("export: kafka: no offsets listed for %s/%d", topic, p)
		case start.Err != nil:
			return s.failed(fmt.Sprintf("listing the start offset of %s/%d", topic, p), start.Err)
		case end.Err != nil:
			return s.failed(fmt.Sprintf("listing the last stable offset of %s/%d", topic, p), end.Err)
		}
		if err := s.readPartition(ctx, detail, p, start.Offset, end.Offset, fn); err != nil {
			return err
		}
	}
	return nil
}

func (s *Kafka) readPartition(ctx context.Context, detail kadm.TopicDetail, p int32, offset, end int64, fn func(*kgo.Record) error) error {
	topic := detail.Topic
	leader := detail.Partitions[p].Leader
	for offset < end {
		if leader < 0 {
			return fmt.Errorf("export: kafka: %s/%d has no leader", topic, p)
		}
		req := kmsg.NewPtrFetchRequest()
		req.MaxWaitMillis = 500
		req.MinBytes = 1
		req.MaxBytes = 16 << 20
		req.IsolationLevel = 1 // read committed
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = topic, detail.ID
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = p, offset, 16<<20
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := s.admin.Broker(int(leader)).Request(ctx, req)
		if err != nil {
			return s.failed(fmt.Sprintf("fetching %s/%d at offset %d", topic, p, offset), err)
		}
		fetched := resp.(*kmsg.FetchResponse)
		if err := kerr.ErrorForCode(fetched.ErrorCode); err != nil {
			return s.failed(fmt.Sprintf("fetching %s/%d at offset %d", topic, p, offset), err)
		}
		var part *kmsg.FetchResponseTopicPartition
		for i := range fetched.Topics {
			for j := range fetched.Topics[i].Partitions {
				if fp := &fetched.Topics[i].Partitions[j]; fp.Partition == p {
					part = fp
				}
			}
		}
		if part == nil {
			return fmt.Errorf("export: kafka: fetching %s/%d at offset %d: the answer has no such partition", topic, p, offset)
		}
		fp, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Offset: offset, IsolationLevel: kgo.ReadCommitted(),
			Topic: topic, Partition: p}, part, kgo.DefaultDecompressor(), nil)
		if fp.Err != nil {
			return s.failed(fmt.Sprintf("fetching %s/%d at offset %d", topic, p, offset), fp.Err)
		}
		for _, r := range fp.Records {
			if r.Offset >= end {
				return nil
			}
			if err := fn(r); err != nil {
				return err
			}
		}
		if next <= offset {
			return fmt.Errorf("export: kafka: fetching %s/%d at offset %d, below its last stable offset %d, gave nothing", topic, p, offset, end)
		}
		offset = next
	}
	return nil
}
