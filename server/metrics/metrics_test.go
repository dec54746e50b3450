package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/informerhub/informerhub/informerhub"
)

type fakeHub struct{ stats []informerhub.ResourceStats }

func (f fakeHub) Stats() []informerhub.ResourceStats { return f.stats }
func (fakeHub) Config() informerhub.Config           { return informerhub.Config{QueueSize: 1000} }
func (fakeHub) Memory() informerhub.MemoryStats {
	return informerhub.MemoryStats{Budget: 1 << 30, History: 4096, Queues: 48000, LabelIndexes: 176, State: 20480, ReplayState: 0, OverBudget: 3}
}

func (fakeHub) Disk() informerhub.DiskStats {
	return informerhub.DiskStats{Enabled: true, Bytes: 1 << 20, Deleted: 12, WriteErrors: 0}
}

func TestHubMetrics(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	hub := fakeHub{stats: []informerhub.ResourceStats{{
		Resource:       schema.GroupVersionResource{Version: "v1", Resource: "configmaps"},
		InformerActive: true, Subscribers: 3, CachedObjects: 10,
		HistoryEvents: 5, HistoryBytes: 4096,
		HistoryOldest: now.Add(-90 * time.Second), HistoryNewest: now.Add(-2 * time.Second),
		QueuePeak:        7,
		UpstreamProgress: now.Add(-20 * time.Second), UpstreamFailingSince: now.Add(-5 * time.Second),
		InformerStarts: 2, WatchRestarts: 4, EventsReceived: 100, EventsSent: 250,
		FellBehind: 4, SlowDisconnects: 1, Recounts: 5, ExpiredTokens: 2, Relists: 3, Replays: 6, FilterErrors: 9, ObjectErrors: 1, DiskSpills: 2, EvictedForMemory: 11,
		ChecksConsistent: 12, ChecksDiverged: 1, ChecksCompacted: 2,
		SubscriberGroups: 2, Filters: 1, Projections: 1,
		RetainedOldest: now.Add(-3 * time.Hour), DiskPending: 4,
	}, {
		// Stopped: its totals stay, its levels are gone.
		Resource:       schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"},
		InformerStarts: 1, EventsReceived: 7, EventsSent: 7,
	}}}
	c := &hubCollector{hub: hub, now: func() time.Time { return now }}
	want := `
# HELP informerhub_informers_active Informers running, one per resource type in use: each holds one upstream watch.
# TYPE informerhub_informers_active gauge
informerhub_informers_active 1
# HELP informerhub_subscribers Open subscriptions and snapshots.
# TYPE informerhub_subscribers gauge
informerhub_subscribers{group="",resource="configmaps",version="v1"} 3
# HELP informerhub_subscriber_queue_depth_max The most changes a live subscriber's queue held, right after one was queued, over the last 30 to 60 seconds; at informerhub_subscriber_queue_capacity the subscriber falls behind and reads from the history.
# TYPE informerhub_subscriber_queue_depth_max gauge
informerhub_subscriber_queue_depth_max{group="",resource="configmaps",version="v1"} 7
# HELP informerhub_subscriber_queue_capacity Changes that may wait for one subscriber (--queue-size).
# TYPE informerhub_subscriber_queue_capacity gauge
informerhub_subscriber_queue_capacity 1000
# HELP informerhub_history_oldest_age_seconds Age of the oldest point the history resumes from: a token older than this is replayed from the API server.
# TYPE informerhub_history_oldest_age_seconds gauge
informerhub_history_oldest_age_seconds{group="",resource="configmaps",version="v1"} 90
# HELP informerhub_history_newest_age_seconds Time since the newest change arrived (since the informer synced, without changes).
# TYPE informerhub_history_newest_age_seconds gauge
informerhub_history_newest_age_seconds{group="",resource="configmaps",version="v1"} 2
# HELP informerhub_history_retained_oldest_age_seconds Age of the oldest point a token resumes from without the API server, in memory or on disk (--history-dir).
# TYPE informerhub_history_retained_oldest_age_seconds gauge
informerhub_history_retained_oldest_age_seconds{group="",resource="configmaps",version="v1"} 10800
# HELP informerhub_history_disk_pending_changes Changes not yet written to the disk history; the memory keeps them until they are.
# TYPE informerhub_history_disk_pending_changes gauge
informerhub_history_disk_pending_changes{group="",resource="configmaps",version="v1"} 4
# HELP informerhub_history_disk_bytes Bytes the disk history takes (--history-dir; bounded by --history-disk-bytes).
# TYPE informerhub_history_disk_bytes gauge
informerhub_history_disk_bytes 1.048576e+06
# HELP informerhub_history_disk_deleted_total Changes the disk history's retention deleted (--history-retention, --history-disk-bytes).
# TYPE informerhub_history_disk_deleted_total counter
informerhub_history_disk_deleted_total 12
# HELP informerhub_events_received_total Changes the informers took from the API server, a relist's differences included.
# TYPE informerhub_events_received_total counter
informerhub_events_received_total{group="",resource="configmaps",version="v1"} 100
informerhub_events_received_total{group="apps",resource="deployments",version="v1"} 7
# HELP informerhub_events_sent_total Events handed to subscribers' streams, initial events and bookmarks included.
# TYPE informerhub_events_sent_total counter
informerhub_events_sent_total{group="",resource="configmaps",version="v1"} 250
informerhub_events_sent_total{group="apps",resource="deployments",version="v1"} 7
# HELP informerhub_upstream_watch_restarts_total Upstream watches an informer opened after its first, because the API server closed or broke the previous one.
# TYPE informerhub_upstream_watch_restarts_total counter
informerhub_upstream_watch_restarts_total{group="",resource="configmaps",version="v1"} 4
informerhub_upstream_watch_restarts_total{group="apps",resource="deployments",version="v1"} 0
# HELP informerhub_expired_token_answers_total Requests answered OUT_OF_RANGE: the resume token is older than both the history and the API server's.
# TYPE informerhub_expired_token_answers_total counter
informerhub_expired_token_answers_total{group="",resource="configmaps",version="v1"} 2
informerhub_expired_token_answers_total{group="apps",resource="deployments",version="v1"} 0
# HELP informerhub_filter_evaluation_errors_total Evaluations of CEL filters that could not decide (a missing field, a type mismatch, the cost limit); their objects are sent marked with filter_error.
# TYPE informerhub_filter_evaluation_errors_total counter
informerhub_filter_evaluation_errors_total{group="",resource="configmaps",version="v1"} 9
informerhub_filter_evaluation_errors_total{group="apps",resource="deployments",version="v1"} 0
# HELP informerhub_object_errors_total Events the hub could not make of an object as a call asked (a projection or a resourceVersion rewrite failed); each ended the calls that asked, with INTERNAL · OBJECT_UNSENDABLE.
# TYPE informerhub_object_errors_total counter
informerhub_object_errors_total{group="",resource="configmaps",version="v1"} 1
informerhub_object_errors_total{group="apps",resource="deployments",version="v1"} 0
# HELP informerhub_count_recounts_total Counters (Count) that fell further behind the changes than the history and counted afresh from the cache: the hub's counting does not keep up (it is overloaded). Their callers see the next counts; none is ended.
# TYPE informerhub_count_recounts_total counter
informerhub_count_recounts_total{group="",resource="configmaps",version="v1"} 5
informerhub_count_recounts_total{group="apps",resource="deployments",version="v1"} 0
# HELP informerhub_subscribers_fell_behind_total Times a live subscriber's queue (--queue-size) was full for a change, so that it read on from the history until it caught up.
# TYPE informerhub_subscribers_fell_behind_total counter
informerhub_subscribers_fell_behind_total{group="",resource="configmaps",version="v1"} 4
informerhub_subscribers_fell_behind_total{group="apps",resource="deployments",version="v1"} 0
# HELP informerhub_upstream_progress_age_seconds Time since the API server last delivered anything to the informer (a list, a change, a bookmark: about once a minute when nothing changes).
# TYPE informerhub_upstream_progress_age_seconds gauge
informerhub_upstream_progress_age_seconds{group="",resource="configmaps",version="v1"} 20
# HELP informerhub_upstream_failing_seconds How long the informer's lists and watches have been failing with nothing delivered; 0 while they do not. At --max-upstream-failure its streams end.
# TYPE informerhub_upstream_failing_seconds gauge
informerhub_upstream_failing_seconds{group="",resource="configmaps",version="v1"} 5
# HELP informerhub_history_evicted_for_memory_total History changes evicted to keep the hub within --memory-budget, before the resource type's own bounds would have.
# TYPE informerhub_history_evicted_for_memory_total counter
informerhub_history_evicted_for_memory_total{group="",resource="configmaps",version="v1"} 11
informerhub_history_evicted_for_memory_total{group="apps",resource="deployments",version="v1"} 0
# HELP informerhub_memory_bytes Approximate bytes the hub holds, by kind: history, queues, label_indexes and state_clones (what snapshots and initial events being read keep of objects since changed) count within --memory-budget; state (the cached objects) and replay_state (bounded by --max-replay-state-bytes) apart.
# TYPE informerhub_memory_bytes gauge
informerhub_memory_bytes{kind="history"} 4096
informerhub_memory_bytes{kind="label_indexes"} 176
informerhub_memory_bytes{kind="queues"} 48000
informerhub_memory_bytes{kind="replay_state"} 0
informerhub_memory_bytes{kind="state"} 20480
informerhub_memory_bytes{kind="state_clones"} 0
# HELP informerhub_memory_budget_bytes The bound on history, queues and label indexes together (--memory-budget); past it, the oldest history changes are evicted first.
# TYPE informerhub_memory_budget_bytes gauge
informerhub_memory_budget_bytes 1.073741824e+09
# HELP informerhub_memory_over_budget_total Times the hub found itself over --memory-budget with nothing it could evict (queues, label indexes and each history's newest change stay; a feed busy for a moment counts too). Growing for minutes: the budget is too small for the streams and indexes the hub holds.
# TYPE informerhub_memory_over_budget_total counter
informerhub_memory_over_budget_total 3
# HELP informerhub_consistency_checks_total Consistency checks of an informer's cache against the API server's LIST at the same resourceVersion (--consistency-check-interval), by result: consistent; diverged (the cache differed, was logged with the first objects that differ, and relisted); compacted (the API server no longer served the position: tried again at the next, not an alarm); failed (the LIST failed, or was answered at another resourceVersion than asked; no relist).
# TYPE informerhub_consistency_checks_total counter
informerhub_consistency_checks_total{group="",resource="configmaps",result="compacted",version="v1"} 2
informerhub_consistency_checks_total{group="",resource="configmaps",result="consistent",version="v1"} 12
informerhub_consistency_checks_total{group="",resource="configmaps",result="diverged",version="v1"} 1
informerhub_consistency_checks_total{group="",resource="configmaps",result="failed",version="v1"} 0
informerhub_consistency_checks_total{group="apps",resource="deployments",result="compacted",version="v1"} 0
informerhub_consistency_checks_total{group="apps",resource="deployments",result="consistent",version="v1"} 0
informerhub_consistency_checks_total{group="apps",resource="deployments",result="diverged",version="v1"} 0
informerhub_consistency_checks_total{group="apps",resource="deployments",result="failed",version="v1"} 0
# HELP informerhub_subscriber_groups Distinct selectors of live subscribers: each is matched once per change it may concern.
# TYPE informerhub_subscriber_groups gauge
informerhub_subscriber_groups{group="",resource="configmaps",version="v1"} 2
`
	names := []string{"informerhub_informers_active", "informerhub_subscribers", "informerhub_subscriber_queue_depth_max",
		"informerhub_subscriber_queue_capacity", "informerhub_history_oldest_age_seconds", "informerhub_history_newest_age_seconds",
		"informerhub_events_received_total", "informerhub_events_sent_total", "informerhub_upstream_watch_restarts_total",
		"informerhub_expired_token_answers_total", "informerhub_filter_evaluation_errors_total", "informerhub_object_errors_total", "informerhub_subscriber_groups",
		"informerhub_subscribers_fell_behind_total", "informerhub_count_recounts_total", "informerhub_upstream_progress_age_seconds", "informerhub_upstream_failing_seconds",
		"informerhub_history_evicted_for_memory_total", "informerhub_memory_bytes", "informerhub_memory_budget_bytes", "informerhub_memory_over_budget_total",
		"informerhub_history_retained_oldest_age_seconds", "informerhub_history_disk_pending_changes", "informerhub_history_disk_bytes",
		"informerhub_history_disk_deleted_total", "informerhub_consistency_checks_total"}
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
	// Every metric the collector describes, it collects for an active
	// resource type: none is described but never reported.
	if n := testutil.CollectAndCount(c); n != 2*(14+4)+14+2+8+3 {
		t.Fatalf("collected %d metrics, want 14 totals and 4 results of consistency checks per resource type, 14 levels of the active one, 2 of the hub, 8 of its memory and 3 of its disk", n)
	}
}

func TestRegistry(t *testing.T) {
	m := New(fakeHub{}, BuildInfo{Version: "v1.2.3", Revision: "abc"})
	m.ObserveSnapshot(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, 3*time.Millisecond)
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*dto.MetricFamily{}
	for _, f := range families {
		byName[f.GetName()] = f
	}
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total", "informerhub_informers_active"} {
		if byName[name] == nil {
			t.Errorf("the registry has no %s", name)
		}
	}
	build := byName["informerhub_build_info"]
	if build == nil || len(build.Metric) != 1 || !hasLabel(build.Metric[0], "version", "v1.2.3") || !hasLabel(build.Metric[0], "revision", "abc") {
		t.Errorf("build info: %v", build)
	}
	snapshots := byName["informerhub_snapshot_duration_seconds"]
	if snapshots == nil || len(snapshots.Metric) != 1 || snapshots.Metric[0].GetHistogram().GetSampleCount() != 1 ||
		!hasLabel(snapshots.Metric[0], "resource", "configmaps") {
		t.Errorf("snapshot latency: %v", snapshots)
	}
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue() == value
		}
	}
	return false
}
