package explain_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/boundedrun"
	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/explain"
	"github.com/receiptflow/receiptflow/pkg/pipeline"
	"github.com/receiptflow/receiptflow/pkg/reconcile"
	"github.com/receiptflow/receiptflow/pkg/traffic"
	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// runAt is the ingest time of the test runs, so the reference batch pass
// stamps the same ingested_at on records without one.
var runAt = time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)

const heartbeatEvery = 7

// fixtures are the inputs the --out path is held to: the hand-written seed
// (corrections, late events, a conflict, retries) and generated traffic
// with more of each.
func fixtures(t *testing.T) map[string]string {
	t.Helper()
	dir := t.TempDir()
	var buf bytes.Buffer
	o := traffic.DefaultConfig()
	o.Seed, o.Events, o.Hours, o.LateRate, o.InvalidRate, o.DisorderRate = 11, 2000, 4, 0.04, 0.02, 0.3
	o.Start = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	if _, err := traffic.Write(&buf, o); err != nil {
		t.Fatal(err)
	}
	gen := filepath.Join(dir, "generated.ndjson")
	if err := os.WriteFile(gen, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	seed, err := filepath.Abs(filepath.Join("..", "..", "e2e", "testdata", "seed.ndjson"))
	if err != nil {
		t.Fatal(err)
	}
	return map[string]string{"seed": seed, "generated": gen}
}

// boundedRun runs events through an in-process pipeline (embedded servers)
// and returns its result and artifact directory.
func boundedRun(t *testing.T, events string, cfg pipeline.Config) (*boundedrun.Result, string) {
	t.Helper()
	return boundedRunWith(t, events, cfg, nil)
}

// boundedRunWith is boundedRun with an AfterDrain hook.
func boundedRunWith(t *testing.T, events string, cfg pipeline.Config, afterDrain func(context.Context, *pipeline.Pipeline) error) (*boundedrun.Result, string) {
	t.Helper()
	dir := t.TempDir()
	cfg.DataDir = dir
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out := filepath.Join(dir, "out")
	res, err := boundedrun.Run(ctx, boundedrun.Config{Config: cfg, Events: events, Out: out, HeartbeatEvery: heartbeatEvery, Now: runAt, AfterDrain: afterDrain})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Report.Holds {
		b, _ := os.ReadFile(filepath.Join(out, "parity.md"))
		t.Fatalf("parity fails:\n%s", b)
	}
	return res, out
}

// reference is the batch pass over the same file, with the run's ingest
// time and heartbeats: the independent judge of every event.
func reference(t *testing.T, events string) *reconcile.Batch {
	t.Helper()
	f, err := os.Open(events)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := reconcile.Count(f, reconcile.Config{DefaultIngestedAt: runAt, HeartbeatEvery: heartbeatEvery, EndOfStream: true})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestExplainRunAgreesWithTraceAndReference: for every final window of
// each fixture, explain over the run's --out agrees with the run's trace
// (on-time count, each correction with its partition and version) and with
// the batch pass computed here from the fixture (count, on time, the
// correction ids, the LATE events with reason and watermark, the
// conflicts, the retries, the digest), and the fixtures do exercise
// corrections, late events and conflicts.
func TestExplainRunAgreesWithTraceAndReference(t *testing.T) {
	for name, events := range fixtures(t) {
		t.Run(name, func(t *testing.T) {
			res, out := boundedRun(t, events, pipeline.Config{})
			ref := reference(t, events)
			var corrections, late, conflicts, final int
			for _, w := range res.Windows {
				if w.Status != window.StatusFinal {
					continue
				}
				final++
				e, err := explain.FromRun(out, "", w.WindowID)
				if err != nil {
					t.Fatal(err)
				}
				checkTrace(t, e, res.Trace)
				checkReference(t, e, ref)
				if e.Parity == nil || e.Parity.Verdict == explain.VerdictMismatch {
					t.Fatalf("%s: parity %+v, want match or explained", w.WindowID, e.Parity)
				}
				corrections += len(e.Corrections)
				late += len(e.Late)
				conflicts += len(e.Conflicts)
			}
			if final == 0 || corrections == 0 || late == 0 || (name == "seed" && conflicts == 0) {
				t.Fatalf("fixture exercises too little: %d final windows, %d corrections, %d late, %d conflicts", final, corrections, late, conflicts)
			}
		})
	}
}

func checkTrace(t *testing.T, e *explain.Explanation, trace []boundedrun.TraceRow) {
	t.Helper()
	var onTime int64
	var want []explain.Correction
	for _, r := range trace {
		if r.WindowID != e.WindowID || r.Decision != "counted" {
			continue
		}
		if r.Correction {
			want = append(want, explain.Correction{EventID: r.EventID, Version: r.Version, Partition: r.Partition})
		} else {
			onTime++
		}
	}
	got := slices.Clone(e.Corrections)
	byID := func(s []explain.Correction) {
		sort.Slice(s, func(i, j int) bool { return s[i].EventID < s[j].EventID })
	}
	byID(got)
	byID(want)
	if e.OnTime != onTime || !slices.Equal(got, want) {
		t.Fatalf("%s: explain on_time %d corrections %+v; trace on_time %d corrections %+v", e.WindowID, e.OnTime, got, onTime, want)
	}
}

func checkReference(t *testing.T, e *explain.Explanation, ref *reconcile.Batch) {
	t.Helper()
	w := ref.Windows[e.WindowID]
	if w == nil {
		t.Fatalf("%s: the batch pass has no such window", e.WindowID)
	}
	var gotCorr []string
	for _, c := range e.Corrections {
		gotCorr = append(gotCorr, c.EventID)
	}
	wantCorr := slices.Clone(w.CorrectionIDs)
	slices.Sort(gotCorr)
	slices.Sort(wantCorr)
	wantLate := make([]explain.Late, 0, len(w.Late))
	for _, l := range w.Late {
		wantLate = append(wantLate, explain.Late{EventID: l.EventID, Reason: l.Reason, Watermark: l.Watermark})
	}
	sort.Slice(wantLate, func(i, j int) bool { return wantLate[i].EventID < wantLate[j].EventID })
	wantConflicts := []string{}
	for _, r := range ref.Rejected {
		if r.Reason != contract.ReasonConflictingDuplicate || slices.Contains(wantConflicts, r.EventID) {
			continue
		}
		win, counted := ref.CountedIn(r.EventID)
		if lj, late := ref.LateJudgmentOf(r.EventID); !counted && late {
			win = lj.WindowID
		}
		if win == e.WindowID {
			wantConflicts = append(wantConflicts, r.EventID)
		}
	}
	slices.Sort(wantConflicts)
	switch {
	case e.Count != w.Count || e.OnTime != w.Count-w.Corrections:
		t.Fatalf("%s: count %d on_time %d; reference count %d on_time %d", e.WindowID, e.Count, e.OnTime, w.Count, w.Count-w.Corrections)
	case !slices.Equal(gotCorr, wantCorr):
		t.Fatalf("%s: corrections %v; reference %v", e.WindowID, gotCorr, wantCorr)
	case !equalLate(e.Late, wantLate):
		t.Fatalf("%s: late %+v; reference %+v", e.WindowID, e.Late, wantLate)
	case !slices.Equal(e.Conflicts, wantConflicts):
		t.Fatalf("%s: conflicts %v; reference %v", e.WindowID, e.Conflicts, wantConflicts)
	case e.Digest != w.Digest.String():
		t.Fatalf("%s: digest %s; reference %s", e.WindowID, e.Digest, w.Digest.String())
	// In a file a retry never reaches RAW: the broker's duplicate window
	// drops it at ingest, so none reaches the ledger.
	case e.IngestDuplicates != int64(len(w.Duplicates)) || e.Duplicates != 0:
		t.Fatalf("%s: duplicates %d at ingest %d; reference retries %d", e.WindowID, e.Duplicates, e.IngestDuplicates, len(w.Duplicates))
	}
}

func equalLate(a, b []explain.Late) bool {
	return slices.EqualFunc(a, b, func(x, y explain.Late) bool {
		return x.EventID == y.EventID && x.Reason == y.Reason && x.Watermark.Equal(y.Watermark)
	})
}

// TestExplainRunRefusesWhatTheRecordsDoNotSay: an unknown window is
// ErrUnknownWindow naming it; a windows.json whose count disagrees with
// the trace, and one whose corrections do, are ErrInconsistent.
func TestExplainRunRefusesWhatTheRecordsDoNotSay(t *testing.T) {
	dir := writeArtifacts(t, 3, 1)
	if _, err := explain.FromRun(dir, "", "2026-12-02T10"); err != nil {
		t.Fatal(err)
	}
	_, err := explain.FromRun(dir, "", "2026-12-02T09")
	if !errors.Is(err, explain.ErrUnknownWindow) || !strings.Contains(err.Error(), "2026-12-02T09") {
		t.Fatalf("unknown window: %v", err)
	}
	for _, tc := range []struct{ count, corrections int64 }{{4, 1}, {3, 0}} {
		dir := writeArtifacts(t, tc.count, tc.corrections)
		_, err := explain.FromRun(dir, "", "2026-12-02T10")
		if !errors.Is(err, explain.ErrInconsistent) {
			t.Fatalf("count %d corrections %d: %v, want ErrInconsistent", tc.count, tc.corrections, err)
		}
	}
}

// writeArtifacts writes a run's artifacts by hand: window 2026-12-02T10
// with the given count and corrections in windows.json, and a trace of two
// events counted on time and one correction. No parity report.
func writeArtifacts(t *testing.T, count, corrections int64) string {
	t.Helper()
	dir := t.TempDir()
	start := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	windows := []wire.Window{{WindowID: "2026-12-02T10", Start: start, End: start.Add(time.Hour), Count: count,
		Corrections: corrections, Version: 5, Status: window.StatusFinal, Digest: "00"}}
	b, err := json.Marshal(windows)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"windows.json": string(b),
		"trace.ndjson": `{"seq":1,"partition":0,"event_id":"a","decision":"counted","window":"2026-12-02T10","version_after":1}
{"seq":2,"partition":0,"event_id":"b","decision":"counted","window":"2026-12-02T10","version_after":2}
{"seq":3,"partition":0,"event_id":"c","decision":"counted","correction":true,"window":"2026-12-02T10","version_after":3}
`,
		"late.ndjson":     "",
		"rejected.ndjson": "",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
