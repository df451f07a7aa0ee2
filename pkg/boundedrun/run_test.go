package boundedrun

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/pipeline"
	"github.com/receiptflow/receiptflow/pkg/traffic"
)

func TestRunGeneratedEmbedded(t *testing.T) {
	dir := t.TempDir()
	var buf bytes.Buffer
	st, err := traffic.Write(&buf, traffic.Config{Seed: 7, Events: 3000, Start: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), Hours: 6})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "events.ndjson")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := Run(ctx, Config{Config: pipeline.Config{DataDir: dir, Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))}, Events: path, Out: filepath.Join(dir, "out"), Progress: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("gen %+v ingest %+v windows %d late %d rejected %d holds %v summary %+v", st, res.Ingest, len(res.Windows), len(res.Late), len(res.Rejected), res.Report.Holds, res.Report.Summary)
	if !res.Report.Holds {
		b, _ := os.ReadFile(filepath.Join(dir, "out", "parity.md"))
		t.Fatalf("parity fails:\n%s", b)
	}
}

// TestRunRefereeReadsRAW: a bounded run with late events and frequent
// heartbeats; the referee replays RAW (heartbeats included) and judges
// every late event itself, so parity holds with the batch's too-late
// verdicts equal to the stream's LATE rows, event by event.
func TestRunRefereeReadsRAW(t *testing.T) {
	dir := t.TempDir()
	var buf bytes.Buffer
	o := traffic.DefaultConfig()
	o.Seed, o.Events, o.Hours, o.LateRate, o.InvalidRate = 5, 3000, 6, 0.03, 0.01
	o.Start = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	if _, err := traffic.Write(&buf, o); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "events.ndjson")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	res, err := Run(ctx, Config{Config: pipeline.Config{DataDir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		Events: path, Out: filepath.Join(dir, "out"), HeartbeatEvery: 7})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Report.Holds {
		b, _ := os.ReadFile(filepath.Join(dir, "out", "parity.md"))
		t.Fatalf("parity fails:\n%s", b)
	}
	s := res.Report.Summary
	if len(res.Late) == 0 || s.BatchLate != len(res.Late) || s.LateAfterGrace != len(res.Late) || s.Heartbeats == 0 {
		t.Fatalf("stream LATE rows %d, batch too-late verdicts %d, matched %d, heartbeats %d",
			len(res.Late), s.BatchLate, s.LateAfterGrace, s.Heartbeats)
	}
}
