// Package dashboard builds informerhub's Grafana dashboard, which the chart
// ships as charts/informerhub/files/dashboard.json: one table of panels,
// row by row, instead of a thousand lines of JSON to keep in step by hand.
// TestTheCommittedDashboardIsGenerated fails when the file is not what
// JSON makes; `go test ./internal/dashboard -update` writes it.
//
// Every panel reads the hub's own metrics (test/chart checks each
// expression against a running hub's /metrics), selected by the
// variables namespace, job and pod (the labels the Prometheus Operator's
// scrape adds) and, where the metric has one, resource.
package dashboard

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// The selectors of the variables: a replica's metrics, and a resource
// type's.
const (
	hub = `namespace="$namespace", job="$job", pod=~"$pod"`
	res = hub + `, resource=~"$resource"`
	// byResource names a resource type in a legend: configmaps,
	// deployments apps.
	byResource = "{{resource}} {{group}}"
)

// rate is the rate of counter over Grafana's rate interval, selected by sel.
func rate(counter, sel string) string {
	return fmt.Sprintf("rate(%s{%s}[$__rate_interval])", counter, sel)
}

// perResource sums expr's series of each resource type over the replicas.
func perResource(agg, expr string) string {
	return fmt.Sprintf("%s by (group, resource) (%s)", agg, expr)
}

// panel is one graph or number.
type panel struct {
	title, description string
	kind               string // "timeseries" (default) or "stat"
	unit               string // a Grafana unit: s, bytes, ops, short
	stack              bool   // series stack up to a whole
	width              int    // of 24 columns; default 8
	targets            []target
}

type target struct{ expr, legend string }

// row is a titled group of panels.
type row struct {
	title  string
	panels []panel
}

// rows are the dashboard, top to bottom, as issue 28 lists them: the
// upstream, the fan-out, memory against the budget, the disk history,
// authentication and authorization, and latency where the hub measures
// it; an overview first.
var rows = []row{
	{"Overview", []panel{
		{title: "Ready replicas", kind: "stat", unit: "short", width: 6,
			description: "Replicas ready for new clients (informerhub_ready, what /readyz says), of those scraped.",
			targets:     []target{{"sum(informerhub_ready{" + hub + "})", "ready"}, {"count(informerhub_ready{" + hub + "})", "replicas"}}},
		{title: "Informers running", kind: "stat", unit: "short", width: 6,
			description: "Informers running on all replicas together: each holds one watch on the API server.",
			targets:     []target{{"sum(informerhub_informers_active{" + hub + "})", "informers"}}},
		{title: "Open streams", kind: "stat", unit: "short", width: 6,
			description: "Subscriptions and snapshots open on all replicas together.",
			targets:     []target{{"sum(informerhub_subscribers{" + hub + "})", "streams"}}},
		{title: "Version", kind: "stat", unit: "short", width: 6,
			description: "Replicas by the version they run (informerhub_build_info).",
			targets:     []target{{"count by (version) (informerhub_build_info{" + hub + "})", "{{version}}"}}},
	}},
	{"Upstream: the API server to the hub, per resource type", []panel{
		{title: "Time since the API server delivered", unit: "s",
			description: "On the worst replica, time since the API server last delivered anything to the informer: a change, a list, a bookmark (about once a minute when nothing changes). Rising past a few minutes without failures: the watch hangs (InformerhubFeedStale).",
			targets:     []target{{perResource("max", "informerhub_upstream_progress_age_seconds{"+res+"}"), byResource}}},
		{title: "Lists and watches failing for", unit: "s",
			description: "On the worst replica, how long the informer's lists and watches have failed with nothing delivered; 0 while they do not. Its streams end at --max-upstream-failure (InformerhubUpstreamUnreachable).",
			targets:     []target{{perResource("max", "informerhub_upstream_failing_seconds{"+res+"}"), byResource}}},
		{title: "Changes received", unit: "ops",
			description: "Changes the informers take from the API server, a relist's differences included, per second, all replicas together.",
			targets:     []target{{perResource("sum", rate("informerhub_events_received_total", res)), byResource}}},
		{title: "Relists", unit: "ops",
			description: "Relists after the first sync (a watch that could not resume), per second: an unstable API server or network.",
			targets:     []target{{perResource("sum", rate("informerhub_relists_total", res)), byResource}}},
		{title: "Watches reopened", unit: "ops",
			description: "Upstream watches reopened after the API server closed or broke one, per second.",
			targets:     []target{{perResource("sum", rate("informerhub_upstream_watch_restarts_total", res)), byResource}}},
		{title: "Cached objects", unit: "short",
			description: "Objects in each informer's state, on the replica holding the most.",
			targets:     []target{{perResource("max", "informerhub_cached_objects{"+res+"}"), byResource}}},
		{title: "Consistency checks", unit: "ops", width: 24,
			description: "Checks of each informer's cache against the API server's LIST at the same resourceVersion (--consistency-check-interval), per second, all replicas together, by result: consistent; diverged (the cache had lost a change: logged and relisted, InformerhubCacheDiverged); compacted (the position was gone before the check listed it; no alarm); failed (the LIST failed).",
			targets:     []target{{"sum by (group, resource, result) (" + rate("informerhub_consistency_checks_total", res) + ")", byResource + " {{result}}"}}},
	}},
	{"Fan-out: the hub to its clients, per resource type", []panel{
		{title: "Open streams", unit: "short", stack: true,
			description: "Subscriptions and snapshots open, all replicas together.",
			targets:     []target{{perResource("sum", "informerhub_subscribers{"+res+"}"), byResource}}},
		{title: "Events delivered", unit: "ops", stack: true,
			description: "Events handed to streams per second (initial events and bookmarks included), all replicas together.",
			targets:     []target{{perResource("sum", rate("informerhub_events_sent_total", res)), byResource}}},
		{title: "Fullest subscriber queue", unit: "short",
			description: "The most changes a live subscriber's queue held over the last 30 to 60 s, on the worst replica. At the capacity (--queue-size) a subscriber falls behind and reads on from the history.",
			targets: []target{
				{perResource("max", "informerhub_subscriber_queue_depth_max{"+res+"}"), byResource},
				{"max(informerhub_subscriber_queue_capacity{" + hub + "})", "capacity (--queue-size)"},
			}},
		{title: "Fell behind", unit: "ops",
			description: "Times per second a live subscriber's queue was full and it read on from the history (InformerhubSubscribersFallingBehind).",
			targets:     []target{{perResource("sum", rate("informerhub_subscribers_fell_behind_total", res)), byResource}}},
		{title: "Cut as too slow", unit: "ops",
			description: "Per second: subscribers ended for falling further behind than the history (InformerhubSlowSubscribersCut); and counters (Count) that did, and counted afresh from the cache, ending nobody.",
			targets: []target{
				{perResource("sum", rate("informerhub_slow_subscriber_disconnects_total", res)), byResource},
				{perResource("sum", rate("informerhub_count_recounts_total", res)), byResource + " counted afresh"},
			}},
		{title: "Expired tokens and replays", unit: "ops",
			description: "Per second: resume tokens answered OUT_OF_RANGE, older than the history and the API server's (InformerhubExpiredTokensSpiking); and tokens older than the history, replayed from the API server.",
			targets: []target{
				{perResource("sum", rate("informerhub_expired_token_answers_total", res)), byResource + " expired"},
				{perResource("sum", rate("informerhub_replays_total", res)), byResource + " replayed"},
			}},
		{title: "Selectors, filters and projections in use", unit: "short",
			description: "On the busiest replica: distinct selectors of live subscribers (each matched once per change it may concern), CEL filters and projections (bounded by --max-filters-per-resource and --max-projections-per-resource).",
			targets: []target{
				{perResource("max", "informerhub_subscriber_groups{"+res+"}"), byResource + " selectors"},
				{perResource("max", "informerhub_filters_in_use{"+res+"}"), byResource + " filters"},
				{perResource("max", "informerhub_projections_in_use{"+res+"}"), byResource + " projections"},
			}},
		{title: "Filter and object errors", unit: "ops",
			description: "Per second: filter evaluations that could not decide (their objects are sent marked with filter_error), and events the hub could not make of an object (a bug: report it).",
			targets: []target{
				{perResource("sum", rate("informerhub_filter_evaluation_errors_total", res)), byResource + " filter errors"},
				{perResource("sum", rate("informerhub_object_errors_total", res)), byResource + " object errors"},
			}},
		{title: "Calls by code", unit: "ops", stack: true,
			description: "Calls ended per second by gRPC code, every protocol and replica together.",
			targets:     []target{{"sum by (grpc_code) (" + rate("grpc_server_handled_total", hub) + ")", "{{grpc_code}}"}}},
	}},
	{"Memory, against --memory-budget", []panel{
		{title: "Held within the budget", unit: "bytes",
			description: "Per replica: what counts within --memory-budget (history, queues, label indexes, state clones), and the budget. Held above the budget for long: nothing is left to evict (InformerhubMemoryOverBudget).",
			targets: []target{
				{`sum by (pod) (informerhub_memory_bytes{` + hub + `, kind=~"history|queues|label_indexes|state_clones"})`, "{{pod}} held"},
				{"max by (pod) (informerhub_memory_budget_bytes{" + hub + "})", "{{pod}} budget"},
			}},
		{title: "Held, by kind", unit: "bytes", stack: true,
			description: "What all replicas hold, by kind: within the budget history, queues, label_indexes and state_clones; apart from it state (the cached objects) and replay_state.",
			targets:     []target{{"sum by (kind) (informerhub_memory_bytes{" + hub + "})", "{{kind}}"}}},
		{title: "Evicted for memory, and over budget", unit: "ops",
			description: "Per second: history changes evicted to stay within the budget, per resource type; and times a replica found itself over the budget with nothing it could evict.",
			targets: []target{
				{perResource("sum", rate("informerhub_history_evicted_for_memory_total", res)), byResource + " evicted"},
				{"sum by (pod) (" + rate("informerhub_memory_over_budget_total", hub) + ")", "{{pod}} over budget"},
			}},
		{title: "History held in memory", unit: "bytes",
			description: "Per resource type, on the replica holding the most: the changes kept for resuming, with the objects only they keep alive (--history-bytes bounds each).",
			targets:     []target{{perResource("max", "informerhub_history_bytes{"+res+"}"), byResource}}},
		{title: "How far back tokens resume", unit: "s",
			description: "Per resource type, on the replica reaching least far: from memory alone, and without the API server (memory or disk). An older token is replayed from the API server, or expires.",
			targets: []target{
				{perResource("min", "informerhub_history_oldest_age_seconds{"+res+"}"), byResource + " memory"},
				{perResource("min", "informerhub_history_retained_oldest_age_seconds{"+res+"}"), byResource + " memory or disk"},
			}},
		{title: "Process memory", unit: "bytes",
			description: "Per replica: resident memory, and the Go heap in use. GOMEMLIMIT (the container's limit) makes the runtime collect harder near it.",
			targets: []target{
				{"process_resident_memory_bytes{" + hub + "}", "{{pod}} resident"},
				{"go_memstats_heap_inuse_bytes{" + hub + "}", "{{pod}} heap in use"},
			}},
	}},
	{"Disk history (--history-dir)", []panel{
		{title: "On disk", unit: "bytes",
			description: "Per replica: what the disk history takes (--history-disk-bytes bounds it; the volume needs room beyond it).",
			targets:     []target{{"informerhub_history_disk_bytes{" + hub + "}", "{{pod}}"}}},
		{title: "Waiting to be written", unit: "short",
			description: "Changes not yet on disk, per resource type, on the replica with the most; the memory keeps them. Growing: the disk cannot keep up (InformerhubDiskHistoryBacklog).",
			targets:     []target{{perResource("max", "informerhub_history_disk_pending_changes{"+res+"}"), byResource}}},
		{title: "Write errors and spills", unit: "ops",
			description: "Per second: failed writes (InformerhubDiskHistoryWriteErrors); and spills, a resource type served from memory alone because its disk fell behind or a write failed.",
			targets: []target{
				{"sum by (pod) (" + rate("informerhub_history_disk_write_errors_total", hub) + ")", "{{pod}} write errors"},
				{perResource("sum", rate("informerhub_history_disk_spills_total", res)), byResource + " spills"},
			}},
		{title: "Deleted by retention", unit: "ops",
			description: "Changes deleted per second by --history-retention and --history-disk-bytes, per replica.",
			targets:     []target{{"sum by (pod) (" + rate("informerhub_history_disk_deleted_total", hub) + ")", "{{pod}}"}}},
	}},
	{"Authentication and authorization", []panel{
		{title: "Authentications", unit: "ops", stack: true,
			description: "Callers' credentials checked per second (cached answers included), by new call or running stream's recheck, and result: accepted, rejected (UNAUTHENTICATED), refused (TokenReview budget) or error (the API server could not answer).",
			targets:     []target{{"sum by (check, result) (" + rate("informerhub_authentications_total", hub) + ")", "{{check}} {{result}}"}}},
		{title: "TokenReviews refused for budget", unit: "ops",
			description: "Calls refused per second before any TokenReview because rejected tokens used up a budget: one client address's (--token-reviews-per-peer) or all clients' (--token-reviews-rejected) (InformerhubTokenReviewsRefused).",
			targets:     []target{{"sum by (limit) (" + rate("informerhub_token_reviews_refused_total", hub) + ")", "{{limit}}"}}},
		{title: "Authorizations", unit: "ops", stack: true,
			description: "Authorization decisions per second (one per verb and resource type asked; cached answers included), by new call or recheck, and result: allowed, denied (PERMISSION_DENIED) or error.",
			targets:     []target{{"sum by (check, result) (" + rate("informerhub_authorizations_total", hub) + ")", "{{check}} {{result}}"}}},
	}},
	{"Latency", []panel{
		{title: "Snapshots: time to their point in time", unit: "s", width: 12,
			description: "Per resource type, the median and 99th percentile of the time from a Snapshot request until its point in time is fixed (a first snapshot waits for the informer's initial list).",
			targets: []target{
				{"histogram_quantile(0.5, sum by (le, group, resource) (" + rate("informerhub_snapshot_duration_seconds_bucket", res) + "))", byResource + " p50"},
				{"histogram_quantile(0.99, sum by (le, group, resource) (" + rate("informerhub_snapshot_duration_seconds_bucket", res) + "))", byResource + " p99"},
			}},
		{title: "Unary calls (99th percentile)", unit: "s", width: 12,
			description: "Per method, the 99th percentile of unary calls' handling time (ListResources); streams run for as long as their clients want.",
			targets: []target{
				{`histogram_quantile(0.99, sum by (le, grpc_method) (rate(grpc_server_handling_seconds_bucket{` + hub + `, grpc_type="unary"}[$__rate_interval])))`, "{{grpc_method}}"},
			}},
	}},
}

// The variables: the data source, then which hubs (namespace, job, pod)
// and which resource types. Each query is label_values of a metric every
// hub exports.
var variables = []variable{
	{name: "namespace", label: "Namespace", query: "label_values(informerhub_build_info, namespace)"},
	{name: "job", label: "Job", query: `label_values(informerhub_build_info{namespace="$namespace"}, job)`},
	{name: "pod", label: "Replica", multi: true, query: `label_values(informerhub_build_info{namespace="$namespace", job="$job"}, pod)`},
	{name: "resource", label: "Resource type", multi: true, query: `label_values(informerhub_events_received_total{namespace="$namespace", job="$job"}, resource)`},
}

type variable struct {
	name, label, query string
	multi              bool // several values, and All (any)
}

// datasource is every panel's and query's: the variable's.
var datasource = map[string]string{"type": "prometheus", "uid": "${datasource}"}

// JSON returns the dashboard, as Grafana imports it, indented.
func JSON() ([]byte, error) {
	var panels []any
	id, y := 0, 0
	for _, r := range rows {
		id++
		panels = append(panels, map[string]any{
			"type": "row", "id": id, "title": r.title, "collapsed": false, "panels": []any{},
			"gridPos": map[string]int{"h": 1, "w": 24, "x": 0, "y": y},
		})
		y++
		x, rowHeight := 0, 0
		for _, p := range r.panels {
			id++
			w, h := p.width, 8
			if w == 0 {
				w = 8
			}
			if p.kind == "stat" {
				h = 4
			}
			if x+w > 24 {
				x, y = 0, y+rowHeight
			}
			panels = append(panels, p.json(id, map[string]int{"h": h, "w": w, "x": x, "y": y}))
			x, rowHeight = x+w, h
		}
		y += rowHeight
	}
	templating := []any{map[string]any{
		"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
		"current": map[string]any{}, "hide": 0, "refresh": 1, "regex": "", "options": []any{},
	}}
	for _, v := range variables {
		t := map[string]any{
			"name": v.name, "label": v.label, "type": "query", "datasource": datasource,
			"query": v.query, "definition": v.query, "refresh": 2, "sort": 1, "hide": 0,
			"current": map[string]any{}, "options": []any{}, "regex": "",
			"multi": v.multi, "includeAll": v.multi,
		}
		if v.multi {
			t["allValue"] = ".*"
		}
		templating = append(templating, t)
	}
	d := map[string]any{
		"uid":   "informerhub",
		"title": "informerhub",
		"description": "informerhub per resource type: the upstream, the fan-out, memory against the budget, the disk history, " +
			"authentication and authorization, latency. Generated by internal/dashboard; alerts: docs/runbook.md.",
		"tags":          []string{"informerhub", "kubernetes"},
		"editable":      true,
		"graphTooltip":  1,
		"schemaVersion": 39,
		"version":       1,
		"refresh":       "30s",
		"time":          map[string]string{"from": "now-6h", "to": "now"},
		"timepicker":    map[string]any{},
		"timezone":      "",
		"annotations":   map[string]any{"list": []any{}},
		"links":         []any{},
		"templating":    map[string]any{"list": templating},
		"panels":        panels,
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(d); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func (p panel) json(id int, gridPos map[string]int) map[string]any {
	var targets []any
	for i, t := range p.targets {
		targets = append(targets, map[string]any{
			"datasource": datasource, "expr": t.expr, "legendFormat": t.legend,
			"refId": string(rune('A' + i)), "range": true,
		})
	}
	defaults := map[string]any{"unit": p.unit}
	out := map[string]any{
		"id": id, "title": p.title, "description": p.description, "gridPos": gridPos,
		"datasource": datasource, "targets": targets,
	}
	switch p.kind {
	case "stat":
		out["type"] = "stat"
		defaults["color"] = map[string]string{"mode": "thresholds"}
		defaults["thresholds"] = map[string]any{"mode": "absolute", "steps": []any{map[string]any{"color": "green", "value": nil}}}
		out["options"] = map[string]any{
			"reduceOptions": map[string]any{"calcs": []string{"lastNotNull"}, "fields": "", "values": false},
			"textMode":      "value_and_name", "colorMode": "none", "graphMode": "none", "justifyMode": "auto", "orientation": "auto",
		}
	default:
		out["type"] = "timeseries"
		custom := map[string]any{"fillOpacity": 10, "lineWidth": 1, "showPoints": "never", "spanNulls": false}
		if p.stack {
			custom["stacking"] = map[string]string{"mode": "normal", "group": "A"}
			custom["fillOpacity"] = 40
		}
		defaults["custom"] = custom
		defaults["min"] = 0
		out["options"] = map[string]any{
			"legend":  map[string]any{"displayMode": "list", "placement": "bottom", "showLegend": true},
			"tooltip": map[string]any{"mode": "multi", "sort": "desc"},
		}
	}
	out["fieldConfig"] = map[string]any{"defaults": defaults, "overrides": []any{}}
	return out
}
