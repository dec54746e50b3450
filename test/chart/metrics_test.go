package chart

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/informerhub/informerhub/export"
	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/internal/testhub"
)

// exportedMetrics runs the hub against the control plane, with its history
// on disk, and gives it enough to do that every series exists: a
// retained resource type, a Watch that receives a change, a Snapshot and
// a unary call. It returns the metric names its /metrics lists (a
// histogram's _bucket, _sum and _count among them).
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	metricsAddr := testhub.FreeAddr(t)
	hub := testhub.Start(t, cluster.KubeConfig, "--metrics-listen", metricsAddr,
		"--history-dir", t.TempDir(), "--retain", "configmaps")
	ctx := ctxFor(t)
	ns, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "metrics-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(hub.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := informerhubv1.NewInformerHubServiceClient(conn)
	sel := &informerhubv1.ResourceSelector{Version: "v1", Resource: "configmaps", Namespace: ns.Name}
	watch, err := client.Watch(ctx, &informerhubv1.WatchRequest{Selector: sel, SendInitialEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	for resp, err := watch.Recv(); !resp.GetInitialEventsEnd(); resp, err = watch.Recv() {
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := kube.CoreV1().ConfigMaps(ns.Name).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if resp, err := watch.Recv(); err != nil || resp.Type != informerhubv1.EventType_EVENT_TYPE_ADDED {
		t.Fatalf("watch: %v %v", resp, err)
	}
	snap, err := client.Snapshot(ctx, &informerhubv1.SnapshotRequest{Selector: sel})
	if err != nil {
		t.Fatal(err)
	}
	for _, err := snap.Recv(); err != io.EOF; _, err = snap.Recv() {
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := client.ListResources(ctx, &informerhubv1.ListResourcesRequest{}); err != nil {
		t.Fatal(err)
	}

	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for name, f := range families {
		names[name] = true
		if f.GetType().String() == "HISTOGRAM" || f.GetType().String() == "SUMMARY" {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				names[name+suffix] = true
			}
		}
	}
	return names
}

// dashboardExpressions returns the PromQL of the dashboard the chart
// ships: its panels' queries, and the metric selectors of its variables'
// label_values, with Grafana's own variables as Prometheus reads them.
func dashboardExpressions(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(chartDir(t), "files", "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Targets []struct{ Expr string }
		}
		Templating struct {
			List []struct {
				Type  string
				Query any
			}
		}
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	var exprs []string
	for _, p := range d.Panels {
		for _, target := range p.Targets {
			exprs = append(exprs, target.Expr)
		}
	}
	labelValues := regexp.MustCompile(`^label_values\((.+), *[a-z_]+\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(string)
		m := labelValues.FindStringSubmatch(q)
		if m == nil {
			t.Errorf("the dashboard's variable query %q is not label_values(<selector>, <label>)", q)
			continue
		}
		exprs = append(exprs, m[1])
	}
	if len(exprs) < 20 {
		t.Fatalf("the dashboard has %d queries: not the usual dashboard", len(exprs))
	}
	// Grafana fills in $__rate_interval; the other variables are in
	// label matchers' strings, which parse as they are.
	for i, e := range exprs {
		exprs[i] = strings.ReplaceAll(e, "$__rate_interval", "5m")
	}
	return exprs
}

// exportMetrics are the metrics of informerhub-export, as package export
// describes them when it registers them: every one, whether or not a
// route has set it yet. Each is in docs/export.md's table.
func exportMetrics(t *testing.T) []string {
	t.Helper()
	d := describedMetrics{}
	export.NewMetrics(d)
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "export.md"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for name := range d {
		names = append(names, name)
		if !strings.Contains(string(doc), "| `"+name+"` |") {
			t.Errorf("docs/export.md's table of metrics lacks %s", name)
		}
	}
	if len(names) == 0 {
		t.Fatal("package export describes no metric")
	}
	return names
}

// describedMetrics is a prometheus.Registerer that keeps the names of the
// metrics its collectors describe.
type describedMetrics map[string]bool

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (d describedMetrics) Register(c prometheus.Collector) error {
	descs := make(chan *prometheus.Desc)
	go func() {
		c.Describe(descs)
		close(descs)
	}()
	for desc := range descs {
		if m := fqName.FindStringSubmatch(desc.String()); m != nil {
			d[m[1]] = true
		}
	}
	return nil
}

func (d describedMetrics) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = d.Register(c)
	}
}

func (d describedMetrics) Unregister(prometheus.Collector) bool { return false }

// Every PromQL expression of the alerting rules and the dashboard parses
// (Prometheus' own parser, in promql-metrics) and reads only metrics that
// a running hub exports, or, the group informerhub-export, only
// informerhub-export's (exportMetrics); and every metric of the hub's own
// is in docs/operations.md's table.
func TestExpressionsReadOnlyMetricsTheHubExports(t *testing.T) {
	exported, byExport := exportedMetrics(t), exportMetrics(t)
	var exprs []string
	byExporter := map[string]bool{} // the expressions of the export's alerts
	for name, rules := range readGroups(t) {
		for _, r := range rules {
			exprs = append(exprs, r.Expr)
			if name == exportGroup {
				byExporter[r.Expr] = true
			}
		}
	}
	exprs = append(exprs, dashboardExpressions(t)...)
	input, err := json.Marshal(exprs)
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := run(t, strings.NewReader(string(input)), tool(t, "promql-metrics"))
	if err != nil {
		t.Fatal(err)
	}
	var results []struct {
		Expr    string
		Metrics []string
		Error   string
	}
	if err := json.Unmarshal([]byte(out), &results); err != nil || len(results) != len(exprs) {
		t.Fatalf("promql-metrics answered %d results for %d expressions (%v):\n%s", len(results), len(exprs), err, out)
	}
	read := map[string]bool{}
	for _, r := range results {
		if r.Error != "" {
			t.Errorf("%s: %s", r.Expr, r.Error)
		}
		if len(r.Metrics) == 0 && r.Error == "" {
			t.Errorf("%s reads no metric", r.Expr)
		}
		for _, m := range r.Metrics {
			read[m] = true
			switch {
			case byExporter[r.Expr] && !slices.Contains(byExport, m):
				t.Errorf("%s reads %s, which informerhub-export does not export", r.Expr, m)
			case !byExporter[r.Expr] && !exported[m]:
				t.Errorf("%s reads %s, which the hub does not export", r.Expr, m)
			}
		}
	}
	t.Logf("%d expressions read %d metrics, all exported", len(exprs), len(read))

	ops, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	var undocumented []string
	for name := range exported {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
		if strings.HasPrefix(name, "informerhub_") && !strings.Contains(string(ops), "`"+base+"`") {
			undocumented = append(undocumented, name)
		}
	}
	slices.Sort(undocumented)
	if len(undocumented) > 0 {
		t.Errorf("docs/operations.md's metrics table lacks %v", undocumented)
	}
}
