package windower

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/receiptflow/receiptflow/pkg/internal/telemetry"
)

type metrics struct {
	decisions *prometheus.CounterVec
	batch     prometheus.Histogram
	script    prometheus.Histogram
	// step times the steps of each batch (stepWait ... stepMark): where
	// the VALID→CHANGES hop's time goes.
	step      *telemetry.Steps
	watermark *prometheus.GaugeVec
	entries   prometheus.Counter
	retired   prometheus.Counter
	// regressions counts Redis state found behind what was applied (lost
	// acknowledged writes), by state: checkpoint.
	regressions *prometheus.CounterVec
	// fenced counts steps refused because a later owner holds the
	// partition (ledger.ErrFenced).
	fenced prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		decisions: telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "receiptflow_windower_events_total", Help: "VALID messages applied, by decision.",
		}, []string{"decision"})),
		batch: telemetry.Register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "receiptflow_windower_batch_size_messages", Help: "VALID messages per script call.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 12),
		})),
		script: telemetry.Register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "receiptflow_windower_script_seconds", Help: "Latency of the apply script.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		})),
		step: telemetry.NewSteps(reg, "receiptflow_windower_batch_step_seconds",
			"Time of each step of a batch, by step: wait (its first VALID message stored → handled), apply (the apply script calls), publish (its LATE and CHANGES messages stored), mark (the published mark written on its own, when the partition goes idle or stops: a busy partition's next apply script carries it)."),
		watermark: telemetry.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "receiptflow_windower_watermark_timestamp_seconds", Help: "Partition watermark, a Unix time in seconds.",
		}, []string{"partition"})),
		entries: telemetry.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "receiptflow_windower_ledger_entries_added_total", Help: "Ledger entries written.",
		})),
		retired: telemetry.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "receiptflow_windower_windows_retired_total", Help: "Window states retired after the replay horizon.",
		})),
		regressions: telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "receiptflow_windower_state_regressions_total",
			Help: "Times Redis state was found behind what this service had applied there (lost acknowledged writes), by state; each one was replayed from VALID.",
		}, []string{"state"})),
		fenced: telemetry.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "receiptflow_windower_fenced_writes_total",
			Help: "Redis steps refused because a later owner (a larger epoch) holds the partition; the instance stopped processing it.",
		})),
	}
	// Former names, exported alongside for one release (CHANGELOG.md).
	telemetry.Register(reg, telemetry.Renamed(m.batch, "receiptflow_windower_batch_size", "receiptflow_windower_batch_size_messages"))
	telemetry.Register(reg, telemetry.Renamed(m.watermark, "receiptflow_windower_watermark_seconds",
		"receiptflow_windower_watermark_timestamp_seconds", "partition"))
	return m
}

// The steps of receiptflow_windower_batch_step_seconds.
const (
	stepWait    = "wait"
	stepApply   = "apply"
	stepPublish = "publish"
	stepMark    = "mark"
)
