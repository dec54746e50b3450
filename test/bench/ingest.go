package bench

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
)

// The ingest scenario compares what receiving a change costs the hub with
// what it costs client-go's informers, each consumer a process of its own
// on the same stream of changes, so that each one's CPU time can be read
// from /proc.

const (
	// ingestNamespace holds the ingest scenario's ConfigMaps and pods.
	ingestNamespace = "bench-ingest"
	// benchinformerPackage is the informer the hub is compared with.
	benchinformerPackage = "github.com/informerhub/informerhub/test/bench/cmd/benchinformer"
)

// The kinds of informer cmd/benchinformer runs (its -kind).
const (
	informerDynamic = "dynamic" // the dynamic client's: JSON into unstructured objects
	informerTyped   = "typed"   // the typed clientset's: protobuf into typed objects
)

// ingestKind is one kind of object whose changes the consumers receive.
type ingestKind struct {
	name     string // in the report: "ConfigMaps"
	resource string // the core resource type: "configmaps"
	objects  int
	bytes    int // an object's JSON as served, once changed
	// touch changes object i (0 ≤ i < objects), stamped with the time.
	touch func(ctx context.Context, i int) error
}

// ingestResult is one run of one kind: the consumers' CPU time over the
// same changes, from the first measured change until each has received the
// last.
type ingestResult struct {
	changes        int
	elapsed        time.Duration // from the first change until every consumer had every change
	hub            time.Duration
	dynamic, typed time.Duration // the informers', when they ran
}

// perChange is a consumer's CPU time per change, in microseconds.
func (x ingestResult) perChange(cpu time.Duration) float64 {
	return 1e6 * cpu.Seconds() / float64(max(x.changes, 1))
}

// ingestProfiles are files for the consumers' CPU profiles of a run; empty
// ones are not taken.
type ingestProfiles struct{ hub, dynamic, typed string }

// ingestScenario measures, for ConfigMaps and for pods, the hub's CPU time
// per change received with one subscriber, against a client-go dynamic
// informer's and a typed (protobuf) informer's, all three on the same
// changes; then the hub's with o.IngestSubscribers subscribers.
func ingestScenario(ctx context.Context, e *Env, o *Options, r *Report) error {
	binary, err := e.buildInformer(ctx)
	if err != nil {
		return err
	}
	if err := e.createNamespace(ctx, ingestNamespace); err != nil {
		return err
	}
	w, err := newWriter(ctx, e, ingestNamespace, o.IngestObjects, o.IngestObjectBytes)
	if err != nil {
		return err
	}
	if err := w.touch(ctx, 0); err != nil {
		return err
	}
	configMapBytes, err := e.servedSize(ctx, "configmaps", ingestNamespace, w.names[0])
	if err != nil {
		return err
	}
	pods, err := e.createPods(ctx, o, ingestNamespace, o.IngestObjects, 1)
	if err != nil {
		return err
	}
	kinds := []ingestKind{
		{name: "ConfigMaps", resource: "configmaps", objects: len(w.names), bytes: configMapBytes, touch: w.touch},
		{name: "Pods", resource: "pods", objects: len(pods.names), bytes: pods.bytes, touch: pods.touch},
	}

	fannedRate := min(o.IngestRate, o.FanOutMaxDelivery/float64(o.IngestSubscribers))
	results := make([][]ingestResult, len(kinds)) // the hub with 1 subscriber, and the informers
	fanned := make([][]ingestResult, len(kinds))  // the hub with o.IngestSubscribers
	for run := range o.Runs {
		// The kinds alternate in order from run to run.
		order := []int{0, 1}
		if run%2 == 1 {
			order = []int{1, 0}
		}
		for _, i := range order {
			k := kinds[i]
			var profiles, fannedProfiles ingestProfiles
			if run == o.Runs-1 {
				profiles = ingestProfiles{
					hub:     o.profilePath(fmt.Sprintf("hub-cpu-ingest-%s.pb.gz", k.resource)),
					dynamic: o.profilePath(fmt.Sprintf("informer-cpu-ingest-%s-%s.pb.gz", k.resource, informerDynamic)),
					typed:   o.profilePath(fmt.Sprintf("informer-cpu-ingest-%s-%s.pb.gz", k.resource, informerTyped)),
				}
				fannedProfiles.hub = o.profilePath(fmt.Sprintf("hub-cpu-ingest-%s-%d.pb.gz", k.resource, o.IngestSubscribers))
			}
			res, err := e.ingestRun(ctx, o, k, o.IngestRate, 1, binary, profiles)
			if err != nil {
				return fmt.Errorf("%s: %w", k.name, err)
			}
			o.logf("ingest run %d: %s: %d changes in %v; CPU per change: hub %.0f µs, dynamic informer %.0f µs, typed informer %.0f µs",
				run+1, k.name, res.changes, res.elapsed.Round(time.Millisecond), res.perChange(res.hub), res.perChange(res.dynamic), res.perChange(res.typed))
			results[i] = append(results[i], res)

			res, err = e.ingestRun(ctx, o, k, fannedRate, o.IngestSubscribers, "", fannedProfiles)
			if err != nil {
				return fmt.Errorf("%s, %d subscribers: %w", k.name, o.IngestSubscribers, err)
			}
			o.logf("ingest run %d: %s, %d subscribers: %d changes in %v; hub CPU per change %.0f µs",
				run+1, k.name, o.IngestSubscribers, res.changes, res.elapsed.Round(time.Millisecond), res.perChange(res.hub))
			fanned[i] = append(fanned[i], res)
		}
	}
	if err := e.kube.CoreV1().ConfigMaps(ingestNamespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		return err
	}
	if err := pods.delete(ctx); err != nil {
		return err
	}

	hubPerChange := func(x ingestResult) float64 { return x.perChange(x.hub) }
	dynamicPerChange := func(x ingestResult) float64 { return x.perChange(x.dynamic) }
	typedPerChange := func(x ingestResult) float64 { return x.perChange(x.typed) }
	ceiling := func(x ingestResult) float64 { return 1e6 / hubPerChange(x) }
	table := Table{Header: []string{"objects", "as served", "changes/s", "hub, 1 subscriber", "client-go dynamic informer (JSON)", "client-go typed informer (protobuf)", "hub ÷ dynamic", "hub ÷ typed"}}
	ceilings := Table{
		Caption: "Throughput ceiling: the changes one core's CPU-second carries through the hub (10⁶ ÷ µs per change), as its subscribers grow:",
		Header:  []string{"objects", "subscribers", "changes/s", "hub CPU per change", "changes per CPU-second"},
	}
	var targets []Target
	for i, k := range kinds {
		rs := results[i]
		vsDynamic := spreadOf(ratiosOf(rs, hubPerChange, dynamicPerChange))
		vsTyped := spreadOf(ratiosOf(rs, hubPerChange, typedPerChange))
		table.Rows = append(table.Rows, []string{k.name, byteSize(float64(k.bytes)), fmt.Sprintf("%.0f", o.IngestRate),
			spreadBy(rs, hubPerChange).format(perChange), spreadBy(rs, dynamicPerChange).format(perChange), spreadBy(rs, typedPerChange).format(perChange),
			vsDynamic.format(ratio), vsTyped.format(ratio)})
		ceilings.Rows = append(ceilings.Rows,
			[]string{k.name, "1", fmt.Sprintf("%.0f", o.IngestRate), spreadBy(rs, hubPerChange).format(perChange), spreadBy(rs, ceiling).format(count)},
			[]string{k.name, fmt.Sprint(o.IngestSubscribers), fmt.Sprintf("%.0f", fannedRate), spreadBy(fanned[i], hubPerChange).format(perChange), spreadBy(fanned[i], ceiling).format(count)})
		name := fmt.Sprintf("Steady ingest, %s of about %s", k.name, byteSize(float64(k.bytes)))
		targets = append(targets,
			Target{Name: name, Goal: "hub CPU per change ≤ 0.7× a client-go dynamic informer's", Measured: vsDynamic.format(ratio), Met: vsDynamic.Median <= 0.7},
			Target{Name: name, Goal: "aiming at hub CPU per change ≤ 1.0× the client-go typed informer's (protobuf)", Measured: vsTyped.format(ratio), Met: vsTyped.Median <= 1},
		)
	}
	r.Sections = append(r.Sections, Section{
		Title: "14. Ingest: CPU per received change",
		Intro: fmt.Sprintf(`What receiving a change costs the hub, against what it costs client-go's informers, on the same changes in the same run. Three consumers, each a process of its own: the hub (cmd/informerhub as in scenario 1; its informer reads JSON from the API server) with one subscriber, a Watch of the changing namespace, read in the harness's process as in scenario 1; a client-go dynamic informer (dynamicinformer.NewFilteredDynamicInformer: JSON into unstructured objects, the dynamic client's default); and a client-go typed informer over protobuf (informers.NewSharedInformerFactory on a clientset with ContentType application/vnd.kubernetes.protobuf, as Kubernetes' controllers read). The informers (test/bench/cmd/benchinformer, built at the scenario's start) watch in all namespaces with resync off, as the hub's informer does, with a namespace index, as their factories give them, and a handler that only counts the updates of the changing namespace. %d ConfigMaps of about %s as served (%s of data), then %d pods of about %s as served (scenario 8's, with managedFields), are merge-patched one at a time in turn (data.sentAt; the label sentAt) at %.0f changes/s for %v, after %v of changes that warm every consumer up. A consumer's CPU time is its process's threads' time on a CPU (/proc/<pid>/task/*/schedstat, as in scenario 7) from the first measured change until every consumer has received the last, divided by the changes: its CPU per received change, whatever it spends it on (decoding, its cache, the hub's history and its subscriber, garbage collection). Every run starts each consumer afresh, and the kinds alternate in order from run to run; the ratios are taken run by run. Then a hub alone, afresh, with %d subscribers over at most %d connections, receives the same kind of changes, for the throughput ceiling. The last run's consumers are profiled: hub-cpu-ingest-<resource>.pb.gz and hub-cpu-ingest-<resource>-%d.pb.gz over the changes, informer-cpu-ingest-<resource>-<dynamic|typed>.pb.gz from the informer's sync to its end.`,
			o.IngestObjects, byteSize(float64(kinds[0].bytes)), byteSize(float64(o.IngestObjectBytes)), o.IngestObjects, byteSize(float64(kinds[1].bytes)), o.IngestRate, o.IngestDuration, o.WarmUp,
			o.IngestSubscribers, min(o.IngestSubscribers, o.FanOutConnections), o.IngestSubscribers),
		Tables: []Table{table, ceilings},
	})
	r.Targets = append(r.Targets, targets...)
	return nil
}

// ratiosOf is f(x) ÷ g(x) for each run x.
func ratiosOf[T any](runs []T, f, g func(T) float64) []float64 {
	v := make([]float64, len(runs))
	for i, x := range runs {
		v[i] = f(x) / g(x)
	}
	return v
}

// ingestRun measures one run of kind k: a fresh hub with subscribers
// subscribers of ingestNamespace and, unless informerBinary is empty, a
// dynamic and a typed informer beside it, all receive the same changes.
// Once all have synced, o.WarmUp's changes at rate reach every one; then
// changes at rate for o.IngestDuration, while each one's CPU time is
// measured until it has received the last.
func (e *Env) ingestRun(ctx context.Context, o *Options, k ingestKind, rate float64, subscribers int, informerBinary string, profiles ingestProfiles) (ingestResult, error) {
	var res ingestResult
	ctx, cancel := context.WithCancel(ctx)
	var rs receivers
	defer rs.stopped()
	defer cancel()

	hub, err := e.startHub(ctx)
	if err != nil {
		return res, err
	}
	defer hub.stop()
	conns, err := hubConns(hub.addr, min(subscribers, o.FanOutConnections), 0)
	if err != nil {
		return res, err
	}
	defer closeConns(conns)
	// The first subscription waits for the hub's informer to sync.
	req := &informerhubv1.WatchRequest{Selector: &informerhubv1.ResourceSelector{Version: "v1", Resource: k.resource, Namespace: ingestNamespace}}
	if err := openHubReceivers(ctx, &rs, conns, req, subscribers); err != nil {
		return res, fmt.Errorf("opening %d subscriptions: %w", subscribers, err)
	}
	var informers []*informerProcess
	defer func() {
		for _, p := range informers {
			p.stop()
		}
	}()
	if informerBinary != "" {
		for _, kind := range []string{informerDynamic, informerTyped} {
			profile := profiles.dynamic
			if kind == informerTyped {
				profile = profiles.typed
			}
			p, err := e.startInformer(informerBinary, kind, k.resource, profile)
			if err != nil {
				return res, err
			}
			informers = append(informers, p)
		}
	}

	ch := newChanger(k.objects, k.touch)
	if _, err := ch.run(ctx, rate, o.WarmUp); err != nil {
		return res, fmt.Errorf("warming up: %w", err)
	}
	if err := awaitConsumers(&rs, informers, ch.total(), time.Now().Add(o.FanOutDrain)); err != nil {
		return res, fmt.Errorf("warming up: %w", err)
	}

	hubMeter, err := startCPUMeter(hub.pid())
	if err != nil {
		return res, err
	}
	meters := make([]cpuMeter, len(informers))
	for i, p := range informers {
		if meters[i], err = startCPUMeter(p.pid()); err != nil {
			return res, err
		}
	}
	var profiled func() error
	if profiles.hub != "" {
		profiled = hub.cpuProfile(ctx, o.IngestDuration, profiles.hub)
	}
	start := time.Now()
	if res.changes, err = ch.run(ctx, rate, o.IngestDuration); err != nil {
		return res, fmt.Errorf("changing: %w", err)
	}
	if err := awaitConsumers(&rs, informers, ch.total(), time.Now().Add(o.FanOutDrain)); err != nil {
		return res, err
	}
	res.elapsed = time.Since(start)
	if res.hub, err = hubMeter.used(); err != nil {
		return res, err
	}
	for i, p := range informers {
		used, err := meters[i].used()
		if err != nil {
			return res, err
		}
		switch p.kind {
		case informerDynamic:
			res.dynamic = used
		case informerTyped:
			res.typed = used
		}
	}
	if profiled != nil {
		if err := profiled(); err != nil {
			return res, fmt.Errorf("profiling the hub: %w", err)
		}
	}
	return res, nil
}

// awaitConsumers waits until every hub subscriber of rs and every informer
// has received count changes, or until deadline.
func awaitConsumers(rs *receivers, informers []*informerProcess, count int64, deadline time.Time) error {
	if short := rs.waitFor(count, deadline); short > 0 {
		return fmt.Errorf("%d of %d hub subscribers did not receive %d changes: %w", short, len(rs.all), count, errTimeout)
	}
	for _, p := range informers {
		if err := p.waitFor(count, deadline); err != nil {
			return err
		}
	}
	return nil
}

// informerProcess is cmd/benchinformer: a client-go informer in a process
// of its own, which counts the updates of ingestNamespace's objects and
// answers on its stdout the commands written to its stdin.
type informerProcess struct {
	kind string
	*lineProcess
}

// buildInformer builds cmd/benchinformer into the Env's scratch directory.
// The go command finds the module from the working directory, which is in
// it both under `make bench` (the repository's root) and in the smoke test
// (test/bench).
func (e *Env) buildInformer(ctx context.Context) (string, error) {
	binary := filepath.Join(e.dir, "benchinformer")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", binary, benchinformerPackage).CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: %w\n%s", benchinformerPackage, err, out)
	}
	return binary, nil
}

// startInformer runs cmd/benchinformer's informer of kind over resource,
// with a CPU profile into the file profile unless it is empty, and waits
// until it has synced.
func (e *Env) startInformer(binary, kind, resource, profile string) (*informerProcess, error) {
	args := []string{"-kubeconfig", e.kubeconfig, "-kind", kind, "-resource", resource, "-namespace", ingestNamespace}
	if profile != "" {
		args = append(args, "-cpuprofile", profile)
	}
	lp, err := startLineProcess("the "+kind+" informer", exec.Command(binary, args...), 8)
	if err != nil {
		return nil, err
	}
	p := &informerProcess{kind: kind, lineProcess: lp}
	line, err := p.next(time.Minute)
	if err == nil && line != "synced" {
		err = fmt.Errorf("it said %q", line)
	}
	if err != nil {
		p.stop()
		return nil, fmt.Errorf("the %s informer did not sync: %w", kind, err)
	}
	return p, nil
}

func (p *informerProcess) pid() int { return p.cmd.Process.Pid }

// waitFor waits until the informer has received count updates, or until
// deadline.
func (p *informerProcess) waitFor(count int64, deadline time.Time) error {
	if _, err := fmt.Fprintf(p.stdin, "wait %d\n", count); err != nil {
		return fmt.Errorf("the %s informer: %w", p.kind, err)
	}
	line, err := p.next(time.Until(deadline))
	if err != nil {
		return fmt.Errorf("waiting for %d updates: %w", count, err)
	}
	n, err := strconv.ParseInt(strings.TrimPrefix(line, "count "), 10, 64)
	if err != nil || n < count {
		return fmt.Errorf("the %s informer answered %q to waiting for %d updates", p.kind, line, count)
	}
	return nil
}

// stop ends the informer with SIGTERM, then SIGKILL if it lingers, and
// waits until it has written its profile and exited.
func (p *informerProcess) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	p.wait(15 * time.Second) // to the end of its output, its last count among it
}
