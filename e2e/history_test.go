package e2e

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/failpoint"
	"github.com/receiptflow/receiptflow/pkg/history"
	"github.com/receiptflow/receiptflow/pkg/ingest"
	"github.com/receiptflow/receiptflow/pkg/pipeline"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/traffic"
	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// historyConfig is the pipeline of the history tests: a short retention
// (48h) over five days of traffic, with a grace and replay horizon small
// enough for it.
func historyConfig(t *testing.T) pipeline.Config {
	return pipeline.Config{DataDir: t.TempDir(), Partitions: 4, Lateness: 5 * time.Minute, Grace: 10 * time.Minute,
		ReplayHorizon: time.Hour, WindowRetention: 48 * time.Hour, HistoryEvery: 200 * time.Millisecond}
}

// historyFile writes five days of generated traffic, ending before now
// (so no event is future_timestamp against the broker's clock).
func historyFile(t *testing.T) string {
	o := traffic.DefaultConfig()
	o.Seed, o.Events, o.Hours, o.Stores = 14, 3000, 120, 8
	o.Start = time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	var buf bytes.Buffer
	if _, err := traffic.Write(&buf, o); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "history.ndjson")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// historyRun sends the file at path through a pipeline of cfg that keeps
// running, waits for it to drain, for every window to be retired and for
// the history pass to prune those more than cfg.WindowRetention behind
// the newest window, and returns the pipeline (closed by t.Cleanup) and
// what its bucket then holds. rate paces ingest (records per second, 0:
// unpaced).
func historyRun(t *testing.T, cfg pipeline.Config, path string, rate int) (*pipeline.Pipeline, *history.Bucket) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	p, err := pipeline.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	in := ingest.New(p.Admin.JS, ingest.Config{Partitions: cfg.Partitions, Validator: p.Validator, HeartbeatEvery: 1000, EndOfStream: true})
	if _, err := ingest.FileAtRate(ctx, in, f, rate, nil); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitDrained(ctx, nil); err != nil {
		t.Fatal(err)
	}
	kv, err := p.KV(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Wait for the windower to retire every window and the publisher's
	// history pass to prune those beyond the retention.
	var b *history.Bucket
	testenv.CheckFor(t, 60*time.Second, 100*time.Millisecond, func() error {
		if b, err = history.Read(ctx, kv); err != nil {
			return err
		}
		var head time.Time
		for _, w := range b.Windows {
			if w.End.After(head) {
				head = w.End
			}
		}
		for _, w := range b.Windows {
			if !w.End.After(head.Add(-cfg.WindowRetention)) {
				return errNotYet("window " + w.WindowID + " beyond the retention not pruned yet")
			}
		}
		final := 0
		for _, d := range b.Days {
			if d.Final {
				final++
			}
		}
		if final != len(b.Days) || len(b.Days) < 5 {
			return errNotYet("day rollups not all final yet")
		}
		return nil
	})
	return p, b
}

// TestHistoryRetentionRollupsAndQuery: a bounded run over five days with a
// 48h window retention keeps every window (its parity holds); the same
// file through a long-running pipeline with the same retention prunes the
// windows more than 48h behind the newest, and `receiptctl windows`
// (the built binary) lists in JSON, CSV and a table every hour the run
// counted, with its count, corrections, late_dropped, version and status:
// inside the retention from the hourly snapshots, beyond it from the day
// rollups; `--by day` gives each day the sum of its hours.
func TestHistoryRetentionRollupsAndQuery(t *testing.T) {
	path := historyFile(t)
	bin := secCLIBinary(t)

	// The bounded run: its artifacts are the record, nothing is pruned.
	ref := runFile(t, historyConfig(t), path)
	if len(ref.Windows) < 100 {
		t.Fatalf("the run has %d windows; want five days' worth", len(ref.Windows))
	}
	want := map[string]wire.Window{}
	var head time.Time
	for _, w := range ref.Windows {
		if w.Status != window.StatusFinal {
			t.Fatalf("window %s not final after the run: %+v", w.WindowID, w)
		}
		want[w.WindowID] = w
		if w.End.After(head) {
			head = w.End
		}
	}
	cut := head.Add(-48 * time.Hour)

	// The same file through a pipeline that keeps running.
	p, b := historyRun(t, historyConfig(t), path, 0)
	if len(b.Windows) == 0 || len(b.Windows) > 48 {
		t.Fatalf("%d hourly snapshots kept, want those of the last 48h", len(b.Windows))
	}

	cli := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		cmd := exec.Command(bin, append([]string{"windows", "--nats-url", p.NATSURL}, args...)...)
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("receiptctl windows %v: %v\n%s", args, err, errb.String())
		}
		return out.String()
	}
	var rows []history.Hour
	if err := json.Unmarshal([]byte(cli("--from", "2026-11-01", "--to", "2026-12-01", "--format", "json")), &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(want) {
		t.Fatalf("windows lists %d hours, the run counted %d", len(rows), len(want))
	}
	fromRollup := 0
	for _, r := range rows {
		w, ok := want[r.WindowID]
		if !ok {
			t.Errorf("hour %s listed, not in the run", r.WindowID)
			continue
		}
		if r.Count != w.Count || r.Corrections != w.Corrections || r.LateDropped != w.LateDropped || r.Version != w.Version || r.Status != w.Status ||
			r.AmountCents != w.AmountCents || r.Unpriced != w.Unpriced {
			t.Errorf("hour %s: %+v, the run's window %+v", r.WindowID, r, w)
		}
		wantSource := history.SourceWindow
		if !w.End.After(cut) {
			wantSource = history.SourceRollup
			fromRollup++
		}
		if r.Source != wantSource {
			t.Errorf("hour %s from %s, want %s", r.WindowID, r.Source, wantSource)
		}
	}
	t.Logf("%d hours: %d from hourly snapshots, %d from day rollups; %d days", len(rows), len(rows)-fromRollup, fromRollup, len(b.Days))
	if fromRollup == 0 || fromRollup == len(rows) {
		t.Fatalf("%d of %d hours from rollups: the test must see both sources", fromRollup, len(rows))
	}

	recs, err := csv.NewReader(strings.NewReader(cli("--from", "2026-11-01", "--to", "2026-12-01", "--format", "csv"))).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != len(rows)+1 || recs[0][0] != "window_id" {
		t.Fatalf("csv has %d records for %d hours", len(recs), len(rows))
	}
	for i, r := range rows {
		if got := strings.Join(recs[i+1], ","); !strings.HasPrefix(got, r.WindowID+","+string(r.Status)+","+itoa(int(r.Count))+",") || !strings.HasSuffix(got, ","+r.Source) {
			t.Errorf("csv row %q, json %+v", got, r)
		}
	}
	table := strings.Split(strings.TrimRight(cli("--from", "2026-11-01", "--to", "2026-12-01"), "\n"), "\n")
	if len(table) != len(rows)+1 || !strings.HasPrefix(table[0], "WINDOW ") {
		t.Fatalf("table has %d lines for %d hours", len(table), len(rows))
	}
	for i, r := range rows {
		if f := strings.Fields(table[i+1]); len(f) != 10 || f[0] != r.WindowID || f[2] != itoa(int(r.Count)) || f[5] != itoa(int(r.AmountCents)) || f[9] != r.Source {
			t.Errorf("table row %q, json %+v", table[i+1], r)
		}
	}

	var days []wire.Day
	if err := json.Unmarshal([]byte(cli("--from", "2026-11-01", "--to", "2026-12-01", "--by", "day", "--format", "json")), &days); err != nil {
		t.Fatal(err)
	}
	sums := map[string]int64{}
	amounts := map[string]int64{}
	hours := map[string]int{}
	for _, w := range ref.Windows {
		d := w.Start.Format(wire.DayLayout)
		sums[d] += w.Count
		amounts[d] += w.AmountCents
		hours[d]++
	}
	if len(days) != len(sums) {
		t.Fatalf("%d day rollups, the run's windows span %d days", len(days), len(sums))
	}
	for _, d := range days {
		if d.Count != sums[d.Day] || d.Windows != hours[d.Day] || !d.Final || d.AmountCents != amounts[d.Day] || d.AmountCents == 0 {
			t.Errorf("day %s: count %d windows %d final %v; the run's hours sum to %d over %d", d.Day, d.Count, d.Windows, d.Final, sums[d.Day], hours[d.Day])
		}
	}
	if out := cli("--from", "2026-11-01", "--to", "2026-12-01", "--by", "day", "--format", "csv"); strings.Count(out, "\n") != len(days)+1 {
		t.Errorf("day csv:\n%s", out)
	}
}

// TestHistoryUnderCrashesEndsLikeTheCleanRun: with the publisher and the
// windower crashing over and over (failpoints), the bucket ends with the
// same hourly snapshots kept, the same hours pruned and the same day
// rollups as without faults: replays write the same history.
func TestHistoryUnderCrashesEndsLikeTheCleanRun(t *testing.T) {
	path := historyFile(t)
	_, clean := historyRun(t, historyConfig(t), path, 0)
	fps, err := failpoint.Parse("publisher.after-put=crash@every:3,windower.after-write=crash@every:5", failpoint.InProcess)
	if err != nil {
		t.Fatal(err)
	}
	cfg := historyConfig(t)
	cfg.Failpoints = fps
	// Paced like a live source: batches stay small, so the failpoints fire
	// many times.
	_, faulty := historyRun(t, cfg, path, 1500)
	if len(fps.Fired()) == 0 {
		t.Fatal("no failpoint fired")
	}
	t.Logf("fired %v", fps.Fired())
	all := func(b *history.Bucket) []history.Hour {
		hours := b.Hours(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
		for i := range hours {
			hours[i].Stale = false
		}
		return hours
	}
	if got, want := all(faulty), all(clean); !reflect.DeepEqual(got, want) {
		t.Fatalf("hours differ from the clean run:\n got %+v\nwant %+v", got, want)
	}
	days := func(b *history.Bucket) []string {
		var out []string
		for _, d := range b.Days {
			h, _ := json.Marshal(d.Hours)
			out = append(out, fmt.Sprintf("%s %d %d %d %d %v %d %s", d.Day, d.Count, d.Corrections, d.LateDropped, d.Windows, d.Final, d.Version, h))
		}
		return out
	}
	if got, want := days(faulty), days(clean); !reflect.DeepEqual(got, want) {
		t.Fatalf("day rollups differ from the clean run:\n got %v\nwant %v", got, want)
	}
}
