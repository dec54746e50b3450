package bench

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
)

// Sides of a fan-out run.
const (
	sideDirect = "direct" // N watches straight from the API server
	sideHub    = "hub"    // N subscriptions to the hub
	sideNone   = "none"   // no clients: the cost of the writes alone
)

// fanOutResult is one fan-out run.
type fanOutResult struct {
	writes     int
	deliveries int64         // changes received, over all clients
	elapsed    time.Duration // from the first write to the last receipt
	cpu        time.Duration // of the side's processes over elapsed
	p50, p99   time.Duration // write to receipt, over all receipts
	watches    int           // the API server's open ConfigMap watches, mid-run
	short      int           // clients that did not receive every change in time
	// serverWrites are the write system calls over elapsed of the process
	// that serves the clients: the API server's, or the hub's.
	serverWrites int64
}

// slowClients are hub subscribers beside a run's clients, whose latency is
// not measured: stalled ones, each on a connection of its own with a small
// window, never read; lagging ones read a quarter of the run's rate.
type slowClients struct{ stalled, lagging int }

// fanOut measures one run: clients receive every change the writer makes at
// rate for o.FanOutDuration, on one side, beside slow hub subscribers.
func (e *Env) fanOut(ctx context.Context, o *Options, side string, hub *hubProcess, w *writer, clients int, slow slowClients, rate float64) (fanOutResult, error) {
	var res fanOutResult
	ctx, cancel := context.WithCancel(ctx)
	var rs receivers
	defer rs.stopped()
	defer cancel()

	conns := min(clients, o.FanOutConnections)
	switch side {
	case sideDirect:
		list, err := e.kube.CoreV1().ConfigMaps(w.ns).List(ctx, metav1.ListOptions{Limit: 1})
		if err != nil {
			return res, err
		}
		hcs, err := apiTransports(e.rest, conns)
		if err != nil {
			return res, err
		}
		defer closeTransports(hcs)
		u := e.configMapsURL(w.ns, url.Values{"watch": {"true"}, "resourceVersion": {list.ResourceVersion}})
		err = forEach(ctx, clients, 32, func(_ context.Context, i int) error {
			// The watch lives on ctx, not on forEach's, which ends first.
			body, err := openAPIWatch(ctx, hcs[i%conns], u)
			if err != nil {
				return err
			}
			r := newReceiver()
			rs.add(r)
			go receiveAPI(body, r)
			return nil
		})
		if err != nil {
			return res, fmt.Errorf("opening %d watches: %w", clients, err)
		}
	case sideHub:
		cs, err := hubConns(hub.addr, conns, 0)
		if err != nil {
			return res, err
		}
		defer closeConns(cs)
		req := &informerhubv1.WatchRequest{Selector: &informerhubv1.ResourceSelector{Version: "v1", Resource: "configmaps", Namespace: w.ns}}
		if err := openHubReceivers(ctx, &rs, cs, req, clients); err != nil {
			return res, fmt.Errorf("opening %d subscriptions: %w", clients, err)
		}
		if slow.stalled > 0 {
			// The smallest window gRPC allows: a stalled client holds the
			// hub's sender after about 15 changes.
			stalledConns, err := hubConns(hub.addr, slow.stalled, 64<<10)
			if err != nil {
				return res, err
			}
			defer closeConns(stalledConns)
			for _, c := range stalledConns {
				if _, err := openHubWatch(ctx, c, req); err != nil {
					return res, err
				}
			}
		}
		if slow.lagging > 0 {
			laggingConns, err := hubConns(hub.addr, slow.lagging, 64<<10)
			if err != nil {
				return res, err
			}
			defer closeConns(laggingConns)
			var lagging sync.WaitGroup
			defer lagging.Wait() // after cancel, which ends their streams
			defer cancel()
			for _, c := range laggingConns {
				stream, err := openHubWatch(ctx, c, req)
				if err != nil {
					return res, err
				}
				lagging.Go(func() { readPaced(stream, rate/4) })
			}
		}
	}

	// Warm up: every client has its stream open and has received a change.
	if err := w.touch(ctx, 0); err != nil {
		return res, err
	}
	if short := rs.waitFor(1, time.Now().Add(time.Minute)); short > 0 {
		return res, fmt.Errorf("%d of %d clients did not receive the first change: %w", short, clients, errTimeout)
	}

	cpu0, err := e.sideCPU(side, hub)
	if err != nil {
		return res, err
	}
	writes0, err := e.serverWrites(side, hub)
	if err != nil {
		return res, err
	}
	start := time.Now()
	writes := inBackground(func() (int, error) { return w.run(ctx, rate, o.FanOutDuration) })
	// Mid-run, every client's watch is open.
	if res.watches, err = e.clientWatches(ctx); err != nil {
		return res, err
	}
	wrote := <-writes
	if wrote.err != nil {
		return res, fmt.Errorf("writing: %w", wrote.err)
	}
	res.writes = wrote.n
	res.short = rs.waitFor(int64(1+res.writes), time.Now().Add(o.FanOutDrain))
	res.elapsed = time.Since(start)
	cpu1, err := e.sideCPU(side, hub)
	if err != nil {
		return res, err
	}
	res.cpu = cpu1 - cpu0
	writes1, err := e.serverWrites(side, hub)
	if err != nil {
		return res, err
	}
	res.serverWrites = writes1 - writes0

	cancel()
	rs.stopped()
	var latencies []time.Duration
	for _, r := range rs.all {
		res.deliveries += r.received.Load() - 1
		latencies = append(latencies, r.latencies[1:]...) // not the warm-up change
	}
	res.p50, res.p99 = percentile(latencies, 50), percentile(latencies, 99)
	return res, nil
}

// sideCPU is the CPU time of a side's processes: the control plane, and the
// hub on the hub's side.
func (e *Env) sideCPU(side string, hub *hubProcess) (time.Duration, error) {
	cp, err := e.controlPlaneCPU()
	if err != nil || side != sideHub {
		return cp, err
	}
	h, err := cpuTime(hub.pid())
	return cp + h, err
}

// fanOutTargetClients is the client count the fan-out targets are at.
const fanOutTargetClients = 1000

// serverWrites is how many write system calls the process serving a side's
// clients has made: the hub on the hub's side, else the API server.
func (e *Env) serverWrites(side string, hub *hubProcess) (int64, error) {
	if side == sideHub {
		return writeCalls(hub.pid())
	}
	return writeCalls(e.apiserverPID)
}

// fanOutScenario compares the sides at each client count. Runs alternate
// the sides, so that drift in the machine's speed affects both alike.
func fanOutScenario(ctx context.Context, e *Env, o *Options, r *Report) error {
	const ns = "bench-fanout"
	if err := e.createNamespace(ctx, ns); err != nil {
		return err
	}
	w, err := newWriter(ctx, e, ns, o.FanOutObjects, o.ObjectBytes)
	if err != nil {
		return err
	}
	hub, err := e.startHub(ctx)
	if err != nil {
		return err
	}
	defer hub.stop()

	type key struct {
		side    string
		clients int
	}
	results := map[key][]fanOutResult{}
	largest := o.FanOutClients[len(o.FanOutClients)-1]
	// The targets are at fanOutTargetClients, when measured; else at the
	// largest count.
	target := largest
	if slices.Contains(o.FanOutClients, fanOutTargetClients) {
		target = fanOutTargetClients
	}
	rateAt := func(n int) float64 { return min(o.FanOutRate, o.FanOutMaxDelivery/float64(n)) }
	// The writes alone (no clients) run at each rate some client count's
	// run at, once per rate (the first count's of that rate), so that what
	// the clients cost beyond the writes follows (the delivery target).
	var alone []int
	for _, n := range o.FanOutClients {
		if !slices.ContainsFunc(alone, func(a int) bool { return rateAt(a) == rateAt(n) }) {
			alone = append(alone, n)
		}
	}
	// writesAlone are the runs of the writes alone at n's rate, if any.
	writesAlone := func(n int) []fanOutResult {
		for _, a := range alone {
			if rateAt(a) == rateAt(n) {
				return results[key{sideNone, a}]
			}
		}
		return nil
	}
	for run := range o.Runs {
		for _, n := range o.FanOutClients {
			rate := rateAt(n)
			sides := []string{sideDirect, sideHub}
			if run%2 == 1 {
				sides = []string{sideHub, sideDirect}
			}
			if slices.Contains(alone, n) {
				sides = append(sides, sideNone)
			}
			for _, side := range sides {
				clients := n
				if side == sideNone {
					clients = 0
				}
				var profiled func() error
				if side == sideHub && n == largest && run == 0 && o.ProfileDir != "" {
					profiled = hub.cpuProfile(ctx, o.FanOutDuration, o.profilePath(fmt.Sprintf("hub-cpu-fanout-%d.pb.gz", n)))
				}
				res, err := e.fanOut(ctx, o, side, hub, w, clients, slowClients{}, rate)
				if err != nil {
					return fmt.Errorf("%s side, %d clients: %w", side, n, err)
				}
				if profiled != nil {
					if err := profiled(); err != nil {
						return fmt.Errorf("profiling the hub: %w", err)
					}
				}
				o.logf("fan-out run %d: %s, %d clients, %.0f changes/s: %d deliveries in %v, CPU %v, p50 %v, p99 %v, %d watches, %d short",
					run+1, side, clients, rate, res.deliveries, res.elapsed.Round(time.Millisecond), res.cpu, res.p50, res.p99, res.watches, res.short)
				results[key{side, n}] = append(results[key{side, n}], res)
			}
		}
	}

	spreadBy := func(rs []fanOutResult, f func(fanOutResult) float64) Spread {
		v := make([]float64, len(rs))
		for i, x := range rs {
			v[i] = f(x)
		}
		return spreadOf(v)
	}
	table := Table{Header: []string{"clients", "changes/s", "side", "delivered events/s", "CPU s (side's processes)", "CPU ms per 1k deliveries", "write calls per delivery", "p50", "p99", "API server watches", "clients short"}}
	ratios := Table{Header: []string{"clients", "hub CPU ÷ direct CPU", "hub ÷ direct CPU per delivery, writes alone subtracted", "hub p99 ÷ direct p99"}}
	var cpuPlot, p99Plot, watchPlot [2]Series
	for _, n := range alone {
		baseCPU := spreadBy(results[key{sideNone, n}], func(x fanOutResult) float64 { return x.cpu.Seconds() })
		table.Rows = append(table.Rows, []string{"0", fmt.Sprintf("%.0f", rateAt(n)), "no clients (writes alone)", "–", baseCPU.format(seconds), "–", "–", "–", "–", "–", "–"})
	}
	var atTarget struct{ cpuRatio, deliveryRatio, p99Ratio Spread }
	for _, n := range o.FanOutClients {
		rate := rateAt(n)
		for i, side := range []string{sideDirect, sideHub} {
			rs := results[key{side, n}]
			cpu := spreadBy(rs, func(x fanOutResult) float64 { return x.cpu.Seconds() })
			p99 := spreadBy(rs, func(x fanOutResult) float64 { return ms1(x.p99) })
			watches := spreadBy(rs, func(x fanOutResult) float64 { return float64(x.watches) })
			table.Rows = append(table.Rows, []string{
				fmt.Sprint(n), fmt.Sprintf("%.0f", rate), side,
				spreadBy(rs, func(x fanOutResult) float64 { return float64(x.deliveries) / x.elapsed.Seconds() }).format(perSecond),
				cpu.format(seconds),
				spreadBy(rs, func(x fanOutResult) float64 { return 1e6 * x.cpu.Seconds() / float64(max(x.deliveries, 1)) }).format(ms),
				spreadBy(rs, func(x fanOutResult) float64 { return float64(x.serverWrites) / float64(max(x.deliveries, 1)) }).format(fraction),
				spreadBy(rs, func(x fanOutResult) float64 { return ms1(x.p50) }).format(ms),
				p99.format(ms), watches.format(count),
				spreadBy(rs, func(x fanOutResult) float64 { return float64(x.short) }).format(count),
			})
			cpuPlot[i].Name, p99Plot[i].Name, watchPlot[i].Name = side, side, side
			cpuPlot[i].Points = append(cpuPlot[i].Points, point(float64(n), cpu))
			p99Plot[i].Points = append(p99Plot[i].Points, point(float64(n), p99))
			watchPlot[i].Points = append(watchPlot[i].Points, point(float64(n), watches))
		}
		direct, hubRuns := results[key{sideDirect, n}], results[key{sideHub, n}]
		var cpuRatio, p99Ratio []float64
		for i := range direct {
			cpuRatio = append(cpuRatio, hubRuns[i].cpu.Seconds()/direct[i].cpu.Seconds())
			p99Ratio = append(p99Ratio, float64(hubRuns[i].p99)/float64(direct[i].p99))
		}
		deliveryRatio, perDelivery := Spread{}, "–"
		if base := writesAlone(n); base != nil {
			deliveryRatio = clientCPURatios(hubRuns, direct, base)
		}
		if deliveryRatio.Runs > 0 {
			perDelivery = deliveryRatio.format(ratio)
		}
		ratios.Rows = append(ratios.Rows, []string{fmt.Sprint(n), spreadOf(cpuRatio).format(ratio), perDelivery, spreadOf(p99Ratio).format(ratio)})
		if n == target {
			atTarget.cpuRatio, atTarget.deliveryRatio, atTarget.p99Ratio = spreadOf(cpuRatio), deliveryRatio, spreadOf(p99Ratio)
		}
	}
	deliveryMeasured := atTarget.deliveryRatio.format(ratio) + " (writes alone subtracted)"
	if atTarget.deliveryRatio.Runs == 0 {
		deliveryMeasured = "– (the direct side's CPU beyond the writes' was too small to measure)"
	}
	r.Sections = append(r.Sections, Section{
		Title: "1. Fan-out against the API server",
		Intro: fmt.Sprintf(`N clients receive every change of ConfigMaps of about %s in one namespace, made at a steady rate by a writer (merge patches, %d objects in turn): once as N watches straight from the API server, once as N hub subscriptions. Each run writes for %v after every client has received a first change. CPU is the user and system time, from /proc, of the side's processes over the run: kube-apiserver and etcd; kube-apiserver, etcd and the hub. Latency is from the writer's timestamp, taken just before its request, to the client's receipt. Write calls are the write system calls of the process serving the clients (the API server, or the hub), from /proc/<pid>/io, over the deliveries. The API server's watch count is its apiserver_longrunning_requests metric for ConfigMap WATCHes, read mid-run. Clients spread over at most %d connections per side; they read raw bytes (HTTP chunks of JSON lines; gRPC messages left undecoded) and only find the timestamp, so the harness costs both sides the same. The change rate drops where N × rate would exceed %.0f deliveries/s, which is what the harness's clients can take on this machine beside both servers. The writes alone, with no clients, run at each rate a client count runs at.`,
			byteSize(float64(o.ObjectBytes)), o.FanOutObjects, o.FanOutDuration, o.FanOutConnections, o.FanOutMaxDelivery),
		Tables: []Table{table, ratios},
		Plots: []Plot{
			{File: "fanout-cpu.png", Title: "CPU seconds of each side's processes per run", X: "clients", Y: "CPU s", LogX: true, Series: cpuPlot[:]},
			{File: "fanout-p99.png", Title: "p99 latency, write to receipt", X: "clients", Y: "ms", LogX: true, Series: p99Plot[:]},
			{File: "fanout-watches.png", Title: "API server ConfigMap watches", X: "clients", Y: "watches", LogX: true, LogY: true, Series: watchPlot[:]},
		},
		Notes: []string{`"CPU per delivery, writes alone subtracted" is, on each side, the side's CPU less that of the writes alone at the same rate, divided by the side's deliveries: what delivering costs the side's processes beyond serving the writes (on the hub's side, the hub's own CPU and the API server's for the hub's one watch). The hub's is divided by the direct side's run by run, each run less the writes alone of the same run (or less their median, should their runs not pair up). The writes alone run for as long as the writing; the sides' runs also include the wait for their last deliveries, whose idle CPU is not subtracted.`},
	})
	r.Targets = append(r.Targets,
		Target{Name: fmt.Sprintf("End to end at %d clients: CPU", target), Goal: "hub side ≤ 1/5 of direct", Measured: atTarget.cpuRatio.format(ratio), Met: atTarget.cpuRatio.Median <= 0.2},
		Target{Name: fmt.Sprintf("End to end at %d clients: p99", target), Goal: "hub p99 ≤ direct p99", Measured: atTarget.p99Ratio.format(ratio), Met: atTarget.p99Ratio.Median <= 1},
		Target{
			Name:     fmt.Sprintf("Delivery at %d subscribers: fan-out CPU per delivery", target),
			Goal:     "≤ 0.35× the direct watches', p99 no worse",
			Measured: fmt.Sprintf("%s; p99 %s", deliveryMeasured, atTarget.p99Ratio.format(ratio)),
			Met:      atTarget.deliveryRatio.Runs > 0 && atTarget.deliveryRatio.Median <= 0.35 && atTarget.p99Ratio.Median <= 1,
		},
	)
	return nil
}

// clientCPURatios is the spread over runs of the hub side's CPU per delivery
// over the direct side's, each side's CPU less the writes alone's at the
// same rate: what the side's clients cost its processes beyond the writes.
// Runs pair up by their order, the writes alone's too; should the writes
// alone have run another number of times, their median is subtracted from
// every run instead. A run whose direct side used no more CPU than the
// writes alone (in runs too short for /proc's clock ticks) has no ratio;
// with none left, the spread has no runs.
func clientCPURatios(hub, direct, alone []fanOutResult) Spread {
	median := spreadBy(alone, func(x fanOutResult) float64 { return x.cpu.Seconds() }).Median
	perDelivery := func(x fanOutResult, run int) float64 {
		base := median
		if len(alone) == len(hub) && len(alone) == len(direct) {
			base = alone[run].cpu.Seconds()
		}
		return (x.cpu.Seconds() - base) / float64(max(x.deliveries, 1))
	}
	var v []float64
	for i := range min(len(hub), len(direct)) {
		if d := perDelivery(direct[i], i); d > 0 {
			v = append(v, perDelivery(hub[i], i)/d)
		}
	}
	if len(v) == 0 {
		return Spread{}
	}
	return spreadOf(v)
}

// slowSubscriberScenario measures healthy subscribers' latency beside 0, 1
// and 10% stalled ones.
func slowSubscriberScenario(ctx context.Context, e *Env, o *Options, r *Report) error {
	const ns = "bench-slow"
	if err := e.createNamespace(ctx, ns); err != nil {
		return err
	}
	w, err := newWriter(ctx, e, ns, o.FanOutObjects, o.ObjectBytes)
	if err != nil {
		return err
	}
	tenth := max(1, o.SlowHealthy/10)
	configs := []slowClients{{}, {stalled: 1}, {stalled: tenth}, {lagging: tenth}}
	rate := min(o.FanOutRate, o.FanOutMaxDelivery/float64(o.SlowHealthy))
	p99s := make([][]float64, len(configs))
	p50s := make([][]float64, len(configs))
	for run := range o.Runs {
		for i, slow := range configs {
			// A hub of its own per run: slow subscribers of one run
			// leave nothing behind for the next.
			hub, err := e.startHub(ctx)
			if err != nil {
				return err
			}
			res, err := e.fanOut(ctx, o, sideHub, hub, w, o.SlowHealthy, slow, rate)
			hub.stop()
			if err != nil {
				return fmt.Errorf("%+v: %w", slow, err)
			}
			o.logf("slow subscribers run %d: %+v: p50 %v, p99 %v, %d short", run+1, slow, res.p50, res.p99, res.short)
			if res.short > 0 {
				return fmt.Errorf("%+v: %d healthy subscribers missed changes", slow, res.short)
			}
			p50s[i], p99s[i] = append(p50s[i], ms1(res.p50)), append(p99s[i], ms1(res.p99))
		}
	}
	table := Table{Header: []string{"stalled subscribers", "lagging subscribers", "healthy subscribers", "p50", "p99", "p99 change against none slow"}}
	var series Series
	series.Name = "healthy p99"
	var worst, lagging Spread
	for i, slow := range configs {
		var change []float64
		for run := range p99s[i] {
			change = append(change, p99s[i][run]/p99s[0][run]-1)
		}
		c := spreadOf(change)
		switch {
		case slow.lagging > 0:
			lagging = c
		case i == 1 || i > 1 && c.Median > worst.Median:
			worst = c
		}
		table.Rows = append(table.Rows, []string{fmt.Sprint(slow.stalled), fmt.Sprint(slow.lagging), fmt.Sprint(o.SlowHealthy),
			spreadOf(p50s[i]).format(ms), spreadOf(p99s[i]).format(ms), c.format(percent)})
		if slow.lagging == 0 {
			series.Points = append(series.Points, point(float64(slow.stalled), spreadOf(p99s[i])))
		}
	}
	r.Sections = append(r.Sections, Section{
		Title: "3. Slow-subscriber tax",
		Intro: fmt.Sprintf(`%d healthy hub subscribers receive %.0f changes/s for %v, as in scenario 1, beside slow subscribers, each on a connection of its own with gRPC's smallest flow-control window (64 KiB). A stalled one never reads: it blocks its own sender after about 15 changes, its queue of 1000 then fills, and it falls behind (it leaves the live subscribers, and would read on from the history); the hub ends it only once it has read nothing for --max-send-stall or the history has moved past it. A lagging one reads a quarter of the changes per second: it falls behind too, and reads from the history at its pace for the rest of the run. Each configuration runs on a fresh hub; the change is per run against that run's p99 with none slow.`,
			o.SlowHealthy, rate, o.FanOutDuration),
		Tables: []Table{table},
		Plots:  []Plot{{File: "slow-p99.png", Title: "Healthy subscribers' p99 beside stalled ones", X: "stalled subscribers", Y: "ms", Series: []Series{series}}},
	})
	r.Targets = append(r.Targets, Target{Name: "Lagging subscribers served from the history", Goal: "≤ 10% change in healthy p99",
		Measured: lagging.format(percent), Met: lagging.Median <= 0.10})
	r.Targets = append(r.Targets, Target{Name: "Slow subscribers", Goal: "≤ 10% change in healthy p99", Measured: worst.format(percent), Met: worst.Median <= 0.10})
	return nil
}

func ms1(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
