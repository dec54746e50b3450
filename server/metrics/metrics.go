package metrics

import (
	"net/http"
	"runtime"
	"slices"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/informerhub/informerhub/informerhub"
)

// StatsSource is what the hub's metrics are read from: an
// *informerhub.Hub.
type StatsSource interface {
	Stats() []informerhub.ResourceStats
	Memory() informerhub.MemoryStats
	Disk() informerhub.DiskStats
	Config() informerhub.Config
}

// BuildInfo describes the running binary, for informerhub_build_info.
type BuildInfo struct {
	Version  string // the release, or "dev"
	Revision string // the VCS revision it was built from, if known
}

// Metrics is the hub's registry and the instruments the server updates.
type Metrics struct {
	// Registry holds every metric; Handler serves it.
	Registry *prometheus.Registry
	// calls count and time the calls of each of Protocols
	// (grpc_server_*), labelled with it: see Calls.
	calls map[string]*grpcprom.ServerMetrics

	snapshotSeconds *prometheus.HistogramVec
	// auth counts authentication and authorization decisions: see
	// Authenticator and Authorizer.
	auth *authMetrics
}

// Protocols are the values of ProtocolLabel, named as connect-go names them.
var Protocols = []string{"grpc", "grpcweb", "connect"}

// Calls returns the call metrics (grpc_server_*) of protocol, one of
// Protocols, whose interceptors go in the server's chain for that
// protocol's calls (server.Config.Metrics); nil for another protocol.
//
// Each protocol has metrics of its own, its label constant, because
// go-grpc-middleware's labels from the context build their values anew
// for each message a stream sends: a constant costs nothing per event.
func (m *Metrics) Calls(protocol string) *grpcprom.ServerMetrics { return m.calls[protocol] }

// New builds the registry: the hub's metrics from hub, build information,
// gRPC server metrics, and the Go runtime and process collectors.
func New(hub StatsSource, build BuildInfo) *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		calls:    map[string]*grpcprom.ServerMetrics{},
		snapshotSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "informerhub_snapshot_duration_seconds",
			Help: "Time from a Snapshot request until its point in time is fixed (the informer's initial list included, when the snapshot starts it), by resource type. Reading the pages is not included: the client sets that pace.",
			// The label index answers in microseconds; a first snapshot
			// waits for a LIST of the whole resource type.
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 11), // 100µs .. ~105s
		}, resourceLabels),
		auth: newAuthMetrics(),
	}
	buildInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "informerhub_build_info",
		Help: "Always 1; the labels say which informerhub is running.",
	}, []string{"version", "revision", "goversion"})
	buildInfo.WithLabelValues(build.Version, build.Revision, runtime.Version()).Set(1)
	for _, protocol := range Protocols {
		label := prometheus.Labels{ProtocolLabel: protocol}
		m.calls[protocol] = grpcprom.NewServerMetrics(
			grpcprom.WithServerCounterOptions(grpcprom.WithConstLabels(label)),
			grpcprom.WithServerHandlingTimeHistogram(
				// Unary calls take milliseconds; streams run for
				// minutes to hours, so their buckets reach far.
				grpcprom.WithHistogramBuckets([]float64{.001, .005, .025, .1, .5, 2.5, 10, 60, 600, 3600}),
				grpcprom.WithHistogramConstLabels(label),
			))
		m.Registry.MustRegister(m.calls[protocol])
	}
	m.Registry.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildInfo,
		m.snapshotSeconds,
		&hubCollector{hub: hub, now: time.Now},
	)
	m.Registry.MustRegister(m.auth.collectors()...)
	return m
}

// Handler serves the registry in the Prometheus exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}

// ObserveSnapshot records how long a snapshot of gvr took to fix its point
// in time.
func (m *Metrics) ObserveSnapshot(gvr schema.GroupVersionResource, took time.Duration) {
	m.snapshotSeconds.WithLabelValues(gvr.Group, gvr.Version, gvr.Resource).Observe(took.Seconds())
}

// ProtocolLabel is the label of the call metrics (grpc_server_*) that says
// which protocol a call came in: "grpc", "grpcweb" or "connect".
const ProtocolLabel = "protocol"

// resourceLabels name a resource type the way the API server's own metrics
// do (apiserver_request_total).
var resourceLabels = []string{"group", "version", "resource"}

func newDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, resourceLabels, nil)
}

var (
	informersDesc = prometheus.NewDesc("informerhub_informers_active",
		"Informers running, one per resource type in use: each holds one upstream watch.", nil, nil)
	subscribersDesc = newDesc("informerhub_subscribers",
		"Open subscriptions and snapshots.")
	cachedObjectsDesc = newDesc("informerhub_cached_objects",
		"Objects in the informer's state.")
	historyEventsDesc = newDesc("informerhub_history_events",
		"Changes the history holds for resuming from memory.")
	historyBytesDesc = newDesc("informerhub_history_bytes",
		"Approximate bytes the history holds: its changes, the objects only they keep alive and the events built for them (see --history-bytes).")
	evictedForMemoryDesc = newDesc("informerhub_history_evicted_for_memory_total",
		"History changes evicted to keep the hub within --memory-budget, before the resource type's own bounds would have.")
	memoryDesc = prometheus.NewDesc("informerhub_memory_bytes",
		"Approximate bytes the hub holds, by kind: history, queues, label_indexes and state_clones (what snapshots and initial events being read keep of objects since changed) count within --memory-budget; state (the cached objects) and replay_state (bounded by --max-replay-state-bytes) apart.",
		[]string{"kind"}, nil)
	memoryBudgetDesc = prometheus.NewDesc("informerhub_memory_budget_bytes",
		"The bound on history, queues and label indexes together (--memory-budget); past it, the oldest history changes are evicted first.", nil, nil)
	overBudgetDesc = prometheus.NewDesc("informerhub_memory_over_budget_total",
		"Times the hub found itself over --memory-budget with nothing it could evict (queues, label indexes and each history's newest change stay; a feed busy for a moment counts too). Growing for minutes: the budget is too small for the streams and indexes the hub holds.", nil, nil)
	retainedOldestDesc = newDesc("informerhub_history_retained_oldest_age_seconds",
		"Age of the oldest point a token resumes from without the API server, in memory or on disk (--history-dir).")
	diskPendingDesc = newDesc("informerhub_history_disk_pending_changes",
		"Changes not yet written to the disk history; the memory keeps them until they are.")
	diskBytesDesc = prometheus.NewDesc("informerhub_history_disk_bytes",
		"Bytes the disk history takes (--history-dir; bounded by --history-disk-bytes).", nil, nil)
	diskDeletedDesc = prometheus.NewDesc("informerhub_history_disk_deleted_total",
		"Changes the disk history's retention deleted (--history-retention, --history-disk-bytes).", nil, nil)
	diskWriteErrorsDesc = prometheus.NewDesc("informerhub_history_disk_write_errors_total",
		"Writes to the disk history that failed; each makes its resource type spill (informerhub_history_disk_spills_total).", nil, nil)
	diskSpillsDesc = newDesc("informerhub_history_disk_spills_total",
		"Times the resource type stopped writing its history to disk because the disk fell behind (--history-max-unwritten-bytes, --memory-budget) or a write failed; memory serves it, and its disk history starts over once the writer has caught up.")
	historyOldestDesc = newDesc("informerhub_history_oldest_age_seconds",
		"Age of the oldest point the history resumes from: a token older than this is replayed from the API server.")
	historyNewestDesc = newDesc("informerhub_history_newest_age_seconds",
		"Time since the newest change arrived (since the informer synced, without changes).")
	upstreamProgressDesc = newDesc("informerhub_upstream_progress_age_seconds",
		"Time since the API server last delivered anything to the informer (a list, a change, a bookmark: about once a minute when nothing changes).")
	upstreamFailingDesc = newDesc("informerhub_upstream_failing_seconds",
		"How long the informer's lists and watches have been failing with nothing delivered; 0 while they do not. At --max-upstream-failure its streams end.")
	queueDepthDesc = newDesc("informerhub_subscriber_queue_depth_max",
		"The most changes a live subscriber's queue held, right after one was queued, over the last 30 to 60 seconds; at informerhub_subscriber_queue_capacity the subscriber falls behind and reads from the history.")
	queueCapacityDesc = prometheus.NewDesc("informerhub_subscriber_queue_capacity",
		"Changes that may wait for one subscriber (--queue-size).", nil, nil)
	startsDesc = newDesc("informerhub_informer_starts_total",
		"Informers started: the first, and again after an idle stop or a failure.")
	watchRestartsDesc = newDesc("informerhub_upstream_watch_restarts_total",
		"Upstream watches an informer opened after its first, because the API server closed or broke the previous one.")
	relistsDesc = newDesc("informerhub_relists_total",
		"Relists after an informer's first sync (its watch could not resume); their differences are sent as events.")
	checksDesc = prometheus.NewDesc("informerhub_consistency_checks_total",
		"Consistency checks of an informer's cache against the API server's LIST at the same resourceVersion (--consistency-check-interval), by result: consistent; diverged (the cache differed, was logged with the first objects that differ, and relisted); compacted (the API server no longer served the position: tried again at the next, not an alarm); failed (the LIST failed, or was answered at another resourceVersion than asked; no relist).",
		[]string{"group", "version", "resource", "result"}, nil)
	receivedDesc = newDesc("informerhub_events_received_total",
		"Changes the informers took from the API server, a relist's differences included.")
	sentDesc = newDesc("informerhub_events_sent_total",
		"Events handed to subscribers' streams, initial events and bookmarks included.")
	fellBehindDesc = newDesc("informerhub_subscribers_fell_behind_total",
		"Times a live subscriber's queue (--queue-size) was full for a change, so that it read on from the history until it caught up.")
	slowDesc = newDesc("informerhub_slow_subscriber_disconnects_total",
		"Subscribers disconnected for falling further behind than the history (RESOURCE_EXHAUSTED; they resume with their token).")
	recountsDesc = newDesc("informerhub_count_recounts_total",
		"Counters (Count) that fell further behind the changes than the history and counted afresh from the cache: the hub's counting does not keep up (it is overloaded). Their callers see the next counts; none is ended.")
	expiredDesc = newDesc("informerhub_expired_token_answers_total",
		"Requests answered OUT_OF_RANGE: the resume token is older than both the history and the API server's.")
	replaysDesc = newDesc("informerhub_replays_total",
		"Resume tokens older than the history, replayed from the API server by an upstream watch of their own.")
	filterErrorsDesc = newDesc("informerhub_filter_evaluation_errors_total",
		"Evaluations of CEL filters that could not decide (a missing field, a type mismatch, the cost limit); their objects are sent marked with filter_error.")
	objectErrorsDesc = newDesc("informerhub_object_errors_total",
		"Events the hub could not make of an object as a call asked (a projection or a resourceVersion rewrite failed); each ended the calls that asked, with INTERNAL · OBJECT_UNSENDABLE.")
	groupsDesc = newDesc("informerhub_subscriber_groups",
		"Distinct selectors of live subscribers: each is matched once per change it may concern.")
	filtersDesc = newDesc("informerhub_filters_in_use",
		"Distinct CEL filters in use (at most --max-filters-per-resource); each costs an evaluation per change.")
	projectionsDesc = newDesc("informerhub_projections_in_use",
		"Distinct projections in use (at most --max-projections-per-resource); each costs a projection per change.")
)

// hubCollector reads the hub's metrics from its stats at scrape time.
type hubCollector struct {
	hub StatsSource
	now func() time.Time
}

func (c *hubCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		informersDesc, subscribersDesc, cachedObjectsDesc, historyEventsDesc, historyBytesDesc,
		historyOldestDesc, historyNewestDesc, upstreamProgressDesc, upstreamFailingDesc, queueDepthDesc, queueCapacityDesc, startsDesc,
		watchRestartsDesc, relistsDesc, checksDesc, receivedDesc, sentDesc, fellBehindDesc, slowDesc, recountsDesc, expiredDesc, replaysDesc,
		filterErrorsDesc, objectErrorsDesc, groupsDesc, filtersDesc, projectionsDesc, evictedForMemoryDesc, diskSpillsDesc, memoryDesc, memoryBudgetDesc, overBudgetDesc,
		retainedOldestDesc, diskPendingDesc, diskBytesDesc, diskDeletedDesc, diskWriteErrorsDesc,
	} {
		ch <- d
	}
}

func (c *hubCollector) Collect(ch chan<- prometheus.Metric) {
	now := c.now()
	active := 0
	disk := c.hub.Disk()
	for _, st := range c.hub.Stats() {
		labels := []string{st.Resource.Group, st.Resource.Version, st.Resource.Resource}
		counter := func(d *prometheus.Desc, v uint64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
		}
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
		}
		counter(startsDesc, st.InformerStarts)
		counter(watchRestartsDesc, st.WatchRestarts)
		counter(relistsDesc, st.Relists)
		for result, n := range map[string]uint64{"consistent": st.ChecksConsistent, "diverged": st.ChecksDiverged, "compacted": st.ChecksCompacted, "failed": st.ChecksFailed} {
			ch <- prometheus.MustNewConstMetric(checksDesc, prometheus.CounterValue, float64(n), slices.Concat(labels, []string{result})...)
		}
		counter(receivedDesc, st.EventsReceived)
		counter(sentDesc, st.EventsSent)
		counter(fellBehindDesc, st.FellBehind)
		counter(slowDesc, st.SlowDisconnects)
		counter(recountsDesc, st.Recounts)
		counter(expiredDesc, st.ExpiredTokens)
		counter(replaysDesc, st.Replays)
		counter(filterErrorsDesc, st.FilterErrors)
		counter(objectErrorsDesc, st.ObjectErrors)
		counter(evictedForMemoryDesc, st.EvictedForMemory)
		counter(diskSpillsDesc, st.DiskSpills)
		if !st.InformerActive {
			continue // its levels are gone with it
		}
		active++
		gauge(subscribersDesc, float64(st.Subscribers))
		gauge(cachedObjectsDesc, float64(st.CachedObjects))
		gauge(groupsDesc, float64(st.SubscriberGroups))
		gauge(filtersDesc, float64(st.Filters))
		gauge(projectionsDesc, float64(st.Projections))
		gauge(queueDepthDesc, float64(st.QueuePeak))
		if !st.UpstreamProgress.IsZero() {
			gauge(upstreamProgressDesc, now.Sub(st.UpstreamProgress).Seconds())
			failing := 0.0
			if !st.UpstreamFailingSince.IsZero() {
				failing = now.Sub(st.UpstreamFailingSince).Seconds()
			}
			gauge(upstreamFailingDesc, failing)
		}
		if !st.HistoryOldest.IsZero() {
			gauge(historyEventsDesc, float64(st.HistoryEvents))
			gauge(historyBytesDesc, float64(st.HistoryBytes))
			gauge(historyOldestDesc, now.Sub(st.HistoryOldest).Seconds())
			gauge(historyNewestDesc, now.Sub(st.HistoryNewest).Seconds())
			gauge(retainedOldestDesc, now.Sub(st.RetainedOldest).Seconds())
		}
		if disk.Enabled {
			gauge(diskPendingDesc, float64(st.DiskPending))
		}
	}
	ch <- prometheus.MustNewConstMetric(informersDesc, prometheus.GaugeValue, float64(active))
	ch <- prometheus.MustNewConstMetric(queueCapacityDesc, prometheus.GaugeValue, float64(c.hub.Config().QueueSize))
	mem := c.hub.Memory()
	ch <- prometheus.MustNewConstMetric(memoryBudgetDesc, prometheus.GaugeValue, float64(mem.Budget))
	ch <- prometheus.MustNewConstMetric(overBudgetDesc, prometheus.CounterValue, float64(mem.OverBudget))
	for kind, v := range map[string]int64{"history": mem.History, "queues": mem.Queues, "label_indexes": mem.LabelIndexes,
		"state_clones": mem.StateClones, "state": mem.State, "replay_state": mem.ReplayState} {
		ch <- prometheus.MustNewConstMetric(memoryDesc, prometheus.GaugeValue, float64(v), kind)
	}
	if disk.Enabled {
		ch <- prometheus.MustNewConstMetric(diskBytesDesc, prometheus.GaugeValue, float64(disk.Bytes))
		ch <- prometheus.MustNewConstMetric(diskDeletedDesc, prometheus.CounterValue, float64(disk.Deleted))
		ch <- prometheus.MustNewConstMetric(diskWriteErrorsDesc, prometheus.CounterValue, float64(disk.WriteErrors))
	}
}
