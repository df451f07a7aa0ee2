package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/receiptflow/receiptflow/pkg/testenv"
)

// aheadEvent occurred 3 minutes after its ingested_at: future_timestamp
// under a 1m skew, counted under the default 5m.
const aheadEvent = `{"schema_version":2,"event_id":"evt-ahead","receipt_id":"rcpt-ahead","type":"submitted","occurred_at":"2026-12-02T10:23:00Z","ingested_at":"2026-12-02T10:20:00Z","partition_key":"store-a","producer_version":"pos-2.4.1"}` + "\n"

// eventsWithAhead writes the seed fixture and aheadEvent to a file.
func eventsWithAhead(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(seed)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "events.ndjson")
	if err := os.WriteFile(path, append(b, aheadEvent...), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// futureRejects reads how many records a batch.json rejected future_timestamp.
func futureRejects(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "batch.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		ByReason map[string]int `json:"rejected_by_reason"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return s.ByReason["future_timestamp"]
}

// rejectedAs returns the reasons rejected.ndjson in dir gives event id.
func rejectedAs(t *testing.T, dir, id string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "rejected.ndjson"))
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r struct {
			EventID string `json:"event_id"`
			Reason  string `json:"reason"`
		}
		if json.Unmarshal([]byte(l), &r) == nil && r.EventID == id {
			reasons = append(reasons, r.Reason)
		}
	}
	return reasons
}

// TestReconcileJudgesWithTheDeploymentsSkew (issue 25): a deployment set
// up with RECEIPTS_MAX_FUTURE_SKEW=1m rejects an event that occurred 3
// minutes after its ingested_at, and reconcile given no parameter flags —
// against the deployment (NATS_URL) or against the run's artifacts —
// judges it rejected too. Before, reconcile judged with the default 5m
// and counted it.
func TestReconcileJudgesWithTheDeploymentsSkew(t *testing.T) {
	_, url := testenv.NATS(t)
	redisURL := testenv.RedisServer(t).URL()
	events := eventsWithAhead(t)
	dir := t.TempDir()
	t.Setenv("RECEIPTS_MAX_FUTURE_SKEW", "1m")
	if code, out, e := runCLI(t, "run", "--events", events, "--out", dir, "--nats-url", url, "--redis-url", redisURL); code != 0 {
		t.Fatalf("run: exit %d\n%s\n%s", code, out, e)
	}
	if got := rejectedAs(t, dir, "evt-ahead"); len(got) != 1 || got[0] != "future_timestamp" {
		t.Fatalf("the pipeline rejected evt-ahead as %v, want [future_timestamp]", got)
	}
	want := 0
	b, _ := os.ReadFile(filepath.Join(dir, "rejected.ndjson"))
	want = strings.Count(string(b), `"future_timestamp"`)

	// The operator's shell has no RECEIPTS_MAX_FUTURE_SKEW: the deployment knows.
	t.Setenv("RECEIPTS_MAX_FUTURE_SKEW", "")
	t.Setenv("NATS_URL", url)
	check := t.TempDir()
	if code, out, e := runCLI(t, "reconcile", "--events", events, "--out", check); code != 0 {
		t.Fatalf("reconcile against the deployment: exit %d\n%s\n%s", code, out, e)
	}
	if got := futureRejects(t, check); got != want {
		t.Fatalf("reconcile against the deployment: %d future_timestamp rejections, the pipeline %d", got, want)
	}

	t.Setenv("NATS_URL", "")
	check = t.TempDir()
	code, out, e := runCLI(t, "reconcile", "--events", events, "--windows", filepath.Join(dir, "windows.json"), "--out", check)
	if code != 0 || !strings.Contains(out, "parity holds") {
		t.Fatalf("reconcile of the run's artifacts: exit %d\n%s\n%s", code, out, e)
	}
	if got := futureRejects(t, check); got != want {
		t.Fatalf("reconcile of the run's artifacts: %d future_timestamp rejections, the pipeline %d", got, want)
	}
}
