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

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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

// TestExportToJetStreamHoldsEveryChangeOnceThroughRestarts exports a
// namespace's ConfigMaps to a JetStream stream while they change, stopping
// the exporter abruptly five times (in the middle of its publishing), and
// restarting nats-server once and the hub once under it: the stream holds
// exactly the API server's own watch's changes, each once, in order.
func TestExportToJetStreamHoldsEveryChangeOnceThroughRestarts(t *testing.T) {
	ctx := ctxFor(t)
	ns := namespace(t)
	h := startRestartableHub(t, informerhub.Config{})
	client := sdkClient(t, h.addr)
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
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "EXPORT", Subjects: []string{"k8s.>"}, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
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
		for held() < n {
			select {
			case <-ctx.Done():
				t.Fatalf("the stream holds %d messages, not %d", held(), n)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	// runExporter runs the route until stop, which returns once it ended.
	runExporter := func() (stop func()) {
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

	// The API server's own watch of the namespace: the reference.
	list, err := kube.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reference, err := kube.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer reference.Stop()

	stop := runExporter()
	createConfigMap(t, ns, "marker", nil, "")
	waitHeld(1)

	// 300 changes over 10 ConfigMaps, written while the exporter is
	// stopped and started, and the hub and nats-server restart.
	const objects, changes = 10, 300
	var writes sync.WaitGroup
	writes.Go(func() {
		for i := range changes {
			name := fmt.Sprint("cm-", i%objects)
			var err error
			switch {
			case i < objects:
				_, err = kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
			case i >= changes-objects/2:
				err = kube.CoreV1().ConfigMaps(ns).Delete(ctx, name, metav1.DeleteOptions{})
			default:
				var cm *corev1.ConfigMap
				if cm, err = kube.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
					cm.Data = map[string]string{"v": fmt.Sprint(i)}
					_, err = kube.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
				}
			}
			if err != nil {
				t.Errorf("change %d: %v", i, err)
				return
			}
		}
	})
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
		stop = runExporter()
	}
	writes.Wait()
	want := []exportedChange{}
	for len(want) < 1+changes {
		select {
		case e := <-reference.ResultChan():
			m, err := meta.Accessor(e.Object)
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, exportedChange{string(e.Type), m.GetName(), m.GetResourceVersion()})
			if e.Type == watch.Error {
				t.Fatalf("the reference watch failed: %v", e.Object)
			}
		case <-ctx.Done():
			t.Fatalf("the reference watch gave %d changes of %d", len(want), 1+changes)
		}
	}
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
	nsrv := natstest.Start(t, natstest.Options{})
	nc, err := nats.Connect(nsrv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "CONFIGMAPS", Subjects: []string{"k8s.>"}})
	if err != nil {
		t.Fatal(err)
	}
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
