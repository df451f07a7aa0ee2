package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/pipeline"
	"github.com/receiptflow/receiptflow/pkg/window"
)

func hsKeyFor(p int) string {
	for i := 0; ; i++ {
		k := fmt.Sprintf("store-%d", i)
		if window.Partition(k, 8) == p {
			return k
		}
	}
}

func hsRun(t *testing.T, lines []string, hbEvery int) *pipeline.RunResult {
	path := filepath.Join(t.TempDir(), "in.ndjson")
	os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	t0 := time.Now()
	res, err := pipeline.Run(ctx, pipeline.RunConfig{Config: pipeline.Config{DataDir: t.TempDir()}, Events: path, HeartbeatEvery: hbEvery})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("run took %v holds=%v", time.Since(t0), res.Report.Holds)
	for _, w := range res.Windows {
		t.Logf("window %s count %d status %s corr %d", w.WindowID, w.Count, w.Status, w.Corrections)
	}
	for _, r := range res.Trace {
		t.Logf("trace %+v", r)
	}
	for _, r := range res.Rejected {
		t.Logf("rej %+v", r)
	}
	return res
}

func hsEv(id, key, at string) string {
	return fmt.Sprintf(`{"schema_version":2,"event_id":%q,"receipt_id":"r1","type":"submitted","occurred_at":%q,"ingested_at":"2026-12-02T10:30:00Z","partition_key":%q,"producer_version":"p"}`, id, at, key)
}

func TestZZHostileCollisionEOS(t *testing.T) {
	k := hsKeyFor(2)
	hsRun(t, []string{hsEv("a1", k, "2026-12-02T10:01:00Z"), hsEv("hb-2-5", k, "2026-12-02T10:02:00Z")}, 0)
}

func TestZZHostileCollisionMid(t *testing.T) {
	k := hsKeyFor(2)
	hsRun(t, []string{hsEv("a1", k, "2026-12-02T10:01:00Z"), hsEv("a2", k, "2026-12-02T10:02:00Z"), hsEv("hb-2-5", k, "2026-12-02T10:03:00Z")}, 2)
}

func TestZZHostileUnstamped64K(t *testing.T) {
	k := hsKeyFor(1)
	base := `{"schema_version":2,"event_id":"big1","receipt_id":"r1","type":"submitted","occurred_at":"2026-12-02T10:01:00Z","partition_key":"` + k + `","producer_version":"p","payload":{"pad":"`
	pad := 64<<10 - len(base) - 3
	line := base + strings.Repeat("x", pad) + `"}}`
	t.Logf("len %d", len(line))
	hsRun(t, []string{"  " + line + " \r", hsEv("a1", k, "2026-12-02T10:01:00Z")}, 0)
}

func TestZZHostileHuge(t *testing.T) {
	k := hsKeyFor(1)
	line := `{"schema_version":2,"event_id":"huge1","payload":{"pad":"` + strings.Repeat("x", 2<<20) + `"}}`
	hsRun(t, []string{line, hsEv("a1", k, "2026-12-02T10:01:00Z")}, 0)
}
