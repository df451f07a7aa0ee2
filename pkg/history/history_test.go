package history_test

import (
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/history"
	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

func TestParseBound(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Time
	}{
		{"2026-12-02T10", time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)},
		{"2026-12-02", time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)},
		{"2026-12-02T10:30:00Z", time.Date(2026, 12, 2, 10, 30, 0, 0, time.UTC)},
		{"2026-12-02T12:30:00+02:00", time.Date(2026, 12, 2, 10, 30, 0, 0, time.UTC)},
	} {
		got, err := history.ParseBound(c.in)
		if err != nil || !got.Equal(c.want) || got.Location() != time.UTC {
			t.Errorf("ParseBound(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "yesterday", "2026-12-02T1", "2026-12-32", "2026-12-02T24", "1764669600"} {
		if _, err := history.ParseBound(bad); err == nil {
			t.Errorf("ParseBound(%q) accepted", bad)
		}
	}
}

// TestHoursFallBackToTheRollup: an hour the bucket still holds is its
// snapshot; a pruned hour is its day rollup's entry; the range is
// half-open.
func TestHoursFallBackToTheRollup(t *testing.T) {
	at := func(h int) time.Time { return time.Date(2026, 12, 2, h, 0, 0, 0, time.UTC) }
	snap := func(h int, count int64) wire.Window {
		return wire.Window{WindowID: window.ID(window.Ms(at(h))), Start: at(h), End: at(h + 1), Count: count, Version: 3,
			Status: window.StatusFinal}
	}
	day := wire.Day{Day: "2026-12-02", Start: at(0), End: at(24), Final: true, Hours: map[string]wire.DayHour{
		"01": {Count: 7, Version: 4, Status: window.StatusFinal},
		"02": {Count: 9, Version: 2, Status: window.StatusFinal}, // older than the snapshot: the snapshot wins
		"05": {Count: 1, Version: 2, Status: window.StatusFinal},
	}}
	day.Total()
	b := &history.Bucket{Windows: []wire.Window{snap(2, 8), snap(3, 2)}, Days: []wire.Day{day}}
	got := b.Hours(at(1), at(5))
	want := []struct {
		id     string
		count  int64
		source string
	}{{"2026-12-02T01", 7, history.SourceRollup}, {"2026-12-02T02", 8, history.SourceWindow}, {"2026-12-02T03", 2, history.SourceWindow}}
	if len(got) != len(want) {
		t.Fatalf("rows %+v", got)
	}
	for i, w := range want {
		if got[i].WindowID != w.id || got[i].Count != w.count || got[i].Source != w.source {
			t.Errorf("row %d: %+v, want %+v", i, got[i], w)
		}
	}
	if rows := b.Hours(at(6), at(7)); len(rows) != 0 {
		t.Errorf("empty range: %+v", rows)
	}
	if days := b.DaysIn(at(10), at(11)); len(days) != 1 || days[0].Count != 17 {
		t.Errorf("DaysIn: %+v", days)
	}
	if days := b.DaysIn(at(24), at(48)); len(days) != 0 {
		t.Errorf("DaysIn after the day: %+v", days)
	}
}
