package telemetry

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestStepsSince: a step is observed under its label, a time from a clock
// ahead of this one counts as 0, and a nil Steps observes nothing.
func TestStepsSince(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := NewSteps(reg, "test_batch_step_seconds", "Steps.")
	began := time.Now().Add(-50 * time.Millisecond)
	now := s.Since("read", began)
	if now.Sub(began) < 50*time.Millisecond {
		t.Fatalf("Since returned %v, want now", now)
	}
	s.Since("read", time.Now().Add(time.Hour))
	var none *Steps
	none.Since("read", began)

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var h *dto.Histogram
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) == 1 && m.GetLabel()[0].GetName() == "step" && m.GetLabel()[0].GetValue() == "read" {
				h = m.GetHistogram()
			}
		}
	}
	if h == nil || h.GetSampleCount() != 2 || h.GetSampleSum() < 0.05 || h.GetSampleSum() > 5 {
		t.Fatalf("step read: %v, want 2 samples summing to the 50 ms (the future one as 0)", h)
	}
}
