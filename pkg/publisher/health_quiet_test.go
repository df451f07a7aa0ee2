package publisher

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// TestHealthBacklogWhileQuiet: the health tick lists the consumers again
// whenever RAW grew or a backlog was not zero, and only then; a quiet
// pipeline's report keeps the zero backlog it last listed.
func TestHealthBacklogWhileQuiet(t *testing.T) {
	r := newHistoryRig(t, 0)
	names := wire.For("")
	durable := wire.Durable("validator", 0)
	raw, err := r.js.Stream(r.ctx, names.Stream(wire.Raw))
	if err != nil {
		t.Fatal(err)
	}
	cons, err := raw.CreateOrUpdateConsumer(r.ctx, jetstream.ConsumerConfig{Durable: durable,
		FilterSubject: names.Subject(wire.Raw, 0), AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	backlog := func(what string, want uint64, listed bool) {
		t.Helper()
		before := r.svc.hc.listed
		h, err := r.svc.health(r.ctx)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := h.Backlog[durable]
		if !ok || got != want {
			t.Fatalf("%s: backlog of %s %d (%v), want %d", what, durable, got, ok, want)
		}
		if again := r.svc.hc.listed != before; again != listed {
			t.Fatalf("%s: listed again %v, want %v", what, again, listed)
		}
	}
	backlog("first tick", 0, true)
	backlog("quiet", 0, false)
	if _, err := r.js.Publish(r.ctx, names.Subject(wire.Raw, 0), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	backlog("RAW grew", 1, true)
	backlog("a backlog was not zero", 1, true)
	batch, err := cons.Fetch(1)
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		if err := m.DoubleAck(r.ctx); err != nil {
			t.Fatal(err)
		}
	}
	backlog("delivered and acknowledged", 0, true)
	backlog("quiet again", 0, false)
	if _, err := r.js.Publish(r.ctx, names.Subject(wire.Raw, 0), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	backlog("RAW grew after a quiet tick", 1, true)
}

// TestHealthQuietAsksNoOutputStream: while nothing is in flight (RAW did
// not grow and every backlog was zero) the health tick takes LATE's and
// REJECTED's figures from its last read instead of asking nats-server
// every tick; once RAW grows it reads them again, and sees what they got.
func TestHealthQuietAsksNoOutputStream(t *testing.T) {
	r := newHistoryRig(t, 0)
	names := wire.For("")
	nc := r.js.Conn()
	counts := testenv.CountRequests(t, nc, "$JS.API.STREAM.INFO."+names.Stream(wire.Late), "$JS.API.STREAM.INFO."+names.Stream(wire.Rejected))
	ticks := func(n int) (int, *wire.Health) {
		t.Helper()
		counts.Take(t)
		var h *wire.Health
		for range n {
			if err := r.svc.tick(r.ctx); err != nil {
				t.Fatal(err)
			}
			var err error
			if h, err = r.svc.health(r.ctx); err != nil {
				t.Fatal(err)
			}
		}
		got := counts.Take(t)
		return got[0] + got[1], h
	}
	if n, _ := ticks(1); n == 0 {
		t.Fatal("the first tick did not read LATE and REJECTED")
	}
	if n, _ := ticks(5); n != 0 {
		t.Fatalf("5 quiet ticks asked for LATE's or REJECTED's info %d times, want 0", n)
	}
	// A record in flight: RAW grows, and the validator's and windower's
	// outputs follow it.
	if _, err := r.js.Publish(r.ctx, names.Subject(wire.Raw, 0), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.js.Publish(r.ctx, names.Subject(wire.Late, 0), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	msg := nats.NewMsg(names.Subject(wire.Rejected, 0))
	msg.Header.Set(wire.HdrReason, "bad_json")
	if _, err := r.js.PublishMsg(r.ctx, msg); err != nil {
		t.Fatal(err)
	}
	n, h := ticks(1)
	if n == 0 {
		t.Fatal("a tick after RAW grew did not read LATE and REJECTED")
	}
	if h.LateTotal != 1 {
		t.Fatalf("LATE total %d after a late record, want 1", h.LateTotal)
	}
	if got := r.svc.rejected.cur.Total; got != 1 {
		t.Fatalf("rejected tally %d after a rejection, want 1", got)
	}
}

// TestHealthReadsRedisOnce: a health report reads every partition's
// checkpoint, windows and sources in one round trip to Redis, not three
// per partition (it made 24 a second on 8 partitions, idle or not).
func TestHealthReadsRedisOnce(t *testing.T) {
	r := newHistoryRig(t, 0)
	r.submit(0, "2026-12-02T10:05:00Z")
	r.submit(1, "2026-12-02T11:05:00Z")
	trips := testenv.CountRoundTrips(r.rdb)
	// A connection's first use adds its hand-shake: counted from the
	// second report on.
	if _, err := r.svc.health(r.ctx); err != nil {
		t.Fatal(err)
	}
	trips.Take()
	h, err := r.svc.health(r.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := trips.Take(); got != 1 {
		t.Errorf("a health report made %d round trips to Redis, want 1", got)
	}
	if h.Windows != 2 || len(h.Watermarks) != 2 || len(h.Sources) != 2 {
		t.Errorf("health: %d windows, %d watermarks, %d partitions' sources; want 2, 2, 2", h.Windows, len(h.Watermarks), len(h.Sources))
	}
}

// TestIdleHealthReportsSlowDown: once a report finds the pipeline idle
// (RAW where it was, every backlog zero) the next comes quietTicks Ticks
// later, not every Tick; RAW's info is asked that much less (every Tick
// before: 50 times a second at a 20 ms Tick).
func TestIdleHealthReportsSlowDown(t *testing.T) {
	r := newHistoryRig(t, 0)
	const tick = 20 * time.Millisecond
	r.svc.cfg.Tick = tick
	counts := testenv.CountRequests(t, r.js.Conn(), "$JS.API.STREAM.INFO."+wire.For("").Stream(wire.Raw))
	ctx, cancel := context.WithCancel(r.ctx)
	done := make(chan error, 1)
	go func() { done <- r.svc.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("publisher: %v", err)
		}
	}()
	time.Sleep(300 * time.Millisecond)
	counts.Take(t)
	began := time.Now()
	time.Sleep(time.Second)
	got := counts.Take(t)[0]
	took := time.Since(began)
	if want := int(took/(quietTicks*tick)) + 2; got > want {
		t.Errorf("%d RAW infos in %v of an idle pipeline, want at most %d (a report every %v)", got, took, want, quietTicks*tick)
	}
	if got == 0 {
		t.Error("no health report in a second")
	}
}

// TestNextTick: Tick while anything is in flight; quietTicks Ticks once
// idle, bounded by KeepAlive and by the moment the source turns stale.
func TestNextTick(t *testing.T) {
	s := New(nil, nil, Config{Names: wire.For(""), Partitions: 1, Tick: time.Second, KeepAlive: 30 * time.Second, StaleAfter: 2 * time.Minute})
	for _, c := range []struct {
		idle    bool
		staleIn time.Duration
		keep    time.Duration
		want    time.Duration
	}{
		{false, time.Minute, 30 * time.Second, time.Second},
		{true, time.Minute, 30 * time.Second, 5 * time.Second},
		{true, 2500 * time.Millisecond, 30 * time.Second, 2501 * time.Millisecond},
		{true, 100 * time.Millisecond, 30 * time.Second, time.Second},
		{true, -time.Second, 30 * time.Second, 5 * time.Second},
		{true, time.Minute, 3 * time.Second, 3 * time.Second},
	} {
		s.hc.idle, s.hc.staleIn, s.cfg.KeepAlive = c.idle, c.staleIn, c.keep
		if got := s.nextTick(); got != c.want {
			t.Errorf("idle %v, stale in %v, keep-alive %v: next tick in %v, want %v", c.idle, c.staleIn, c.keep, got, c.want)
		}
	}
}
