package windower

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// TestLateRowNamesItsSource (docs/spec.md §3.1): a source that joins
// behind a partition's watermark has its events judged late, and the LATE
// row names it, for receiptctl explain.
func TestLateRowNamesItsSource(t *testing.T) {
	f := newFixture(t)
	at := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	recv := at.Add(72 * time.Hour).UnixMilli()
	fr := wire.Frame{Records: []wire.FrameRecord{
		{Kind: wire.FrameSubmission, RawSeq: 1, Time: at.UnixMilli(), EventID: "live-1", Type: "submitted", Fingerprint: 1, SourceID: "pos-live", Received: recv},
		{Kind: wire.FrameSubmission, RawSeq: 2, Time: at.Add(-2 * time.Hour).UnixMilli(), EventID: "old-1", Type: "submitted", Fingerprint: 2, SourceID: "backfill", Received: recv + 10},
	}}
	m := stream.NewMsg(f.names.Subject(wire.Valid, 0), wire.FrameMsgID(0, 1, 2), wire.AppendFrame(nil, &fr))
	m.Header.Set(wire.HdrFrame, strconv.Itoa(wire.FrameVersion))
	if _, err := f.js.PublishMsg(f.ctx, m); err != nil {
		t.Fatal(err)
	}
	if err := f.run(10, "", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	var rows []wire.LateEvent
	if err := stream.ReadLate(f.ctx, f.js, f.names, func(le wire.LateEvent) error { rows = append(rows, le); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].EventID != "old-1" || rows[0].Source != "backfill" {
		b, _ := json.Marshal(rows)
		t.Fatalf("LATE holds %s, want old-1 from source backfill", b)
	}
}
