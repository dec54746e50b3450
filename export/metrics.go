package export

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the routes' metrics, labelled by route. A nil *Metrics
// counts nothing.
type Metrics struct {
	published *prometheus.CounterVec
	relisted  *prometheus.CounterVec
	failures  *prometheus.CounterVec
	position  *prometheus.GaugeVec
	lastAt    *prometheus.GaugeVec
}

// NewMetrics makes the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		published: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "informerhub_export_changes_published_total",
			Help: "Changes the route's sink acknowledged."}, []string{"route"}),
		relisted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "informerhub_export_relisted_changes_total",
			Help: "Changes published marked as found by a relist or a re-sync: the changes in between them are unknown."}, []string{"route"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "informerhub_export_failures_total",
			Help: "Times the route's export failed (its watch or its sink) and resumed from what the sink holds."}, []string{"route"}),
		position: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "informerhub_export_position_resource_version",
			Help: "The resourceVersion of the last change the route's sink acknowledged."}, []string{"route"}),
		lastAt: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "informerhub_export_last_published_timestamp_seconds",
			Help: "When the route's sink last acknowledged changes (Unix time)."}, []string{"route"}),
	}
	reg.MustRegister(m.published, m.relisted, m.failures, m.position, m.lastAt)
	return m
}

// acknowledged counts changes a sink acknowledged, at now (Unix seconds).
func (m *Metrics) acknowledged(route string, changes []Change, now float64) {
	if m == nil || len(changes) == 0 {
		return
	}
	m.published.WithLabelValues(route).Add(float64(len(changes)))
	relisted := 0
	for _, c := range changes {
		if c.FromRelist || c.Resync {
			relisted++
		}
	}
	m.relisted.WithLabelValues(route).Add(float64(relisted))
	if rv, err := strconv.ParseFloat(changes[len(changes)-1].ResourceVersion, 64); err == nil {
		m.position.WithLabelValues(route).Set(rv)
	}
	m.lastAt.WithLabelValues(route).Set(now)
}

// failed counts a failed export.
func (m *Metrics) failed(route string) {
	if m != nil {
		m.failures.WithLabelValues(route).Inc()
	}
}
