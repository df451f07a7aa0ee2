package publisher

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/receiptflow/receiptflow/pkg/wire"
)

// gauge returns the value of the unlabelled gauge name in reg.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}

// TestSourceGaugesFollowTheHealthReport: the source's staleness and last
// message time, which the alert ReceiptflowSourceStale reads, are the
// health report's (issue 14, alert rules).
func TestSourceGaugesFollowTheHealthReport(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newMetrics(reg)
	seen := time.Date(2026, 12, 2, 10, 0, 0, 500_000_000, time.UTC)
	steps := []struct {
		h          wire.Health
		stale, at  float64
		whatItSays string
	}{
		{wire.Health{}, 0, 0, "nothing sent yet, not stale"},
		{wire.Health{Stale: true}, 1, 0, "nothing sent for longer than stale-after"},
		{wire.Health{SourceLastSeen: seen}, 0, float64(seen.UnixMilli()) / 1000, "live"},
		{wire.Health{SourceLastSeen: seen, Stale: true}, 1, float64(seen.UnixMilli()) / 1000, "silent since seen"},
		{wire.Health{SourceLastSeen: seen.Add(time.Minute)}, 0, float64(seen.Add(time.Minute).UnixMilli()) / 1000, "back"},
	}
	for _, s := range steps {
		m.observeSource(&s.h)
		if got := gauge(t, reg, "receiptflow_publisher_source_stale"); got != s.stale {
			t.Errorf("%s: source_stale %v, want %v", s.whatItSays, got, s.stale)
		}
		if got := gauge(t, reg, "receiptflow_publisher_source_last_seen_timestamp_seconds"); got != s.at {
			t.Errorf("%s: source_last_seen %v, want %v", s.whatItSays, got, s.at)
		}
	}
}
