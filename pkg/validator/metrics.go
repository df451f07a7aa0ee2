package validator

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/receiptflow/receiptflow/pkg/internal/telemetry"
)

type metrics struct {
	in    *prometheus.CounterVec
	out   *prometheus.CounterVec
	batch prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		in: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "receiptflow_validator_messages_in_total", Help: "RAW messages read, by kind.",
		}, []string{"kind"}),
		out: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "receiptflow_validator_messages_out_total", Help: "Messages published, by outcome (valid, rejected_<reason>).",
		}, []string{"outcome"}),
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "receiptflow_validator_batch_size", Help: "Messages per processed batch.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 12),
		}),
	}
	m.in = telemetry.Register(reg, m.in)
	m.out = telemetry.Register(reg, m.out)
	m.batch = telemetry.Register(reg, m.batch)
	return m
}
