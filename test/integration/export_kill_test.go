package integration

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	hubclient "github.com/informerhub/informerhub/clients/go"
	"github.com/informerhub/informerhub/export"
	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/internal/testhub"
)

var exportKillSeed = flag.Uint64("export-kill-seed", 0, "the seed of TestExportSurvivesKills (0: from the clock), to replay a run")

// killChange is a change as TestExportSurvivesKills compares them: what
// the API server's watch said (its ID computed as the exporter must), or
// what a sink holds (its ID as the sink carries it).
type killChange struct{ ID, Type, Name, UID, ResourceVersion string }

// killCluster names the cluster in the exporter's configuration.
const killCluster = "test"

// killChangeOf makes the change of a sink's message: its id and type
// as the message says, the rest from its object.
func killChangeOf(id, typ string, object []byte) (killChange, error) {
	var meta struct {
		Metadata struct{ Name, UID, ResourceVersion string }
	}
	if err := json.Unmarshal(object, &meta); err != nil {
		return killChange{}, err
	}
	m := meta.Metadata
	return killChange{ID: id, Type: typ, Name: m.Name, UID: m.UID, ResourceVersion: m.ResourceVersion}, nil
}

// apiWatch is the API server's own watch of a namespace's ConfigMaps,
// from before the test's first change, read as it comes (a watcher that
// does not read is closed by the API server).
type apiWatch struct {
	mu      sync.Mutex // guards the fields below
	changes []killChange
	err     error
}

func watchAPIServer(ctx context.Context, t *testing.T, ns string) *apiWatch {
	t.Helper()
	list, err := kube.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := kube.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	a := &apiWatch{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for e := range w.ResultChan() {
			cm, ok := e.Object.(*corev1.ConfigMap)
			a.mu.Lock()
			if e.Type == watch.Error || !ok {
				a.err = fmt.Errorf("the API server's watch failed: %v", e.Object)
				a.mu.Unlock()
				return
			}
			id := export.Change{Type: hubclient.EventType(e.Type), Resource: configMaps, UID: string(cm.UID), ResourceVersion: cm.ResourceVersion}.ID(killCluster)
			a.changes = append(a.changes, killChange{ID: id, Type: string(e.Type), Name: cm.Name, UID: string(cm.UID), ResourceVersion: cm.ResourceVersion})
			a.mu.Unlock()
		}
		a.mu.Lock()
		if a.err == nil && ctx.Err() == nil {
			a.err = errors.New("the API server's watch ended")
		}
		a.mu.Unlock()
	}()
	t.Cleanup(func() {
		w.Stop()
		<-done
	})
	return a
}

// wait waits until the watch gave n changes, and returns them.
// so far returns the changes the watch gave so far.
func (a *apiWatch) soFar(t *testing.T) []killChange {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err != nil {
		t.Fatal(a.err)
	}
	return a.changes // appends leave the elements there as they are
}

func (a *apiWatch) wait(ctx context.Context, t *testing.T, n int) []killChange {
	t.Helper()
	var got []killChange
	waitUntil(ctx, t, func() string { return fmt.Sprintf("the API server's watch gave %d changes of %d", len(got), n) }, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.err != nil {
			t.Fatal(a.err)
		}
		got = slices.Clone(a.changes)
		return len(got) >= n
	})
	if len(got) != n {
		t.Fatalf("the API server's watch gave %d changes, not %d", len(got), n)
	}
	return got
}

// killChurn makes changes over objects ConfigMaps of ns with writers
// concurrent writers, each writing its own ConfigMaps: each first
// created, then updated, or one in ten times deleted (and created again,
// under a new uid, when next picked). Every write is one change.
type killChurn struct {
	written atomic.Int64
	took    time.Duration // once done is closed
	done    chan struct{}
}

func writeKillChurn(ctx context.Context, t *testing.T, fail context.CancelFunc, ns string, seed uint64, objects, changes, writers int) *killChurn {
	c := &killChurn{done: make(chan struct{})}
	cms := kube.CoreV1().ConfigMaps(ns)
	began := time.Now()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(w)+1))
			var mine []int // the objects this writer writes
			for i := w; i < objects; i += writers {
				mine = append(mine, i)
			}
			current := make([]*corev1.ConfigMap, len(mine)) // nil: deleted, or not created yet
			n := changes / writers
			if w < changes%writers {
				n++
			}
			for step := range n {
				k := rng.IntN(len(mine))
				if step < len(mine) {
					k = step // each created first
				}
				name := fmt.Sprint("cm-", mine[k])
				var err error
				switch cm := current[k]; {
				case cm == nil:
					current[k], err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name},
						Data: map[string]string{"v": fmt.Sprint(step)}}, metav1.CreateOptions{})
				case rng.IntN(10) == 0:
					err = cms.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &cm.UID}})
					current[k] = nil
				default:
					cm.Data = map[string]string{"v": fmt.Sprint(step)}
					current[k], err = cms.Update(ctx, cm, metav1.UpdateOptions{})
				}
				if err != nil {
					if ctx.Err() == nil { // else the test has failed, or is ending
						t.Errorf("writer %d, change %d (%s): %v", w, step, name, err)
						fail()
					}
					return
				}
				c.written.Add(1)
			}
		})
	}
	go func() {
		wg.Wait()
		c.took = time.Since(began)
		close(c.done)
	}()
	t.Cleanup(func() {
		fail()
		<-c.done
	})
	return c
}

func (c *killChurn) finished() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// exporterProcess is informerhub-export, run as a process that the test
// kills with SIGKILL and starts again; every start's output goes to one
// buffer.
type exporterProcess struct {
	t        *testing.T
	bin, cfg string
	out      testhub.SyncBuffer
	cmd      *exec.Cmd
	exited   chan struct{}
	waitErr  error
	starts   int
}

func (p *exporterProcess) start() {
	p.t.Helper()
	p.starts++
	fmt.Fprintf(&p.out, "--- start %d ---\n", p.starts)
	p.cmd = exec.Command(p.bin, "--config", p.cfg)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	exited := make(chan struct{})
	p.exited = exited
	cmd := p.cmd
	go func() {
		p.waitErr = cmd.Wait()
		close(exited)
	}()
}

// running fails the test if the process exited on its own.
func (p *exporterProcess) running() {
	p.t.Helper()
	select {
	case <-p.exited:
		p.t.Fatalf("informerhub-export (start %d) exited on its own: %v\n%s", p.starts, p.waitErr, p.tail())
	default:
	}
}

// kill kills the process with SIGKILL, and waits until it is gone.
func (p *exporterProcess) kill() {
	p.t.Helper()
	p.running()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		p.t.Fatal(err)
	}
	<-p.exited
	fmt.Fprintf(&p.out, "--- killed ---\n")
}

// stop ends the process with SIGTERM, which must end it with status 0.
func (p *exporterProcess) stop() {
	p.t.Helper()
	p.running()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		p.t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		<-p.exited
		p.t.Fatalf("informerhub-export did not end in 30 s after SIGTERM\n%s", p.tail())
	}
	if p.waitErr != nil {
		p.t.Fatalf("informerhub-export, after SIGTERM: %v\n%s", p.waitErr, p.tail())
	}
}

// tail is the last lines of the processes' output.
func (p *exporterProcess) tail() string {
	lines := strings.Split(strings.TrimRight(p.out.String(), "\n"), "\n")
	if len(lines) > 60 {
		lines = lines[len(lines)-60:]
	}
	return strings.Join(lines, "\n")
}

// startBinaryCEReceiver serves r on loopback until the test ends, and
// returns its URL and a count of the requests that were not in binary
// mode (no Ce-Id header).
func startBinaryCEReceiver(t *testing.T, r *ceReceiver) (string, *atomic.Int64) {
	t.Helper()
	var notBinary atomic.Int64
	binary := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if req.Header.Get("Ce-Id") == "" {
				notBinary.Add(1)
			}
			next.ServeHTTP(w, req)
		})
	}
	return serveCE(t, r.receive, cehttp.WithMiddleware(binary)), &notBinary
}

// jetStreamKillChanges reads every message of stream, in order, with an
// ordered consumer; the stream's sequences must have no holes.
func jetStreamKillChanges(ctx context.Context, t *testing.T, js jetstream.JetStream, stream jetstream.Stream) []killChange {
	t.Helper()
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.LastSeq - info.State.FirstSeq + 1; info.State.Msgs > 0 && n != info.State.Msgs {
		t.Fatalf("the stream holds %d messages between sequences %d and %d", info.State.Msgs, info.State.FirstSeq, info.State.LastSeq)
	}
	cons, err := js.OrderedConsumer(ctx, info.Config.Name, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var out []killChange
	for uint64(len(out)) < info.State.Msgs {
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for msg := range batch.Messages() {
			c, err := killChangeOf(msg.Headers().Get(jetstream.MsgIDHeader), msg.Headers().Get(export.HeaderType), msg.Data())
			if err != nil {
				t.Fatalf("message %d of the stream: %v", len(out)+1, err)
			}
			out = append(out, c)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			t.Fatal(err)
		}
		if ctx.Err() != nil {
			t.Fatalf("read %d of the stream's %d messages", len(out), info.State.Msgs)
		}
	}
	return out
}

// kafkaKillChanges reads every committed change in topic, by partition,
// in order.
func kafkaKillChanges(ctx context.Context, t *testing.T, brokers []string, topic string) map[int32][]killChange {
	t.Helper()
	out := map[int32][]killChange{}
	kafkaCommitted(ctx, t, brokers, topic, func(r *kgo.Record) {
		c, err := killChangeOf(recordHeader(r, export.HeaderID), recordHeader(r, export.HeaderType), r.Value)
		if err != nil {
			t.Fatalf("the record at %s/%d@%d: %v", topic, r.Partition, r.Offset, err)
		}
		if string(r.Key) != c.UID {
			t.Errorf("the record at %s/%d@%d is keyed %q, not by its object's uid %s", topic, r.Partition, r.Offset, r.Key, c.UID)
		}
		out[r.Partition] = append(out[r.Partition], c)
	})
	return out
}

// ceFirstArrivals takes a receiver's events at their first arrival, by
// id, as they come, and checks them against the API server's changes as
// far as those go: a route that resumed from anywhere else fails at once.
// An id that comes again must come with the same type and data.
type ceFirstArrivals struct {
	read     int // of the receiver's events
	seen     map[string]cloudevents.Event
	first    []killChange
	checked  int // of first
	repeats  int
	receiver *ceReceiver
}

func (c *ceFirstArrivals) advance(t *testing.T, reference []killChange) {
	t.Helper()
	c.receiver.mu.Lock()
	events := c.receiver.received[c.read:]
	c.read = len(c.receiver.received)
	c.receiver.mu.Unlock()
	for _, e := range events {
		if s, ok := c.seen[e.ID()]; ok {
			if s.Type() != e.Type() || string(s.Data()) != string(e.Data()) {
				t.Fatalf("event %s came twice, with other contents: %s %s, then %s %s", e.ID(), s.Type(), s.Data(), e.Type(), e.Data())
			}
			c.repeats++
			continue
		}
		c.seen[e.ID()] = e
		typ := strings.ToUpper(strings.TrimPrefix(e.Type(), "io.informerhub.object."))
		change, err := killChangeOf(e.ID(), typ, e.Data())
		if err != nil {
			t.Fatalf("event %s: %v", e.ID(), err)
		}
		c.first = append(c.first, change)
	}
	for ; c.checked < len(c.first) && c.checked < len(reference); c.checked++ {
		if c.first[c.checked] != reference[c.checked] {
			n := min(len(c.first), len(reference), c.checked+3)
			t.Fatalf("the receiver's changes, at first arrival, differ from the API server's watch: %s", killDiff(reference[:n], c.first[:n]))
		}
	}
}

// killDiff says where got first differs from want, with the changes
// around it, rather than a diff of thousands of lines.
func killDiff(want, got []killChange) string {
	i := 0
	for i < len(want) && i < len(got) && want[i] == got[i] {
		i++
	}
	if i == len(want) && i == len(got) {
		return ""
	}
	lo := max(0, i-2)
	return fmt.Sprintf("%d changes wanted, %d got; the first difference at %d (-want +got):\n%s",
		len(want), len(got), i, cmp.Diff(want[lo:min(len(want), i+3)], got[lo:min(len(got), i+3)]))
}

// TestExportSurvivesKills runs one informerhub-export process with three
// routes on one namespace's ConfigMaps, to JetStream, Kafka (kfake, four
// partitions) and CloudEvents (binary mode), while 10,000 changes are
// made over 100 ConfigMaps by 16 concurrent writers (fewer write too
// slowly at -race): creations, updates, deletions and creations again
// under the same name. The exporter is killed with SIGKILL at 20 random
// points, each once a sink picked at random reached a point picked at
// random and progressed since the exporter started, and started again;
// the hub is restarted once and nats-server once under it. The seed is
// logged; -export-kill-seed replays its choices (not their timing).
// Compared with the API server's own watch of the namespace: the stream
// holds every change once, in order; a read_committed consumer of the
// topic, every change once, in order for each object; the receiver,
// every change at least once, in order taken at first arrival, a repeat
// under the same id with the same data.
func TestExportSurvivesKills(t *testing.T) {
	const (
		objects, changes, writers = 100, 10000, 16
		kills                     = 20
		hubRestartAt, natsRestart = 6, 13 // before these kills
	)
	seed := *exportKillSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (-export-kill-seed %d replays it)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	began := time.Now()
	ctx, fail := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(fail)
	bin := testhub.Build(t, "github.com/informerhub/informerhub/cmd/informerhub-export")
	ns := namespace(t)
	reference := watchAPIServer(ctx, t, ns)
	h := startRestartableHub(t, informerhub.Config{})

	// JetStream: a stream the test creates.
	nsrv, js, stream := startJetStream(ctx, t, jetstream.StreamConfig{Name: "KILL", Subjects: []string{"k8s.>"}, Storage: jetstream.FileStorage})
	// Kafka: kfake on loopback TCP, the topics created by the test.
	const topic = "configmaps"
	brokers := startKafka(t, topic, 4)
	kadmin, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kadmin.Close)
	// CloudEvents: a receiver on sdk-go.
	receiver := &ceReceiver{}
	ceURL, notBinary := startBinaryCEReceiver(t, receiver)
	received := &ceFirstArrivals{seen: map[string]cloudevents.Event{}, receiver: receiver}

	dir := t.TempDir()
	cfg := filepath.Join(dir, "export.yaml")
	brokersYAML, _ := json.Marshal(brokers)
	text := fmt.Sprintf(`cluster: %[1]s
hub: {addresses: [%[2]q], insecure: true}
nats: {url: %[3]q}
routes:
- name: to-jetstream
  selector: {version: v1, resource: configmaps, namespace: %[4]s}
  jetstream: {stream: KILL, subject: "k8s.{{.Resource}}.{{.Namespace}}.{{.Name}}"}
- name: to-kafka
  selector: {version: v1, resource: configmaps, namespace: %[4]s}
  kafka: {brokers: %[5]s, topic: %[6]s}
- name: to-cloudevents
  selector: {version: v1, resource: configmaps, namespace: %[4]s}
  cloudevents: {url: %[7]q, mode: binary, checkpoint: %[8]q}
`, killCluster, h.addr, nsrv.URL(), ns, brokersYAML, topic, ceURL, filepath.Join(dir, "cloudevents.checkpoint"))
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	exporter := &exporterProcess{t: t, bin: bin, cfg: cfg}
	t.Cleanup(func() {
		if exporter.cmd == nil {
			return
		}
		select {
		case <-exporter.exited:
		default:
			exporter.cmd.Process.Kill()
			<-exporter.exited
		}
		if t.Failed() {
			t.Logf("informerhub-export's output, last lines:\n%s", exporter.tail())
		}
	})

	// What each sink holds, read cheaply, as it grows: the stream's
	// messages, the topic's last stable offsets (records and the
	// transactions' control records), the receiver's events.
	var lastJS, lastKafka int64
	progress := [3]func() int64{
		func() int64 {
			if info, err := stream.Info(ctx); err == nil { // else nats-server is restarting
				lastJS = int64(info.State.Msgs)
			}
			return lastJS
		},
		func() int64 {
			if ends, err := kadm.NewClient(kadmin).ListCommittedOffsets(ctx, topic); err == nil {
				var n int64
				ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
				lastKafka = n
			}
			return lastKafka
		},
		func() int64 { return int64(receiver.count()) },
	}
	sinkNames := [3]string{"the stream", "the topic", "the receiver"}
	counts := func() (c [3]int64) {
		for i, f := range progress {
			c[i] = f()
		}
		return c
	}
	// waitProgress waits until each of sinks progressed past base, and
	// the first reached at least threshold; once the writes are done, the
	// threshold alone (all may be exported).
	waitProgress := func(churn *killChurn, base [3]int64, threshold int64, sinks ...int) {
		t.Helper()
		waitUntil(ctx, t, func() string {
			written := int64(0)
			if churn != nil {
				written = churn.written.Load()
			}
			return fmt.Sprintf("%s: %v changes, from %v, not %d; %d written\n%s", sinkNames[sinks[0]], counts(), base, threshold, written, exporter.tail())
		}, func() bool {
			exporter.running()
			received.advance(t, reference.soFar(t))
			c := counts()
			if c[sinks[0]] < threshold {
				return false
			}
			for _, s := range sinks {
				if c[s] <= base[s] && (churn == nil || !churn.finished()) {
					return false
				}
			}
			return true
		})
	}

	exporter.start()
	// A first change, once every route runs: a route that starts on an
	// empty sink watches from now, with the objects that exist as ADDED,
	// in the order of their names, not of their changes. The CloudEvents
	// route, with no checkpoint, starts with a gap (here, of no object).
	receiver.waitGapEnds(ctx, t, 1)
	createConfigMap(t, ns, "marker", nil, "")
	waitProgress(nil, [3]int64{}, 1, 0, 1, 2)
	// The 20 kills, each once a sink picked at random reached a point
	// picked at random, among the first 90% of the changes.
	points := make([]int64, kills)
	for i := range points {
		points[i] = int64(changes/100 + rng.IntN(changes*9/10-changes/100))
	}
	slices.Sort(points)
	churn := writeKillChurn(ctx, t, fail, ns, seed, objects, changes, writers)
	afterWrites := 0
	for i, point := range points {
		base := counts()
		if i == hubRestartAt || i == natsRestart {
			// Under the running exporter, once it runs (it connects to
			// NATS once, when it starts), which must go on.
			waitProgress(churn, base, 0, 0, 1, 2)
			base = counts()
		}
		switch i {
		case hubRestartAt:
			t.Logf("restarting the hub at %v", base)
			h.kill()
			h.start() // on the same address, where the exporter reconnects
			waitProgress(churn, base, 0, 0, 1, 2)
			base = counts()
		case natsRestart:
			t.Logf("restarting nats-server at %v", base)
			if err := nsrv.Restart(); err != nil {
				t.Fatal(err)
			}
			waitProgress(churn, base, 0, 0)
			base = counts()
		}
		sink := rng.IntN(3)
		waitProgress(churn, base, point, sink)
		if churn.finished() {
			afterWrites++
		}
		exporter.kill()
		t.Logf("kill %d at %v (%s at %d of %d): %d changes written", i+1, counts(), sinkNames[sink], counts()[sink], point, churn.written.Load())
		exporter.start()
	}
	wrote := time.Now()
	select {
	case <-churn.done:
	case <-ctx.Done():
	}
	if t.Failed() || ctx.Err() != nil {
		t.Fatalf("writing: %v; %d changes written", ctx.Err(), churn.written.Load())
	}
	t.Logf("%d changes written by %d writers in %v; %d of the %d kills came after the last", changes, writers, churn.took.Round(time.Millisecond), afterWrites, kills)
	want := reference.wait(ctx, t, 1+changes) // the marker's, and the writers

	// Every sink holds everything: the stream and the receiver as
	// counted, the topic as read once its last stable offsets moved.
	var readKafka int64 = -1
	var kafkaHeld int
	waitUntil(ctx, t, func() string {
		return fmt.Sprintf("the sinks hold %d, %d and %d distinct changes of %d", lastJS, kafkaHeld, len(received.first), len(want))
	}, func() bool {
		exporter.running()
		c := counts()
		if c[0] > int64(len(want)) {
			t.Fatalf("the stream holds %d messages, more than the %d changes", c[0], len(want))
		}
		if c[1] != readKafka {
			kafkaHeld, readKafka = 0, c[1]
			for _, records := range kafkaKillChanges(ctx, t, brokers, topic) {
				kafkaHeld += len(records)
			}
		}
		received.advance(t, want)
		return c[0] == int64(len(want)) && kafkaHeld >= len(want) && len(received.first) >= len(want)
	})
	t.Logf("exported %v after the writes", time.Since(wrote).Round(time.Millisecond))
	exporter.stop()

	// JetStream: every change once, in order.
	if diff := killDiff(want, jetStreamKillChanges(ctx, t, js, stream)); diff != "" {
		t.Errorf("the stream's messages differ from the API server's watch: %s", diff)
	}

	// Kafka: every change once; each object's in order, in one partition.
	wantByUID, gotByUID := map[string][]killChange{}, map[string][]killChange{}
	for _, c := range want {
		wantByUID[c.UID] = append(wantByUID[c.UID], c)
	}
	partitionOf, held := map[string]int32{}, 0
	for p, records := range kafkaKillChanges(ctx, t, brokers, topic) {
		for _, c := range records {
			if q, ok := partitionOf[c.UID]; ok && q != p {
				t.Errorf("object %s (uid %s) has records in partitions %d and %d", c.Name, c.UID, q, p)
			}
			partitionOf[c.UID] = p
			gotByUID[c.UID] = append(gotByUID[c.UID], c)
			held++
		}
	}
	if held != len(want) {
		t.Errorf("the topic holds %d changes, not %d", held, len(want))
	}
	if len(gotByUID) != len(wantByUID) {
		t.Errorf("the topic holds changes of %d objects (uids), not %d", len(gotByUID), len(wantByUID))
	}
	for uid, w := range wantByUID {
		if diff := killDiff(w, gotByUID[uid]); diff != "" {
			t.Errorf("the topic's changes of object %s (uid %s) differ from the API server's watch: %s", w[0].Name, uid, diff)
		}
	}
	for uid, g := range gotByUID {
		if _, ok := wantByUID[uid]; !ok {
			t.Errorf("the topic holds %d changes of uid %s, which the API server's watch never gave", len(g), uid)
		}
	}

	// CloudEvents: every change, in order at first arrival.
	received.advance(t, want)
	if diff := killDiff(want, received.first); diff != "" {
		t.Errorf("the receiver's changes, at first arrival, differ from the API server's watch: %s", diff)
	}
	if n := notBinary.Load(); n != 0 {
		t.Errorf("%d requests to the receiver were not in binary mode", n)
	}
	var deleted, recreated int
	names := map[string]string{} // name → the uid it had
	for _, c := range want {
		if c.Type == "DELETED" {
			deleted++
		}
		if uid, ok := names[c.Name]; ok && uid != c.UID {
			recreated++
		}
		names[c.Name] = c.UID
	}
	t.Logf("%d changes (%d deletions, %d objects created again under a name with a new uid), %d starts of the exporter, %d events the receiver got twice or more; %v in all",
		len(want), deleted, recreated, exporter.starts, received.repeats, time.Since(began).Round(time.Millisecond))
}
