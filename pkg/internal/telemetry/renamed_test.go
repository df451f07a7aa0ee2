package telemetry

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestRenamedExportsTheFormerName: a renamed gauge and histogram are
// exported under both names with the same values and labels, the former
// name's help says it is deprecated and names the new one, and a
// restarted service registering both again still exposes one series each.
func TestRenamedExportsTheFormerName(t *testing.T) {
	reg := prometheus.NewRegistry()
	register := func() (*prometheus.GaugeVec, prometheus.Histogram) {
		g := Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "receiptflow_test_mark_timestamp_seconds", Help: "A time."},
			[]string{"partition", "zone"}))
		Register(reg, Renamed(g, "receiptflow_test_mark_seconds", "receiptflow_test_mark_timestamp_seconds", "zone", "partition"))
		h := Register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{Name: "receiptflow_test_batch_size_messages", Help: "Sizes.",
			Buckets: []float64{1, 10}}))
		Register(reg, Renamed(h, "receiptflow_test_batch_size", "receiptflow_test_batch_size_messages"))
		return g, h
	}
	g, h := register()
	g.WithLabelValues("3", "utc").Set(1764670000)
	h.Observe(4)
	g2, h2 := register() // a restart in the same process
	g2.WithLabelValues("1", "utc").Set(1764660000)
	h2.Observe(20)
	want := `
# HELP receiptflow_test_mark_seconds Deprecated: renamed to receiptflow_test_mark_timestamp_seconds, which has the same value; this name is removed in the next release (CHANGELOG.md).
# TYPE receiptflow_test_mark_seconds gauge
receiptflow_test_mark_seconds{partition="1",zone="utc"} 1.76466e+09
receiptflow_test_mark_seconds{partition="3",zone="utc"} 1.76467e+09
# HELP receiptflow_test_mark_timestamp_seconds A time.
# TYPE receiptflow_test_mark_timestamp_seconds gauge
receiptflow_test_mark_timestamp_seconds{partition="1",zone="utc"} 1.76466e+09
receiptflow_test_mark_timestamp_seconds{partition="3",zone="utc"} 1.76467e+09
# HELP receiptflow_test_batch_size Deprecated: renamed to receiptflow_test_batch_size_messages, which has the same value; this name is removed in the next release (CHANGELOG.md).
# TYPE receiptflow_test_batch_size histogram
receiptflow_test_batch_size_bucket{le="1"} 0
receiptflow_test_batch_size_bucket{le="10"} 1
receiptflow_test_batch_size_bucket{le="+Inf"} 2
receiptflow_test_batch_size_sum 24
receiptflow_test_batch_size_count 2
# HELP receiptflow_test_batch_size_messages Sizes.
# TYPE receiptflow_test_batch_size_messages histogram
receiptflow_test_batch_size_messages_bucket{le="1"} 0
receiptflow_test_batch_size_messages_bucket{le="10"} 1
receiptflow_test_batch_size_messages_bucket{le="+Inf"} 2
receiptflow_test_batch_size_messages_sum 24
receiptflow_test_batch_size_messages_count 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
