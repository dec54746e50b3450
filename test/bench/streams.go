package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
)

const (
	streamloadPackage = "github.com/informerhub/informerhub/test/bench/cmd/streamload"
	// streamsNamespace holds the one ConfigMap every stream of the streams
	// scenario watches.
	streamsNamespace = "bench-streams"
	streamsObject    = "stamped"
)

// streamsRun is what one run of the streams scenario measured.
type streamsRun struct {
	open                      time.Duration // to open every stream
	heap, stacks, rss         float64       // the hub's, with every stream open
	perStream, rssPerStream   float64       // growth over the hub with one stream, per stream
	perStreamAfter            float64       // the same, idle again after the changes
	stacksPerStreamAfter      float64       // of it, the goroutine stacks
	goroutinesPerStream       float64
	changeP50, changeP99, max []float64 // per change, over the streams, in ms
}

// streamsScenario holds o.Streams idle Watch streams over
// o.StreamConnections connections on one hub, opened by cmd/streamload in
// a process of its own; reads the hub's memory with them all open; then
// makes o.StreamChanges changes, one at a time, each received by every
// stream before the next.
func streamsScenario(ctx context.Context, e *Env, o *Options, r *Report) error {
	if err := e.createNamespace(ctx, streamsNamespace); err != nil {
		return err
	}
	if _, err := e.kube.CoreV1().ConfigMaps(streamsNamespace).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: streamsObject},
		Data:       map[string]string{"sentAt": "0"},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	binary := filepath.Join(e.dir, "streamload")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", binary, streamloadPackage).CombinedOutput(); err != nil {
		return fmt.Errorf("building %s: %w\n%s", streamloadPackage, err, out)
	}
	var runs []streamsRun
	for run := range o.Runs {
		res, err := e.streamsRun(ctx, o, binary, run == o.Runs-1)
		if err != nil {
			return err
		}
		o.logf("streams run %d: %d streams open in %v; %.0f bytes of heap and stacks (%.0f after the changes, %.0f of stacks), %.0f of RSS, %.2f goroutines per stream; changes' p99 %v ms",
			run+1, o.Streams, res.open, res.perStream, res.perStreamAfter, res.stacksPerStreamAfter, res.rssPerStream, res.goroutinesPerStream, res.changeP99)
		runs = append(runs, res)
	}
	spread := func(f func(streamsRun) float64) Spread {
		var vs []float64
		for _, run := range runs {
			vs = append(vs, f(run))
		}
		return spreadOf(vs)
	}
	median := func(vs []float64) float64 { return spreadOf(vs).Median }
	perStream := spread(func(x streamsRun) float64 { return x.perStream })
	p99 := spread(func(x streamsRun) float64 { return median(x.changeP99) })
	r.Sections = append(r.Sections, Section{
		Title: "16. Streams on one replica",
		Intro: fmt.Sprintf(`%d Watch streams of one namespace's ConfigMaps, over %d connections, held by one hub (with --metrics-listen, as deployed); cmd/streamload opens them, %d at a time, from a process of its own. The hub's heap (HeapAlloc after a forced collection) and goroutine stacks, its RSS and its goroutines are read once they are all open; "per stream" is their growth over the hub with one stream open, divided by the streams. Then %d changes of the namespace's one ConfigMap are made one at a time, each received by every stream before the next, and the memory is read again, every stream idle once more; a change's latency is, per stream, from the writer's timestamp to the receipt, and its p50, p99 and greatest are over the streams. The hub's heap profile and goroutine profile of the last run are in test/bench/results/pprof (streams-heap.pb.gz, streams-goroutine.txt).`,
			o.Streams, o.StreamConnections, o.StreamParallel, o.StreamChanges),
		Tables: []Table{{
			Header: []string{"streams", "connections", "time to open them all", "hub heap", "hub stacks", "hub RSS", "heap + stacks per stream", "the same, idle after the changes", "RSS per stream", "goroutines per stream", "a change's p50", "a change's p99", "a change's slowest"},
			Rows: [][]string{{fmt.Sprint(o.Streams), fmt.Sprint(o.StreamConnections),
				spread(func(x streamsRun) float64 { return x.open.Seconds() }).format(seconds),
				spread(func(x streamsRun) float64 { return x.heap }).format(byteSize),
				spread(func(x streamsRun) float64 { return x.stacks }).format(byteSize),
				spread(func(x streamsRun) float64 { return x.rss }).format(byteSize),
				perStream.format(byteSize),
				spread(func(x streamsRun) float64 { return x.perStreamAfter }).format(byteSize),
				spread(func(x streamsRun) float64 { return x.rssPerStream }).format(byteSize),
				spread(func(x streamsRun) float64 { return x.goroutinesPerStream }).format(func(v float64) string { return fmt.Sprintf("%.2f", v) }),
				spread(func(x streamsRun) float64 { return median(x.changeP50) }).format(ms),
				p99.format(ms),
				spread(func(x streamsRun) float64 { return median(x.max) }).format(ms),
			}},
		}},
		Notes: []string{"A change's figures are the median over its changes of each run; the spread is over the runs."},
	})
	r.Targets = append(r.Targets, Target{
		Name:     fmt.Sprintf("%d Watch streams over %d connections on one hub", o.Streams, o.StreamConnections),
		Goal:     "≤ 16 KiB of heap and stacks per idle stream",
		Measured: fmt.Sprintf("%s per stream; a change reaches them all with p99 %s", perStream.format(byteSize), p99.format(ms)),
		Met:      perStream.Median <= 16<<10,
	})
	return nil
}

// streamsRun is one run of the streams scenario, on a hub of its own;
// profile saves the hub's heap and goroutine profiles.
func (e *Env) streamsRun(ctx context.Context, o *Options, binary string, profile bool) (res streamsRun, err error) {
	// Metrics on, as a deployed hub has them: every call passes through
	// their interceptor.
	metricsAddr, err := freeAddr()
	if err != nil {
		return res, err
	}
	// One connection of the harness's own, for a stream that makes the
	// informer run and sync first, so that the base memory counts it.
	hub, conn, stopHub, err := e.startHubDialed(ctx, "--metrics-listen", metricsAddr)
	if err != nil {
		return res, err
	}
	defer stopHub()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req := &informerhubv1.WatchRequest{Selector: &informerhubv1.ResourceSelector{Version: "v1", Resource: "configmaps", Namespace: streamsNamespace}}
	if _, err := openHubWatch(ctx, conn, req); err != nil {
		return res, err
	}
	base, err := hub.memory(ctx)
	if err != nil {
		return res, err
	}
	baseRSS, err := residentBytes(hub.pid())
	if err != nil {
		return res, err
	}
	baseGoroutines, err := hub.goroutines(ctx)
	if err != nil {
		return res, err
	}

	load, err := startStreamLoad(binary, StreamLoad{Addr: hub.addr, Namespace: streamsNamespace,
		Streams: o.Streams, Connections: o.StreamConnections, Parallel: o.StreamParallel})
	if err != nil {
		return res, err
	}
	defer load.stop()
	opened, err := load.report(10 * time.Minute)
	if err != nil {
		return res, err
	}
	if opened.Opened != o.Streams {
		return res, fmt.Errorf("streamload said %+v, not that %d streams are open", opened, o.Streams)
	}
	res.open = time.Duration(opened.OpenSeconds * float64(time.Second))

	m, err := hub.memory(ctx)
	if err != nil {
		return res, err
	}
	rss, err := residentBytes(hub.pid())
	if err != nil {
		return res, err
	}
	goroutines, err := hub.goroutines(ctx)
	if err != nil {
		return res, err
	}
	n := float64(o.Streams)
	res.heap, res.stacks, res.rss = float64(m.HeapAlloc), float64(m.StackInuse), float64(rss)
	res.perStream = float64(int64(m.HeapAlloc+m.StackInuse)-int64(base.HeapAlloc+base.StackInuse)) / n
	res.rssPerStream = float64(rss-baseRSS) / n
	res.goroutinesPerStream = float64(goroutines-baseGoroutines) / n
	if profile && o.ProfileDir != "" {
		if err := hub.profile(ctx, "heap?gc=1", o.profilePath("streams-heap.pb.gz")); err != nil {
			return res, err
		}
		if err := hub.profile(ctx, "goroutine?debug=1", o.profilePath("streams-goroutine.txt")); err != nil {
			return res, err
		}
	}

	for range o.StreamChanges {
		stamp := time.Now().UnixNano()
		patch := `{"data":{"sentAt":"` + strconv.FormatInt(stamp, 10) + `"}}`
		if _, err := e.kube.CoreV1().ConfigMaps(streamsNamespace).Patch(ctx, streamsObject, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return res, err
		}
		got, err := load.report(5 * time.Minute)
		if err != nil {
			return res, err
		}
		if got.Change != stamp {
			return res, fmt.Errorf("streamload reported %+v, not the change stamped %d", got, stamp)
		}
		res.changeP50 = append(res.changeP50, ms1(got.P50))
		res.changeP99 = append(res.changeP99, ms1(got.P99))
		res.max = append(res.max, ms1(got.Max))
	}
	// Idle again, once every stream has sent the changes: a send that grew
	// its goroutine's stack would show here.
	if m, err = hub.memory(ctx); err != nil {
		return res, err
	}
	res.perStreamAfter = float64(int64(m.HeapAlloc+m.StackInuse)-int64(base.HeapAlloc+base.StackInuse)) / n
	res.stacksPerStreamAfter = float64(int64(m.StackInuse)-int64(base.StackInuse)) / n
	if o.MaxStackPerStream > 0 && res.stacksPerStreamAfter > o.MaxStackPerStream {
		return res, fmt.Errorf("streams: idle again after the changes, the hub's stacks grew by %.0f bytes per stream, more than %.0f: a send path deeper than a stream's 8 KiB stack keeps 16 KiB for each (see docs/architecture.md)", res.stacksPerStreamAfter, o.MaxStackPerStream)
	}
	return res, nil
}

// goroutines reads how many goroutines the hub has.
func (p *hubProcess) goroutines(ctx context.Context) (int, error) {
	body, err := p.debugGet(ctx, "/debug/pprof/goroutine?debug=1")
	if err != nil {
		return 0, err
	}
	// "goroutine profile: total N"
	first, _, _ := strings.Cut(string(body), "\n")
	n, err := strconv.Atoi(strings.TrimPrefix(first, "goroutine profile: total "))
	if err != nil {
		return 0, fmt.Errorf("the hub's goroutine profile begins %q", first)
	}
	return n, nil
}

// streamLoadProcess is cmd/streamload, running.
type streamLoadProcess struct{ *lineProcess }

func startStreamLoad(binary string, l StreamLoad) (*streamLoadProcess, error) {
	p, err := startLineProcess("streamload", exec.Command(binary, "-addr", l.Addr, "-namespace", l.Namespace, "-streams", fmt.Sprint(l.Streams),
		"-connections", fmt.Sprint(l.Connections), "-parallel", fmt.Sprint(l.Parallel)), 16)
	if err != nil {
		return nil, err
	}
	return &streamLoadProcess{p}, nil
}

// report reads streamload's next report, waiting for timeout at most.
func (p *streamLoadProcess) report(timeout time.Duration) (StreamLoadReport, error) {
	var r StreamLoadReport
	line, err := p.next(timeout)
	if err != nil {
		return r, err
	}
	return r, json.Unmarshal([]byte(line), &r)
}

// stop ends streamload (closing its stdin), then kills it if it lingers.
func (p *streamLoadProcess) stop() {
	p.stdin.Close()
	p.wait(30 * time.Second)
}
