package e2e

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/generation"
	"github.com/receiptflow/receiptflow/pkg/pipeline"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// TestBackfillReadmitsTooLateEvents (issue 14, LATE backfill): the events
// the live generation routed to LATE as after_grace are counted by a new
// generation rebuilt with a grace wide enough for all of them; each
// window's count grows by exactly its too-late events, the new
// generation's LATE holds none, and readers switch only when the batch
// pass (run with the same grace) agrees. A backfill whose parity fails
// leaves the pointer alone; a generation without too-late events has
// nothing to backfill.
func TestBackfillReadmitsTooLateEvents(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	_, natsURL := testenv.NATS(t)
	r := testenv.RedisServer(t)
	base := pipeline.Config{NATSURL: natsURL, RedisURL: r.URL()}
	o := troubled
	o.Events = 5000
	path, st := writeGenerated(t, o)
	if st.LateAfterGrace == 0 {
		t.Fatalf("the input has no events after the grace: %+v", st)
	}
	live := runFile(t, base, path) // generation 1
	tooLate := map[string]int{}    // window → after_grace events
	n := 0
	for _, row := range live.Late {
		if row.Reason == wire.ReasonAfterGrace {
			tooLate[row.WindowID]++
			n++
		}
	}
	if n == 0 {
		t.Fatal("the live run routed no event to LATE as after_grace")
	}
	admin, err := connect.ConnectNATS(natsURL, "test-admin")
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()

	// The referee sees a wrong generation: no switch.
	cfg := base
	cfg.Generation = "2"
	victim := live.Windows[0].WindowID // final under any grace the backfill picks
	bad, err := generation.Backfill(ctx, generation.BackfillConfig{RebuildConfig: generation.RebuildConfig{Config: cfg,
		BeforeParity: func(ctx context.Context, p *pipeline.Pipeline) error {
			corruptWindow(t, ctx, p.Admin, "2", victim)
			return nil
		}}})
	if err != nil {
		t.Fatal(err)
	}
	if bad.Rebuild.Report.Holds || bad.Rebuild.Switched {
		t.Fatalf("backfill 2 with a corrupted window: holds %v, switched %v", bad.Rebuild.Report.Holds, bad.Rebuild.Switched)
	}
	if ptr, _, _ := generation.Active(ctx, admin.JS); ptr.Generation != "1" {
		t.Fatalf("the pointer moved to %s after a backfill that failed parity", ptr.Generation)
	}

	cfg.Generation = "3"
	res, err := generation.Backfill(ctx, generation.BackfillConfig{RebuildConfig: generation.RebuildConfig{Config: cfg}})
	if err != nil {
		t.Fatal(err)
	}
	if res.From != "1" || res.TooLate != n || res.Readmitted != n || res.Grace <= time.Hour || res.Grace%time.Minute != 0 {
		t.Fatalf("backfill 3: from %s, %d too late, %d readmitted, grace %s; want from 1, %d and %d, a grace of whole minutes over 1h",
			res.From, res.TooLate, res.Readmitted, res.Grace, n, n)
	}
	if !res.Rebuild.Report.Holds || !res.Rebuild.Switched {
		t.Fatalf("backfill 3: holds %v, switched %v: %+v", res.Rebuild.Report.Holds, res.Rebuild.Switched, res.Rebuild.Report.Unexplained)
	}
	if ptr, _, err := generation.Active(ctx, admin.JS); err != nil || ptr.Generation != "3" || ptr.Previous != "1" {
		t.Fatalf("pointer = %+v, %v; want 3 after 1", ptr, err)
	}
	after, err := pipeline.ReadWindows(ctx, admin.JS, wire.For("3"))
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int64{}
	for _, w := range after {
		counts[w.WindowID] = w.Count
	}
	for _, w := range live.Windows {
		if want := w.Count + int64(tooLate[w.WindowID]); counts[w.WindowID] != want {
			t.Errorf("window %s: %d in generation 3, want %d (%d in generation 1 + %d too late)",
				w.WindowID, counts[w.WindowID], want, w.Count, tooLate[w.WindowID])
		}
	}
	late3, err := pipeline.ReadLate(ctx, admin.JS, wire.For("3"))
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range late3 {
		if row.Reason == wire.ReasonAfterGrace {
			t.Errorf("generation 3 still routes %s (window %s) to LATE as too late", row.EventID, row.WindowID)
		}
	}

	// Generation 3 is active and found nothing too late.
	cfg.Generation = "4"
	if _, err := generation.Backfill(ctx, generation.BackfillConfig{RebuildConfig: generation.RebuildConfig{Config: cfg}}); !errors.Is(err, generation.ErrNothingToBackfill) {
		t.Fatalf("backfill from generation 3 = %v, want ErrNothingToBackfill", err)
	}
}
