package windower

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/receiptflow/receiptflow/pkg/ledger"
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
// before the windower started waited at least that long. The mark is
// written on its own only once the partition is idle (mark.go), and timed
// then.
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
		// The idle mark comes markIdle after the last batch.
		steps = testenv.HistogramByLabel(t, reg, "receiptflow_windower_batch_step_seconds", "step")
		if steps[stepMark].Count == 0 {
			return fmt.Errorf("no idle mark yet: %v", steps)
		}
		return nil
	})
	batches := steps[stepApply].Count
	for _, s := range []string{stepWait, stepApply, stepPublish} {
		if steps[s].Count != batches || steps[s].Sum <= 0 {
			t.Errorf("step %s: %+v, want %d batches timed (as apply) and time spent", s, steps[s], batches)
		}
	}
	if m := steps[stepMark]; m.Count > batches || m.Sum <= 0 {
		t.Errorf("step %s: %+v, want at most one per batch (%d) and time spent", stepMark, m, batches)
	}
	if got := time.Duration(steps[stepWait].Sum * float64(time.Second)); got < idle {
		t.Errorf("the batches waited %s in all, want at least the %s between their storing and the windower's start", got, idle)
	}
}

// TestPublishedMarkOffThePath: a batch's published mark reaches Redis with
// the next batch's apply script, not in a round trip of its own; the last
// batch's once the partition is idle, or when the windower stops before
// that. A restart then resumes right after the last batch published.
func TestPublishedMarkOffThePath(t *testing.T) {
	f := newFixture(t)
	at := time.Date(2026, 12, 2, 10, 15, 0, 0, time.UTC)
	reg := prometheus.NewRegistry()
	w := New(f.js, f.store, Config{Names: f.names, Partitions: 1, Registerer: reg})
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()

	marks := func() uint64 {
		return testenv.HistogramByLabel(t, reg, "receiptflow_windower_batch_step_seconds", "step")[stepMark].Count
	}
	checkpoint := func() ledger.Checkpoint {
		ck, err := f.store.Checkpoint(f.ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		return ck
	}
	// Busy: each record a batch of its own (the next one is stored once
	// the one before is applied), none idle for markIdle.
	const busy = 20
	for i := 1; i <= busy; i++ {
		f.submit("busy-"+strconv.Itoa(i), at, i)
		testenv.CheckFor(t, 10*time.Second, time.Millisecond, func() error {
			if ck := checkpoint(); ck.Seq < uint64(i) {
				return fmt.Errorf("checkpoint %d, want %d", ck.Seq, i)
			}
			return nil
		})
		// The mark of the batch before is in the checkpoint the apply
		// wrote, without a write of its own.
		if ck := checkpoint(); ck.Published < uint64(i-1) {
			t.Fatalf("after batch %d the mark is %d, want at least %d (carried by its apply)", i, ck.Published, i-1)
		}
	}
	if m := marks(); m > busy/2 {
		t.Errorf("%d marks written alone while %d batches came back to back, want few", m, busy)
	}
	// Idle: the last batch's mark is written alone.
	testenv.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if ck := checkpoint(); ck.Published != busy {
			return fmt.Errorf("idle, mark %d, want %d", ck.Published, busy)
		}
		return nil
	})

	// A stop within markIdle of the last batch writes its mark too, once
	// the batch's outputs are stored.
	published := func() uint64 {
		return testenv.HistogramByLabel(t, reg, "receiptflow_windower_batch_step_seconds", "step")[stepPublish].Count
	}
	before := published()
	f.submit("last", at, busy+1)
	testenv.CheckFor(t, 10*time.Second, time.Millisecond, func() error {
		if n := published(); n == before {
			return fmt.Errorf("the last batch's outputs not stored yet")
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	done <- nil // for the deferred wait
	if ck := checkpoint(); ck.Published != busy+1 {
		t.Fatalf("stopped, mark %d, want the last batch's %d", ck.Published, busy+1)
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
