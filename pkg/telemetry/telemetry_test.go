package telemetry

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

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
	if got := testutil.ToFloat64(first); got != 4 {
		t.Fatalf("counter = %v, want 4 (3 before the restart, 1 after)", got)
	}
	n, err := testutil.GatherAndCount(reg, "receiptflow_test_events_total")
	if err != nil || n != 1 {
		t.Fatalf("registry holds %d series (%v), want 1", n, err)
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
	if got := testutil.ToFloat64(a.WithLabelValues("malformed_json")); got != 2 {
		t.Fatalf("vec counter = %v, want 2", got)
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
