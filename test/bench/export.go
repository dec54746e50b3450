package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/informerhub/informerhub/export"
	"github.com/informerhub/informerhub/internal/natstest"
	"github.com/informerhub/informerhub/internal/testhub"
)

// The export scenario (issue 41) measures informerhub-export: changes made
// at a fixed offered rate reach a route per sink (JetStream, Kafka,
// CloudEvents) and, beside it, a plain Watch client of the Go SDK
// (cmd/benchwatch); both are processes of their own, so that their CPU
// time per change can be read from /proc.
//
// The control plane of this machine cannot make the rates asked for
// (first measured: exportProbe), so the changes come from a synthetic
// source: a hub in the harness's process on hubtest's in-memory cluster
// (synthHub), served over gRPC on loopback as the binary serves it.

const (
	exportNamespace = "bench-export"
	exporterPackage = "github.com/informerhub/informerhub/cmd/informerhub-export"
	benchwatchPkg   = "github.com/informerhub/informerhub/test/bench/cmd/benchwatch"
	// exporterPprofEnv names the address the exporter built for the
	// scenario serves net/http/pprof on (exporterPprof).
	exporterPprofEnv = "HUBBENCH_PPROF_LISTEN"
)

// exporterPprof is added to informerhub-export's main package by go
// build -overlay, for the scenario's build only: the exporter's source is
// measured as it is, with pprof's endpoints for the profile.
const exporterPprof = `package main

import (
	"net"
	"net/http"
	_ "net/http/pprof"
	"os"
)

// Added by test/bench's export scenario (go build -overlay): serves
// net/http/pprof on $` + exporterPprofEnv + `.
func init() {
	addr := os.Getenv("` + exporterPprofEnv + `")
	if addr == "" {
		return
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		panic(err)
	}
	go http.Serve(lis, nil)
}
`

// exportResult is one run of one sink at one rate.
type exportResult struct {
	changes     int           // made in the window
	madeIn      time.Duration // from the first change made to the last
	received    int64         // by the sink's consumer, of the window's
	elapsed     time.Duration // from the first change made until the sink's consumer had the last
	lags        []time.Duration
	objectBytes int   // an object as the sink's consumer received it
	watched     int64 // by the Watch client
	watchP50    time.Duration
	watchP99    time.Duration
	exporterCPU time.Duration
	watchCPU    time.Duration
}

func (x exportResult) throughput() float64 { return float64(x.received) / x.elapsed.Seconds() }
func (x exportResult) exporterPerChange() float64 {
	return 1e6 * x.exporterCPU.Seconds() / float64(max(x.received, 1))
}
func (x exportResult) watchPerChange() float64 {
	return 1e6 * x.watchCPU.Seconds() / float64(max(x.watched, 1))
}

// exportBinaries are the scenario's builds.
type exportBinaries struct{ exporter, watch string }

func (e *Env) buildExportBinaries(ctx context.Context) (exportBinaries, error) {
	b := exportBinaries{exporter: filepath.Join(e.dir, "informerhub-export"), watch: filepath.Join(e.dir, "benchwatch")}
	dir, err := exec.CommandContext(ctx, "go", "list", "-f", "{{.Dir}}", exporterPackage).Output()
	if err != nil {
		return b, fmt.Errorf("finding %s: %w", exporterPackage, err)
	}
	pprofFile := filepath.Join(e.dir, "hubbench_pprof.go")
	if err := os.WriteFile(pprofFile, []byte(exporterPprof), 0o644); err != nil {
		return b, err
	}
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": {filepath.Join(strings.TrimSpace(string(dir)), "zz_hubbench_pprof.go"): pprofFile}})
	if err != nil {
		return b, err
	}
	overlayFile := filepath.Join(e.dir, "overlay.json")
	if err := os.WriteFile(overlayFile, overlay, 0o644); err != nil {
		return b, err
	}
	for _, build := range [][]string{
		{"build", "-overlay", overlayFile, "-o", b.exporter, exporterPackage},
		{"build", "-o", b.watch, benchwatchPkg},
	} {
		if out, err := exec.CommandContext(ctx, "go", build...).CombinedOutput(); err != nil {
			return b, fmt.Errorf("go %s: %w\n%s", strings.Join(build, " "), err, out)
		}
	}
	return b, nil
}

// exportScenario measures, for each sink and each offered rate, the
// exporter's throughput and lag and its CPU per change, beside a Watch
// client's on the same changes.
func exportScenario(ctx context.Context, e *Env, o *Options, r *Report) error {
	probe, err := e.exportProbe(ctx, o)
	if err != nil {
		return fmt.Errorf("the API server's writes: %w", err)
	}
	o.logf("export: the API server took %.0f writes/s offered %.0f/s (%d writes in %v, its and etcd's CPU %v)",
		probe.rate(), o.ExportRates[len(o.ExportRates)-1], probe.writes, probe.elapsed.Round(time.Millisecond), probe.cpu.Round(time.Millisecond))
	bins, err := e.buildExportBinaries(ctx)
	if err != nil {
		return err
	}
	natsDir, err := os.MkdirTemp(e.dir, "nats")
	if err != nil {
		return err
	}
	natsServer, err := natstest.Run(natsDir, natstest.Options{})
	if err != nil {
		return err
	}
	defer func() {
		if err := natsServer.Close(); err != nil {
			o.logf("export: stopping nats-server: %v", err)
		}
	}()
	sinks := []string{sinkJetStream, sinkKafka, sinkCloudEvents}
	results := map[string]map[float64][]exportResult{}
	runID := 0
	for run := range o.Runs {
		for _, sink := range sinks {
			if results[sink] == nil {
				results[sink] = map[float64][]exportResult{}
			}
			for _, rate := range o.ExportRates {
				runID++
				var profiles exportProfiles
				if run == o.Runs-1 && rate == o.ExportRates[len(o.ExportRates)-1] {
					profiles = exportProfiles{
						exporter: o.profilePath(fmt.Sprintf("export-cpu-%s-%.0f.pb.gz", strings.ToLower(sink), rate)),
						watch:    o.profilePath(fmt.Sprintf("benchwatch-cpu-%s-%.0f.pb.gz", strings.ToLower(sink), rate)),
					}
				}
				res, err := e.exportRun(ctx, o, bins, natsServer, sink, rate, runID, profiles)
				if err != nil {
					return fmt.Errorf("%s at %.0f/s: %w", sink, rate, err)
				}
				o.logf("export run %d: %s at %.0f/s: %d changes made in %v; the sink's consumer had %d in %v (%.0f/s), lag p50 %v p99 %v; exporter CPU %.1f µs/change; Watch client had %d, lag p50 %v p99 %v, CPU %.1f µs/change",
					run+1, sink, rate, res.changes, res.madeIn.Round(time.Millisecond), res.received, res.elapsed.Round(time.Millisecond), res.throughput(),
					percentile(res.lags, 50), percentile(res.lags, 99), res.exporterPerChange(), res.watched, res.watchP50, res.watchP99, res.watchPerChange())
				results[sink][rate] = append(results[sink][rate], res)
			}
		}
	}

	millis := func(d time.Duration) float64 { return float64(d) / 1e6 }
	table := Table{Header: []string{"sink", "offered changes/s", "made at", "sink's consumer received", "throughput", "lag p50", "lag p99",
		"exporter CPU per change", "Watch client: lag p50", "lag p99", "Watch client CPU per change", "exporter ÷ Watch client CPU"}}
	for _, sink := range sinks {
		for _, rate := range o.ExportRates {
			rs := results[sink][rate]
			made := spreadBy(rs, func(x exportResult) float64 { return float64(x.changes) / x.madeIn.Seconds() })
			got := spreadBy(rs, func(x exportResult) float64 { return float64(x.received) / float64(x.changes) })
			table.Rows = append(table.Rows, []string{sink, fmt.Sprintf("%.0f", rate), made.format(perSecond), got.format(percent),
				spreadBy(rs, exportResult.throughput).format(perSecond),
				spreadBy(rs, func(x exportResult) float64 { return millis(percentile(x.lags, 50)) }).format(ms),
				spreadBy(rs, func(x exportResult) float64 { return millis(percentile(x.lags, 99)) }).format(ms),
				spreadBy(rs, exportResult.exporterPerChange).format(perChange),
				spreadBy(rs, func(x exportResult) float64 { return millis(x.watchP50) }).format(ms),
				spreadBy(rs, func(x exportResult) float64 { return millis(x.watchP99) }).format(ms),
				spreadBy(rs, exportResult.watchPerChange).format(perChange),
				spreadOf(ratiosOf(rs, exportResult.exporterPerChange, exportResult.watchPerChange)).format(ratio),
			})
		}
	}
	var notes []string
	served := 0
	for _, sink := range sinks {
		for _, rate := range o.ExportRates {
			rs := results[sink][rate]
			served = rs[0].objectBytes
			made := spreadBy(rs, func(x exportResult) float64 { return float64(x.changes) / x.madeIn.Seconds() })
			through := spreadBy(rs, exportResult.throughput)
			if made.Median < 0.95*rate {
				notes = append(notes, fmt.Sprintf("%s at %.0f/s offered: the source made the changes at %s only: the harness's process (the hub, and the sinks' consumers) did not get the CPU to make and serve them at the offered rate beside the others on this machine.",
					sink, rate, made.format(perSecond)))
			}
			if through.Median < 0.95*made.Median {
				notes = append(notes, fmt.Sprintf("%s at %.0f/s offered: the sink's consumer received %s, behind the %s the changes were made at: the route fell behind, and its lag is the backlog's.",
					sink, rate, through.format(perSecond), made.format(perSecond)))
			}
		}
	}
	r.Sections = append(r.Sections, Section{
		Title: "18. Export",
		Notes: notes,
		Intro: fmt.Sprintf(`informerhub-export (issue 41) beside a plain Watch client, on the same changes. The API server of this machine cannot make the rates measured: offered %.0f merge patches/s of ConfigMaps with %s of data by 64 writers at once, with no hub running, it took %.0f/s (%d in %v; kube-apiserver's and etcd's CPU %.2f s, %s per write). So the changes come from a synthetic source: the hub's core (package informerhub, the binary's defaults) on informerhub/hubtest's in-memory cluster, in the harness's process, served over gRPC on loopback by package server as cmd/informerhub serves it (package cork under grpc-go's writer; anonymous callers, as with --auth none). Everything the binary does from the informer's handler on is there; the API server, the informer's reading of its JSON and the hub's flags are not. %d ConfigMaps of %s of data (%s as the sinks receive them, the object as the hub serves it) in namespace %s are modified one at a time in turn, each stamped in its data with its number and the time taken just before the change is made (sentAt), at the offered rate for %v, after %v of changes at that rate that warm everything up. One route of informerhub-export (built from cmd/informerhub-export at the scenario's start; the harness adds, with go build -overlay, a file that serves net/http/pprof for the profile, nothing else) watches the namespace and publishes to: JetStream, a stream of its own on a real nats-server (internal/natstest, file storage, one server for the scenario), read by an ordered consumer; Kafka, kfake (franz-go's in-process fake broker, a fresh cluster per run in the harness's process, not a real broker: its costs are not Kafka's), a topic of %d partitions read by a consumer of committed records; CloudEvents, an sdk-go HTTP receiver on loopback, binary mode. Beside it, test/bench/cmd/benchwatch, the Go SDK's Watch of the same namespace, reads every event and finds its stamp. Lag is from sentAt to the receipt: for a sink, by its consumer in the harness's process (a JetStream message delivered, a Kafka record fetched once its transaction committed, a CloudEvent's request handled, which is before the exporter has its 2xx); for the Watch client, by that client. Throughput is the changes the sink's consumer received ÷ the time from the first change made to its receipt of the last. A process's CPU is its threads' time on a CPU (/proc/<pid>/task/*/schedstat) from the first measured change until both the sink's consumer and the Watch client had the last (or %v passed), divided by the changes it handled (the sink's consumer received; the Watch client received). Both run afresh for each run, with the sink's; the ratio is taken run by run. "made at" is the rate at which the changes were made: the offered rate, unless the source fell behind. The last run at %.0f/s profiles both: export-cpu-<sink>-%.0f.pb.gz and benchwatch-cpu-<sink>-%.0f.pb.gz, over the changes.`,
			o.ExportRates[len(o.ExportRates)-1], byteSize(float64(o.ExportObjectBytes)), probe.rate(), probe.writes, probe.elapsed.Round(time.Millisecond), probe.cpu.Seconds(), fmt.Sprintf("%.0f µs", 1e6*probe.cpu.Seconds()/float64(probe.writes)),
			o.ExportObjects, byteSize(float64(o.ExportObjectBytes)), byteSize(float64(served)), exportNamespace, o.ExportDuration, o.WarmUp, kafkaPartitions, o.ExportDrain,
			o.ExportRates[len(o.ExportRates)-1], o.ExportRates[len(o.ExportRates)-1], o.ExportRates[len(o.ExportRates)-1]),
		Tables: []Table{table},
	})
	return nil
}

// exportProfiles are files for the processes' CPU profiles of a run;
// empty ones are not taken.
type exportProfiles struct{ exporter, watch string }

// exportRun measures one run: a fresh synthetic hub, sink, exporter and
// Watch client; changes at rate for o.WarmUp, then for o.ExportDuration.
func (e *Env) exportRun(ctx context.Context, o *Options, bins exportBinaries, natsServer *natstest.Server, sink string, rate float64, runID int, profiles exportProfiles) (res exportResult, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	dir, err := os.MkdirTemp(e.dir, "export")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	hub, err := startSynthHub(exportNamespace, o.ExportObjects, o.ExportObjectBytes)
	if err != nil {
		return res, err
	}
	defer hub.stop()
	rec := newRecorder()
	s, err := newExportSink(ctx, sink, runID, natsServer, dir, rec)
	if err != nil {
		return res, err
	}
	defer func() {
		if stopErr := s.stop(); err == nil && stopErr != nil {
			err = fmt.Errorf("stopping the sink: %w", stopErr)
		}
	}()
	exporter, err := startExporter(bins.exporter, dir, hub.addr, s)
	if err != nil {
		return res, err
	}
	defer exporter.stop()
	// The route starts with no resume point: the initial state first.
	if err := rec.waitTotal(ctx, int64(o.ExportObjects), time.Now().Add(time.Minute)); err != nil {
		return res, fmt.Errorf("the sink's consumer did not receive the initial state: %w\n%s", err, exporter.output.String())
	}
	watch, err := startBenchWatch(bins.watch, hub.addr, profiles.watch)
	if err != nil {
		return res, err
	}
	defer watch.stop()

	window := func(d time.Duration) (int, time.Duration, error) {
		from := hub.last() + 1
		total := max(1, int(rate*d.Seconds()))
		to := from + int64(total) - 1
		rec.expect(from, to)
		start := time.Now()
		n, err := paced(ctx, 1, rate, d, func(_ context.Context, i int) error { hub.touch(i); return nil })
		made := time.Since(start)
		if err == nil && n != total {
			err = fmt.Errorf("made %d changes of %d", n, total)
		}
		return n, made, err
	}
	// Warming up: every change reaches both.
	if _, _, err := window(o.WarmUp); err != nil {
		return res, err
	}
	if n, _, _ := rec.waitWindow(ctx, time.Now().Add(o.ExportDrain)); n != rec.to-rec.from+1 {
		return res, fmt.Errorf("warming up: the sink's consumer received %d of %d changes: %w\n%s", n, rec.to-rec.from+1, errTimeout, exporter.output.String())
	}
	if _, _, _, err := watch.waitFor(rec.from, rec.to, time.Now().Add(o.ExportDrain)); err != nil {
		return res, fmt.Errorf("warming up: %w", err)
	}

	exporterMeter, err := startCPUMeter(exporter.pid())
	if err != nil {
		return res, err
	}
	watchMeter, err := startCPUMeter(watch.pid())
	if err != nil {
		return res, err
	}
	var profiled func() error
	if profiles.exporter != "" {
		profiled = debugCPUProfile(ctx, exporter.debugAddr, o.ExportDuration, profiles.exporter)
	}
	start := time.Now()
	if res.changes, res.madeIn, err = window(o.ExportDuration); err != nil {
		return res, err
	}
	deadline := time.Now().Add(o.ExportDrain)
	var lastAt time.Time
	res.received, res.lags, lastAt = rec.waitWindow(ctx, deadline)
	res.objectBytes = rec.objectSize()
	if res.received > 0 {
		res.elapsed = lastAt.Sub(start)
	}
	if res.watched, res.watchP50, res.watchP99, err = watch.waitFor(rec.from, rec.to, deadline); err != nil {
		return res, err
	}
	if res.exporterCPU, err = exporterMeter.used(); err != nil {
		return res, err
	}
	if res.watchCPU, err = watchMeter.used(); err != nil {
		return res, err
	}
	if profiled != nil {
		if err := profiled(); err != nil {
			return res, fmt.Errorf("profiling the exporter: %w", err)
		}
	}
	if res.received == 0 {
		return res, fmt.Errorf("the sink's consumer received none of %d changes\n%s", res.changes, exporter.output.String())
	}
	return res, nil
}

// exporterProcess is informerhub-export, with one route to a sink.
type exporterProcess struct {
	cmd       *exec.Cmd
	debugAddr string
	exited    chan struct{}
	output    testhub.SyncBuffer
}

func startExporter(binary, dir, hubAddr string, s exportSink) (*exporterProcess, error) {
	cfg := export.Config{Cluster: "bench", Hub: export.Hub{Addresses: []string{hubAddr}, Insecure: true}}
	route := export.RouteConfig{Name: "bench", Selector: export.SelectorConfig{Version: "v1", Resource: "configmaps", Namespace: exportNamespace}}
	s.route(&cfg, &route)
	cfg.Routes = []export.RouteConfig{route}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	config := filepath.Join(dir, "export.yaml")
	if err := os.WriteFile(config, data, 0o600); err != nil {
		return nil, err
	}
	debugAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	p := &exporterProcess{debugAddr: debugAddr, exited: make(chan struct{})}
	p.cmd = exec.Command(binary, "--config", config, "--log-level", "warn")
	p.cmd.Env = append(os.Environ(), exporterPprofEnv+"="+debugAddr)
	p.cmd.Stdout, p.cmd.Stderr = &p.output, &p.output
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", binary, err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

func (p *exporterProcess) pid() int { return p.cmd.Process.Pid }

// stop ends the exporter with SIGTERM, then SIGKILL if it lingers.
func (p *exporterProcess) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// debugCPUProfile starts a CPU profile lasting d (whole seconds, at least
// one) of the process serving net/http/pprof on addr, into file; the
// function it returns waits for it.
func debugCPUProfile(ctx context.Context, addr string, d time.Duration, file string) func() error {
	p := &hubProcess{debugAddr: addr} // for its debug endpoint's client alone
	done := make(chan error, 1)
	seconds := max(1, int(math.Ceil(d.Seconds())))
	go func() { done <- p.profile(ctx, fmt.Sprintf("profile?seconds=%d", seconds), file) }()
	return func() error { return <-done }
}

// benchWatch is cmd/benchwatch, the Watch client.
type benchWatch struct{ *lineProcess }

func startBenchWatch(binary, hubAddr, profile string) (*benchWatch, error) {
	args := []string{"-hub", hubAddr, "-namespace", exportNamespace}
	if profile != "" {
		args = append(args, "-cpuprofile", profile)
	}
	lp, err := startLineProcess("the Watch client", exec.Command(binary, args...), 8)
	if err != nil {
		return nil, err
	}
	w := &benchWatch{lp}
	line, err := w.next(time.Minute)
	if err == nil && line != "open" {
		err = fmt.Errorf("it said %q", line)
	}
	if err != nil {
		w.stop()
		return nil, fmt.Errorf("the Watch client did not open: %w", err)
	}
	return w, nil
}

func (w *benchWatch) pid() int { return w.cmd.Process.Pid }

// waitFor waits until the client has received change to, and returns how
// many of from to to it received, and their lags' p50 and p99.
func (w *benchWatch) waitFor(from, to int64, deadline time.Time) (int64, time.Duration, time.Duration, error) {
	if _, err := fmt.Fprintf(w.stdin, "wait %d %d\n", from, to); err != nil {
		return 0, 0, 0, fmt.Errorf("the Watch client: %w", err)
	}
	line, err := w.next(time.Until(deadline))
	if err != nil {
		return 0, 0, 0, fmt.Errorf("waiting for change %d: %w", to, err)
	}
	f := strings.Fields(line)
	if len(f) != 4 || f[0] != "got" {
		return 0, 0, 0, fmt.Errorf("the Watch client answered %q", line)
	}
	var v [3]int64
	for i := range v {
		if v[i], err = strconv.ParseInt(f[i+1], 10, 64); err != nil {
			return 0, 0, 0, fmt.Errorf("the Watch client answered %q", line)
		}
	}
	return v[0], time.Duration(v[1]), time.Duration(v[2]), nil
}

// stop ends the client with SIGTERM, then SIGKILL if it lingers, and
// waits until it has written its profile and exited.
func (w *benchWatch) stop() {
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	w.wait(15 * time.Second)
}

// exportProbeResult is how many writes the API server took.
type exportProbeResult struct {
	writes  int
	elapsed time.Duration
	cpu     time.Duration // kube-apiserver's and etcd's
}

func (p exportProbeResult) rate() float64 { return float64(p.writes) / p.elapsed.Seconds() }

// exportProbe offers the API server the scenario's greatest rate of
// writes, by 64 writers at once, for o.ExportProbe, with no hub running:
// how many it takes.
func (e *Env) exportProbe(ctx context.Context, o *Options) (exportProbeResult, error) {
	var res exportProbeResult
	ns := exportNamespace + "-apiserver"
	if err := e.createNamespace(ctx, ns); err != nil {
		return res, err
	}
	w, err := newWriter(ctx, e, ns, o.ExportObjects, o.ExportObjectBytes)
	if err != nil {
		return res, err
	}
	w.workers = 64
	before, err := e.controlPlaneCPU()
	if err != nil {
		return res, err
	}
	start := time.Now()
	if res.writes, err = w.run(ctx, o.ExportRates[len(o.ExportRates)-1], o.ExportProbe); err != nil {
		return res, err
	}
	res.elapsed = time.Since(start)
	after, err := e.controlPlaneCPU()
	if err != nil {
		return res, err
	}
	res.cpu = after - before
	err = e.kube.CoreV1().ConfigMaps(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	return res, err
}
