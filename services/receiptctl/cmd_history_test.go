package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// TestWindowsFormats: receiptctl windows over a bucket holding two hourly
// snapshots and the day rollup of those and of a pruned hour prints the
// same rows as a table, CSV (with a header) and JSON (an array), hours
// from the rollup marked source rollup; an empty range is an empty table,
// a header only or []; --by day lists the rollup; a missing bucket is a
// server error (exit 1).
func TestWindowsFormats(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, url := testenv.NATS(t)
	js := testenv.JetStream(t, url)
	if err := stream.Ensure(ctx, js, wire.For(""), stream.Config{Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, wire.For("").Bucket())
	if err != nil {
		t.Fatal(err)
	}
	at := func(h int) time.Time { return time.Date(2026, 12, 2, h, 0, 0, 0, time.UTC) }
	put := func(key string, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, key, b); err != nil {
			t.Fatal(err)
		}
	}
	for h, c := range map[int]int64{10: 5, 11: 3} {
		id := window.ID(window.Ms(at(h)))
		put(wire.WindowKey(id), wire.Window{WindowID: id, Start: at(h), End: at(h + 1), Count: c, Version: c + 1,
			Status: window.StatusInGrace, Corrections: 1, Stale: h == 11,
			Breakdown: wire.Breakdown{AmountCents: 100 * c, Unpriced: c - 2}})
	}
	day := wire.Day{Day: "2026-12-02", Start: at(0), End: at(24), Generation: "1", Hours: map[string]wire.DayHour{
		"09": {Count: 7, Version: 9, Status: window.StatusFinal, AmountCents: 1299, Unpriced: 1},
		"10": {Count: 5, Corrections: 1, Version: 6, Status: window.StatusInGrace, AmountCents: 500, Unpriced: 3},
		"11": {Count: 2, Version: 3, Status: window.StatusInGrace, AmountCents: 200},
	}}
	day.Total()
	put(wire.DayKey("2026-12-02"), day)

	cli := func(args ...string) string {
		t.Helper()
		code, out, errOut := runCLI(t, append([]string{"windows", "--nats-url", url}, args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d\n%s", args, code, errOut)
		}
		return out
	}
	table := cli("--from", "2026-12-02T09", "--to", "2026-12-02T12")
	lines := strings.Split(strings.TrimRight(table, "\n"), "\n")
	want := []string{
		"WINDOW        STATUS   COUNT CORR LATE AMOUNT_CENTS UNPRICED VERSION STALE SOURCE",
		"2026-12-02T09 final        7    0    0         1299        1       9 false rollup",
		"2026-12-02T10 in_grace     5    1    0          500        3       6 false window",
		"2026-12-02T11 in_grace     3    1    0          300        1       4 true  window",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Fatalf("table:\n%s\nwant:\n%s", table, strings.Join(want, "\n"))
	}

	recs, err := csv.NewReader(strings.NewReader(cli("--from", "2026-12-02", "--to", "2026-12-03", "--format", "csv"))).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 4 || strings.Join(recs[0], ",") != "window_id,status,count,corrections,late_dropped,amount_cents,unpriced,version,stale,source" ||
		strings.Join(recs[1], ",") != "2026-12-02T09,final,7,0,0,1299,1,9,false,rollup" || strings.Join(recs[3], ",") != "2026-12-02T11,in_grace,3,1,0,300,1,4,true,window" {
		t.Fatalf("csv: %q", recs)
	}

	var rows []struct {
		WindowID string `json:"window_id"`
		Count    int64  `json:"count"`
		Source   string `json:"source"`
	}
	if err := json.Unmarshal([]byte(cli("--from", "2026-12-02T10:30:00Z", "--format", "json")), &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].WindowID != "2026-12-02T10" || rows[1].Count != 3 || rows[1].Source != "window" {
		t.Fatalf("json: %+v", rows)
	}

	var days []wire.Day
	if err := json.Unmarshal([]byte(cli("--from", "2026-12-01", "--to", "2026-12-04", "--by", "day", "--format", "json")), &days); err != nil {
		t.Fatal(err)
	}
	if len(days) != 1 || days[0].Count != 14 || days[0].Windows != 3 || days[0].AmountCents != 1999 || days[0].Unpriced != 4 {
		t.Fatalf("days: %+v", days)
	}
	if out := cli("--from", "2026-12-01", "--by", "day"); !strings.Contains(out, "2026-12-02") || !strings.HasPrefix(out, "DAY") {
		t.Fatalf("day table:\n%s", out)
	}

	// An empty range.
	if out := strings.TrimSpace(cli("--from", "2026-11-01", "--to", "2026-11-02", "--format", "json")); out != "[]" {
		t.Errorf("empty json: %q", out)
	}
	if out := cli("--from", "2026-11-01", "--to", "2026-11-02", "--format", "csv"); strings.Count(out, "\n") != 1 {
		t.Errorf("empty csv: %q", out)
	}
	if out := cli("--from", "2026-11-01", "--to", "2026-11-02"); strings.Count(out, "\n") != 1 || !strings.HasPrefix(out, "WINDOW ") {
		t.Errorf("empty table: %q", out)
	}
	// A generation without a bucket: the server says no (exit 1).
	code, _, errOut := runCLI(t, "windows", "--nats-url", url, "--from", "2026-12-02", "--generation", "7")
	if code != 1 || !strings.Contains(errOut, "receipts-7") {
		t.Errorf("missing bucket: exit %d, %s", code, errOut)
	}
}

// TestWindowsTimeZone: receiptctl windows --time-zone over a bucket whose
// older hours are in day rollups and newer ones are snapshots: --by day
// lists the zone's local days (Berlin's 23-hour Mar 29 and New York's
// 25-hour Nov 1, 2026) equal to a reference grouping the fixture's UTC
// hours by their local date, the status the least final of the hours;
// --by hour labels hours locally, the repeated hour by its offset.
func TestWindowsTimeZone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, url := testenv.NATS(t)
	js := testenv.JetStream(t, url)
	if err := stream.Ensure(ctx, js, wire.For(""), stream.Config{Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, wire.For("").Bucket())
	if err != nil {
		t.Fatal(err)
	}
	put := func(key string, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, key, b); err != nil {
			t.Fatal(err)
		}
	}
	// Every UTC hour of two stretches has data: Mar 27 – Mar 31 (rollups
	// before Mar 30, snapshots after: final to 10:00, in grace at 11:00,
	// open after) and Oct 30 – Nov 4 (rollups, final).
	type fixHour struct {
		start  time.Time
		count  int64
		status window.Status
	}
	var fixture []fixHour
	rollups := map[string]*wire.Day{}
	addStretch := func(from, to, snapFrom time.Time) {
		for s := from; s.Before(to); s = s.Add(time.Hour) {
			n := int64(s.Day()*10 + s.Hour())
			st := window.StatusFinal
			if s.After(snapFrom.Add(10 * time.Hour)) {
				st = window.StatusOpen
				if s.Equal(snapFrom.Add(11 * time.Hour)) {
					st = window.StatusInGrace
				}
			}
			fixture = append(fixture, fixHour{s, n, st})
			id := window.ID(window.Ms(s))
			if !s.Before(snapFrom) {
				put(wire.WindowKey(id), wire.Window{WindowID: id, Start: s, End: s.Add(time.Hour), Count: n, Version: n, Status: st,
					Corrections: n % 2, Breakdown: wire.Breakdown{AmountCents: 100 * n}})
				continue
			}
			day := s.Format(wire.DayLayout)
			if rollups[day] == nil {
				start, _ := wire.ParseDay(day)
				rollups[day] = &wire.Day{Day: day, Start: start, End: start.Add(24 * time.Hour), Hours: map[string]wire.DayHour{}}
			}
			rollups[day].Hours[wire.HourKey(id)] = wire.DayHour{Count: n, Corrections: n % 2, Version: n, Status: st, AmountCents: 100 * n}
		}
	}
	utc := func(mo time.Month, d, h int) time.Time { return time.Date(2026, mo, d, h, 0, 0, 0, time.UTC) }
	addStretch(utc(3, 27, 0), utc(3, 31, 0), utc(3, 30, 0))
	addStretch(utc(10, 30, 0), utc(11, 4, 0), utc(12, 1, 0))
	for day, d := range rollups {
		d.Final = true
		d.Total()
		put(wire.DayKey(day), d)
	}

	cli := func(args ...string) string {
		t.Helper()
		code, out, errOut := runCLI(t, append([]string{"windows", "--nats-url", url}, args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d\n%s", args, code, errOut)
		}
		return out
	}
	type refDay struct {
		hours             int
		count, corr, cent int64
		status            window.Status
	}
	reference := func(zone string) map[string]*refDay {
		loc, err := time.LoadLocation(zone)
		if err != nil {
			t.Fatal(err)
		}
		ref := map[string]*refDay{}
		for _, h := range fixture {
			d := h.start.In(loc).Format("2006-01-02")
			r := ref[d]
			if r == nil {
				r = &refDay{status: window.StatusFinal}
				ref[d] = r
			}
			r.hours++
			r.count += h.count
			r.corr += h.count % 2
			r.cent += 100 * h.count
			if h.status.Ordinal() < r.status.Ordinal() {
				r.status = h.status
			}
		}
		return ref
	}
	for _, c := range []struct {
		zone, from, to string
		days           []string
		hours          []int
	}{
		{"Europe/Berlin", "2026-03-28", "2026-03-31", []string{"2026-03-28", "2026-03-29", "2026-03-30"}, []int{24, 23, 24}},
		{"America/New_York", "2026-10-31", "2026-11-03", []string{"2026-10-31", "2026-11-01", "2026-11-02"}, []int{24, 25, 24}},
	} {
		ref := reference(c.zone)
		var days []struct {
			Day         string        `json:"day"`
			Hours       int           `json:"hours"`
			Windows     int           `json:"windows"`
			Status      window.Status `json:"status"`
			Count       int64         `json:"count"`
			Corrections int64         `json:"corrections"`
			AmountCents int64         `json:"amount_cents"`
		}
		if err := json.Unmarshal([]byte(cli("--time-zone", c.zone, "--by", "day", "--from", c.from, "--to", c.to, "--format", "json")), &days); err != nil {
			t.Fatal(err)
		}
		if len(days) != len(c.days) {
			t.Fatalf("%s: %+v", c.zone, days)
		}
		for i, d := range days {
			r := ref[d.Day]
			if d.Day != c.days[i] || r == nil || d.Hours != c.hours[i] || d.Hours != r.hours || d.Windows != r.hours ||
				d.Count != r.count || d.Corrections != r.corr || d.AmountCents != r.cent || d.Status != r.status {
				t.Errorf("%s day %d: %+v, reference %+v", c.zone, i, d, r)
			}
		}
	}
	if s := reference("Europe/Berlin")["2026-03-30"].status; s != window.StatusOpen {
		t.Fatalf("the fixture's Mar 30 in Berlin should hold open hours: %s", s)
	}

	// Hours labelled in the zone; the repeated hour by its offset.
	var hours []struct {
		WindowID string `json:"window_id"`
		Local    string `json:"local"`
		Source   string `json:"source"`
	}
	if err := json.Unmarshal([]byte(cli("--time-zone", "America/New_York", "--from", "2026-11-01T04", "--to", "2026-11-01T07", "--format", "json")), &hours); err != nil {
		t.Fatal(err)
	}
	want := []string{"2026-11-01 00:00 EDT", "2026-11-01 01:00 EDT (-04:00)", "2026-11-01 01:00 EST (-05:00)"}
	if len(hours) != 3 || hours[0].Local != want[0] || hours[1].Local != want[1] || hours[2].Local != want[2] || hours[0].Source != "rollup" {
		t.Fatalf("New York hours: %+v", hours)
	}
	table := cli("--time-zone", "Europe/Berlin", "--from", "2026-03-29T00", "--to", "2026-03-29T02")
	if !strings.Contains(table, "2026-03-29T01 2026-03-29 03:00 CEST final") || !strings.HasPrefix(table, "WINDOW        LOCAL ") {
		t.Fatalf("Berlin table:\n%s", table)
	}
	// A date bound is local midnight: Berlin's Mar 29 starts at 23:00 UTC the day before.
	if out := cli("--time-zone", "Europe/Berlin", "--from", "2026-03-29", "--to", "2026-03-30", "--format", "csv"); !strings.Contains(strings.Split(out, "\n")[1], "2026-03-28T23,2026-03-29 00:00 CET,") ||
		strings.Count(out, "\n") != 24 {
		t.Fatalf("Berlin Mar 29 csv:\n%s", out)
	}
}

// TestWindowsTimeZoneRefused: a zone with a half-hour or 45-minute
// offset, or an unknown name, is a usage error (exit 2) of one line naming
// the zone, before any server is asked.
func TestWindowsTimeZoneRefused(t *testing.T) {
	for _, zone := range []string{"Asia/Kolkata", "Asia/Kathmandu", "Mars/Olympus_Mons"} {
		for _, by := range []string{"hour", "day"} {
			code, out, errOut := runCLI(t, "windows", "--nats-url", "nats://127.0.0.1:1", "--from", "2026-03-01", "--time-zone", zone, "--by", by)
			if code != 2 || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, zone) || !strings.Contains(errOut, "--time-zone") {
				t.Errorf("%s --by %s: exit %d, stdout %q, stderr %q", zone, by, code, out, errOut)
			}
		}
	}
}
