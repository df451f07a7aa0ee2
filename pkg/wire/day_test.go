package wire_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

func TestDayKeyNames(t *testing.T) {
	if got := wire.DayKey("2026-12-02"); got != "day.2026-12-02" {
		t.Fatalf("DayKey = %q", got)
	}
	day, err := wire.DayOf("2026-12-02T23")
	if err != nil || day != "2026-12-02" {
		t.Fatalf("DayOf(2026-12-02T23) = %q, %v", day, err)
	}
	if _, err := wire.DayOf("2026-12-02"); err == nil {
		t.Fatal("DayOf accepted a day id as a window id")
	}
	if got := wire.HourKey("2026-12-02T07"); got != "07" {
		t.Fatalf("HourKey = %q", got)
	}
	start, err := wire.ParseDay("2026-12-02")
	if err != nil || !start.Equal(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("ParseDay = %v, %v", start, err)
	}
	for _, bad := range []string{"", "2026-12-2", "2026-13-01", "2026-12-02T10"} {
		if _, err := wire.ParseDay(bad); err == nil {
			t.Errorf("ParseDay(%q) accepted", bad)
		}
	}
}

// TestDayRoundTripAndTotal: a day rollup encodes with the documented field
// names, decodes to the same value, and Total sums its hours.
func TestDayRoundTripAndTotal(t *testing.T) {
	start := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	d := wire.Day{Day: "2026-12-02", Start: start, End: start.Add(24 * time.Hour), Final: true,
		UpdatedAt: start.Add(30 * time.Hour), Generation: "1",
		Hours: map[string]wire.DayHour{
			"00": {Count: 5, Corrections: 1, LateDropped: 2, Version: 7, Status: window.StatusFinal},
			"13": {Count: 3, Version: 4, Status: window.StatusFinal},
		}}
	d.Total()
	if d.Count != 8 || d.Corrections != 1 || d.LateDropped != 2 || d.Windows != 2 || d.Version != 7+4+1 {
		t.Fatalf("Total: %+v", d)
	}
	body, err := json.Marshal(&d)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"day", "start", "end", "count", "corrections", "late_dropped", "windows", "final",
		"version", "updated_at", "generation", "hours"} {
		if _, ok := fields[f]; !ok {
			t.Errorf("field %s missing from %s", f, body)
		}
	}
	var back wire.Day
	if err := json.Unmarshal(body, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, d) {
		t.Fatalf("round trip:\n%+v\n%+v", back, d)
	}
}
