package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	ceclient "github.com/cloudevents/sdk-go/v2/client"
	"github.com/cloudevents/sdk-go/v2/protocol"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kfake"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	hubclient "github.com/informerhub/informerhub/clients/go"
	"github.com/informerhub/informerhub/export"
	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/internal/natstest"
	"github.com/informerhub/informerhub/internal/testhub"
)

// exportedChange is a change as the tests compare them: what the API
// server's watch said, or a consumer of the export read.
type exportedChange struct{ Type, Name, ResourceVersion string }

// streamChanges reads every message of stream, in order.
func streamChanges(ctx context.Context, t *testing.T, stream jetstream.Stream) []exportedChange {
	t.Helper()
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []exportedChange
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		msg, err := stream.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		var meta struct{ Metadata struct{ Name string } }
		if err := json.Unmarshal(msg.Data, &meta); err != nil {
			t.Fatal(err)
		}
		out = append(out, exportedChange{msg.Header.Get(export.HeaderType), meta.Metadata.Name, msg.Header.Get(export.HeaderResourceVersion)})
	}
	return out
}

// exportChurn is what the export tests export: a namespace's ConfigMaps
// as they change, and the API server's own watch of them, the reference.
type exportChurn struct {
	t         *testing.T
	ctx       context.Context
	ns        string
	reference watch.Interface
	writes    sync.WaitGroup
}

func newExportChurn(t *testing.T) *exportChurn {
	c := &exportChurn{t: t, ctx: ctxFor(t), ns: namespace(t)}
	list, err := kube.CoreV1().ConfigMaps(c.ns).List(c.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c.reference, err = kube.CoreV1().ConfigMaps(c.ns).Watch(c.ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.reference.Stop)
	return c
}

// write makes changes over objects ConfigMaps in the background: each
// created, then updated in turn, half of them deleted at the end.
func (c *exportChurn) write(objects, changes int) {
	c.writes.Go(func() {
		cms := kube.CoreV1().ConfigMaps(c.ns)
		for i := range changes {
			name := fmt.Sprint("cm-", i%objects)
			var err error
			switch {
			case i < objects:
				_, err = cms.Create(c.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
			case i >= changes-objects/2:
				err = cms.Delete(c.ctx, name, metav1.DeleteOptions{})
			default:
				var cm *corev1.ConfigMap
				if cm, err = cms.Get(c.ctx, name, metav1.GetOptions{}); err == nil {
					cm.Data = map[string]string{"v": fmt.Sprint(i)}
					_, err = cms.Update(c.ctx, cm, metav1.UpdateOptions{})
				}
			}
			if err != nil {
				c.t.Errorf("change %d: %v", i, err)
				return
			}
		}
	})
}

// want waits for the writes, and returns the first n changes the
// reference watch gave.
func (c *exportChurn) want(n int) []exportedChange {
	c.t.Helper()
	c.writes.Wait()
	var want []exportedChange
	for len(want) < n {
		select {
		case e := <-c.reference.ResultChan():
			if e.Type == watch.Error {
				c.t.Fatalf("the reference watch failed: %v", e.Object)
			}
			m, err := meta.Accessor(e.Object)
			if err != nil {
				c.t.Fatal(err)
			}
			want = append(want, exportedChange{string(e.Type), m.GetName(), m.GetResourceVersion()})
		case <-c.ctx.Done():
			c.t.Fatalf("the reference watch gave %d changes of %d", len(want), n)
		}
	}
	return want
}

// startJetStream starts a nats-server with JetStream until the test ends
// and creates a stream of cfg; the connection it returns reconnects
// through the server's restarts.
func startJetStream(ctx context.Context, t *testing.T, cfg jetstream.StreamConfig) (*natstest.Server, jetstream.JetStream, jetstream.Stream) {
	t.Helper()
	nsrv := natstest.Start(t, natstest.Options{})
	nc, err := nats.Connect(nsrv.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.CreateStream(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return nsrv, js, stream
}

// startKafka starts kfake, an in-process Kafka listening on loopback,
// until the test ends, with topic in partitions partitions and its
// checkpoint topic (the Kafka sink's default name), and returns its
// brokers.
func startKafka(t *testing.T, topic string, partitions int32) []string {
	t.Helper()
	kafka, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topic), kfake.SeedTopics(1, topic+".informerhub-checkpoint"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kafka.Close)
	return kafka.ListenAddrs()
}

// runRoute runs route until stop, which returns once it ended.
func runRoute(ctx context.Context, t *testing.T, route *export.Route, client *hubclient.Client) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- route.Run(ctx, client) }()
	return func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("the exporter ended with %v", err)
		}
	}
}

// waitUntil polls cond until it holds, or fails the test saying what.
func waitUntil(ctx context.Context, t *testing.T, what func() string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatal(what())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestExportToJetStreamHoldsEveryChangeOnceThroughRestarts exports a
// namespace's ConfigMaps to a JetStream stream while they change, stopping
// the exporter abruptly five times (in the middle of its publishing), and
// restarting nats-server once and the hub once under it: the stream holds
// exactly the API server's own watch's changes, each once, in order.
func TestExportToJetStreamHoldsEveryChangeOnceThroughRestarts(t *testing.T) {
	churn := newExportChurn(t)
	ctx, ns := churn.ctx, churn.ns
	h := startRestartableHub(t, informerhub.Config{})
	client := sdkClient(t, h.addr)
	nsrv, js, stream := startJetStream(ctx, t, jetstream.StreamConfig{Name: "EXPORT", Subjects: []string{"k8s.>"}, Storage: jetstream.FileStorage})
	subject, err := export.ParseSubject("k8s.{{.Resource}}.{{.Namespace}}.{{.Name}}")
	if err != nil {
		t.Fatal(err)
	}
	route := &export.Route{Name: "configmaps", Selector: hubclient.Selector{Resource: configMaps, Namespace: ns},
		Sink: &export.JetStream{JS: js, Stream: "EXPORT", Subject: subject, Cluster: "test"}, MaxBatch: 16,
		Retry: 20 * time.Millisecond, Log: testLogger(t)}
	held := func() uint64 {
		info, err := stream.Info(ctx)
		if err != nil {
			return 0 // nats-server restarting
		}
		return info.State.Msgs
	}
	waitHeld := func(n uint64) {
		t.Helper()
		waitUntil(ctx, t, func() string { return fmt.Sprintf("the stream holds %d messages, not %d", held(), n) }, func() bool { return held() >= n })
	}

	stop := runRoute(ctx, t, route, client)
	createConfigMap(t, ns, "marker", nil, "")
	waitHeld(1)
	// 300 changes over 10 ConfigMaps, written while the exporter is
	// stopped and started, and the hub and nats-server restart.
	const objects, changes = 10, 300
	churn.write(objects, changes)
	for i, at := range []uint64{20, 60, 100, 150, 200} {
		waitHeld(at)
		// Under the running exporter: nats-server, then the hub.
		switch i {
		case 1:
			if err := nsrv.Restart(); err != nil {
				t.Fatal(err)
			}
		case 3:
			h.kill()
			h.start() // on the same address, where the client reconnects
		}
		stop()
		stop = runRoute(ctx, t, route, client)
	}
	want := churn.want(1 + changes)
	waitHeld(uint64(len(want)))
	stop()
	if diff := cmp.Diff(want, streamChanges(ctx, t, stream)); diff != "" {
		t.Fatalf("the stream's changes differ from the API server's watch (-api +stream):\n%s", diff)
	}
}

// TestInformerhubExportRunsItsConfigsRoutes runs the command: a route of
// its configuration file publishes a ConfigMap's creation, SIGTERM ends it
// with status 0; a route whose stream does not exist ends it with status 1
// and says so.
func TestInformerhubExportRunsItsConfigsRoutes(t *testing.T) {
	ctx := ctxFor(t)
	bin := testhub.Build(t, "github.com/informerhub/informerhub/cmd/informerhub-export")
	ns := namespace(t)
	h := startHub(t, informerhub.Config{})
	nsrv, _, stream := startJetStream(ctx, t, jetstream.StreamConfig{Name: "CONFIGMAPS", Subjects: []string{"k8s.>"}})
	config := func(streamName string) string {
		path := filepath.Join(t.TempDir(), "export.yaml")
		text := fmt.Sprintf(`cluster: test
hub: {addresses: [%q], insecure: true}
nats: {url: %q}
routes:
- name: configmaps
  selector: {version: v1, resource: configmaps, namespace: %s}
  jetstream: {stream: %s, subject: "k8s.{{.Resource}}.{{.Namespace}}.{{.Name}}"}
`, h.addr, nsrv.URL(), ns, streamName)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}

	metricsAddr := freeLocalAddr(t)
	cmd := exec.CommandContext(ctx, bin, "--config", config("CONFIGMAPS"), "--metrics-listen", metricsAddr)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	createConfigMap(t, ns, "exported", nil, "")
	for {
		if msg, err := stream.GetLastMsgForSubject(ctx, "k8s.configmaps."+ns+".exported"); err == nil {
			if got := msg.Header.Get(export.HeaderType); got != "ADDED" {
				t.Fatalf("the message of the creation says %s", got)
			}
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("nothing was exported: %s", stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	// Its metrics count the change, at its resourceVersion.
	published := `informerhub_export_changes_published_total{route="configmaps"} 1`
	for {
		resp, err := http.Get("http://" + metricsAddr + "/metrics")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(body), published) && strings.Contains(string(body), `informerhub_export_position_resource_version{route="configmaps"}`) {
				break
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the metrics never said %s", published)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("after SIGTERM: %v\n%s", err, stderr.String())
	}

	out, err := exec.CommandContext(ctx, bin, "--config", config("MISSING")).CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), "stream MISSING does not exist") {
		t.Fatalf("a route to a missing stream: %v\n%s", err, out)
	}
}

// freeLocalAddr is a loopback address with a port free a moment ago, for
// a command that takes an address to listen on.
func freeLocalAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return lis.Addr().String()
}

// ceReceiver is a CloudEvents receiver on sdk-go, over HTTP, that records
// what it acknowledges and refuses the first requests it is told to. It
// counts a gap's markers apart, and records them only if told to: a route
// that starts with no checkpoint starts with a gap.
type ceReceiver struct {
	mu       sync.Mutex // guards the fields below
	refuse   int        // requests still to refuse (503)
	refused  int
	markers  bool // record markers too
	gapEnds  int
	received []cloudevents.Event
}

func (r *ceReceiver) receive(e cloudevents.Event) protocol.Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.refuse > 0 {
		r.refuse--
		r.refused++
		return cehttp.NewResult(http.StatusServiceUnavailable, "refusing, as a test")
	}
	if e.Type() == export.TypeGapEnd {
		r.gapEnds++
	}
	if r.markers || (e.Type() != export.TypeGapStart && e.Type() != export.TypeGapEnd) {
		r.received = append(r.received, e)
	}
	return nil
}

func (r *ceReceiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.received)
}

// waitGapEnds waits until r has received n GAP_ENDs: a route that starts
// with no checkpoint has listed what exists.
func (r *ceReceiver) waitGapEnds(ctx context.Context, t *testing.T, n int) {
	t.Helper()
	gapEnds := func() int {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.gapEnds
	}
	waitUntil(ctx, t, func() string { return fmt.Sprintf("the receiver got %d GAP_ENDs, not %d", gapEnds(), n) },
		func() bool { return gapEnds() >= n })
}

// startCEReceiver serves r on loopback until the test ends, and returns
// its URL.
func startCEReceiver(t *testing.T, r *ceReceiver) string {
	t.Helper()
	return serveCE(t, r.receive)
}

// serveCE serves receive, an sdk-go receiver, on loopback until the test
// ends, with the HTTP protocol's options, and returns its URL.
func serveCE(t *testing.T, receive func(cloudevents.Event) protocol.Result, opts ...cehttp.Option) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p, err := cloudevents.NewHTTP(append([]cehttp.Option{cehttp.WithListener(lis)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	c, err := cloudevents.NewClient(p)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := c.StartReceiver(ctx, receive); err != nil {
			t.Errorf("the CloudEvents receiver: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return "http://" + lis.Addr().String()
}

// TestExportToCloudEventsDeliversEveryChangeWithRepeatsUnderOneID exports a
// namespace's ConfigMaps as CloudEvents over HTTP, in binary and in
// structured mode, while they change: the receiver refuses 5 requests,
// and the exporter is stopped abruptly four times. The receiver gets every
// change of the API server's own watch, in order once each is taken at its
// first arrival; a change it got twice came under one id, with the same
// data.
func TestExportToCloudEventsDeliversEveryChangeWithRepeatsUnderOneID(t *testing.T) {
	for _, structured := range []bool{false, true} {
		t.Run(fmt.Sprint("structured=", structured), func(t *testing.T) {
			churn := newExportChurn(t)
			ctx, ns := churn.ctx, churn.ns
			h := startHub(t, informerhub.Config{})
			client := sdkClient(t, h.addr)
			receiver := &ceReceiver{refuse: 5}
			opts := []cehttp.Option{cloudevents.WithTarget(startCEReceiver(t, receiver))}
			p, err := cloudevents.NewHTTP(opts...)
			if err != nil {
				t.Fatal(err)
			}
			var ceOpts []cloudevents.ClientOption
			if structured {
				ceOpts = append(ceOpts, ceclient.WithForceStructured())
			} else {
				ceOpts = append(ceOpts, ceclient.WithForceBinary())
			}
			sender, err := cloudevents.NewClient(p, ceOpts...)
			if err != nil {
				t.Fatal(err)
			}
			checkpoint := export.FileCheckpoint{Path: filepath.Join(t.TempDir(), "checkpoint")}
			route := &export.Route{Name: "configmaps", Selector: hubclient.Selector{Resource: configMaps, Namespace: ns},
				Sink: &export.CloudEvents{Client: sender, Cluster: "test", Checkpoint: checkpoint}, MaxBatch: 16,
				Retry: 20 * time.Millisecond, Log: testLogger(t)}
			waitReceived := func(n int) {
				t.Helper()
				waitUntil(ctx, t, func() string { return fmt.Sprintf("the receiver got %d events, not %d", receiver.count(), n) },
					func() bool { return receiver.count() >= n })
			}

			stop := runRoute(ctx, t, route, client)
			receiver.waitGapEnds(ctx, t, 1) // the route's start, with no checkpoint
			createConfigMap(t, ns, "marker", nil, "")
			waitReceived(1)
			const objects, changes = 10, 200
			churn.write(objects, changes)
			for _, at := range []int{20, 60, 100, 150} {
				waitReceived(at)
				stop()
				stop = runRoute(ctx, t, route, client)
			}
			want := churn.want(1 + changes)
			first := map[string]cloudevents.Event{}
			var got []exportedChange
			waitUntil(ctx, t, func() string { return fmt.Sprintf("the receiver got %d distinct changes, not %d", len(got), len(want)) }, func() bool {
				receiver.mu.Lock()
				defer receiver.mu.Unlock()
				got, first = nil, map[string]cloudevents.Event{}
				for _, e := range receiver.received {
					if seen, ok := first[e.ID()]; ok {
						if !bytes.Equal(seen.Data(), e.Data()) || seen.Type() != e.Type() {
							t.Fatalf("event %s came twice, with other contents", e.ID())
						}
						continue
					}
					first[e.ID()] = e
					var obj struct {
						Metadata struct{ Name, ResourceVersion string }
					}
					if err := json.Unmarshal(e.Data(), &obj); err != nil {
						t.Fatal(err)
					}
					typ := strings.ToUpper(strings.TrimPrefix(e.Type(), "io.informerhub.object."))
					got = append(got, exportedChange{typ, obj.Metadata.Name, obj.Metadata.ResourceVersion})
				}
				return len(got) >= len(want)
			})
			stop()
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("the receiver's changes differ from the API server's watch (-api +received):\n%s", diff)
			}
			if receiver.refused != 5 {
				t.Errorf("the receiver refused %d requests, not 5", receiver.refused)
			}
		})
	}
}
