package pipeline

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/gen"
)

func TestRunGeneratedEmbedded(t *testing.T) {
	dir := t.TempDir()
	var buf bytes.Buffer
	st, err := gen.Write(&buf, gen.Options{Seed: 7, Events: 3000, Start: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), Hours: 6})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "events.ndjson")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := Run(ctx, RunConfig{Config: Config{DataDir: dir, Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))}, Events: path, Out: filepath.Join(dir, "out"), Progress: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("gen %+v ingest %+v windows %d late %d rejected %d holds %v summary %+v", st, res.Ingest, len(res.Windows), len(res.Late), len(res.Rejected), res.Report.Holds, res.Report.Summary)
	if !res.Report.Holds {
		b, _ := os.ReadFile(filepath.Join(dir, "out", "parity.md"))
		t.Fatalf("parity fails:\n%s", b)
	}
}
