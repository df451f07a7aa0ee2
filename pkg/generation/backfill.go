package generation

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/receiptflow/receiptflow/pkg/config"
	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/pipeline"
	"github.com/receiptflow/receiptflow/pkg/reconcile"
	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// DefaultBackfillMargin is how much wider than the latest LATE event
// needs a backfill's grace is.
const DefaultBackfillMargin = time.Minute

// BackfillConfig configures a backfill: a rebuild whose grace is wide
// enough to count the active generation's too-late events.
type BackfillConfig struct {
	// RebuildConfig names the target generation and the servers; its
	// Grace is the least grace the target gets (the active generation's).
	RebuildConfig
	// Margin is added to the grace the latest LATE event needs (default
	// DefaultBackfillMargin); the sum is rounded up to a whole minute.
	Margin time.Duration
}

// BackfillResult is what a backfill did.
type BackfillResult struct {
	// From is the generation whose LATE rows were re-admitted.
	From string
	// Grace is the target generation's grace.
	Grace time.Duration
	// TooLate is how many distinct events From routed to LATE as
	// after_grace; Readmitted how many of them the target counts;
	// Retired how many From dropped as retired (past the replay horizon),
	// which a grace does not bring back.
	TooLate, Readmitted, Retired int
	// Rebuild is the rebuild's result (nil when there was nothing to do).
	Rebuild *RebuildResult
}

// ErrNothingToBackfill is returned by Backfill when the active generation
// routed no event to LATE as too late.
var ErrNothingToBackfill = errors.New("generation: the active generation has no after_grace LATE events")

// GraceFor returns the least grace, rounded up to a whole minute with
// margin added, under which every after_grace row of late is counted: an
// event is too late when its partition watermark W_p ≥ end + grace
// (docs/spec.md §3), and the watermarks follow RAW order, so a rebuild
// with grace > W_p − end sees the same W_p and counts it. It is at least
// least. The second result is how many rows are after_grace.
func GraceFor(late []reconcile.LateRow, least, margin time.Duration) (time.Duration, int, error) {
	need, n := time.Duration(0), 0
	for _, r := range late {
		if r.Reason != wire.ReasonAfterGrace {
			continue
		}
		start, err := window.ParseID(r.WindowID)
		if err != nil {
			return 0, 0, fmt.Errorf("generation: LATE row of %s: %w", r.EventID, err)
		}
		n++
		end := window.Time(start).Add(time.Hour)
		need = max(need, r.Watermark.Sub(end))
	}
	grace := need + margin
	if r := grace % time.Minute; r != 0 {
		grace += time.Minute - r
	}
	return max(grace, least), n, nil
}

// Backfill re-admits the events the active generation routed to LATE as
// too late: it reads the active generation's LATE rows, works out the
// grace that counts them all (GraceFor), and rebuilds RAW into the target
// generation with that grace. The rebuild's gate holds: the target is
// reconciled against the batch pass run with the same grace, and readers
// are switched only when parity holds and the target counts every one of
// those events (and NoSwitch is not set).
func Backfill(ctx context.Context, bc BackfillConfig) (*BackfillResult, error) {
	if bc.NATSURL == "" || bc.RedisURL == "" {
		return nil, errors.New("generation: backfill needs --nats-url and --redis-url of the running deployment")
	}
	if bc.Margin < 0 {
		return nil, fmt.Errorf("generation: backfill margin %s is negative", bc.Margin)
	}
	if bc.Margin == 0 {
		bc.Margin = DefaultBackfillMargin
	}
	conn, err := connect.ConnectNATS(bc.NATSURL, "receiptctl-backfill")
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	active, _, err := Active(ctx, conn.JS)
	if err != nil {
		return nil, err
	}
	late, err := pipeline.ReadLate(ctx, conn.JS, wire.For(active.Generation))
	if err != nil {
		return nil, fmt.Errorf("generation: LATE of generation %s: %w", active.Generation, err)
	}
	res := &BackfillResult{From: active.Generation}
	least := bc.Grace
	if least <= 0 {
		least = config.Defaults().Grace
	}
	if res.Grace, res.TooLate, err = GraceFor(late, least, bc.Margin); err != nil {
		return nil, err
	}
	for _, r := range late {
		if r.Reason == wire.ReasonRetired {
			res.Retired++
		}
	}
	logf(bc.Progress, "backfill: generation %s routed %d events to LATE as too late (%d more retired); grace %s counts them",
		active.Generation, res.TooLate, res.Retired, res.Grace)
	if res.TooLate == 0 {
		return res, ErrNothingToBackfill
	}
	rc := bc.RebuildConfig
	rc.Grace = res.Grace
	if rc.Params != (config.Params{}) {
		rc.Params.Grace = res.Grace
	}
	rc.NoSwitch = true // switched below, once the LATE events are counted too
	if res.Rebuild, err = Rebuild(ctx, rc); err != nil {
		return res, err
	}
	after, err := pipeline.ReadLate(ctx, conn.JS, wire.For(rc.Generation))
	if err != nil {
		return res, fmt.Errorf("generation: LATE of generation %s: %w", rc.Generation, err)
	}
	still := map[string]bool{}
	for _, r := range after {
		still[r.EventID] = true
	}
	for _, r := range late {
		if r.Reason == wire.ReasonAfterGrace && !still[r.EventID] {
			res.Readmitted++
		}
	}
	logf(bc.Progress, "backfill: generation %s counts %d of the %d", rc.Generation, res.Readmitted, res.TooLate)
	rb := res.Rebuild
	if !rb.Report.Holds || res.Readmitted < res.TooLate || bc.NoSwitch {
		return res, nil
	}
	if rb.Pointer, err = Switch(ctx, conn.JS, rc.Generation, false); err != nil {
		return res, err
	}
	rb.Switched = true
	logf(bc.Progress, "backfill: switched readers from generation %s to %s", rb.Pointer.Previous, rc.Generation)
	return res, nil
}
