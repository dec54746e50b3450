package bench

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/internal/benchusage"
)

const (
	// oneObjectNamespace holds the one-object-each scenario's ConfigMaps.
	oneObjectNamespace = "bench-one"
	// nodesNamespace holds the node agents' pods.
	nodesNamespace = "bench-nodes"
)

// projectedFields is the projection the projection scenario asks for.
var projectedFields = []string{"metadata.labels", "status.phase"}

// selectiveScenarios run the one-object-each scenario on ConfigMaps, then
// the node agents' and projection's on pods, and delete their objects
// after them, so that the later scenarios' API server and hubs (whose
// informers cache a resource type in every namespace) hold only their own.
func selectiveScenarios(ctx context.Context, e *Env, o *Options, r *Report) error {
	if err := oneObjectScenario(ctx, e, o, r); err != nil {
		return fmt.Errorf("one object each: %w", err)
	}
	pods, err := e.createNodePods(ctx, o)
	if err != nil {
		return err
	}
	if err := nodeAgentsScenario(ctx, e, o, r, pods); err != nil {
		return fmt.Errorf("node agents: %w", err)
	}
	if err := projectionScenario(ctx, e, o, r, pods); err != nil {
		return fmt.Errorf("projection: %w", err)
	}
	return pods.delete(ctx)
}

// oneObjectScenario measures N hub subscribers, each on metadata.name of a
// ConfigMap of its own, while changes go round the objects: each change
// concerns exactly one subscriber.
func oneObjectScenario(ctx context.Context, e *Env, o *Options, r *Report) error {
	const ns = oneObjectNamespace
	if err := e.createNamespace(ctx, ns); err != nil {
		return err
	}
	counts := o.SelectiveSubscribers
	smallest, largest := slices.Min(counts), slices.Max(counts)
	w, err := newWriter(ctx, e, ns, largest, o.ObjectBytes)
	if err != nil {
		return err
	}
	profile := fmt.Sprintf("hub-cpu-one-object-each-%d.pb.gz", largest)
	results := map[int][]selectiveResult{}
	for run := range o.Runs {
		for _, n := range counts {
			ch := newChanger(n, w.touch) // target i is object i
			sel := selection{
				clients:  n,
				resource: "configmaps",
				hub: func(i int) *informerhubv1.WatchRequest {
					return &informerhubv1.WatchRequest{Selector: &informerhubv1.ResourceSelector{
						Version: "v1", Resource: "configmaps", Namespace: ns, FieldSelector: "metadata.name=" + w.names[i]}}
				},
				expected: func(i int) int64 { return ch.counts[i] },
			}
			file := ""
			if run == 0 && n == largest {
				file = o.profilePath(profile)
			}
			res, err := e.selectiveRun(ctx, o, sideHub, sel, ch, o.FanOutRate, e.ownWatches, file)
			if err != nil {
				return fmt.Errorf("%d subscribers: %w", n, err)
			}
			o.logf("one object each run %d: %d subscribers: %d changes, hub CPU %v, side CPU %v, p50 %v, p99 %v, %d watches, %d short",
				run+1, n, res.changes, res.hubCPU, res.cpu, res.p50, res.p99, res.watches, res.short)
			results[n] = append(results[n], res)
		}
	}
	if err := e.kube.CoreV1().ConfigMaps(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		return err
	}

	table := Table{Header: []string{"subscribers", "changes/s", "hub CPU s", "hub CPU per change", "CPU per change: API server, etcd and hub", "p50", "p99", "API server ConfigMap watches", "clients short"}}
	ratios := Table{Header: []string{"subscribers", fmt.Sprintf("hub CPU per change ÷ at %d", smallest)}}
	series := Series{Name: "hub"}
	var worst Spread
	for _, n := range counts {
		rs := results[n]
		hubPerChange := spreadBy(rs, hubCPUPerChange)
		table.Rows = append(table.Rows, []string{
			fmt.Sprint(n), fmt.Sprintf("%.0f", o.FanOutRate),
			spreadBy(rs, func(x selectiveResult) float64 { return x.hubCPU.Seconds() }).format(seconds),
			hubPerChange.format(perChange),
			spreadBy(rs, sideCPUPerChange).format(perChange),
			spreadBy(rs, func(x selectiveResult) float64 { return ms1(x.p50) }).format(ms),
			spreadBy(rs, func(x selectiveResult) float64 { return ms1(x.p99) }).format(ms),
			spreadBy(rs, func(x selectiveResult) float64 { return float64(x.watches) }).format(count),
			spreadBy(rs, func(x selectiveResult) float64 { return float64(x.short) }).format(count),
		})
		series.Points = append(series.Points, point(float64(n), hubPerChange))
		if n == smallest {
			continue
		}
		rel := runRatios(rs, results[smallest], hubCPUPerChange)
		ratios.Rows = append(ratios.Rows, []string{fmt.Sprint(n), rel.format(ratio)})
		if n == largest {
			worst = rel
		}
	}
	r.Sections = append(r.Sections, Section{
		Title: "7. One object each",
		Intro: fmt.Sprintf(`N hub subscribers each watch one ConfigMap of about %s by its name (field selector metadata.name=<its object>), in one namespace of %d such objects; a writer changes the N objects in turn (merge patches of data.sentAt) at %.0f changes/s for %v, so that each change concerns exactly one subscriber. The hub's dispatch index finds that subscriber's group by the object's name, so its CPU per change should not grow with N. Each run has a hub process of its own, started with --bookmark-interval 1h: a quiet subscriber otherwise gets a bookmark a minute, a cost per subscriber rather than per change. Its subscribers share at most %d connections; %v of changes warm it up. Hub CPU is the time the hub process's threads spent on a CPU (/proc/<pid>/task/*/schedstat, in nanoseconds; the process's clock ticks should a thread exit) from the first measured change until every subscriber has received its share, divided by the changes; beside it, the same per change with the API server's and etcd's CPU added (from /proc, in clock ticks), which serve the writes. Latency is from the writer's timestamp, taken just before its request, to the subscriber's receipt. The ratios are taken run by run against the same run's N = %d. The first run at N = %d is profiled (%s in the results' pprof directory).`,
			byteSize(float64(o.ObjectBytes)), largest, o.FanOutRate, o.FanOutDuration, o.FanOutConnections, o.WarmUp, smallest, largest, "`"+profile+"`"),
		Tables: []Table{table, ratios},
		Plots:  []Plot{{File: "one-object-each-cpu.png", Title: "One object each: hub CPU per change", X: "subscribers", Y: "µs", LogX: true, Series: []Series{series}}},
	})
	r.Targets = append(r.Targets, Target{
		Name: "One object each: hub CPU per change (end to end)", Goal: fmt.Sprintf("at %d subscribers ≤ 1.5× at %d", largest, smallest),
		Measured: worst.format(ratio), Met: worst.Median <= 1.5,
	})
	return nil
}

// nodeAgentsScenario measures N node agents, each watching the pods of its
// node (spec.nodeName=<its node>), as N hub subscriptions and as N direct
// watches of the API server, while changes go round the nodes' pods.
func nodeAgentsScenario(ctx context.Context, e *Env, o *Options, r *Report, pods *nodePods) error {
	own, err := e.watchCount(ctx, "pods")
	if err != nil {
		return err
	}
	counts := o.SelectiveSubscribers
	smallest, largest := slices.Min(counts), slices.Max(counts)
	profile := fmt.Sprintf("hub-cpu-node-agents-%d.pb.gz", largest)
	type key struct {
		side  string
		nodes int
	}
	results := map[key][]selectiveResult{}
	for run := range o.Runs {
		for _, n := range counts {
			sides := []string{sideDirect, sideHub}
			if run%2 == 1 {
				sides = []string{sideHub, sideDirect}
			}
			if n == smallest {
				sides = append(sides, sideNone)
			}
			for _, side := range sides {
				ch := pods.changer(n)
				sel := selection{
					clients:  n,
					resource: "pods",
					hub: func(i int) *informerhubv1.WatchRequest {
						return &informerhubv1.WatchRequest{Selector: &informerhubv1.ResourceSelector{
							Version: "v1", Resource: "pods", FieldSelector: "spec.nodeName=" + benchusage.NodeName(i)}}
					},
					query: func(i int) url.Values {
						return url.Values{"fieldSelector": {"spec.nodeName=" + benchusage.NodeName(i)}}
					},
					expected: func(i int) int64 { return pods.nodeChanges(ch, n, i) },
				}
				if side == sideNone {
					sel.clients = 0
				}
				file := ""
				if side == sideHub && run == 0 && n == largest {
					file = o.profilePath(profile)
				}
				res, err := e.selectiveRun(ctx, o, side, sel, ch, o.FanOutRate, own, file)
				if err != nil {
					return fmt.Errorf("%s side, %d nodes: %w", side, n, err)
				}
				o.logf("node agents run %d: %s, %d nodes: %d changes, side CPU %v, hub CPU %v, p50 %v, p99 %v, %d watches, %d short",
					run+1, side, sel.clients, res.changes, res.cpu, res.hubCPU, res.p50, res.p99, res.watches, res.short)
				results[key{side, n}] = append(results[key{side, n}], res)
			}
		}
	}

	table := Table{Header: []string{"nodes (agents)", "side", "CPU s (side's processes)", "side CPU per change", "hub CPU per change", "p50", "p99", "API server pod watches", "clients short"}}
	ratios := Table{Header: []string{"nodes", fmt.Sprintf("hub CPU per change ÷ at %d", smallest), "hub side CPU ÷ direct CPU", "hub p99 ÷ direct p99"}}
	none := results[key{sideNone, smallest}]
	table.Rows = append(table.Rows, []string{"0", "no clients (writes alone)",
		spreadBy(none, func(x selectiveResult) float64 { return x.cpu.Seconds() }).format(seconds),
		spreadBy(none, sideCPUPerChange).format(perChange), "–", "–", "–", "–", "–"})
	var sidePlot [3]Series
	sidePlot[0].Name, sidePlot[1].Name, sidePlot[2].Name = "direct: API server and etcd", "hub side: API server, etcd and hub", "the hub alone"
	var worst Spread
	for _, n := range counts {
		for i, side := range []string{sideDirect, sideHub} {
			rs := results[key{side, n}]
			hubPerChange := "–"
			if side == sideHub {
				hubPerChange = spreadBy(rs, hubCPUPerChange).format(perChange)
				sidePlot[2].Points = append(sidePlot[2].Points, point(float64(n), spreadBy(rs, hubCPUPerChange)))
			}
			table.Rows = append(table.Rows, []string{
				fmt.Sprint(n), side,
				spreadBy(rs, func(x selectiveResult) float64 { return x.cpu.Seconds() }).format(seconds),
				spreadBy(rs, sideCPUPerChange).format(perChange), hubPerChange,
				spreadBy(rs, func(x selectiveResult) float64 { return ms1(x.p50) }).format(ms),
				spreadBy(rs, func(x selectiveResult) float64 { return ms1(x.p99) }).format(ms),
				spreadBy(rs, func(x selectiveResult) float64 { return float64(x.watches) }).format(count),
				spreadBy(rs, func(x selectiveResult) float64 { return float64(x.short) }).format(count),
			})
			sidePlot[i].Points = append(sidePlot[i].Points, point(float64(n), spreadBy(rs, sideCPUPerChange)))
		}
		hubRuns, direct := results[key{sideHub, n}], results[key{sideDirect, n}]
		flat := runRatios(hubRuns, results[key{sideHub, smallest}], hubCPUPerChange)
		if n == largest {
			worst = flat
		}
		ratios.Rows = append(ratios.Rows, []string{fmt.Sprint(n), flat.format(ratio),
			runRatios(hubRuns, direct, func(x selectiveResult) float64 { return x.cpu.Seconds() }).format(ratio),
			runRatios(hubRuns, direct, func(x selectiveResult) float64 { return ms1(x.p99) }).format(ratio)})
	}
	r.Sections = append(r.Sections, Section{
		Title: "8. Node agents",
		Intro: fmt.Sprintf(`%d pods of about %s each (as served, with managedFields: a Deployment's pod with two containers, spec.nodeName set at creation; no scheduler or kubelet runs, so they stay Pending) spread over as many nodes as the largest N, %d per node. N node agents each watch the pods of their node (field selector spec.nodeName=<its node>, in all namespaces, as a kubelet does): once as N watches straight from the API server, whose watch cache indexes pods by spec.nodeName, once as N hub subscriptions. A writer changes the pods of the N agents' nodes in turn (merge patches of the label sentAt) at %.0f changes/s for %v, so that each change concerns exactly one agent. The hub side has a hub process of its own per run (--bookmark-interval 1h, as in scenario 7), the direct side none; %v of changes warm each run up; clients share at most %d connections per side and read raw bytes, as in scenario 1. CPU is the user and system time, from /proc, of the side's processes from the first measured change until every agent has received its share: kube-apiserver and etcd; kube-apiserver, etcd and the hub; "no clients" is the writes alone. Per change, it is divided by the changes. The hub's own CPU per change, measured as in scenario 7, is the target: it should stay flat as N grows. The API server's pod watch count is its apiserver_longrunning_requests metric, read mid-run. The ratios are taken run by run. The first hub run at N = %d is profiled (%s).`,
			len(pods.names), byteSize(float64(pods.bytes)), pods.perNode, o.FanOutRate, o.FanOutDuration, o.WarmUp, o.FanOutConnections, largest, "`"+profile+"`"),
		Tables: []Table{table, ratios},
		Plots:  []Plot{{File: "node-agents-cpu.png", Title: "Node agents: CPU per change", X: "nodes (agents)", Y: "µs", LogX: true, LogY: true, Series: sidePlot[:]}},
	})
	r.Targets = append(r.Targets, Target{
		Name: "Node agents: hub CPU per change (end to end)", Goal: fmt.Sprintf("flat: at %d nodes ≤ 1.5× at %d", largest, smallest),
		Measured: worst.format(ratio), Met: worst.Median <= 1.5,
	})
	return nil
}

// projectionScenario measures the same fan-out of pods to hub subscribers
// receiving whole objects, and receiving them projected.
func projectionScenario(ctx context.Context, e *Env, o *Options, r *Report, pods *nodePods) error {
	own, err := e.watchCount(ctx, "pods")
	if err != nil {
		return err
	}
	n := o.ProjectionSubscribers
	rate := min(o.FanOutRate, o.FanOutMaxDelivery/float64(n))
	variants := []struct {
		name   string
		fields []string
	}{{"whole", nil}, {"projected", projectedFields}}
	results := make([][]selectiveResult, len(variants))
	for run := range o.Runs {
		order := []int{0, 1}
		if run%2 == 1 {
			order = []int{1, 0}
		}
		for _, v := range order {
			ch := pods.changer(pods.nodes) // every pod in turn
			sel := selection{
				clients:  n,
				resource: "pods",
				hub: func(int) *informerhubv1.WatchRequest {
					return &informerhubv1.WatchRequest{
						Selector: &informerhubv1.ResourceSelector{Version: "v1", Resource: "pods", Namespace: nodesNamespace},
						Fields:   variants[v].fields,
					}
				},
				expected: func(int) int64 { return ch.total() },
			}
			file := ""
			if run == 0 {
				file = o.profilePath("hub-cpu-projection-" + variants[v].name + ".pb.gz")
			}
			res, err := e.selectiveRun(ctx, o, sideHub, sel, ch, rate, own, file)
			if err != nil {
				return fmt.Errorf("%s objects: %w", variants[v].name, err)
			}
			o.logf("projection run %d: %s objects, %d subscribers: %d deliveries of %.0f bytes, hub CPU %v, p50 %v, p99 %v, %d short",
				run+1, variants[v].name, n, res.deliveries, bytesPerDelivery(res), res.hubCPU, res.p50, res.p99, res.short)
			results[v] = append(results[v], res)
		}
	}

	table := Table{Header: []string{"objects", "subscribers", "changes/s", "delivered events/s", "bytes per delivery", "hub CPU s", "hub CPU per change", "hub CPU ms per 1k deliveries", "p50", "p99", "clients short"}}
	for v, variant := range variants {
		rs := results[v]
		name := "whole"
		if variant.fields != nil {
			name = "projected to " + strings.Join(variant.fields, ", ")
		}
		table.Rows = append(table.Rows, []string{
			name, fmt.Sprint(n), fmt.Sprintf("%.0f", rate),
			spreadBy(rs, func(x selectiveResult) float64 { return float64(x.deliveries) / x.elapsed.Seconds() }).format(perSecond),
			spreadBy(rs, bytesPerDelivery).format(byteSize),
			spreadBy(rs, func(x selectiveResult) float64 { return x.hubCPU.Seconds() }).format(seconds),
			spreadBy(rs, hubCPUPerChange).format(perChange),
			spreadBy(rs, func(x selectiveResult) float64 { return 1e6 * x.hubCPU.Seconds() / float64(max(x.deliveries, 1)) }).format(ms),
			spreadBy(rs, func(x selectiveResult) float64 { return ms1(x.p50) }).format(ms),
			spreadBy(rs, func(x selectiveResult) float64 { return ms1(x.p99) }).format(ms),
			spreadBy(rs, func(x selectiveResult) float64 { return float64(x.short) }).format(count),
		})
	}
	bytesRatio := runRatios(results[1], results[0], bytesPerDelivery)
	cpuRatio := runRatios(results[1], results[0], func(x selectiveResult) float64 { return x.hubCPU.Seconds() })
	r.Sections = append(r.Sections, Section{
		Title: "9. Projection",
		Intro: fmt.Sprintf(`%d hub subscribers watch every pod of scenario 8's namespace (about %s each, as served), once receiving whole objects and once projected to %s (WatchRequest.fields: the hub keeps those paths, and apiVersion, kind and the object's name, namespace, uid and resourceVersion). A writer changes the pods in turn (the label sentAt, which the projection keeps) at %.0f changes/s for %v, so that every subscriber receives every change in both variants. Each run has a hub of its own (as in scenario 7); the variants alternate in order from run to run. Bytes per delivery are the WatchResponse messages as the subscribers receive them (gRPC's 5-byte prefix not counted); hub CPU is the hub process's, measured as in scenario 7, from the first measured change until every subscriber has received every change. The ratios are taken run by run. The first run of each variant is profiled (%s and %s).`,
			n, byteSize(float64(pods.bytes)), strings.Join(projectedFields, " and "), rate, o.FanOutDuration, "`hub-cpu-projection-whole.pb.gz`", "`hub-cpu-projection-projected.pb.gz`"),
		Tables: []Table{table, {
			Header: []string{"projected ÷ whole", "bytes per delivery", "hub CPU"},
			Rows:   [][]string{{fmt.Sprintf("%d subscribers", n), bytesRatio.format(percent1), cpuRatio.format(ratio)}},
		}},
	})
	r.Targets = append(r.Targets, Target{
		Name:     "Projection to " + strings.Join(projectedFields, ", ") + " (end to end)",
		Goal:     "bytes per delivery ≤ 10% of whole objects'; hub CPU ≤ the unprojected fan-out's",
		Measured: fmt.Sprintf("%s of the bytes; %s the hub CPU", bytesRatio.format(percent1), cpuRatio.format(ratio)),
		Met:      bytesRatio.Median <= 0.10 && cpuRatio.Median <= 1,
	})
	return nil
}

// nodePods are the pods of the node agents, projection and ingest
// scenarios: perNode on each of nodes nodes, pod i on node i % nodes.
type nodePods struct {
	env     *Env
	ns      string
	names   []string
	nodes   int
	perNode int
	bytes   int // a pod's JSON as served, once changed
}

// createNodePods creates the node agents' pods (see createPods) in a
// namespace of their own.
func (e *Env) createNodePods(ctx context.Context, o *Options) (*nodePods, error) {
	if err := e.createNamespace(ctx, nodesNamespace); err != nil {
		return nil, err
	}
	return e.createPods(ctx, o, nodesNamespace, slices.Max(o.SelectiveSubscribers), o.PodsPerNode)
}

// createPods creates perNode pods on each of nodes nodes in namespace ns,
// padded to about benchusage.PodBytes as the API server serves them once
// changed.
func (e *Env) createPods(ctx context.Context, o *Options, ns string, nodes, perNode int) (*nodePods, error) {
	p := &nodePods{env: e, ns: ns, nodes: nodes, perNode: perNode}
	// How much padding: a probe, created without and changed once, as
	// served. Its name is as long as the pods'.
	const probe = "agent-probe"
	if _, err := e.kube.CoreV1().Pods(ns).Create(ctx, benchusage.Pod(ns, probe, benchusage.NodeName(0), nil, 0), metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	if err := p.touchName(ctx, probe); err != nil {
		return nil, err
	}
	size, err := e.servedSize(ctx, "pods", ns, probe)
	if err != nil {
		return nil, err
	}
	if err := e.kube.CoreV1().Pods(ns).Delete(ctx, probe, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		return nil, err
	}
	pad := max(0, benchusage.PodBytes-size)
	o.logf("pods: %d bytes as served, changed once, before padding; padded by %d", size, pad)

	p.names = make([]string, p.nodes*p.perNode)
	for i := range p.names {
		p.names[i] = fmt.Sprintf("agent-%05d", i)
	}
	start := time.Now()
	err = forEach(ctx, len(p.names), 32, func(ctx context.Context, i int) error {
		_, err := e.kube.CoreV1().Pods(ns).Create(ctx, benchusage.Pod(ns, p.names[i], benchusage.NodeName(i%p.nodes), nil, pad), metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return nil, err
	}
	o.logf("created %d pods on %d nodes in %v", len(p.names), p.nodes, time.Since(start).Round(time.Millisecond))
	if err := p.touch(ctx, 0); err != nil {
		return nil, err
	}
	if p.bytes, err = e.servedSize(ctx, "pods", ns, p.names[0]); err != nil {
		return nil, err
	}
	return p, nil
}

// touch changes pod i: its label sentAt, stamped now.
func (p *nodePods) touch(ctx context.Context, i int) error { return p.touchName(ctx, p.names[i]) }

func (p *nodePods) touchName(ctx context.Context, name string) error {
	patch := `{"metadata":{"labels":{"sentAt":"` + stamp() + `"}}}`
	_, err := p.env.kube.CoreV1().Pods(p.ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// delete deletes the pods at once: no kubelet runs to end them gracefully.
func (p *nodePods) delete(ctx context.Context) error {
	now := metav1.DeleteOptions{GracePeriodSeconds: new(int64)}
	return p.env.kube.CoreV1().Pods(p.ns).DeleteCollection(ctx, now, metav1.ListOptions{})
}

// servedSize is the length of an object's JSON as the API server serves
// it: a core resource type's object in namespace ns.
func (e *Env) servedSize(ctx context.Context, resource, ns, name string) (int, error) {
	b, err := e.kube.CoreV1().RESTClient().Get().Namespace(ns).Resource(resource).Name(name).DoRaw(ctx)
	return len(b), err
}

// changer returns a changer of the pods of nodes 0 .. n-1, which goes
// round the nodes: change t is of node t % n, each node's pods in turn.
func (p *nodePods) changer(n int) *changer {
	return newChanger(n*p.perNode, func(ctx context.Context, t int) error {
		return p.touch(ctx, t/n*p.nodes+t%n)
	})
}

// nodeChanges is how many of a changer(n)'s changes were of node i's pods.
func (p *nodePods) nodeChanges(ch *changer, n, i int) int64 {
	var total int64
	for replica := range p.perNode {
		total += ch.counts[replica*n+i]
	}
	return total
}

// spreadBy is the spread of a value over runs.
func spreadBy[T any](runs []T, f func(T) float64) Spread {
	v := make([]float64, len(runs))
	for i, x := range runs {
		v[i] = f(x)
	}
	return spreadOf(v)
}

// runRatios is the spread of f(a[i]) ÷ f(b[i]) over runs i: ratios taken
// within each run, then summarised.
func runRatios[T any](a, b []T, f func(T) float64) Spread {
	var v []float64
	for i := range min(len(a), len(b)) {
		v = append(v, f(a[i])/f(b[i]))
	}
	return spreadOf(v)
}

func hubCPUPerChange(x selectiveResult) float64 {
	return 1e6 * x.hubCPU.Seconds() / float64(max(x.changes, 1))
}

func sideCPUPerChange(x selectiveResult) float64 {
	return 1e6 * x.cpu.Seconds() / float64(max(x.changes, 1))
}

func bytesPerDelivery(x selectiveResult) float64 {
	return float64(x.bytes) / float64(max(x.deliveries, 1))
}

func percent1(v float64) string { return fmt.Sprintf("%.1f%%", v*100) }
