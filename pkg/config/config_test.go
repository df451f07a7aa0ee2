package config

import (
	"flag"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseOwned(t *testing.T) {
	got, err := ParseOwned("0, 2-4,7", 8)
	if err != nil || !reflect.DeepEqual(got, []int{0, 2, 3, 4, 7}) {
		t.Fatalf("ParseOwned = %v, %v", got, err)
	}
	for _, bad := range []string{"8", "x", "1-x", "-1"} {
		if _, err := ParseOwned(bad, 8); err == nil {
			t.Errorf("ParseOwned(%q) accepted", bad)
		}
	}
	if got := Split(8, 1, 3); !reflect.DeepEqual(got, []int{1, 4, 7}) {
		t.Fatalf("Split = %v", got)
	}
}

// TestLatencyBudget: --latency-budget (and RECEIPTS_LATENCY_BUDGET) sets
// the hops' waits; the default keeps ingest's linger at 5 ms and the
// barrier's tick at a third of the budget; large budgets stop at the
// waits of the releases before it, tiny ones at a floor; zero is refused.
func TestLatencyBudget(t *testing.T) {
	parse := func(args ...string) (*Common, error) {
		var c Common
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		c.Register(fs)
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		return &c, c.Validate()
	}
	c, err := parse()
	if err != nil {
		t.Fatal(err)
	}
	if c.LatencyBudget != DefaultLatencyBudget {
		t.Fatalf("default budget %s", c.LatencyBudget)
	}
	want := Waits{IngestLinger: 5 * time.Millisecond, PublishLinger: 5 * time.Millisecond,
		BarrierIdle: 25 * time.Millisecond / 3, BarrierPoll: 5 * time.Millisecond, ConsumeLinger: time.Millisecond}
	if got := c.Waits(); got != want {
		t.Fatalf("default waits %+v, want %+v", got, want)
	}
	if got, old := WaitsFor(time.Second), (Waits{IngestLinger: 20 * time.Millisecond, PublishLinger: 5 * time.Millisecond,
		BarrierIdle: 50 * time.Millisecond, BarrierPoll: 20 * time.Millisecond, ConsumeLinger: time.Millisecond}); got != old {
		t.Fatalf("1s budget %+v, want the old waits %+v", got, old)
	}
	if got := WaitsFor(10 * time.Millisecond); got.ConsumeLinger != 400*time.Microsecond {
		t.Fatalf("10ms budget: consume linger %s, want 400µs", got.ConsumeLinger)
	}
	if got := WaitsFor(time.Microsecond); got.BarrierIdle != 5*time.Millisecond || got.IngestLinger != time.Millisecond || got.BarrierPoll != 2*time.Millisecond || got.ConsumeLinger != 250*time.Microsecond {
		t.Fatalf("tiny budget %+v, want the floors", got)
	}
	t.Setenv("RECEIPTS_LATENCY_BUDGET", "100ms")
	if c, err = parse(); err != nil || c.LatencyBudget != 100*time.Millisecond {
		t.Fatalf("from the environment: %v %v", c, err)
	}
	for _, bad := range []string{"0s", "-1ms", "2m"} {
		if _, err := parse("--latency-budget", bad); err == nil || !strings.Contains(err.Error(), "--latency-budget") {
			t.Errorf("--latency-budget %s: %v, want refused naming the flag", bad, err)
		}
	}
}
