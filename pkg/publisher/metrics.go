package publisher

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/receiptflow/receiptflow/pkg/internal/telemetry"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

type metrics struct {
	writes    prometheus.Counter
	skipped   prometheus.Counter
	conflicts prometheus.Counter
	ahead     prometheus.Gauge
	// sourceStale and sourceLastSeen are meta.health's verdict on the
	// source, for alerting (deploy/prometheus/alerts.yml).
	sourceStale    prometheus.Gauge
	sourceLastSeen prometheus.Gauge
	// liveSources counts the sources live in some partition
	// (docs/spec.md §3.1).
	liveSources prometheus.Gauge
	dayWrites   prometheus.Counter
	pruned      *prometheus.CounterVec
	// step times the steps of each batch of change notices (stepWait ...
	// stepRollup): where the CHANGES→KV hop's time goes.
	step *telemetry.Steps
}

func newMetrics(reg prometheus.Registerer) *metrics {
	return &metrics{
		writes: telemetry.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "receiptflow_publisher_kv_writes_total", Help: "Window snapshots written to KV.",
		})),
		skipped: telemetry.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "receiptflow_publisher_kv_stale_skips_total", Help: "Snapshots not written because KV held a newer version.",
		})),
		conflicts: telemetry.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "receiptflow_publisher_kv_conflicts_total", Help: "Compare-and-set conflicts with another writer.",
		})),
		ahead: telemetry.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "receiptflow_publisher_watermark_ahead_of_clock_seconds",
			Help: "How far the furthest partition watermark is ahead of the publisher's clock (0: none is); above 0 a future-dated input moved it, and windows close early.",
		})),
		sourceStale: telemetry.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "receiptflow_publisher_source_stale",
			Help: "1 while no record or heartbeat has reached RAW for longer than --stale-after (readers are told the data is stale), else 0.",
		})),
		sourceLastSeen: telemetry.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "receiptflow_publisher_source_last_seen_timestamp_seconds",
			Help: "When RAW last received a record or heartbeat, seconds since the epoch (0: nothing yet).",
		})),
		liveSources: telemetry.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "receiptflow_publisher_live_sources",
			Help: "Sources of RAW live in at least one partition: holding its watermark (docs/spec.md §3.1).",
		})),
		dayWrites: telemetry.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "receiptflow_publisher_day_writes_total", Help: "Day rollups written to KV.",
		})),
		step: telemetry.NewSteps(reg, "receiptflow_publisher_batch_step_seconds",
			"Time of each step of a batch of change notices, by step: wait (its first notice stored → handled, the linger included), read (the windows read from Redis), put (their snapshots stored in KV), rollup (the day rollups stored)."),
		pruned: telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "receiptflow_publisher_pruned_total", Help: "Keys pruned from KV beyond their retention, by kind (window, day).",
		}, []string{"kind"})),
	}
}

// observeSource sets the source gauges from the health report h.
func (m *metrics) observeSource(h *wire.Health) {
	stale := 0.0
	if h.Stale {
		stale = 1
	}
	m.sourceStale.Set(stale)
	last := 0.0
	if !h.SourceLastSeen.IsZero() && h.SourceLastSeen.Unix() > 0 {
		last = float64(h.SourceLastSeen.UnixMilli()) / 1000
	}
	m.sourceLastSeen.Set(last)
}

// The steps of receiptflow_publisher_batch_step_seconds.
const (
	stepWait   = "wait"
	stepRead   = "read"
	stepPut    = "put"
	stepRollup = "rollup"
)
