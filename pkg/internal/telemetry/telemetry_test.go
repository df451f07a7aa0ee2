package telemetry

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// gathered returns the value of every series of the counter family name
// in reg, by its label values joined with ",".
func gathered(t *testing.T, reg *prometheus.Registry, name string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetValue())
			}
			out[strings.Join(labels, ",")] = m.GetCounter().GetValue()
		}
	}
	return out
}

func counter() prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: "receiptflow_test_events_total", Help: "test"})
}

// TestRegisterKeepsPredecessor: a second Register of an equal collector
// (a restarted service) returns the first one, so counts carry on instead
// of restarting from zero, and the registry exposes one series.
func TestRegisterKeepsPredecessor(t *testing.T) {
	reg := prometheus.NewRegistry()
	first := Register(reg, counter())
	first.Add(3)
	second := Register(reg, counter())
	if second != first {
		t.Fatal("the second Register returned a new collector, not the registered one")
	}
	second.Inc()
	if got := gathered(t, reg, "receiptflow_test_events_total"); len(got) != 1 || got[""] != 4 {
		t.Fatalf("registry holds %v, want one series at 4 (3 before the restart, 1 after)", got)
	}
}

// TestRegisterVec: the same holds for vectors, label values included.
func TestRegisterVec(t *testing.T) {
	reg := prometheus.NewRegistry()
	mk := func() *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "receiptflow_test_rejected_total", Help: "test"}, []string{"reason"})
	}
	a := Register(reg, mk())
	a.WithLabelValues("malformed_json").Inc()
	b := Register(reg, mk())
	b.WithLabelValues("malformed_json").Inc()
	if got := gathered(t, reg, "receiptflow_test_rejected_total"); len(got) != 1 || got["malformed_json"] != 2 {
		t.Fatalf("registry holds %v, want malformed_json at 2", got)
	}
}

// TestRegisterNil: a nil registerer registers nothing and returns c itself.
func TestRegisterNil(t *testing.T) {
	c := counter()
	if got := Register(nil, c); got != c {
		t.Fatal("Register(nil, c) did not return c")
	}
}

// TestRegisterConflictPanics: two different collectors under one name are
// a programming error, reported by a panic naming the metric.
func TestRegisterConflictPanics(t *testing.T) {
	reg := prometheus.NewRegistry()
	Register(reg, counter())
	defer func() {
		r := recover()
		if r == nil {
			t.Fatal("no panic for a conflicting collector")
		}
		if err, ok := r.(error); !ok || !strings.Contains(err.Error(), "receiptflow_test_events_total") {
			t.Fatalf("panic %v does not name the metric", r)
		}
	}()
	Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{Name: "receiptflow_test_events_total", Help: "other help"}))
}
