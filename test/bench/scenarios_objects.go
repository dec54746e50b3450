package bench

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
)

// objectsScenarios create o.SnapshotObjects ConfigMaps once, then measure
// snapshots, memory and startup on them.
func objectsScenarios(ctx context.Context, e *Env, o *Options, r *Report) error {
	if err := e.createObjects(ctx, o, o.SnapshotObjects); err != nil {
		return err
	}
	if err := e.createNamespace(ctx, idleNamespace); err != nil {
		return err
	}
	for _, scenario := range []func(context.Context, *Env, *Options, *Report) error{snapshotScenario, memoryScenario, startupScenario} {
		if err := scenario(ctx, e, o, r); err != nil {
			return err
		}
	}
	return nil
}

// snapshotScenario compares a full and a 1% label-selected snapshot with the
// API server's LIST of the same selection.
func snapshotScenario(ctx context.Context, e *Env, o *Options, r *Report) error {
	hub, conn, stopHub, err := e.startHubDialed(ctx)
	if err != nil {
		return err
	}
	defer stopHub()
	hcs, err := apiTransports(e.rest, 1)
	if err != nil {
		return err
	}
	defer closeTransports(hcs)

	type measured struct{ hubFirst, hubTotal, apiFirst, apiTotal, speedup []float64 }
	selections := []struct{ name, selector string }{{"full", ""}, {"1% by label (" + selectedLabel + ")", selectedLabel}}
	results := make([]measured, len(selections))
	var full pagedRead
	// One unmeasured round first: the hub's informer syncs, and builds the
	// label index on the first selection that can use one.
	for round := -1; round < o.Runs; round++ {
		for i, sel := range selections {
			// A read of a few milliseconds varies by as much again with
			// what else the two shared cores run (the API server's
			// collection after the full LIST before it, above all): each
			// side reads the selection a few times in a row, once the hub
			// and the control plane are quiet, and the median read counts.
			reads := 1
			if sel.selector != "" {
				reads = selectedReads
			}
			if err := quiet(ctx, hub.pid(), e.apiserverPID, e.etcdPID); err != nil {
				return err
			}
			h, err := medianRead(reads, func() (pagedRead, error) { return hubSnapshot(ctx, conn, sel.selector, nil) })
			if err != nil {
				return fmt.Errorf("hub snapshot %s: %w", sel.name, err)
			}
			if err := quiet(ctx, hub.pid(), e.apiserverPID, e.etcdPID); err != nil {
				return err
			}
			a, err := medianRead(reads, func() (pagedRead, error) { return e.apiList(ctx, hcs[0], sel.selector) })
			if err != nil {
				return fmt.Errorf("API LIST %s: %w", sel.name, err)
			}
			if h.objects != a.objects {
				return fmt.Errorf("%s: the hub's snapshot has %d objects, the API server's LIST %d", sel.name, h.objects, a.objects)
			}
			if round < 0 {
				if sel.selector == "" {
					full = h
				}
				continue
			}
			o.logf("snapshot run %d, %s: hub first page %v, all %v; API first page %v, all %v (%d objects)",
				round+1, sel.name, h.firstPage, h.total, a.firstPage, a.total, h.objects)
			m := &results[i]
			m.hubFirst, m.hubTotal = append(m.hubFirst, ms1(h.firstPage)), append(m.hubTotal, ms1(h.total))
			m.apiFirst, m.apiTotal = append(m.apiFirst, ms1(a.firstPage)), append(m.apiTotal, ms1(a.total))
			m.speedup = append(m.speedup, float64(a.total)/float64(h.total))
		}
	}

	// The memory a snapshot holds while its client reads slowly: read the
	// first page, then stop reading while the hub's heap is measured.
	before, err := hub.memory(ctx)
	if err != nil {
		return err
	}
	var during memStats
	_, err = hubSnapshot(ctx, conn, "", func() error {
		during, err = hub.memory(ctx)
		return err
	})
	if err != nil {
		return err
	}
	extra := float64(int64(during.HeapAlloc) - int64(before.HeapAlloc))

	table := Table{Header: []string{"selection", "objects", "hub: first page", "hub: all", "API server LIST: first page", "API server LIST: all", "API ÷ hub (all)"}}
	var bars [2]Series
	bars[0].Name, bars[1].Name = "hub", "API server LIST"
	var selected Spread
	for i, sel := range selections {
		m := results[i]
		n := full.objects
		if sel.selector != "" {
			n = (full.objects + 99) / 100
		}
		speedup := spreadOf(m.speedup)
		if sel.selector != "" {
			selected = speedup
		}
		table.Rows = append(table.Rows, []string{sel.name, fmt.Sprint(n),
			spreadOf(m.hubFirst).format(ms), spreadOf(m.hubTotal).format(ms),
			spreadOf(m.apiFirst).format(ms), spreadOf(m.apiTotal).format(ms), speedup.format(ratio)})
		bars[0].Points = append(bars[0].Points, point(float64(i+1), spreadOf(m.hubTotal)))
		bars[1].Points = append(bars[1].Points, point(float64(i+1), spreadOf(m.apiTotal)))
	}
	r.Sections = append(r.Sections, Section{
		Title: "4. Snapshot",
		Intro: fmt.Sprintf(`%d ConfigMaps of about %s each (as served, with managedFields) are cached by the hub. A Snapshot is read whole, in pages of 500, and compared with the API server's LIST of the same selection in pages of 500 (limit and continue, as client-go's pager reads; a consistent LIST, which Kubernetes %s serves from its watch cache). Each side reads once the hub's, the API server's and etcd's processes are quiet (under a tenth of a core over 20 ms, or after 2 s); the 1%% selection is read %d times in a row by each side, and the read of median time counts. Both clients read raw bytes and count objects without decoding them; the counts must agree. One unmeasured round comes first: the hub's informer syncs, and the first selection on a label builds the hub's index of that label.`,
			full.objects, byteSize(full.perObject()), "v1.37", selectedReads),
		Tables: []Table{table, {
			Caption: "Memory a snapshot holds while its client reads slowly (hub heap after a collection, with the first page read and the rest waiting):",
			Header:  []string{"whole snapshot", "held by the hub mid-snapshot", "share"},
			Rows:    [][]string{{byteSize(float64(full.bytes)), byteSize(extra), percent(extra / float64(full.bytes))}},
		}},
		Plots: []Plot{{File: "snapshot.png", Title: "Snapshot and LIST time (1 = full, 2 = 1% by label)", X: "selection", Y: "ms", LogY: true, Series: bars[:]}},
	})
	r.Targets = append(r.Targets,
		Target{Name: "Snapshot of 1% by label", Goal: "≥ 10× faster than the API server's LIST", Measured: selected.format(ratio), Met: selected.Median >= 10},
		Target{Name: "Snapshot memory", Goal: "O(page), not O(list)", Measured: fmt.Sprintf("%s held of a %s snapshot", byteSize(extra), byteSize(float64(full.bytes))), Met: extra < float64(full.bytes)/10},
	)
	return nil
}

// selectedReads is how many reads of the 1% selection each side makes per
// run of the snapshot scenario; the median counts.
const selectedReads = 5

// medianRead makes n reads, and returns the one of median total time.
func medianRead(n int, read func() (pagedRead, error)) (pagedRead, error) {
	all := make([]pagedRead, 0, n)
	for range n {
		r, err := read()
		if err != nil {
			return r, err
		}
		all = append(all, r)
	}
	slices.SortFunc(all, func(a, b pagedRead) int { return cmp.Compare(a.total, b.total) })
	return all[n/2], nil
}

// memoryScenario measures the hub's heap per cached object, with and
// without managedFields, and per idle subscriber, with the API server's
// watch count as subscribers grow.
func memoryScenario(ctx context.Context, e *Env, o *Options, r *Report) error {
	type objectMemory struct {
		perObject []float64
		jsonSize  float64
	}
	var variants [2]objectMemory
	var hub *hubProcess
	defer func() {
		if hub != nil {
			hub.stop()
		}
	}()
	for run := range o.Runs {
		for i, args := range [][]string{nil, {"--strip-managed-fields"}} {
			if hub != nil {
				hub.stop()
			}
			var err error
			if hub, err = e.startHub(ctx, args...); err != nil {
				return err
			}
			before, err := hub.memory(ctx)
			if err != nil {
				return err
			}
			conns, err := hubConns(hub.addr, 1, 0)
			if err != nil {
				return err
			}
			snap, err := hubSnapshot(ctx, conns[0], "", nil)
			closeConns(conns)
			if err != nil {
				return err
			}
			after, err := hub.memory(ctx)
			if err != nil {
				return err
			}
			perObject := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(snap.objects)
			o.logf("memory run %d, %v: %.0f bytes of heap per object (%d objects of %.0f bytes)", run+1, args, perObject, snap.objects, snap.perObject())
			variants[i].perObject = append(variants[i].perObject, perObject)
			variants[i].jsonSize = snap.perObject()
		}
	}
	if o.ProfileDir != "" {
		if err := hub.profile(ctx, "heap?gc=1", o.profilePath("hub-heap-objects.pb.gz")); err != nil {
			return err
		}
	}

	// Idle subscribers, on the last hub (managedFields stripped, objects
	// cached): memory and the API server's watches as they grow.
	base, err := hub.memory(ctx)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	maxSubs := o.IdleSubscribers[len(o.IdleSubscribers)-1]
	conns, err := hubConns(hub.addr, min(maxSubs, o.FanOutConnections), 0)
	if err != nil {
		return err
	}
	defer closeConns(conns)
	req := &informerhubv1.WatchRequest{Selector: &informerhubv1.ResourceSelector{Version: "v1", Resource: "configmaps", Namespace: idleNamespace}}
	table := Table{Header: []string{"idle subscribers", "hub heap + stacks", "per subscriber", "hub RSS", "API server ConfigMap watches"}}
	var watchSeries, memSeries Series
	watchSeries.Name, memSeries.Name = "API server watches", "bytes per subscriber"
	open, flat := 0, true
	var perSub, rssAt float64
	for _, n := range o.IdleSubscribers {
		err := forEach(ctx, n-open, 32, func(_ context.Context, i int) error {
			_, err := openHubWatch(ctx, conns[(open+i)%len(conns)], req)
			return err
		})
		if err != nil {
			return fmt.Errorf("opening %d idle subscribers: %w", n, err)
		}
		open = n
		m, err := hub.memory(ctx)
		if err != nil {
			return err
		}
		rss, err := residentBytes(hub.pid())
		if err != nil {
			return err
		}
		watches, err := e.clientWatches(ctx)
		if err != nil {
			return err
		}
		flat = flat && watches == 1
		grown := float64(int64(m.HeapAlloc+m.StackInuse) - int64(base.HeapAlloc+base.StackInuse))
		per := grown / float64(n)
		if n == maxSubs {
			perSub = per
		}
		if n == o.MemorySubscribers {
			rssAt = float64(rss)
		}
		o.logf("idle subscribers %d: %.0f bytes each, RSS %s, %d API server watches", n, per, byteSize(float64(rss)), watches)
		table.Rows = append(table.Rows, []string{fmt.Sprint(n), byteSize(float64(m.HeapAlloc + m.StackInuse)), byteSize(per), byteSize(float64(rss)), fmt.Sprint(watches)})
		watchSeries.Points = append(watchSeries.Points, Point{X: float64(n), Y: float64(watches), Lo: float64(watches), Hi: float64(watches)})
		memSeries.Points = append(memSeries.Points, Point{X: float64(n), Y: per, Lo: per, Hi: per})
	}

	full, stripped := spreadOf(variants[0].perObject), spreadOf(variants[1].perObject)
	r.Sections = append(r.Sections, Section{
		Title: "5. Memory",
		Intro: fmt.Sprintf(`The hub's heap (HeapAlloc after a forced collection, from its --debug-listen endpoints) before and after its informer caches the %d ConfigMaps of scenario 4, divided by their number; with managedFields kept, and stripped (--strip-managed-fields). Then, on the stripped hub, idle subscribers (Watch on an empty namespace) are opened over %d connections; "per subscriber" is the growth of heap and goroutine stacks over the hub with none, divided by their number.`,
			o.SnapshotObjects, min(maxSubs, o.FanOutConnections)),
		Tables: []Table{{
			Header: []string{"objects", "JSON per object", "hub heap per object"},
			Rows: [][]string{
				{"as served (managedFields kept)", byteSize(variants[0].jsonSize), full.format(byteSize)},
				{"managedFields stripped", byteSize(variants[1].jsonSize), stripped.format(byteSize)},
			},
		}, table},
		Plots: []Plot{{File: "idle-subscribers.png", Title: "Bytes per idle subscriber", X: "idle subscribers", Y: "bytes", LogX: true, Series: []Series{memSeries}}},
		Notes: []string{fmt.Sprintf("RSS of the hub with %d objects cached and %d idle subscribers: %s.", o.SnapshotObjects, o.MemorySubscribers, byteSize(rssAt))},
	})
	r.Targets = append(r.Targets,
		Target{Name: "Heap per cached ConfigMap, managedFields stripped", Goal: "≤ 2 KB", Measured: stripped.format(byteSize), Met: stripped.Median <= 2048},
		Target{Name: "Memory per idle subscriber", Goal: "≤ 16 KiB", Measured: byteSize(perSub), Met: perSub <= 16<<10},
		Target{Name: "Upstream watches", Goal: fmt.Sprintf("one per resource type, flat from 1 to %d subscribers", maxSubs), Measured: fmt.Sprintf("see the table: %v", flat), Met: flat},
	)
	return nil
}

// startupScenario measures the time from the hub process's start to its
// first snapshot page, which it serves once its informer has synced, against
// client-go's typed informer syncing the same objects over protobuf; then,
// in runs of their own, the hub's heap while it syncs against its heap
// once synced.
func startupScenario(ctx context.Context, e *Env, o *Options, r *Report) error {
	var hubTimes, fromRequest, informerTimes, ratios []float64
	for run := range o.Runs {
		hub, conn, stopHub, err := e.startHubDialed(ctx)
		if err != nil {
			return err
		}
		var synced, requested time.Duration
		request := time.Now()
		_, err = hubSnapshot(ctx, conn, selectedLabel, func() error {
			synced, requested = time.Since(hub.started), time.Since(request)
			return nil
		})
		stopHub()
		if err != nil {
			return err
		}
		informer, n, err := e.informerSync(ctx)
		if err != nil {
			return err
		}
		o.logf("startup run %d: hub %v (%v from the first request), client-go informer %v (%d objects)", run+1, synced, requested, informer, n)
		hubTimes, fromRequest, informerTimes = append(hubTimes, ms1(synced)), append(fromRequest, ms1(requested)), append(informerTimes, ms1(informer))
		ratios = append(ratios, float64(requested)/float64(informer))
	}

	// Where the hub's time goes while it syncs, in a run of its own: a CPU
	// profile from the first request until well after the first page.
	if file := o.profilePath("hub-cpu-startup.pb.gz"); file != "" {
		if err := e.profileStartup(ctx, file); err != nil {
			return fmt.Errorf("profiling the start-up: %w", err)
		}
	}

	// The heap, in runs of their own: sampling it stops the hub's world
	// for a moment each time, which the times above should not include.
	var peaks, peakLives, steadies, heapRatios, liveRatios, peakRSS []float64
	for run := range o.Runs {
		m, err := e.syncMemory(ctx, heapSampleInterval)
		if err != nil {
			return fmt.Errorf("the heap while syncing: %w", err)
		}
		o.logf("startup memory run %d: peak heap %s while syncing (%d samples; live %s), %s once synced, peak RSS %s",
			run+1, byteSize(float64(m.peak)), m.samples, byteSize(float64(m.peakLive)), byteSize(float64(m.steady)), byteSize(float64(m.peakRSS)))
		peaks, peakLives, steadies, peakRSS = append(peaks, float64(m.peak)), append(peakLives, float64(m.peakLive)), append(steadies, float64(m.steady)), append(peakRSS, float64(m.peakRSS))
		heapRatios = append(heapRatios, float64(m.peak)/float64(m.steady))
		liveRatios = append(liveRatios, float64(m.peakLive)/float64(m.steady))
	}

	// What the API server's own streams of the objects cost a reader that
	// only reads their bytes: the floor for any client, in each encoding.
	var jsonStream, protobufStream, hubOverJSON []float64
	for run := range o.Runs {
		j, err := e.watchListRead(ctx, "application/json")
		if err != nil {
			return err
		}
		p, err := e.watchListRead(ctx, "application/vnd.kubernetes.protobuf")
		if err != nil {
			return err
		}
		o.logf("startup run %d: the API server's watch-list stream read raw: JSON %v, protobuf %v", run+1, j, p)
		jsonStream, protobufStream = append(jsonStream, ms1(j)), append(protobufStream, ms1(p))
		hubOverJSON = append(hubOverJSON, fromRequest[run]/ms1(j))
	}
	startRatio, heapRatio, liveRatio := spreadOf(ratios), spreadOf(heapRatios), spreadOf(liveRatios)
	r.Sections = append(r.Sections, Section{
		Title: "6. Startup",
		Intro: fmt.Sprintf(`From the start of the hub's process to the first page of a Snapshot, which the hub serves once its informer has synced the %d ConfigMaps (the informer starts on the first request); against client-go's own typed informer (the shared informer factory's, reading protobuf, application/vnd.kubernetes.protobuf, as Kubernetes' controllers do), in the harness's process, from its start to HasSynced, on the same objects. The hub reads JSON from the API server. The hub's time from its process's start includes the process's start-up (waiting until the API server answers, then serving) and the first discovery of ConfigMaps; the time from the first request is the informer's own. A run of its own, on a fresh hub, profiles the hub's CPU from its first request for 10 s (hub-cpu-startup.pb.gz in the results' pprof directory).

The heap is measured in runs of its own, as many, on a fresh hub each: from the first request until the first page of the snapshot arrives, the harness reads the hub's HeapAlloc (from /debug/vars, without a collection first: garbage not yet collected counts, as it occupies memory) every %v and at the first page, and keeps the greatest; once the whole snapshot has been read, it reads HeapAlloc after a forced collection, the steady heap. The peak is sampled, so it can under-read the true peak by what the heap grows and shrinks between two samples. HeapAlloc counts the garbage a collection has yet to take, up to the collector's goal (twice the heap it last found live, at GOGC=100); the live heap (runtime/metrics /gc/heap/live:bytes, the hub's heapLive expvar) is what the last collection found in use, which is what the hub holds. The hub's peak RSS (VmHWM from /proc, exact) is beside them.

The floor: a reader in the harness's process opens the API server's own watch-list stream of the same objects (sendInitialEvents=true) and reads its bytes, decoding nothing, until the bookmark that ends the initial events, in JSON (what the hub reads, to keep the API server's JSON for its clients) and in protobuf (what the typed informer reads).`,
			o.SnapshotObjects, heapSampleInterval),
		Tables: []Table{{
			Header: []string{"hub: process start to synced", "hub: first request to synced", "client-go typed informer (protobuf): start to synced", "hub (from the request) ÷ informer"},
			Rows:   [][]string{{spreadOf(hubTimes).format(ms), spreadOf(fromRequest).format(ms), spreadOf(informerTimes).format(ms), startRatio.format(ratio)}},
		}, {
			Caption: "The API server's watch-list stream of the objects, read raw (the floor for any client):",
			Header:  []string{"JSON", "protobuf", "hub (from the request) ÷ the JSON stream"},
			Rows:    [][]string{{spreadOf(jsonStream).format(ms), spreadOf(protobufStream).format(ms), spreadOf(hubOverJSON).format(ratio)}},
		}, {
			Caption: fmt.Sprintf("The hub's heap while syncing %d objects, and once synced:", o.SnapshotObjects),
			Header:  []string{fmt.Sprintf("peak live heap while syncing (sampled every %v)", heapSampleInterval), "peak HeapAlloc while syncing, garbage included", "steady heap after sync (after a collection)", "peak live ÷ steady", "peak HeapAlloc ÷ steady", "hub peak RSS (VmHWM)"},
			Rows:    [][]string{{spreadOf(peakLives).format(byteSize), spreadOf(peaks).format(byteSize), spreadOf(steadies).format(byteSize), liveRatio.format(ratio), heapRatio.format(ratio), spreadOf(peakRSS).format(byteSize)}},
		}},
	})
	r.Targets = append(r.Targets,
		Target{Name: fmt.Sprintf("Start-up at %d objects", o.SnapshotObjects), Goal: "first request to synced ≤ 1.0× the client-go typed informer (protobuf)",
			Measured: fmt.Sprintf("%s; %s the API server's JSON stream read raw", startRatio.format(ratio), spreadOf(hubOverJSON).format(ratio)), Met: startRatio.Median <= 1},
		Target{Name: fmt.Sprintf("Peak heap while syncing %d objects", o.SnapshotObjects), Goal: "≤ 1.5× the steady heap after sync",
			Measured: fmt.Sprintf("live heap %s (sampled); HeapAlloc, garbage included, %s", liveRatio.format(ratio), heapRatio.format(ratio)), Met: liveRatio.Median <= 1.5},
	)
	return nil
}

// profileStartup starts a hub and profiles its CPU from its first
// request, a Snapshot of selectedLabel's objects, for startupProfileLength
// (the sync took 2–7 s in make bench's runs), into file.
func (e *Env) profileStartup(ctx context.Context, file string) error {
	hub, conn, stopHub, err := e.startHubDialed(ctx)
	if err != nil {
		return err
	}
	defer stopHub()
	profiled := hub.cpuProfile(ctx, startupProfileLength, file)
	_, err = hubSnapshot(ctx, conn, selectedLabel, nil)
	return errors.Join(err, profiled())
}

const startupProfileLength = 10 * time.Second

// heapSampleInterval is how often the hub's heap is read while it syncs.
const heapSampleInterval = 20 * time.Millisecond

// syncMemory is the hub's memory while its informer syncs, and after.
type syncMemory struct {
	peak     uint64 // the greatest HeapAlloc sampled, garbage included
	peakLive uint64 // the greatest live heap sampled (as its last collection found it)
	samples  int
	steady   uint64 // HeapAlloc after a collection, once synced
	peakRSS  int64  // the process's VmHWM, once synced
}

// syncMemory starts a hub and reads its heap (memoryNow, every interval)
// from its first request, a Snapshot of selectedLabel's objects, until the
// first page arrives, which the hub serves once its
// informer has synced; then, once the snapshot has been read, its heap
// after a collection and its peak RSS.
func (e *Env) syncMemory(ctx context.Context, interval time.Duration) (syncMemory, error) {
	var res syncMemory
	hub, conn, stopHub, err := e.startHubDialed(ctx)
	if err != nil {
		return res, err
	}
	defer stopHub()

	sample := func() error {
		m, err := hub.memoryNow(ctx)
		if err != nil {
			return err
		}
		res.peak = max(res.peak, m.HeapAlloc)
		res.peakLive = max(res.peakLive, m.HeapLive)
		res.samples++
		return nil
	}
	// The sampler runs until stop closes; finish stops it and returns its
	// error, once.
	stop, sampled := make(chan struct{}), make(chan error, 1)
	go func() {
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			if err := sample(); err != nil {
				sampled <- err
				return
			}
			select {
			case <-stop:
				sampled <- nil
				return
			case <-tick.C:
			}
		}
	}()
	finish := sync.OnceValue(func() error {
		close(stop)
		return <-sampled
	})
	defer finish()
	// The sampler's first reading is at once, as the request goes.
	_, err = hubSnapshot(ctx, conn, selectedLabel, func() error {
		if err := finish(); err != nil {
			return fmt.Errorf("sampling the hub's heap: %w", err)
		}
		return sample() // at the first page
	})
	if err != nil {
		return res, err
	}
	steady, err := hub.memory(ctx)
	if err != nil {
		return res, err
	}
	res.steady = steady.HeapAlloc
	if res.peakRSS, err = statusBytes(hub.pid(), "VmHWM"); err != nil {
		return res, err
	}
	return res, nil
}

// watchListRead opens the API server's watch-list stream of the objects'
// namespace in contentType and reads its bytes, decoding nothing, until
// the bookmark that ends the initial events; it returns how long that took.
func (e *Env) watchListRead(ctx context.Context, contentType string) (time.Duration, error) {
	hcs, err := apiTransports(e.rest, 1)
	if err != nil {
		return 0, err
	}
	defer closeTransports(hcs)
	u := e.kube.CoreV1().RESTClient().Get().Namespace(objectsNamespace).Resource("configmaps").URL()
	u.RawQuery = url.Values{"watch": {"true"}, "sendInitialEvents": {"true"}, "allowWatchBookmarks": {"true"}, "resourceVersionMatch": {"NotOlderThan"}}.Encode()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Accept", contentType)
	resp, err := hcs[0].Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("watch-list in %s: %s", contentType, resp.Status)
	}
	// The annotation's key is in the bookmark's bytes in either encoding;
	// tail keeps what a read may have cut of it.
	marker := []byte("k8s.io/initial-events-end")
	buf := make([]byte, 256<<10)
	var tail []byte
	for {
		n, err := resp.Body.Read(buf)
		chunk := append(tail, buf[:n]...)
		if bytes.Contains(chunk, marker) {
			return time.Since(start), nil
		}
		tail = append(tail[:0], chunk[max(0, len(chunk)-len(marker)):]...)
		if err != nil {
			return 0, fmt.Errorf("watch-list in %s ended before its initial events did: %w", contentType, err)
		}
	}
}
