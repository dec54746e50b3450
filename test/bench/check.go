package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// The consistency check scenario measures one of the hub's consistency
// checks (informerhub/internal/feed/check.go: the cache digested per
// namespace, against the API server's paged LIST at the cache's
// resourceVersion) at each of o.CheckObjects ConfigMaps in the cluster,
// against a client-go paged LIST of the same ConfigMaps at an exact
// resourceVersion, which is what the check asks of the API server.

const (
	// checkNamespace holds the consistency check scenario's ConfigMaps.
	checkNamespace = "bench-check"
	// checkWindowMargin: a check's CPU window opens this long before the
	// check can start at the earliest, so that a harness woken late on a
	// busy machine still opens it before the check starts.
	checkWindowMargin = 100 * time.Millisecond
	// checkLogPoll is how often the harness reads the hub's log for the
	// next check's line, from its own buffer: reading it costs the hub
	// nothing, where polling the hub's metrics would cost it a scrape.
	checkLogPoll = 5 * time.Millisecond
	// checkTimeout bounds the wait for one check, a sync of the largest
	// size included.
	checkTimeout = 5 * time.Minute
)

// cpuSpent is what one check or one LIST took: its wall time, the CPU time
// each process used over it, and what the API server read to serve it.
type cpuSpent struct {
	wall, hub, apiServer, etcd time.Duration
	lists                      storageLists
}

// storageLists are the ConfigMap LISTs (pages) the API server served from
// its watch cache and from etcd, and the objects it fetched from either to
// serve them (apiserver_storage_list_total,
// apiserver_storage_list_fetched_objects_total). An exact resourceVersion
// is served from the watch cache's snapshots while it holds one
// (Kubernetes 1.34's ListFromCacheSnapshot), else from etcd.
type storageLists struct {
	fromCache, fromEtcd int
	fetched             int
}

// storageLists reads the ConfigMap LISTs the API server has served so far.
func (e *Env) storageLists(ctx context.Context) (storageLists, error) {
	var l storageLists
	body, err := e.kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return l, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	for _, m := range []struct {
		name, storage string
		into          *int
	}{
		{"apiserver_storage_list_total", "watchcache", &l.fromCache},
		{"apiserver_storage_list_total", "etcd", &l.fromEtcd},
		{"apiserver_storage_list_fetched_objects_total", "", &l.fetched},
	} {
		matches := []string{`resource="configmaps"`}
		if m.storage != "" {
			matches = append(matches, `storage="`+m.storage+`"`)
		}
		// Not found: nothing served from there yet.
		v, _, err := sumMetric(body, m.name, matches...)
		if err != nil {
			return l, err
		}
		*m.into = int(v)
	}
	return l, nil
}

// storageListsSince is the LISTs the API server has served since before.
func (e *Env) storageListsSince(ctx context.Context, before storageLists) (storageLists, error) {
	now, err := e.storageLists(ctx)
	return storageLists{fromCache: now.fromCache - before.fromCache, fromEtcd: now.fromEtcd - before.fromEtcd, fetched: now.fetched - before.fetched}, err
}

// checkSize is the measurements at one size: the checks' and the LISTs'.
type checkSize struct {
	objects       int        // the checks digested (their log lines say), which every LIST listed too
	checks, lists []cpuSpent // run by run
	// waited is, per check, the time its CPU window was open before the
	// check started (the margin and the interval's jitter): CPU spent
	// waiting, which the check's figures include.
	waited []time.Duration
	// idleAPIServer and idleHub are the CPU time per second each used
	// while the hub waited between checks: what the waits above cost.
	idleAPIServer, idleHub []float64
	late                   int // checks not measured: the harness saw the previous one end too late
}

// checkProfiles are the files for CPU profiles of one check: the hub's and
// the API server's.
type checkProfiles struct{ hub, apiServer string }

// consistencyCheckScenario tops the cluster's ConfigMaps up to each of
// o.CheckObjects in turn and measures a hub's checks of them, then the
// LISTs, and deletes the ConfigMaps it created.
func consistencyCheckScenario(ctx context.Context, e *Env, o *Options, r *Report) error {
	if err := e.createNamespace(ctx, checkNamespace); err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(hubReadConfig(e.rest))
	if err != nil {
		return err
	}
	// Every ConfigMap of the cluster is checked: the feed watches all
	// namespaces. Those of earlier scenarios count towards each size.
	others, err := listConfigMaps(ctx, kube, "", o.CheckPageSize)
	if err != nil {
		return fmt.Errorf("counting the cluster's ConfigMaps: %w", err)
	}
	largest := slices.Max(o.CheckObjects)
	created := 0
	var sizes []checkSize
	for _, n := range o.CheckObjects {
		if want := n - others; want > created {
			start := time.Now()
			if err := e.createConfigMaps(ctx, checkNamespace, created, want); err != nil {
				return err
			}
			o.logf("consistency check: created %d ConfigMaps in %v (%d others in the cluster)", want-created, time.Since(start).Round(time.Millisecond), others)
			created = want
		}
		var profiles checkProfiles
		if n == largest {
			profiles.hub = o.profilePath(fmt.Sprintf("hub-cpu-consistency-check-%d.pb.gz", n))
			profiles.apiServer = o.profilePath(fmt.Sprintf("apiserver-cpu-consistency-check-%d.pb.gz", n))
		}
		size, err := e.checkSizeRun(ctx, o, kube, profiles)
		if err != nil {
			return fmt.Errorf("at %d objects: %w", n, err)
		}
		sizes = append(sizes, size)
	}
	start := time.Now()
	if err := e.deleteConfigMaps(ctx, checkNamespace, 0, created); err != nil {
		return err
	}
	o.logf("consistency check: deleted %d ConfigMaps in %v", created, time.Since(start).Round(time.Millisecond))
	r.Sections = append(r.Sections, checkSection(o, sizes, others))
	return nil
}

// lateChecksTolerated is how many checks more than o.Runs the harness may
// see too late before it gives up.
const lateChecksTolerated = 5

// checkSizeRun starts a hub whose only feed, the ConfigMaps', checks
// itself every o.CheckInterval, measures o.Runs of its checks after an
// unmeasured first one, and profiles more when profiles are set;
// then, with the hub stopped, o.Runs LISTs.
func (e *Env) checkSizeRun(ctx context.Context, o *Options, kube kubernetes.Interface, profiles checkProfiles) (checkSize, error) {
	var res checkSize
	metricsAddr, err := freeAddr()
	if err != nil {
		return res, err
	}
	// The consistent check's line is at debug; JSON, for the harness to
	// read. Nothing else logs at debug on a quiet hub.
	hub, err := e.startHub(ctx, "--retain", "configmaps", "--consistency-check-interval", o.CheckInterval.String(),
		"--consistency-check-page-size", strconv.Itoa(o.CheckPageSize),
		"--metrics-listen", metricsAddr, "--log-level", "debug", "--log-format", "json")
	if err != nil {
		return res, err
	}
	defer hub.stop()
	checks := &checkLog{hub: hub, metricsAddr: metricsAddr}
	// The first check, after the informer's sync: unmeasured.
	last, err := checks.next(ctx)
	if err != nil {
		return res, err
	}
	res.objects = last.Objects
	lateOnce := func() error {
		// A loaded machine reads a line late now and then (the smoke
		// run's half-second interval shares two cores with the whole
		// suite): each costs an interval, not the measurement.
		if res.late++; res.late > o.Runs+lateChecksTolerated {
			return fmt.Errorf("the harness saw %d checks end too late to open the next one's window", res.late)
		}
		return nil
	}
	for len(res.checks) < o.Runs {
		c, next, err := e.measureCheck(ctx, o, hub, checks, last)
		if err != nil {
			return res, err
		}
		last = next
		if c == nil {
			if err := lateOnce(); err != nil {
				return res, err
			}
			continue
		}
		if next.Objects != res.objects {
			return res, fmt.Errorf("a check digested %d objects, the first %d: the cluster was not quiet", next.Objects, res.objects)
		}
		o.logf("consistency check run %d, %d objects: %v; hub CPU %v, API server %v, etcd %v (window open %v before the check); %d pages, %d objects fetched",
			len(res.checks)+1, res.objects, c.wall, c.hub, c.apiServer, c.etcd, c.waited.Round(time.Millisecond), c.lists.fromCache+c.lists.fromEtcd, c.lists.fetched)
		res.checks, res.waited = append(res.checks, c.cpuSpent), append(res.waited, c.waited)
		res.idleAPIServer, res.idleHub = append(res.idleAPIServer, c.idle.apiServer), append(res.idleHub, c.idle.hub)
	}
	if profiles != (checkProfiles{}) {
		took := time.Duration(spreadBy(res.checks, func(c cpuSpent) float64 { return float64(c.wall) }).Max)
		for {
			profiled, next, err := e.profileChecks(ctx, o, hub, checks, last, took, profiles)
			if err != nil {
				return res, err
			}
			if profiled {
				break
			}
			if err := lateOnce(); err != nil {
				return res, err
			}
			last = next
		}
	}
	hub.stop()

	for run := range o.Runs {
		l, err := e.measureList(ctx, kube, res.objects, o.CheckPageSize)
		if err != nil {
			return res, fmt.Errorf("LIST %d: %w", run+1, err)
		}
		o.logf("consistency check's baseline LIST %d, %d objects: %v; API server CPU %v, etcd %v; %d pages, %d objects fetched",
			run+1, res.objects, l.wall, l.apiServer, l.etcd, l.lists.fromCache+l.lists.fromEtcd, l.lists.fetched)
		res.lists = append(res.lists, l)
	}
	return res, nil
}

// idleRates are CPU time per second of wall time, in milliseconds.
type idleRates struct{ apiServer, hub float64 }

// checkWindow is the time from just before a check can start to its line.
type checkWindow struct {
	opened time.Time
	idle   idleRates    // over the wait before it opened
	before storageLists // the API server's, before it opened
}

// openWindow waits, after the check whose line is last, until the next
// can start at the earliest (last's line plus the interval) less
// checkWindowMargin, measuring what the wait costs on the way. It returns
// false when the harness saw last's line too late to open the window
// before the next check could start.
func (e *Env) openWindow(ctx context.Context, o *Options, hub *hubProcess, last checkLine) (checkWindow, bool, error) {
	var w checkWindow
	var err error
	// Before the window: the hub lists nothing while it waits, so that
	// the pages the API server serves from here to the next line are the
	// check's.
	if w.before, err = e.storageLists(ctx); err != nil {
		return w, false, err
	}
	// The hub's next wait starts after it logged last's line.
	open := last.Time.Add(o.CheckInterval - checkWindowMargin)
	idleStart := time.Now()
	if !idleStart.Before(open) {
		return w, false, nil
	}
	meters, err := e.startMeters(hub)
	if err != nil {
		return w, false, err
	}
	if err := waitUntil(ctx, open); err != nil {
		return w, false, err
	}
	used, err := meters.used()
	if err != nil {
		return w, false, err
	}
	w.opened = time.Now()
	idleFor := w.opened.Sub(idleStart).Seconds()
	w.idle = idleRates{apiServer: ms1(used.apiServer) / idleFor, hub: ms1(used.hub) / idleFor}
	return w, true, nil
}

// measuredCheck is one check's measurements.
type measuredCheck struct {
	cpuSpent
	// waited is how long the window was open before the check started.
	waited time.Duration
	idle   idleRates
}

// measureCheck measures the check after the one whose line is last: the
// processes' CPU over its window, and its wall time from its line (the hub
// times it). It returns the check's line, and nil measurements when the
// harness saw last's line too late to open the window in time.
func (e *Env) measureCheck(ctx context.Context, o *Options, hub *hubProcess, checks *checkLog, last checkLine) (*measuredCheck, checkLine, error) {
	w, ok, err := e.openWindow(ctx, o, hub, last)
	if err != nil || !ok {
		if err == nil {
			last, err = checks.next(ctx)
		}
		return nil, last, err
	}
	meters, err := e.startMeters(hub)
	if err != nil {
		return nil, last, err
	}
	// The line first, then the CPU, then what checking the check costs.
	next, err := checks.nextLine(ctx)
	if err != nil {
		return nil, next, err
	}
	c := &measuredCheck{idle: w.idle}
	if c.cpuSpent, err = meters.used(); err != nil {
		return nil, next, err
	}
	if err := checks.verify(ctx, next); err != nil {
		return nil, next, err
	}
	if c.lists, err = e.storageListsSince(ctx, w.before); err != nil {
		return nil, next, err
	}
	c.wall = next.Took
	// The hub logs its time in milliseconds: the check started at most a
	// millisecond before this says.
	c.waited = max(0, next.Time.Add(-next.Took).Sub(w.opened))
	return c, next, nil
}

// profiledChecks is how many checks the profiles cover: one check's
// profile at 100 samples a second holds too few samples of its smaller
// parts (the digests) to tell them apart.
const profiledChecks = 3

// profileChecks profiles the hub and the API server over the
// profiledChecks checks after the one whose line is last, from the first's
// window's opening for long enough that checks of took and the waits
// between them end within it (rounded up to whole seconds, so that the
// next may have begun). It returns false, and the next check's line, when
// the harness saw last's line too late to open the window.
func (e *Env) profileChecks(ctx context.Context, o *Options, hub *hubProcess, checks *checkLog, last checkLine, took time.Duration, profiles checkProfiles) (bool, checkLine, error) {
	_, ok, err := e.openWindow(ctx, o, hub, last)
	if err != nil || !ok {
		if err == nil {
			last, err = checks.next(ctx)
		}
		return false, last, err
	}
	d := checkWindowMargin + o.CheckInterval/5 + profiledChecks*took + (profiledChecks-1)*o.CheckInterval*6/5
	hubDone := hub.cpuProfile(ctx, d, profiles.hub)
	apiServerDone := e.apiServerCPUProfile(ctx, d, profiles.apiServer)
	var next checkLine
	for range profiledChecks {
		if next, err = checks.next(ctx); err != nil {
			return false, next, err
		}
	}
	if err := hubDone(); err != nil {
		return false, next, fmt.Errorf("profiling the hub: %w", err)
	}
	if err := apiServerDone(); err != nil {
		return false, next, fmt.Errorf("profiling the API server: %w", err)
	}
	return true, next, nil
}

// apiServerCPUProfile starts a CPU profile of the API server lasting d,
// rounded up to whole seconds, saved into file, as hubProcess.cpuProfile
// does the hub's.
func (e *Env) apiServerCPUProfile(ctx context.Context, d time.Duration, file string) func() error {
	done := make(chan error, 1)
	seconds := max(1, int(math.Ceil(d.Seconds())))
	go func() {
		body, err := e.kube.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
			Param("seconds", strconv.Itoa(seconds)).DoRaw(ctx)
		if err == nil {
			err = os.WriteFile(file, body, 0o644)
		}
		done <- err
	}()
	return func() error { return <-done }
}

// waitUntil waits until t, or until ctx ends.
func waitUntil(ctx context.Context, t time.Time) error {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// measureList reads every ConfigMap in pages of pageSize at exactly
// the current resourceVersion, as the check reads its position, and
// returns its wall time and the control plane's CPU time over it. It must
// find objects.
func (e *Env) measureList(ctx context.Context, kube kubernetes.Interface, objects, pageSize int) (cpuSpent, error) {
	var res cpuSpent
	rv, err := e.resourceVersion(ctx, "configmaps")
	if err != nil {
		return res, err
	}
	before, err := e.storageLists(ctx)
	if err != nil {
		return res, err
	}
	meters, err := e.startMeters(nil)
	if err != nil {
		return res, err
	}
	start := time.Now()
	n, err := listConfigMaps(ctx, kube, rv, pageSize)
	if err != nil {
		return res, err
	}
	wall := time.Since(start)
	if res, err = meters.used(); err != nil {
		return res, err
	}
	res.wall = wall
	if res.lists, err = e.storageListsSince(ctx, before); err != nil {
		return res, err
	}
	if n != objects {
		return res, fmt.Errorf("listed %d ConfigMaps, the checks %d", n, objects)
	}
	return res, nil
}

// listConfigMaps lists every ConfigMap with client-go, pageSize a page,
// at exactly rv, or, when rv is "", at the newest (a consistent
// read); it returns how many it listed.
func listConfigMaps(ctx context.Context, kube kubernetes.Interface, rv string, pageSize int) (int, error) {
	opts := metav1.ListOptions{Limit: int64(pageSize)}
	if rv != "" {
		opts.ResourceVersion, opts.ResourceVersionMatch = rv, metav1.ResourceVersionMatchExact
	}
	n := 0
	for {
		list, err := kube.CoreV1().ConfigMaps("").List(ctx, opts)
		if err != nil {
			return n, err
		}
		if rv != "" && list.ResourceVersion != rv {
			return n, fmt.Errorf("asked for resourceVersion %s, the API server answered at %s", rv, list.ResourceVersion)
		}
		n += len(list.Items)
		if list.Continue == "" {
			return n, nil
		}
		// A continue token holds the version; the API server refuses both.
		opts = metav1.ListOptions{Limit: int64(pageSize), Continue: list.Continue}
	}
}

// hubReadConfig is a copy of cfg that reads as the hub does: JSON, where
// client-go's typed clients prefer protobuf for built-in types, and
// uncompressed (the hub's --upstream-compression is off), where client-go
// asks for gzip, which the API server then spends CPU on.
func hubReadConfig(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.ContentType = "application/json"
	cfg.AcceptContentTypes = "application/json"
	cfg.DisableCompression = true
	return cfg
}

// controlPlaneMeters measure the CPU time of the API server, etcd and,
// when there is one, the hub.
type controlPlaneMeters struct {
	apiServer, etcd, hub cpuMeter
	withHub              bool
}

func (e *Env) startMeters(hub *hubProcess) (controlPlaneMeters, error) {
	var m controlPlaneMeters
	var err error
	if m.apiServer, err = startCPUMeter(e.apiserverPID); err != nil {
		return m, err
	}
	if m.etcd, err = startCPUMeter(e.etcdPID); err != nil {
		return m, err
	}
	if hub != nil {
		m.withHub = true
		if m.hub, err = startCPUMeter(hub.pid()); err != nil {
			return m, err
		}
	}
	return m, nil
}

// used returns the CPU time each process has used since the meters
// started; the rest is left for the caller.
func (m controlPlaneMeters) used() (cpuSpent, error) {
	var s cpuSpent
	var err error
	if s.apiServer, err = m.apiServer.used(); err != nil {
		return s, err
	}
	if s.etcd, err = m.etcd.used(); err != nil {
		return s, err
	}
	if m.withHub {
		if s.hub, err = m.hub.used(); err != nil {
			return s, err
		}
	}
	return s, nil
}

// checkLine is a consistency check's log line, as the hub writes it with
// --log-format json.
type checkLine struct {
	Time    time.Time     `json:"time"` // when it was written, in milliseconds
	Message string        `json:"msg"`
	Objects int           `json:"objects"` // the hub's, when consistent
	Took    time.Duration `json:"took"`    // slog writes a duration in nanoseconds
	Error   string        `json:"error"`
}

// consistentLine is the line of a check that found the cache consistent.
const consistentLine = "the cache matches the API server"

// checkLog reads the hub's consistency checks from its log, in order, and
// checks each against its metric.
type checkLog struct {
	hub         *hubProcess
	metricsAddr string
	read        int // bytes of the hub's output read
	seen        int // check lines read
}

// next waits for the hub's next check line, and verifies it.
func (l *checkLog) next(ctx context.Context) (checkLine, error) {
	c, err := l.nextLine(ctx)
	if err != nil {
		return c, err
	}
	return c, l.verify(ctx, c)
}

// verify checks that the check of line c, the last read, came out
// consistent: its line says so, and informerhub_consistency_checks_total,
// which the hub counts just before it logs the line, has counted every
// check so far as consistent.
func (l *checkLog) verify(ctx context.Context, c checkLine) error {
	body, err := hubMetrics(ctx, l.metricsAddr)
	if err != nil {
		return err
	}
	for _, result := range []string{"consistent", "diverged", "compacted", "failed"} {
		n, _, err := sumMetric(body, "informerhub_consistency_checks_total", `resource="configmaps"`, `result="`+result+`"`)
		if err != nil {
			return err
		}
		want := 0
		if result == "consistent" {
			want = l.seen
		}
		if int(n) != want {
			return fmt.Errorf("after %d checks, informerhub_consistency_checks_total{result=%q} is %.0f, not %d (the last check's line: %q %s)",
				l.seen, result, n, want, c.Message, c.Error)
		}
	}
	if c.Message != consistentLine {
		return fmt.Errorf("check %d: %s %s", l.seen, c.Message, c.Error)
	}
	return nil
}

// nextLine polls the hub's output for the next line with a took field
// (a check's), for checkTimeout at most.
func (l *checkLog) nextLine(ctx context.Context) (checkLine, error) {
	deadline := time.Now().Add(checkTimeout)
	for {
		out := l.hub.output.String()
		for {
			end := strings.IndexByte(out[l.read:], '\n')
			if end < 0 {
				break
			}
			line := out[l.read : l.read+end]
			l.read += end + 1
			if !strings.Contains(line, `"took":`) {
				continue
			}
			var c checkLine
			if err := json.Unmarshal([]byte(line), &c); err != nil {
				return c, fmt.Errorf("the hub's check line %q: %w", line, err)
			}
			l.seen++
			return c, nil
		}
		if time.Now().After(deadline) {
			return checkLine{}, fmt.Errorf("no consistency check %d within %v: %w", l.seen+1, checkTimeout, errTimeout)
		}
		t := time.NewTimer(checkLogPoll)
		select {
		case <-t.C:
		case <-l.hub.exited:
			t.Stop()
			return checkLine{}, fmt.Errorf("the hub exited:\n%s", out)
		case <-ctx.Done():
			t.Stop()
			return checkLine{}, ctx.Err()
		}
	}
}

// checkSection lays the sizes' measurements out for the report.
func checkSection(o *Options, sizes []checkSize, others int) Section {
	table := Table{Header: []string{"objects", "outcome", "check: wall", "check: hub CPU", "hub CPU per object",
		"check: API server CPU", "check: etcd CPU", "LIST: wall", "LIST: API server CPU", "LIST: etcd CPU",
		"check ÷ LIST: API server CPU", "check ÷ LIST: wall"}}
	var notes []string
	for _, s := range sizes {
		checks := func(f func(cpuSpent) time.Duration) Spread {
			return spreadBy(s.checks, func(c cpuSpent) float64 { return ms1(f(c)) })
		}
		lists := func(f func(cpuSpent) time.Duration) Spread {
			return spreadBy(s.lists, func(c cpuSpent) float64 { return ms1(f(c)) })
		}
		wall := func(c cpuSpent) time.Duration { return c.wall }
		hub := func(c cpuSpent) time.Duration { return c.hub }
		apiServer := func(c cpuSpent) time.Duration { return c.apiServer }
		etcd := func(c cpuSpent) time.Duration { return c.etcd }
		perObject := spreadBy(s.checks, func(c cpuSpent) float64 { return 1e6 * c.hub.Seconds() / float64(s.objects) })
		ratioOf := func(f func(cpuSpent) time.Duration) Spread {
			return runRatios(s.checks, s.lists, func(c cpuSpent) float64 { return float64(f(c)) })
		}
		table.Rows = append(table.Rows, []string{fmt.Sprint(s.objects), fmt.Sprintf("consistent (%d of %d)", len(s.checks), len(s.checks)),
			checks(wall).format(ms), checks(hub).format(ms), perObject.format(perObjectCPU),
			checks(apiServer).format(ms), checks(etcd).format(ms),
			lists(wall).format(ms), lists(apiServer).format(ms), lists(etcd).format(ms),
			ratioOf(apiServer).format(ratio), ratioOf(wall).format(ratio)})
		waited := spreadBy(s.waited, func(d time.Duration) float64 { return ms1(d) })
		notes = append(notes, fmt.Sprintf("At %d objects the CPU windows opened %s before their checks started; while the hub waited, the API server used %s of CPU and the hub %s. %s; %s.%s",
			s.objects, waited.format(ms), spreadOf(s.idleAPIServer).format(msPerSecond), spreadOf(s.idleHub).format(msPerSecond),
			servedFrom("A check's", s.checks, s.objects), servedFrom("a LIST's", s.lists, s.objects), lateNote(s.late)))
	}
	largest := slices.Max(o.CheckObjects)
	return Section{
		Title: "17. Consistency check",
		Intro: fmt.Sprintf(`One consistency check of the hub's cache against the API server (informerhub/internal/feed/check.go), against a LIST of the same objects. ConfigMaps shaped as scenario 4's, in namespace %s, top the cluster's ConfigMaps up to each size (%d were there before, the control plane's and earlier scenarios'; the check covers every namespace). A hub with only the ConfigMaps feed (--retain configmaps; --kube-api-qps 1000, as every hub here) checks every %v (each wait jittered up to a fifth longer): it clones its state, digests it per namespace (SHA-256 per object), LISTs every ConfigMap at exactly its resourceVersion in pages of %d, JSON and uncompressed, and compares. The first check after the informer's sync is not measured; then %d are. A check's wall time is the hub's own, from its log line (took: from the clone to the comparison). Its CPU time is each process's (/proc/<pid>/task/*/schedstat) from %v before the check can start at the earliest (the previous check's line plus the interval) to its line: the window includes that wait and the interval's jitter, not subtracted (the notes say how long, and what waiting costs). Each check's line and informerhub_consistency_checks_total must say consistent, or the scenario fails. Then, with the hub stopped, the harness makes %d LISTs with client-go's typed client, as the hub reads (JSON, uncompressed), %d a page at exactly the current resourceVersion (resourceVersionMatch=Exact, then continue tokens), as the check asks; the LIST's wall time includes client-go decoding typed objects in the harness, as the check's includes the hub decoding its own. Ratios are run by run. The hub's and the API server's CPU profiles over %d more checks at %d objects, and the waits between them, are hub-cpu-consistency-check-%d.pb.gz and apiserver-cpu-consistency-check-%d.pb.gz.`,
			checkNamespace, others, o.CheckInterval, o.CheckPageSize, o.Runs, checkWindowMargin, o.Runs, o.CheckPageSize, profiledChecks, largest, largest, largest),
		Tables: []Table{table},
		Notes:  notes,
	}
}

// servedFrom says where the API server served runs' pages from, and how
// many objects it fetched per object listed to serve them.
func servedFrom(what string, runs []cpuSpent, objects int) string {
	of := func(f func(storageLists) int) Spread {
		return spreadBy(runs, func(c cpuSpent) float64 { return float64(f(c.lists)) })
	}
	fetched := spreadBy(runs, func(c cpuSpent) float64 { return float64(c.lists.fetched) / float64(objects) })
	return fmt.Sprintf("%s pages came from the API server's watch cache: %s, from etcd: %s; it fetched %s objects per object listed",
		what, of(func(l storageLists) int { return l.fromCache }).format(count), of(func(l storageLists) int { return l.fromEtcd }).format(count),
		fetched.format(func(v float64) string { return fmt.Sprintf("%.1f", v) }))
}

// lateNote says how many checks were not measured because the harness saw
// the one before end too late.
func lateNote(late int) string {
	if late == 0 {
		return ""
	}
	return fmt.Sprintf(" %d checks were not measured: the harness saw the previous check's line too late to open their window in time.", late)
}

// perObjectCPU formats CPU time per object, in microseconds.
func perObjectCPU(v float64) string { return fmt.Sprintf("%.2f µs", v) }

// msPerSecond formats CPU time per second of wall time.
func msPerSecond(v float64) string { return fmt.Sprintf("%.1f ms/s", v) }
