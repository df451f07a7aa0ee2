package explain_test

import (
	"context"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/explain"
	"github.com/receiptflow/receiptflow/pkg/ingest"
	"github.com/receiptflow/receiptflow/pkg/pipeline"
	"github.com/receiptflow/receiptflow/pkg/stream"
)

// TestExplainLiveAgreesWithTheRun: the same input, explained from the live
// deployment (KV snapshot, Redis explain records, LATE and REJECTED) while
// the in-process pipeline still runs, and from the run's --out afterwards,
// gives the same explanation of every window. The input is the seed
// fixture sent twice, the second time after the broker's (shortened)
// duplicate window, so that its copies reach the windower and its ledger
// drops them: the duplicates the live record counts are the trace's.
func TestExplainLiveAgreesWithTheRun(t *testing.T) {
	events := fixtures(t)["seed"]
	live := map[string]*explain.Explanation{}
	var liveIDs []string
	cfg := pipeline.Config{Stream: stream.Config{DupWindow: 100 * time.Millisecond}}
	res, out := boundedRunWith(t, events, cfg, func(ctx context.Context, p *pipeline.Pipeline) error {
		time.Sleep(300 * time.Millisecond) // past the duplicate window: the copies reach RAW (not a wait for a result)
		f, err := os.Open(events)
		if err != nil {
			return err
		}
		defer f.Close()
		c := p.Config()
		in := ingest.New(p.Admin.JS, ingest.Config{Partitions: c.Partitions, HotKeys: c.HotKeys, Validator: p.Validator,
			HeartbeatEvery: heartbeatEvery, EndOfStream: true, Now: func() time.Time { return runAt }})
		if _, err := ingest.File(ctx, in, f, nil); err != nil {
			return err
		}
		if err := p.WaitDrained(ctx, nil); err != nil {
			return err
		}
		windows, err := p.Windows(ctx)
		if err != nil {
			return err
		}
		d := explain.Deployment{JS: p.Admin.JS, Store: p.Store, Names: p.Names}
		for _, w := range windows {
			e, err := d.Explain(ctx, w.WindowID)
			if err != nil {
				return err
			}
			live[w.WindowID] = e
			liveIDs = append(liveIDs, w.WindowID)
		}
		_, err = d.Explain(ctx, "2026-12-02T19")
		if !errors.Is(err, explain.ErrUnknownWindow) || !strings.Contains(err.Error(), "2026-12-02T19") {
			t.Errorf("unknown window, live: %v", err)
		}
		return nil
	})
	if len(liveIDs) != len(res.Windows) || len(liveIDs) == 0 {
		t.Fatalf("explained %d live windows of %d", len(liveIDs), len(res.Windows))
	}
	var dups int64
	for _, id := range liveIDs {
		got, err := explain.FromRun(out, "", id)
		if err != nil {
			t.Fatal(err)
		}
		// The live path has no parity report yet and cannot know the
		// retries dropped at ingest; everything else must be the same.
		got.Parity, got.IngestDuplicates = nil, 0
		if !reflect.DeepEqual(got, live[id]) {
			t.Fatalf("%s:\n--out %+v\nlive  %+v", id, got, live[id])
		}
		var traced int64
		for _, r := range res.Trace {
			if r.WindowID == id && r.Decision == "duplicate" && r.Layer == "ledger" {
				traced++
			}
		}
		if got.Duplicates != traced {
			t.Fatalf("%s: %d duplicates, the trace has %d", id, got.Duplicates, traced)
		}
		dups += got.Duplicates
	}
	if dups == 0 {
		t.Fatal("no copy reached the ledger: the test shows nothing about duplicates")
	}
}
