package dashboard

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/receiptflow/receiptflow/pkg/internal/telemetry"
)

type metrics struct {
	loads       prometheus.Counter
	reloads     *prometheus.CounterVec
	quietChecks prometheus.Counter
	updates     prometheus.Counter
	badEntries  prometheus.Counter
	clients     prometheus.Gauge
	pushes      prometheus.Counter
	alertPolls  *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	return &metrics{
		loads: telemetry.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "receiptflow_dashboard_bucket_loads_total", Help: "Full loads of the snapshot bucket.",
		})),
		reloads: telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "receiptflow_dashboard_rewatches_total", Help: "Watch sessions ended and started again, by reason.",
		}, []string{"reason"})),
		quietChecks: telemetry.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "receiptflow_dashboard_quiet_checks_total", Help: "Silences of the watch after which the bucket had not moved past it (an idle source): no re-watch.",
		})),
		updates: telemetry.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "receiptflow_dashboard_kv_updates_total", Help: "Live KV updates received.",
		})),
		badEntries: telemetry.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "receiptflow_dashboard_bad_entries_total", Help: "KV entries that could not be decoded.",
		})),
		clients: telemetry.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "receiptflow_dashboard_event_streams", Help: "Open Server-Sent Events streams.",
		})),
		pushes: telemetry.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "receiptflow_dashboard_pushes_total", Help: "Views pushed to the open event streams.",
		})),
		alertPolls: telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "receiptflow_dashboard_alert_polls_total", Help: "Polls of Prometheus's alerts (--prometheus-url), by result (ok, error).",
		}, []string{"result"})),
	}
}
