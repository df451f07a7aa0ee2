package generation

import (
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/reconcile"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

func TestGraceForCountsEveryTooLateRow(t *testing.T) {
	end := time.Date(2026, 3, 1, 11, 0, 0, 0, time.UTC) // end of window 10:00
	late := []reconcile.LateRow{
		{EventID: "a", WindowID: "2026-03-01T10", Reason: wire.ReasonAfterGrace, Watermark: end.Add(90 * time.Minute)},
		{EventID: "b", WindowID: "2026-03-01T10", Reason: wire.ReasonAfterGrace, Watermark: end.Add(2*time.Hour + 10*time.Second)},
		{EventID: "c", WindowID: "2026-03-01T08", Reason: wire.ReasonRetired, Watermark: end.Add(50 * time.Hour)},
	}
	grace, n, err := GraceFor(late, time.Hour, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("after_grace rows = %d, want 2 (a retired row is not one)", n)
	}
	// b needs a grace above 2h0m10s; with the 1m margin that is 2h1m10s,
	// rounded up to 2h2m.
	if want := 2*time.Hour + 2*time.Minute; grace != want {
		t.Errorf("grace = %s, want %s", grace, want)
	}
	for _, r := range late[:2] {
		if !r.Watermark.Before(end.Add(grace)) {
			t.Errorf("%s: watermark %s still reaches end+grace %s", r.EventID, r.Watermark, end.Add(grace))
		}
	}

	// Never narrower than the active generation's grace.
	if grace, _, _ := GraceFor(late, 6*time.Hour, time.Minute); grace != 6*time.Hour {
		t.Errorf("grace = %s, want the least 6h", grace)
	}
	// Nothing too late: the least grace and zero rows.
	if grace, n, _ := GraceFor(late[2:], time.Hour, time.Minute); n != 0 || grace != time.Hour {
		t.Errorf("retired only: grace %s, n %d; want 1h, 0", grace, n)
	}
	// A row that names no window is an error, not a silent skip.
	if _, _, err := GraceFor([]reconcile.LateRow{{EventID: "x", WindowID: "noon", Reason: wire.ReasonAfterGrace}}, time.Hour, time.Minute); err == nil {
		t.Error("a bad window id was accepted")
	}
}
