package windower

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// TestLostStateOfAnIdlePartitionIsReplayed: every record of the partition
// is applied and nothing more arrives; then Redis loses the partition's
// state (a replica promoted before it had the last writes, a FLUSHALL).
// The windower notices without new input, applies VALID again from the
// checkpoint Redis holds, and counts the regression in
// receiptflow_windower_state_regressions_total.
func TestLostStateOfAnIdlePartitionIsReplayed(t *testing.T) {
	f := newFixture(t)
	const n = 50
	at := time.Date(2026, 12, 2, 10, 15, 0, 0, time.UTC)
	f.submitN("idle-", at, n)
	reg := prometheus.NewRegistry()
	f.start(reg)
	counted := f.counted(at, n)
	testenv.CheckFor(t, 30*time.Second, 20*time.Millisecond, counted)
	if err := f.rdb.FlushAll(f.ctx).Err(); err != nil {
		t.Fatal(err)
	}
	testenv.CheckFor(t, 30*time.Second, 20*time.Millisecond, counted)
	if got := testenv.CounterSum(t, reg, "receiptflow_windower_state_regressions_total"); got != 1 {
		t.Errorf("receiptflow_windower_state_regressions_total{state=checkpoint} is %v, want 1", got)
	}
}

// TestLostStateWhileStoppedIsCounted: Redis loses a partition's state
// while no windower runs; the next one counts the regression (its
// checkpoint is behind what the consumer acknowledged) and rebuilds the
// window from VALID.
func TestLostStateWhileStoppedIsCounted(t *testing.T) {
	f := newFixture(t)
	const n = 30
	at := time.Date(2026, 12, 2, 10, 15, 0, 0, time.UTC)
	f.submitN("stopped-", at, n)
	counted := f.counted(at, n)
	acked := func() error {
		c, err := f.js.Consumer(f.ctx, f.names.Stream(wire.Valid), f.names.ServiceDurable("windower", 0))
		if err != nil {
			return err
		}
		if got := c.CachedInfo().AckFloor.Stream; got != n {
			return fmt.Errorf("acknowledged through %d, want %d", got, n)
		}
		return nil
	}
	run := func(reg *prometheus.Registry, until ...func() error) *Service {
		w := New(f.js, f.store, Config{Names: f.names, Partitions: 1, Registerer: reg})
		ctx, cancel := context.WithCancel(f.ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := w.Run(ctx); err != nil {
				t.Errorf("windower: %v", err)
			}
		}()
		for _, u := range until {
			testenv.CheckFor(t, 30*time.Second, 20*time.Millisecond, u)
		}
		cancel()
		<-done
		return w
	}
	run(prometheus.NewRegistry(), counted, acked)
	if err := f.rdb.FlushAll(f.ctx).Err(); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	run(reg, counted)
	if got := testenv.CounterSum(t, reg, "receiptflow_windower_state_regressions_total"); got != 1 {
		t.Errorf("receiptflow_windower_state_regressions_total{state=checkpoint} is %v, want 1", got)
	}
}

// counted checks that partition 0 has applied n records, all counted in
// the window of at.
func (f *fixture) counted(at time.Time, n int) func() error {
	id := window.Of(at.UnixMilli()).ID
	return func() error {
		v, err := f.store.Read(f.ctx, 0, []string{id})
		if err != nil {
			return err
		}
		if v.Seq != uint64(n) || v.Partials[id].Count != int64(n) {
			return fmt.Errorf("checkpoint %d, count %d; want %d and %d", v.Seq, v.Partials[id].Count, n, n)
		}
		return nil
	}
}

// TestNoticesOfAReplayReachThePublisher: after Redis lost a partition's
// state, the replay's CHANGES notices are new messages. Under the ids of
// the first pass JetStream would drop them as duplicates, and a publisher
// that read Redis while it was behind would never read it again (a window
// left one late event short in the bucket).
func TestNoticesOfAReplayReachThePublisher(t *testing.T) {
	f := newFixture(t)
	const n = 40
	at := time.Date(2026, 12, 2, 10, 15, 0, 0, time.UTC)
	f.submitN("notice-", at, n)
	notices := func() uint64 {
		st, err := f.js.Stream(f.ctx, f.names.Stream(wire.Changes))
		if err != nil {
			t.Fatal(err)
		}
		return st.CachedInfo().State.Msgs
	}
	w := New(f.js, f.store, Config{Names: f.names, Partitions: 1, Batch: 10, Linger: 200 * time.Millisecond})
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := w.Run(ctx); err != nil {
			t.Errorf("windower: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	testenv.CheckFor(t, 30*time.Second, 20*time.Millisecond, f.counted(at, n))
	before := notices()
	if err := f.rdb.FlushAll(f.ctx).Err(); err != nil {
		t.Fatal(err)
	}
	testenv.CheckFor(t, 30*time.Second, 20*time.Millisecond, f.counted(at, n))
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if got := notices(); got < 2*before {
			return fmt.Errorf("CHANGES holds %d notices after the replay, %d before it: the replay's were dropped as duplicates", got, before)
		}
		return nil
	})
}

// submitN submits n events of at, ids prefix1..prefixN, at RAW sequences
// 1..n.
func (f *fixture) submitN(prefix string, at time.Time, n int) {
	for i := 1; i <= n; i++ {
		f.submit(prefix+strconv.Itoa(i), at, i)
	}
}

// TestBatchStepsTimed: every batch is timed step by step in
// receiptflow_windower_batch_step_seconds, and the wait of a batch is
// counted from when its first VALID message was stored: messages stored
// before the windower started waited at least that long.
func TestBatchStepsTimed(t *testing.T) {
	f := newFixture(t)
	const n = 40
	at := time.Date(2026, 12, 2, 10, 15, 0, 0, time.UTC)
	f.submitN("steps-", at, n)
	const idle = 300 * time.Millisecond
	time.Sleep(idle)
	reg := prometheus.NewRegistry()
	f.start(reg)
	testenv.CheckFor(t, 30*time.Second, 20*time.Millisecond, f.counted(at, n))
	var steps map[string]testenv.HistogramSample
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		// The last batch's mark may still be on its way once the counts
		// are in Redis.
		steps = testenv.HistogramByLabel(t, reg, "receiptflow_windower_batch_step_seconds", "step")
		if steps[stepMark].Count == 0 || steps[stepMark].Count != steps[stepApply].Count {
			return fmt.Errorf("not every batch marked yet: %v", steps)
		}
		return nil
	})
	batches := steps[stepApply].Count
	for _, s := range []string{stepWait, stepApply, stepPublish, stepMark} {
		if steps[s].Count != batches || steps[s].Sum <= 0 {
			t.Errorf("step %s: %+v, want %d batches timed (as apply) and time spent", s, steps[s], batches)
		}
	}
	if got := time.Duration(steps[stepWait].Sum * float64(time.Second)); got < idle {
		t.Errorf("the batches waited %s in all, want at least the %s between their storing and the windower's start", got, idle)
	}
}

// start runs a windower of the fixture's one partition, its metrics on
// reg, until the test ends.
func (f *fixture) start(reg *prometheus.Registry) {
	f.t.Helper()
	w := New(f.js, f.store, Config{Names: f.names, Partitions: 1, Registerer: reg})
	ctx, cancel := context.WithCancel(f.ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := w.Run(ctx); err != nil {
			f.t.Errorf("windower: %v", err)
		}
	}()
	f.t.Cleanup(func() { cancel(); wg.Wait() })
}
