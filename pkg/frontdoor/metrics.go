package frontdoor

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/receiptflow/receiptflow/pkg/internal/telemetry"
)

// Metrics are the front door's metrics (docs/deployment.md).
type Metrics struct {
	requests *prometheus.CounterVec
	records  *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	inflight prometheus.Gauge
	refused  *prometheus.CounterVec
}

// NewMetrics registers the front door's metrics with reg (nil: unexported).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	return &Metrics{
		requests: telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "receiptflow_ingest_requests_total", Help: "Requests answered by the front door, by door (http, nats) and status code.",
		}, []string{"door", "code"})),
		records: telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "receiptflow_ingest_records_total", Help: "Records answered, by door and status (stored, duplicate, invalid; not_stored: in a 503 answer, to be sent again).",
		}, []string{"door", "status"})),
		latency: telemetry.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "receiptflow_ingest_request_seconds", Help: "Time from a request's body read to its answer, by door and status code.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"door", "code"})),
		inflight: telemetry.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "receiptflow_ingest_inflight_records", Help: "Records admitted and not yet answered (bounded by --max-inflight-events).",
		})),
		refused: telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "receiptflow_ingest_refused_total", Help: "Requests refused before their body was read, by door and reason (unauthorized, forbidden, not_loopback, no_reply, method, path).",
		}, []string{"door", "reason"})),
	}
}

// or returns m, or unregistered metrics when m is nil.
func (m *Metrics) or() *Metrics {
	if m != nil {
		return m
	}
	return NewMetrics(nil)
}

// observe counts an answered request.
func (m *Metrics) observe(door string, a *Answer, took time.Duration) {
	code := strconv.Itoa(a.Code)
	m.requests.WithLabelValues(door, code).Inc()
	m.latency.WithLabelValues(door, code).Observe(took.Seconds())
	m.records.WithLabelValues(door, StatusStored).Add(float64(a.Stored))
	m.records.WithLabelValues(door, StatusDuplicate).Add(float64(a.Duplicates))
	m.records.WithLabelValues(door, StatusInvalid).Add(float64(a.Invalid))
	m.records.WithLabelValues(door, "not_stored").Add(float64(a.notStored))
}
