package e2e

import (
	"sort"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/boundedrun"
	"github.com/receiptflow/receiptflow/pkg/dashboard"
	"github.com/receiptflow/receiptflow/pkg/pipeline"
)

// TestStateIsBoundedOverALongRun runs 200 event-time hours with a 2h replay
// horizon: ledger entries and retained windows rise, then stay flat, while
// every final window still reconciles.
func TestStateIsBoundedOverALongRun(t *testing.T) {
	o := troubled
	o.Seed, o.Events, o.Hours = 9, 20000, 200
	// All 200 hours in the past: an event time later than the broker's
	// clock (plus the skew) is future_timestamp (docs/spec.md §2).
	o.Start = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	path, _ := writeGenerated(t, o)
	cfg := pipeline.Config{DataDir: t.TempDir(), ReplayHorizon: 2 * time.Hour}
	// Paced like a live source the pipeline keeps up with, so retirement
	// follows the watermark (an unpaced replay is bounded by the slowest
	// partition instead). The rate alone is not enough: on a busy host the
	// pipeline falls behind it, and a ledger that holds the lag as well
	// grows with the host's load, not with the run. The source is held
	// while more than 100 messages wait anywhere in the pipeline.
	res := runBounded(t, boundedrun.Config{Config: cfg, Events: path, Rate: 1200, MaxBacklog: 100})
	if len(res.Windows) < 200 {
		t.Fatalf("only %d windows", len(res.Windows))
	}
	s := res.Metrics
	if len(s) < 6 {
		t.Fatalf("only %d metric samples", len(s))
	}
	var peak int64
	for _, x := range s {
		peak = max(peak, x.LedgerEntries)
	}
	counted := int64(res.Report.Summary.Counted)
	half := len(s) / 2
	first, second := medianLedger(s[1:half]), medianLedger(s[half:len(s)-1])
	t.Logf("samples %d, peak ledger %d, median first half %d, second half %d, counted %d", len(s), peak, first, second, counted)
	// Without retirement the ledger would end near `counted`; with it the
	// state stays a small multiple of one horizon's traffic however long
	// the run (peak includes bursts when the pipeline lags behind).
	if peak > counted/2 {
		t.Fatalf("ledger not bounded: peak %d of %d counted", peak, counted)
	}
	if second > 2*first+200 {
		t.Fatalf("ledger keeps growing: median %d in the first half, %d in the second", first, second)
	}
	if last := s[len(s)-1]; last.LedgerEntries != 0 || last.Windows != 0 {
		t.Fatalf("after end of stream every window is final and retired, still %+v", last)
	}
	var retired int
	for _, l := range res.Late {
		if l.Reason == "retired" {
			retired++
		}
	}
	t.Logf("late rows %d (retired %d)", len(res.Late), retired)
}

func medianLedger(s []dashboard.Sample) int64 {
	v := make([]int64, len(s))
	for i, x := range s {
		v[i] = x.LedgerEntries
	}
	sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
	if len(v) == 0 {
		return 0
	}
	return v[len(v)/2]
}
