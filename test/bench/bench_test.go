package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/informerhub/informerhub/internal/controlplane"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, controlplane.IgnoredGoroutines()...)
}

// TestHarnessSmoke runs every scenario at tiny sizes, so that `make test`
// keeps the harness working. It asserts that each scenario measured
// something, not how fast: that is BENCHMARKS.md's business.
func TestHarnessSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	hubBinary := filepath.Join(t.TempDir(), "informerhub")
	if out, err := exec.Command("go", "build", "-o", hubBinary, "github.com/informerhub/informerhub/cmd/informerhub").CombinedOutput(); err != nil {
		t.Fatalf("building the hub: %v\n%s", err, out)
	}
	env, err := StartEnv(hubBinary)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	o := SmokeOptions()
	o.ProfileDir = t.TempDir()
	o.Log = t.Logf
	report, err := Run(ctx, env, o)
	if err != nil {
		t.Fatal(err)
	}
	// As `go test -bench` writes them (the query benchmarks' lines are a
	// real run's, shortened).
	goBench := "BenchmarkGRPCFanOut/streams=100/hub-2 \t 1\t 100 ns/op\t 300000 deliveries/cpu-s\t 0 B/op\t 0 allocs/op\n" +
		"BenchmarkGRPCFanOut/streams=100/limit-2 \t 1\t 100 ns/op\t 400000 deliveries/cpu-s\t 0 B/op\t 0 allocs/op\n" +
		"BenchmarkOneObjectEach/subscribers=50-2 \t 38184\t 13104 ns/op\t 16594 cpu-ns/change\t 1.000 groups/change\t 16563 B/op\t 33 allocs/op\n" +
		"BenchmarkOneObjectEach/subscribers=5000-2 \t 32352\t 16208 ns/op\t 20449 cpu-ns/change\t 1.000 groups/change\t 16552 B/op\t 33 allocs/op\n" +
		"BenchmarkNodeAgents/subscribers=50-2 \t 15040\t 40896 ns/op\t 49637 cpu-ns/change\t 1.000 groups/change\t 24617 B/op\t 97 allocs/op\n" +
		"BenchmarkNodeAgents/subscribers=5000-2 \t 10000\t 57012 ns/op\t 57785 cpu-ns/change\t 1.000 groups/change\t 24670 B/op\t 97 allocs/op\n" +
		"BenchmarkFilter/subscribers=1000/selector=labels-2 \t 7611\t 76285 ns/op\t 87086 cpu-ns/change\t 0 decodes/change\t 24432 B/op\t 91 allocs/op\n" +
		"BenchmarkFilter/subscribers=1000/selector=cel-2 \t 3543\t 150388 ns/op\t 178019 cpu-ns/change\t 1.000 decodes/change\t 80302 B/op\t 1133 allocs/op\n" +
		"BenchmarkProjection/subscribers=1000/objects=whole-2 \t 1884\t 352739 ns/op\t 6197 bytes/delivery\t 479168 cpu-ns/change\t 24319 B/op\t 89 allocs/op\n" +
		"BenchmarkProjection/subscribers=1000/objects=projected-2 \t 1718\t 435015 ns/op\t 384.5 bytes/delivery\t 655912 cpu-ns/change\t 21979 B/op\t 112 allocs/op\n" +
		"BenchmarkWatchMany/clients=100/types=10/watch-2 \t 400\t 7449446 ns/op\t 5.016 allocs/delivery\t 78400 deliveries/cpu-s\t 335819 B/op\t 5015 allocs/op\n" +
		"BenchmarkWatchMany/clients=100/types=10/watchmany-2 \t 400\t 7270340 ns/op\t 8.4 allocs/delivery\t 74000 deliveries/cpu-s\t 2286780 B/op\t 8400 allocs/op\n" +
		"BenchmarkShards/unsharded-2 \t 2000\t 61151 ns/op\t 60630 cpu-ns/change\t 1.000 groups/change\t 24396 B/op\t 86 allocs/op\n" +
		"BenchmarkShards/shards=16-2 \t 2000\t 61849 ns/op\t 61598 cpu-ns/change\t 1.000 groups/change\t 24388 B/op\t 86 allocs/op\n"
	if err := report.AddGoBenchmarks(strings.NewReader(goBench), "go test -bench"); err != nil {
		t.Fatal(err)
	}

	var md bytes.Buffer
	if err := report.WriteMarkdown(&md, "results"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"1. Fan-out", "2. Fan-out core", "3. Slow-subscriber", "4. Snapshot", "5. Memory", "6. Startup", "75%",
		"7. One object each", "8. Node agents", "11. A relist beside healthy subscribers", "9. Projection", "10. Indexed dispatch",
		"One object each: hub CPU per change (end to end)", "Node agents: hub CPU per change (end to end)", "(in process)",
		"Projection to metadata.labels, status.phase (end to end)", "Filters: 1000 subscribers sharing 10 CEL expressions",
		"14. Ingest", "Steady ingest, Pods", "15. Several types on one stream", "WatchMany of 10 types against 10 Watch streams", "16 shard subscribers against one unsharded", "Delivery at", "Peak heap while syncing", "Start-up at",
		"16. Streams on one replica", "Watch streams over", "write calls per delivery",
		"17. Consistency check", "consistent (1 of 1)",
		"18. Export", "| JetStream | 100 |", "| Kafka | 100 |", "| CloudEvents | 100 |"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, md.String())
		}
	}
	if strings.Contains(md.String(), "NaN") || strings.Contains(md.String(), "n/a") {
		t.Errorf("the report has values that were not measured:\n%s", md.String())
	}
	plots := filepath.Join(t.TempDir(), "plots.json")
	if err := report.WritePlots(plots); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(plots); err != nil || !bytes.Contains(b, []byte(`"fanout-cpu.png"`)) {
		t.Errorf("plots: %v\n%s", err, b)
	}
	largest := o.SelectiveSubscribers[len(o.SelectiveSubscribers)-1]
	for _, profile := range []string{
		"hub-heap-objects.pb.gz",
		fmt.Sprintf("hub-cpu-fanout-%d.pb.gz", o.FanOutClients[len(o.FanOutClients)-1]),
		fmt.Sprintf("hub-cpu-one-object-each-%d.pb.gz", largest),
		fmt.Sprintf("hub-cpu-node-agents-%d.pb.gz", largest),
		"hub-cpu-projection-whole.pb.gz", "hub-cpu-projection-projected.pb.gz",
		"hub-cpu-ingest-pods.pb.gz", fmt.Sprintf("hub-cpu-ingest-pods-%d.pb.gz", o.IngestSubscribers),
		"informer-cpu-ingest-pods-dynamic.pb.gz", "informer-cpu-ingest-pods-typed.pb.gz",
		fmt.Sprintf("hub-cpu-consistency-check-%d.pb.gz", slices.Max(o.CheckObjects)),
		"export-cpu-jetstream-100.pb.gz", "export-cpu-kafka-100.pb.gz", "export-cpu-cloudevents-100.pb.gz",
		"benchwatch-cpu-jetstream-100.pb.gz",
	} {
		if _, err := os.Stat(filepath.Join(o.ProfileDir, profile)); err != nil {
			t.Errorf("a profile: %v", err)
		}
	}
	t.Logf("report:\n%s", md.String())
}
