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
