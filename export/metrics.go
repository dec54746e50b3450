package export

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the routes' metrics, labelled by route. A nil *Metrics
// counts nothing.
type Metrics struct {
	sent         *prometheus.CounterVec
	acked        *prometheus.CounterVec
	relisted     *prometheus.CounterVec
	gaps         *prometheus.CounterVec
	failures     *prometheus.CounterVec
	stoppedRoute *prometheus.GaugeVec
	position     *prometheus.GaugeVec
	lastAt       *prometheus.GaugeVec

	lagSeconds, lagChanges *prometheus.Desc
	mu                     sync.Mutex      // guards lags
	lags                   map[string]*lag // by route: read when scraped
}

// NewMetrics makes the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	route := []string{"route"}
	m := &Metrics{
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "informerhub_export_changes_published_total",
			Help: "Changes sent to the route's sink; a change sent again after a failure counts again."}, route),
		acked: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "informerhub_export_changes_acknowledged_total",
			Help: "Changes the route's sink acknowledged, a gap's markers included."}, route),
		relisted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "informerhub_export_relisted_changes_total",
			Help: "Changes acknowledged that were found by a relist of the hub or are a gap's differences: the changes in between are unknown."}, route),
		gaps: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "informerhub_export_gaps_total",
			Help: "Gaps the route published (a GAP_END acknowledged): the hub could no longer resume the route, so it listed again."}, route),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "informerhub_export_failures_total",
			Help: "Times the route's export failed (its watch or its sink) and was retried from what the sink holds."}, route),
		stoppedRoute: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "informerhub_export_route_stopped",
			Help: "1 once the route stopped for good, on an error no retry can fix (logged)."}, route),
		position: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "informerhub_export_position_resource_version",
			Help: "The resourceVersion of the last change the route's sink acknowledged."}, route),
		lastAt: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "informerhub_export_last_acknowledged_timestamp_seconds",
			Help: "When the route's sink last acknowledged changes (Unix time)."}, route),
		lagSeconds: prometheus.NewDesc("informerhub_export_lag_seconds",
			"How long the oldest change the route received from the hub and its sink has not acknowledged has waited; 0 when none waits.", route, nil),
		lagChanges: prometheus.NewDesc("informerhub_export_lag_changes",
			"Changes the route received from the hub that its sink has not acknowledged.", route, nil),
		lags: map[string]*lag{},
	}
	reg.MustRegister(m.sent, m.acked, m.relisted, m.gaps, m.failures, m.stoppedRoute, m.position, m.lastAt, lagCollector{m})
	return m
}

// lagCollector reads the routes' lags when scraped.
type lagCollector struct{ m *Metrics }

func (c lagCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.m.lagSeconds
	ch <- c.m.lagChanges
}

func (c lagCollector) Collect(ch chan<- prometheus.Metric) {
	c.m.mu.Lock()
	lags := make(map[string]*lag, len(c.m.lags))
	for route, l := range c.m.lags {
		lags[route] = l
	}
	c.m.mu.Unlock()
	now := time.Now()
	for route, l := range lags {
		seconds, changes := l.read(now)
		ch <- prometheus.MustNewConstMetric(c.m.lagSeconds, prometheus.GaugeValue, seconds, route)
		ch <- prometheus.MustNewConstMetric(c.m.lagChanges, prometheus.GaugeValue, float64(changes), route)
	}
}

// follow reports route's lag from l; its other metrics start at 0.
func (m *Metrics) follow(route string, l *lag) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.lags[route] = l
	m.mu.Unlock()
	m.sent.WithLabelValues(route)
	m.acked.WithLabelValues(route)
	m.relisted.WithLabelValues(route)
	m.gaps.WithLabelValues(route)
	m.failures.WithLabelValues(route)
	m.stoppedRoute.WithLabelValues(route).Set(0)
}

// published counts changes sent to a sink.
func (m *Metrics) published(route string, n int) {
	if m != nil {
		m.sent.WithLabelValues(route).Add(float64(n))
	}
}

// acknowledged counts changes a sink acknowledged, at now.
func (m *Metrics) acknowledged(route string, changes []Change, now time.Time) {
	if m == nil || len(changes) == 0 {
		return
	}
	m.acked.WithLabelValues(route).Add(float64(len(changes)))
	relisted, gaps := 0, 0
	for _, c := range changes {
		if c.Type == GapEnd {
			gaps++
		}
		if (c.FromRelist || c.Resync) && !c.IsMarker() {
			relisted++
		}
	}
	m.relisted.WithLabelValues(route).Add(float64(relisted))
	m.gaps.WithLabelValues(route).Add(float64(gaps))
	if rv, err := strconv.ParseFloat(changes[len(changes)-1].ResourceVersion, 64); err == nil {
		m.position.WithLabelValues(route).Set(rv)
	}
	m.lastAt.WithLabelValues(route).Set(float64(now.UnixNano()) / 1e9)
}

// failed counts a failed export.
func (m *Metrics) failed(route string) {
	if m != nil {
		m.failures.WithLabelValues(route).Inc()
	}
}

// stopped marks a route stopped for good.
func (m *Metrics) stopped(route string) {
	if m != nil {
		m.stoppedRoute.WithLabelValues(route).Set(1)
	}
}
