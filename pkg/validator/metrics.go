package validator

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/receiptflow/receiptflow/pkg/internal/telemetry"
)

// The kinds of RAW message receiptflow_validator_messages_in_total counts.
const (
	kindRecord    = "record"
	kindHeartbeat = "heartbeat"
)

type metrics struct {
	in    *prometheus.CounterVec
	out   *prometheus.CounterVec
	batch prometheus.Histogram
	// regressions counts state found behind what was written (Redis lost
	// acknowledged writes), by state: claims.
	regressions *prometheus.CounterVec
	// fenced counts claim progress marks refused because a later owner
	// holds the partition (ledger.ErrFenced).
	fenced prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		in: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "receiptflow_validator_messages_in_total", Help: "RAW messages handled, by kind (record: an event, valid or rejected; heartbeat).",
		}, []string{"kind"}),
		out: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "receiptflow_validator_messages_out_total", Help: "Messages published, by outcome (valid, rejected_<reason>).",
		}, []string{"outcome"}),
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "receiptflow_validator_batch_size_messages", Help: "RAW messages per processed batch.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 12),
		}),
		regressions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "receiptflow_validator_state_regressions_total",
			Help: "Times Redis state was found behind what this service had written there (lost acknowledged writes), by state; each one was rebuilt from the streams.",
		}, []string{"state"}),
		fenced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "receiptflow_validator_fenced_writes_total",
			Help: "Claim progress marks refused because a later owner (a larger epoch) holds the RAW partition; the instance stopped processing it.",
		}),
	}
	m.fenced = telemetry.Register(reg, m.fenced)
	m.in = telemetry.Register(reg, m.in)
	m.regressions = telemetry.Register(reg, m.regressions)
	m.out = telemetry.Register(reg, m.out)
	m.batch = telemetry.Register(reg, m.batch)
	// The former name, exported alongside for one release (CHANGELOG.md).
	telemetry.Register(reg, telemetry.Renamed(m.batch, "receiptflow_validator_batch_size", "receiptflow_validator_batch_size_messages"))
	return m
}
