package bench

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
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
	goBench := "BenchmarkGRPCFanOut/streams=100/hub-2 \t 1\t 100 ns/op\t 300000 deliveries/cpu-s\t 0 B/op\t 0 allocs/op\n" +
		"BenchmarkGRPCFanOut/streams=100/limit-2 \t 1\t 100 ns/op\t 400000 deliveries/cpu-s\t 0 B/op\t 0 allocs/op\n"
	if err := report.AddGoBenchmarks(strings.NewReader(goBench), "go test -bench"); err != nil {
		t.Fatal(err)
	}

	var md bytes.Buffer
	if err := report.WriteMarkdown(&md, "results"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"1. Fan-out", "2. Fan-out core", "3. Slow-subscriber", "4. Snapshot", "5. Memory", "6. Startup", "75%"} {
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
	if _, err := os.Stat(filepath.Join(o.ProfileDir, "hub-heap-objects.pb.gz")); err != nil {
		t.Errorf("the heap profile: %v", err)
	}
	t.Logf("report:\n%s", md.String())
}
