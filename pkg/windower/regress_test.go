package windower

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/window"
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
	for i := 1; i <= n; i++ {
		f.submit("idle-"+strconv.Itoa(i), at, i)
	}
	reg := prometheus.NewRegistry()
	w := New(f.js, f.store, Config{Names: f.names, Partitions: 1, Registerer: reg})
	ctx, cancel := context.WithCancel(f.ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := w.Run(ctx); err != nil {
			t.Errorf("windower: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	id := window.Of(at.UnixMilli()).ID
	counted := func() error {
		v, err := f.store.Read(f.ctx, 0, []string{id})
		if err != nil {
			return err
		}
		if v.Seq != n || v.Partials[id].Count != n {
			return fmt.Errorf("checkpoint %d, count %d; want %d and %d", v.Seq, v.Partials[id].Count, n, n)
		}
		return nil
	}
	testenv.CheckFor(t, 30*time.Second, 20*time.Millisecond, counted)
	if err := f.rdb.FlushAll(f.ctx).Err(); err != nil {
		t.Fatal(err)
	}
	testenv.CheckFor(t, 30*time.Second, 20*time.Millisecond, counted)
	if got := testutil.ToFloat64(w.m.regressions.WithLabelValues("checkpoint")); got != 1 {
		t.Errorf("receiptflow_windower_state_regressions_total{state=checkpoint} is %v, want 1", got)
	}
}
