package service

import (
	"fmt"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/config"
	"github.com/receiptflow/receiptflow/pkg/failpoint"
	"github.com/receiptflow/receiptflow/pkg/publisher"
	"github.com/receiptflow/receiptflow/pkg/validator"
	"github.com/receiptflow/receiptflow/pkg/windower"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

func TestBuild(t *testing.T) {
	d := Deps{Params: Params{Partitions: 2, Lateness: time.Minute, Grace: time.Hour}, Names: wire.For("")}
	for name, want := range map[string]string{
		Validator: fmt.Sprintf("%T", (*validator.Service)(nil)),
		Windower:  fmt.Sprintf("%T", (*windower.Service)(nil)),
		Publisher: fmt.Sprintf("%T", (*publisher.Service)(nil)),
	} {
		r, err := Build(name, d)
		if err != nil {
			t.Fatalf("Build(%q): %v", name, err)
		}
		if got := fmt.Sprintf("%T", r); got != want {
			t.Errorf("Build(%q) = %s, want %s", name, got, want)
		}
	}
	if r, err := Build("dashboard", d); err == nil {
		t.Errorf("Build(dashboard) = %T, want an error", r)
	}
}

// TestParamsOf: the shared flags' values reach the services' parameters.
func TestParamsOf(t *testing.T) {
	c := config.Common{Params: config.Params{Partitions: 4, HotKeys: "busy=2", Lateness: time.Minute, Grace: 2 * time.Hour,
		ReplayHorizon: 3 * time.Hour}, StaleAfter: 4 * time.Minute, WindowRetention: 5 * time.Hour,
		DayRetention: 6 * time.Hour, LatencyBudget: 50 * time.Millisecond}
	p := ParamsOf(&c)
	if p.Partitions != 4 || p.Lateness != time.Minute || p.Grace != 2*time.Hour || p.ReplayHorizon != 3*time.Hour ||
		p.StaleAfter != 4*time.Minute || p.WindowRetention != 5*time.Hour || p.DayRetention != 6*time.Hour {
		t.Errorf("ParamsOf = %+v", p)
	}
	if p.Waits != config.WaitsFor(50*time.Millisecond) {
		t.Errorf("waits %+v, want those of the latency budget", p.Waits)
	}
	if len(p.HotKeys) == 0 {
		t.Errorf("hot keys %v, want busy spread", p.HotKeys)
	}
}

func TestNewStore(t *testing.T) {
	s := NewStore(nil, wire.For("2"), Params{Lateness: time.Minute, Grace: time.Hour, ReplayHorizon: 24 * time.Hour})
	if s.Horizon() != (24 * time.Hour).Milliseconds() {
		t.Errorf("horizon %d ms, want 24h", s.Horizon())
	}
	if got, want := s.Keys().Prefix, wire.For("2").RedisPrefix(); got != want {
		t.Errorf("key prefix %q, want %q", got, want)
	}
}

// within reports whether d is base with the schedule's ±50% jitter.
func within(d, base time.Duration) bool { return d >= base/2 && d <= base*3/2 }

func TestRestarts(t *testing.T) {
	r := NewRestarts()
	base := RestartInitial
	for i := 0; i < 12; i++ {
		d := r.Next(time.Second, fmt.Errorf("connection lost"))
		if !within(d, base) {
			t.Fatalf("stop %d in a row: pause %v, want %v ±50%%", i+1, d, base)
		}
		base = min(2*base, RestartMax)
	}
	if d := r.Next(HealthyRun, fmt.Errorf("connection lost")); !within(d, RestartInitial) {
		t.Errorf("after a healthy run: pause %v, want the first one (%v ±50%%)", d, RestartInitial)
	}
	r.Next(time.Second, nil)
	r.Next(time.Second, nil)
	if d := r.Next(time.Millisecond, fmt.Errorf("at x: %w", failpoint.ErrCrash)); !within(d, RestartInitial) {
		t.Errorf("after a planned crash: pause %v, want the first one (%v ±50%%)", d, RestartInitial)
	}
}

// TestConsumers: the consumers a service runs are the ones it creates
// (wire.Names.ServiceDurable) on the stream it reads, and the generation
// owns them.
func TestConsumers(t *testing.T) {
	n := wire.For("2")
	for _, c := range []struct {
		name  string
		owned []int
		want  []Consumer
	}{
		{Validator, []int{1, 3}, []Consumer{{n.Stream(wire.Raw), "validator-g2-p1"}, {n.Stream(wire.Raw), "validator-g2-p3"}}},
		{Windower, []int{0}, []Consumer{{n.Stream(wire.Valid), "windower-g2-p0"}}},
		{Publisher, []int{0, 1}, []Consumer{{n.Stream(wire.Changes), "publisher-g2"}}},
		{"dashboard", []int{0}, nil},
	} {
		got := Consumers(c.name, n, c.owned)
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("Consumers(%s, %v) = %v, want %v", c.name, c.owned, got, c.want)
		}
		for _, g := range got {
			if !n.OwnsConsumer(g.Durable) {
				t.Errorf("generation 2 does not own %s", g.Durable)
			}
		}
	}
}
