package testenv

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// CounterSum is the sum of the counter family name on reg over all its
// labels (0 when reg has none). It fails t if reg cannot be gathered.
func CounterSum(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// HistogramByLabel returns, for the histogram family name on reg, each
// value of its label label with the sample count and sum there (nil when
// reg has none). It fails t if reg cannot be gathered.
func HistogramByLabel(t testing.TB, reg *prometheus.Registry, name, label string) map[string]HistogramSample {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]HistogramSample
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		out = map[string]HistogramSample{}
		for _, m := range mf.GetMetric() {
			var v string
			for _, l := range m.GetLabel() {
				if l.GetName() == label {
					v = l.GetValue()
				}
			}
			h := m.GetHistogram()
			out[v] = HistogramSample{Count: h.GetSampleCount(), Sum: h.GetSampleSum()}
		}
	}
	return out
}

// HistogramSample is one histogram's sample count and sum.
type HistogramSample struct {
	Count uint64
	Sum   float64
}
