package bench

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
)

// The selective scenarios measure subscribers that each select a small part
// of a resource type, so that each change concerns one of them (one object
// each; node agents), and projection: the costs that the hub's indexed
// dispatch and its query features are meant to keep down. This file holds
// what they share: a changer that knows each client's share of the changes,
// and a run that measures one side.

// quietHub are the flags of the selective scenarios' hubs: no bookmarks
// during a run. A quiet subscriber (one object's, one node's) otherwise gets
// a bookmark a minute, a cost per subscriber and minute rather than per
// change, which the runs would count against the changes.
var quietHub = []string{"--bookmark-interval", "1h"}

// changer makes changes of targets 0 .. targets-1 in turn, at a steady
// rate, and counts each target's changes, from which each client's share
// follows. change stamps the target's object with the time it is sent
// (sentAt, in Unix nanoseconds), from which receivers measure latency.
type changer struct {
	targets int
	change  func(ctx context.Context, target int) error
	workers int
	next    int     // the target of the next change
	counts  []int64 // changes made of each target
}

func newChanger(targets int, change func(ctx context.Context, target int) error) *changer {
	return &changer{targets: targets, change: change, workers: 8, counts: make([]int64, targets)}
}

// run makes changes at rate per second for d, and returns how many.
func (c *changer) run(ctx context.Context, rate float64, d time.Duration) (int, error) {
	next := c.next
	n, err := paced(ctx, c.workers, rate, d, func(ctx context.Context, i int) error {
		return c.change(ctx, (next+i)%c.targets)
	})
	for i := range n {
		c.counts[(next+i)%c.targets]++
	}
	c.next = (next + n) % c.targets
	return n, err
}

// total is the number of changes made so far.
func (c *changer) total() int64 {
	var t int64
	for _, n := range c.counts {
		t += n
	}
	return t
}

// selection is what each client of a selective run watches, on either
// side, and which of the changer's changes it must receive.
type selection struct {
	clients  int
	resource string // of the API server: the direct watches' (all namespaces) and the watch count's
	// hub is client i's request to the hub.
	hub func(i int) *informerhubv1.WatchRequest
	// query is client i's direct watch's selectors; nil when the scenario
	// has no direct side.
	query func(i int) url.Values
	// expected is how many of the changes made so far client i receives.
	expected func(i int) int64
}

// selectiveResult is one selective run.
type selectiveResult struct {
	changes    int
	deliveries int64         // changes received, over all clients
	bytes      int64         // of the messages (gRPC) or lines (HTTP) of those deliveries
	elapsed    time.Duration // from the first change to the last receipt
	cpu        time.Duration // of the side's processes over elapsed
	hubCPU     time.Duration // of the hub alone, on the hub's side, from its threads' times (cpuMeter)
	p50, p99   time.Duration // change to receipt, over all receipts
	watches    int           // the API server's client watches of the resource, mid-run
	short      int           // clients that did not receive their share in time
}

// selectiveRun measures one run on one side. On the hub's side a hub of
// its own runs (quietHub). The clients open their watches; a warm-up of
// o.WarmUp's changes reaches each its share; then ch makes changes at rate
// for o.FanOutDuration while the side's CPU is measured, until every client
// has its share or o.FanOutDrain has passed. ownWatches are the API
// server's watches of the resource before any client's. profile, when set,
// is a file for a CPU profile of the hub over the measured changes.
func (e *Env) selectiveRun(ctx context.Context, o *Options, side string, sel selection, ch *changer, rate float64, ownWatches int, profile string) (selectiveResult, error) {
	var res selectiveResult
	ctx, cancel := context.WithCancel(ctx)
	recv := make([]*receiver, sel.clients)
	defer func() {
		cancel()
		for _, r := range recv {
			if r != nil {
				<-r.done
			}
		}
	}()
	var hub *hubProcess
	if side == sideHub {
		var err error
		if hub, err = e.startHub(ctx, quietHub...); err != nil {
			return res, err
		}
		defer hub.stop()
	}

	conns := min(sel.clients, o.FanOutConnections)
	switch {
	case sel.clients == 0:
	case side == sideDirect:
		rv, err := e.resourceVersion(ctx, sel.resource)
		if err != nil {
			return res, err
		}
		hcs, err := apiTransports(e.rest, conns)
		if err != nil {
			return res, err
		}
		defer closeTransports(hcs)
		err = forEach(ctx, sel.clients, 32, func(_ context.Context, i int) error {
			q := sel.query(i)
			q.Set("watch", "true")
			q.Set("resourceVersion", rv)
			// The watch lives on ctx, not on forEach's, which ends first.
			body, err := openAPIWatch(ctx, hcs[i%conns], e.resourceURL(sel.resource, "", q))
			if err != nil {
				return err
			}
			recv[i] = newReceiver()
			go receiveAPI(body, recv[i])
			return nil
		})
		if err != nil {
			return res, fmt.Errorf("opening %d watches: %w", sel.clients, err)
		}
	case side == sideHub:
		cs, err := hubConns(hub.addr, conns, 0)
		if err != nil {
			return res, err
		}
		defer closeConns(cs)
		// The first subscription waits for the hub's informer to sync.
		err = forEach(ctx, sel.clients, 32, func(_ context.Context, i int) error {
			stream, err := openHubWatch(ctx, cs[i%conns], sel.hub(i))
			if err != nil {
				return err
			}
			recv[i] = newReceiver()
			go receiveHub(stream, recv[i])
			return nil
		})
		if err != nil {
			return res, fmt.Errorf("opening %d subscriptions: %w", sel.clients, err)
		}
	}

	// Warm up: the clients' streams carry changes, each has its share.
	if _, err := ch.run(ctx, rate, o.WarmUp); err != nil {
		return res, fmt.Errorf("warming up: %w", err)
	}
	if short := waitEach(recv, sel.expected, time.Now().Add(o.FanOutDrain)); short > 0 {
		return res, fmt.Errorf("%d of %d clients did not receive their share of the warm-up's changes: %w", short, sel.clients, errTimeout)
	}
	warmCount, warmBytes := make([]int64, len(recv)), make([]int64, len(recv))
	for i, r := range recv {
		warmCount[i], warmBytes[i] = r.received.Load(), r.bytes.Load()
	}

	cpu0, err := e.sideCPU(side, hub)
	if err != nil {
		return res, err
	}
	var hubMeter cpuMeter
	if hub != nil {
		if hubMeter, err = startCPUMeter(hub.pid()); err != nil {
			return res, err
		}
	}
	var profiled func() error
	if hub != nil && profile != "" {
		profiled = hub.cpuProfile(ctx, o.FanOutDuration, profile)
	}
	start := time.Now()
	writes := inBackground(func() (int, error) { return ch.run(ctx, rate, o.FanOutDuration) })
	if sel.clients > 0 {
		// Mid-run, every client's watch is open.
		n, err := e.watchCount(ctx, sel.resource)
		if err != nil {
			return res, err
		}
		res.watches = n - ownWatches
	}
	wrote := <-writes
	if wrote.err != nil {
		return res, fmt.Errorf("changing: %w", wrote.err)
	}
	res.changes = wrote.n
	res.short = waitEach(recv, sel.expected, time.Now().Add(o.FanOutDrain))
	res.elapsed = time.Since(start)
	cpu1, err := e.sideCPU(side, hub)
	if err != nil {
		return res, err
	}
	res.cpu = cpu1 - cpu0
	if hub != nil {
		if res.hubCPU, err = hubMeter.used(); err != nil {
			return res, err
		}
	}
	if profiled != nil {
		if err := profiled(); err != nil {
			return res, fmt.Errorf("profiling the hub: %w", err)
		}
	}

	cancel()
	var latencies []time.Duration
	for i, r := range recv {
		<-r.done
		res.deliveries += r.received.Load() - warmCount[i]
		res.bytes += r.bytes.Load() - warmBytes[i]
		latencies = append(latencies, r.latencies[warmCount[i]:]...)
	}
	res.p50, res.p99 = percentile(latencies, 50), percentile(latencies, 99)
	return res, nil
}

// waitEach waits until each receiver i has expected(i) changes or has
// stopped, or until deadline. It returns how many fell short.
func waitEach(recv []*receiver, expected func(i int) int64, deadline time.Time) int {
	timeout := time.NewTimer(time.Until(deadline))
	defer timeout.Stop()
	for i, r := range recv {
		if r.wait(expected(i), timeout.C) != nil {
			break
		}
	}
	short := 0
	for i, r := range recv {
		if r.received.Load() < expected(i) {
			short++
		}
	}
	return short
}

// resourceVersion is the API server's current resourceVersion of a
// resource type, read from a LIST of one object in all namespaces.
func (e *Env) resourceVersion(ctx context.Context, resource string) (string, error) {
	obj, err := e.kube.CoreV1().RESTClient().Get().Resource(resource).
		VersionedParams(&metav1.ListOptions{Limit: 1}, metav1.ParameterCodec).Do(ctx).Get()
	if err != nil {
		return "", err
	}
	list, err := meta.ListAccessor(obj)
	if err != nil {
		return "", err
	}
	return list.GetResourceVersion(), nil
}

// resourceURL is the URL of a core resource type on the API server, in a
// namespace or ("") all, with query parameters.
func (e *Env) resourceURL(resource, namespace string, query url.Values) string {
	r := e.kube.CoreV1().RESTClient().Get().Resource(resource)
	if namespace != "" {
		r = r.Namespace(namespace)
	}
	u := r.URL()
	u.RawQuery = query.Encode()
	return u.String()
}

// perChange formats CPU time per change, in microseconds.
func perChange(v float64) string { return fmt.Sprintf("%.0f µs", v) }

// stamp is the time a change is sent, as the receivers read it.
func stamp() string { return strconv.FormatInt(time.Now().UnixNano(), 10) }
