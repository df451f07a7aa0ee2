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
