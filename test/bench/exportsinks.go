package bench

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/informerhub/informerhub/export"
	"github.com/informerhub/informerhub/internal/natstest"
)

// The export scenario's sinks, each with a consumer in the harness's
// process that receives what the exporter published and notes each
// change's lag (a recorder).
const (
	sinkJetStream   = "JetStream"
	sinkKafka       = "Kafka"
	sinkCloudEvents = "CloudEvents"
)

// exportSink is one run's sink: where the exporter's route publishes, and
// the consumer reading it back.
type exportSink interface {
	// route sets the sink of a route, and whatever else of cfg it needs.
	route(cfg *export.Config, r *export.RouteConfig)
	// stop ends the consumer and whatever the sink runs for the run.
	stop() error
}

// newExportSink starts one run's sink of kind, its consumer feeding rec.
// nats is the scenario's nats-server, for JetStream; dir is the run's
// scratch directory.
func newExportSink(ctx context.Context, kind string, run int, natsServer *natstest.Server, dir string, rec *recorder) (exportSink, error) {
	switch kind {
	case sinkJetStream:
		return newJetStreamSink(ctx, natsServer.URL(), run, rec)
	case sinkKafka:
		return newKafkaSink(rec)
	case sinkCloudEvents:
		return newCloudEventsSink(dir, rec)
	}
	return nil, fmt.Errorf("no sink %q", kind)
}

// jetStreamSink is a stream of its own on the scenario's nats-server (file
// storage, JetStream's defaults), read by an ordered consumer.
type jetStreamSink struct {
	url, stream, subject string
	nc                   *nats.Conn
	js                   jetstream.JetStream
	consuming            jetstream.ConsumeContext
}

func newJetStreamSink(ctx context.Context, url string, run int, rec *recorder) (*jetStreamSink, error) {
	s := &jetStreamSink{url: url, stream: fmt.Sprintf("EXPORT_%d", run)}
	prefix := fmt.Sprintf("bench%d", run)
	s.subject = prefix + ".{{.Namespace}}.{{.Name}}"
	var err error
	if s.nc, err = nats.Connect(url, nats.Name("hubbench")); err != nil {
		return nil, err
	}
	if s.js, err = jetstream.New(s.nc); err == nil {
		_, err = s.js.CreateStream(ctx, jetstream.StreamConfig{Name: s.stream, Subjects: []string{prefix + ".>"}})
	}
	var consumer jetstream.Consumer
	if err == nil {
		consumer, err = s.js.OrderedConsumer(ctx, s.stream, jetstream.OrderedConsumerConfig{})
	}
	if err == nil {
		s.consuming, err = consumer.Consume(func(m jetstream.Msg) { rec.received(m.Data(), time.Now()) })
	}
	if err != nil {
		s.nc.Close()
		return nil, fmt.Errorf("JetStream stream %s: %w", s.stream, err)
	}
	return s, nil
}

func (s *jetStreamSink) route(cfg *export.Config, r *export.RouteConfig) {
	cfg.NATS = &export.NATS{URL: s.url}
	r.JetStream = &export.JetStreamRoute{Stream: s.stream, Subject: s.subject}
}

func (s *jetStreamSink) stop() error {
	s.consuming.Stop()
	<-s.consuming.Closed()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := s.js.DeleteStream(ctx, s.stream)
	s.nc.Close()
	return err
}

// kafkaSink is a kfake cluster of its own, in the harness's process, with
// the route's topic (3 partitions) and its checkpoint topic, read by a
// consumer of committed records.
type kafkaSink struct {
	cluster  *kfake.Cluster
	consumer *kgo.Client
	cancel   context.CancelFunc
	polled   chan error
}

const (
	kafkaTopic      = "configmaps"
	kafkaPartitions = 3
)

func newKafkaSink(rec *recorder) (*kafkaSink, error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(kafkaPartitions, kafkaTopic), kfake.SeedTopics(1, kafkaTopic+".informerhub-checkpoint"))
	if err != nil {
		return nil, err
	}
	consumer, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(kafkaTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		c.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &kafkaSink{cluster: c, consumer: consumer, cancel: cancel, polled: make(chan error, 1)}
	go func() {
		for {
			fetches := consumer.PollFetches(ctx)
			if ctx.Err() != nil {
				s.polled <- nil
				return
			}
			if err := fetches.Err0(); err != nil {
				s.polled <- err
				return
			}
			now := time.Now()
			fetches.EachRecord(func(r *kgo.Record) { rec.received(r.Value, now) })
		}
	}()
	return s, nil
}

func (s *kafkaSink) route(_ *export.Config, r *export.RouteConfig) {
	r.Kafka = &export.KafkaRoute{Brokers: s.cluster.ListenAddrs(), Topic: kafkaTopic}
}

func (s *kafkaSink) stop() error {
	s.cancel()
	err := <-s.polled
	s.consumer.Close()
	s.cluster.Close()
	return err
}

// cloudEventsSink is an sdk-go receiver on loopback; the exporter sends in
// binary mode, its checkpoint in the run's directory.
type cloudEventsSink struct {
	url, checkpoint string
	cancel          context.CancelFunc
	received        chan error
}

func newCloudEventsSink(dir string, rec *recorder) (*cloudEventsSink, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p, err := cloudevents.NewHTTP(cehttp.WithListener(lis))
	if err != nil {
		lis.Close()
		return nil, err
	}
	client, err := cloudevents.NewClient(p)
	if err != nil {
		lis.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &cloudEventsSink{url: "http://" + lis.Addr().String(), checkpoint: filepath.Join(dir, "checkpoint"), cancel: cancel, received: make(chan error, 1)}
	go func() {
		s.received <- client.StartReceiver(ctx, func(e cloudevents.Event) { rec.received(e.Data(), time.Now()) })
	}()
	return s, nil
}

func (s *cloudEventsSink) route(_ *export.Config, r *export.RouteConfig) {
	r.CloudEvents = &export.CloudEventsRoute{URL: s.url, Mode: "binary", Checkpoint: s.checkpoint}
}

func (s *cloudEventsSink) stop() error {
	s.cancel()
	return <-s.received
}

// recorder notes what a consumer receives: every message, and the lag of
// each change numbered within the window it expects, from the change's
// sentAt to its receipt. A change received again (at least once, a
// retry) counts once, at its first receipt.
type recorder struct {
	mu       sync.Mutex
	total    int64 // messages, of any number
	size     int   // the last message's object, in bytes
	from, to int64
	seen     []bool
	count    int64
	lags     []time.Duration
	lastAt   time.Time // when the window's last missing change arrived
	progress chan struct{}
}

func newRecorder() *recorder { return &recorder{progress: make(chan struct{}, 1)} }

var (
	seqField    = []byte(`"seq":"`)
	sentAtField = []byte(`"sentAt":"`)
)

// stampOf finds a decimal string field in an object's JSON.
func stampOf(object, key []byte) (int64, bool) {
	i := bytes.Index(object, key)
	if i < 0 {
		return 0, false
	}
	rest := object[i+len(key):]
	end := bytes.IndexByte(rest, '"')
	if end < 0 {
		return 0, false
	}
	v, err := strconv.ParseInt(string(rest[:end]), 10, 64)
	return v, err == nil
}

func (r *recorder) received(object []byte, at time.Time) {
	seq, ok := stampOf(object, seqField)
	sentAt, _ := stampOf(object, sentAtField)
	r.mu.Lock()
	r.total++
	r.size = len(object)
	if ok && seq >= r.from && seq <= r.to && r.seen != nil && !r.seen[seq-r.from] {
		r.seen[seq-r.from] = true
		r.count++
		r.lags = append(r.lags, at.Sub(time.Unix(0, sentAt)))
		r.lastAt = at
	}
	r.mu.Unlock()
	select {
	case r.progress <- struct{}{}:
	default:
	}
}

// expect starts a window: the changes numbered from to to.
func (r *recorder) expect(from, to int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.from, r.to = from, to
	r.seen = make([]bool, to-from+1)
	r.count, r.lags, r.lastAt = 0, nil, time.Time{}
}

// waitTotal waits until n messages of any number have arrived.
func (r *recorder) waitTotal(ctx context.Context, n int64, deadline time.Time) error {
	return r.waitUntil(ctx, deadline, func() bool { return r.total >= n })
}

// waitWindow waits until every change of the window has arrived, or until
// deadline; it returns how many did, their lags and when the last one
// arrived.
func (r *recorder) waitWindow(ctx context.Context, deadline time.Time) (int64, []time.Duration, time.Time) {
	_ = r.waitUntil(ctx, deadline, func() bool { return r.count == r.to-r.from+1 })
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count, append([]time.Duration(nil), r.lags...), r.lastAt
}

// objectSize is the size of the last object received.
func (r *recorder) objectSize() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.size
}

func (r *recorder) waitUntil(ctx context.Context, deadline time.Time, done func() bool) error {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	for {
		r.mu.Lock()
		ok := done()
		r.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-r.progress:
		case <-t.C:
			return errTimeout
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
