package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const seed = "../../e2e/testdata/seed.ndjson"

func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestRunWritesArtifactsAndHoldsParity(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := runCLI(t, "run", "--events", seed, "--out", dir)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "parity holds") {
		t.Fatalf("output: %s", out)
	}
	var windows []map[string]any
	b, err := os.ReadFile(filepath.Join(dir, "windows.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &windows); err != nil || len(windows) != 4 {
		t.Fatalf("windows.json: %d windows, %v", len(windows), err)
	}
}

func TestRunWithFailpointsEndsLikeTheCleanRun(t *testing.T) {
	clean, faulty := t.TempDir(), t.TempDir()
	if code, out, e := runCLI(t, "run", "--events", seed, "--out", clean); code != 0 {
		t.Fatalf("clean: %d %s %s", code, out, e)
	}
	code, out, e := runCLI(t, "run", "--events", seed, "--out", faulty,
		"--failpoints", "windower.after-write=crash@every:2,validator.after-publish=crash@every:3,publisher.after-put=crash@every:2")
	if code != 0 {
		t.Fatalf("faulty: %d %s %s", code, out, e)
	}
	if !strings.Contains(out, "crashes map[") || strings.Contains(out, "crashes map[]") {
		t.Fatalf("no crash happened: %s", out)
	}
	a, b := readCounts(t, clean), readCounts(t, faulty)
	if a != b {
		t.Fatalf("windows differ:\nclean  %s\nfaulty %s", a, b)
	}
}

func readCounts(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "windows.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ws []struct {
		WindowID    string `json:"window_id"`
		Count       int64  `json:"count"`
		Version     int64  `json:"version"`
		Status      string `json:"status"`
		Corrections int64  `json:"corrections"`
		LateDropped int64  `json:"late_dropped"`
		Digest      string `json:"digest"`
	}
	if err := json.Unmarshal(b, &ws); err != nil {
		t.Fatal(err)
	}
	s, _ := json.Marshal(ws)
	return string(s)
}

func TestHandoffBundle(t *testing.T) {
	dir := t.TempDir()
	code, out, e := runCLI(t, "handoff", "--out", dir, "--events", seed, "--docs", "../../docs")
	if code != 0 {
		t.Fatalf("exit %d %s %s", code, out, e)
	}
	for _, f := range []string{"README.md", "dashboard-state.json", "source/seed.ndjson", "schemas/event.v1.schema.json",
		"schemas/event.v2.schema.json", "docs/sink-transaction-plan.md", "docs/recovery.md", "run/windows.json",
		"run/trace.ndjson", "run/parity.md", "run/parity.json"} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || fi.Size() == 0 {
			t.Errorf("bundle file %s: %v", f, err)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"nope"},
		{"run", "--out", t.TempDir()},
		{"run", "--events", seed, "--out", t.TempDir(), "--failpoints", "bogus=crash@every:1"},
		{"run", "--events", seed, "--out", t.TempDir(), "--partitions", "0"},
		{"switch"},
		{"rebuild", "--generation", "2"},
	} {
		if code, _, _ := runCLI(t, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

// TestUsageErrorsAreOneLine (docs/spec.md §6): a usage error exits 2 with
// one line naming the bad flag, value or command, not the whole usage; -h
// prints the full usage and exits 0; an error is prefixed with the command
// once. Before, a bad flag printed the flag set's usage (50 lines for run)
// and exited 1, and run's errors read "receiptctl run: run: ...".
func TestUsageErrorsAreOneLine(t *testing.T) {
	for _, tc := range []struct {
		args []string
		name string // what the line must name
	}{
		{[]string{"run", "--bogus"}, "-bogus"},
		{[]string{"run", "--events", seed, "--out", t.TempDir(), "--partitions", "many"}, "-partitions"},
		{[]string{"run", "--events", seed, "--out", t.TempDir(), "--lateness", "soon"}, "-lateness"},
		{[]string{"reconcile", "--windows"}, "-windows"},
		{[]string{"watch", "--nope=1"}, "-nope"},
		{[]string{"backfill"}, "--generation"},
		{[]string{"backfill", "--generation", "2"}, "--nats-url"},
		{[]string{"backfill", "--generation", "2", "--nats-url", "nats://127.0.0.1:1", "--redis-url", "redis://127.0.0.1:1", "--margin", "-1m"}, "--margin"},
		{[]string{"nope"}, `"nope"`},
		{[]string{"run", "--events", seed, "--out", t.TempDir(), "--window-retention", "1h"}, "--window-retention"},
		{[]string{"run", "--events", seed, "--out", t.TempDir(), "--day-retention", "24h"}, "--day-retention"},
		{[]string{"windows"}, "--from"},
		{[]string{"windows", "--from", "yesterday"}, "--from"},
		{[]string{"windows", "--from", "2026-12-02", "--to", "2026-12-32"}, "--to"},
		{[]string{"windows", "--from", "2026-12-02T10", "--to", "2026-12-02T10"}, "--from"},
		{[]string{"windows", "--from", "2026-12-02", "--to", "2026-12-01"}, "--from"},
		{[]string{"windows", "--from", "2026-12-02", "--format", "xml"}, "--format"},
		{[]string{"windows", "--from", "2026-12-02", "--by", "week"}, "--by"},
		{[]string{"windows", "--from", "2026-12-02", "--nats-url", ""}, "--nats-url"},
		{[]string{"windows", "--from", "2026-12-02", "--nats-url", "nats://127.0.0.1:1", "--bogus"}, "-bogus"},
	} {
		code, out, errOut := runCLI(t, tc.args...)
		if code != 2 {
			t.Errorf("%v: exit %d, want 2", tc.args, code)
		}
		if lines := strings.Count(strings.TrimRight(errOut, "\n"), "\n") + 1; lines != 1 || !strings.Contains(errOut, tc.name) {
			t.Errorf("%v: stderr has %d lines, want one naming %s:\n%s", tc.args, lines, tc.name, errOut)
		}
		if out != "" {
			t.Errorf("%v: stdout %q, want nothing", tc.args, out)
		}
	}
	code, _, errOut := runCLI(t, "run", "-h")
	if code != 0 || !strings.Contains(errOut, "-events") || !strings.Contains(errOut, "-stall-timeout") || !strings.Contains(errOut, "usage: receiptctl run") {
		t.Errorf("run -h: exit %d, want 0 and the full usage:\n%s", code, errOut)
	}
	code, _, errOut = runCLI(t, "run", "--events", filepath.Join(t.TempDir(), "missing.ndjson"), "--out", t.TempDir())
	if code != 1 || strings.Contains(errOut, "run: run:") || !strings.HasPrefix(errOut, "receiptctl run: ") {
		t.Errorf("run of a missing file: exit %d, want 1 and the command named once:\n%s", code, errOut)
	}
}

// TestReconcileJudgesARunsArtifacts: reconcile over the file a run read,
// with the run's windows.json (late.ndjson read beside it by default),
// holds; the same artifacts with one LATE row's watermark changed fail
// with exit 1, naming the event.
func TestReconcileJudgesARunsArtifacts(t *testing.T) {
	dir := t.TempDir()
	if code, out, e := runCLI(t, "run", "--events", seed, "--out", dir); code != 0 {
		t.Fatalf("run: %d %s %s", code, out, e)
	}
	windows := filepath.Join(dir, "windows.json")
	code, out, e := runCLI(t, "reconcile", "--events", seed, "--windows", windows, "--out", filepath.Join(dir, "check"))
	if code != 0 || !strings.Contains(out, "parity holds") {
		t.Fatalf("reconcile: exit %d\n%s\n%s", code, out, e)
	}
	late, err := os.ReadFile(filepath.Join(dir, "late.ndjson"))
	if err != nil {
		t.Fatal(err)
	}
	line, _, _ := strings.Cut(string(late), "\n")
	var row struct {
		EventID   string    `json:"event_id"`
		Watermark time.Time `json:"watermark"`
	}
	if err := json.Unmarshal([]byte(line), &row); err != nil || row.EventID == "" {
		t.Fatalf("late.ndjson %q: %v", line, err)
	}
	changed := strings.Replace(string(late), row.Watermark.UTC().Format(time.RFC3339Nano),
		row.Watermark.Add(time.Minute).UTC().Format(time.RFC3339Nano), 1)
	if changed == string(late) {
		t.Fatalf("watermark of %q not found", line)
	}
	bad := filepath.Join(dir, "bad-late.ndjson")
	if err := os.WriteFile(bad, []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, _ = runCLI(t, "reconcile", "--events", seed, "--windows", windows, "--late", bad)
	if code != 1 || !strings.Contains(out, "late_watermark_mismatch "+row.EventID) {
		t.Fatalf("reconcile with a changed LATE watermark: exit %d\n%s", code, out)
	}
}

// TestRunMaxFutureSkew: --max-future-skew (a common flag, docs/spec.md §6)
// reaches the validator of run. An event 20 minutes after its received
// time is future_timestamp under the default 5m skew and counted with
// --max-future-skew 1h; a skew that is not positive is a usage error.
func TestRunMaxFutureSkew(t *testing.T) {
	b, err := os.ReadFile(seed)
	if err != nil {
		t.Fatal(err)
	}
	soon := time.Now().UTC().Add(20 * time.Minute).Format(time.RFC3339)
	line := `{"schema_version":2,"event_id":"evt-soon","receipt_id":"rcpt-soon","type":"submitted","occurred_at":"` + soon +
		`","partition_key":"store-a","producer_version":"pos-2.4.1"}` + "\n"
	path := filepath.Join(t.TempDir(), "events.ndjson")
	if err := os.WriteFile(path, append(b, line...), 0o644); err != nil {
		t.Fatal(err)
	}
	rejected := func(args ...string) []string {
		t.Helper()
		dir := t.TempDir()
		code, out, errOut := runCLI(t, append([]string{"run", "--events", path, "--out", dir}, args...)...)
		if code != 0 {
			t.Fatalf("run %v: exit %d\n%s\n%s", args, code, out, errOut)
		}
		return rejectedAs(t, dir, "evt-soon")
	}
	if got := rejected(); len(got) != 1 || got[0] != "future_timestamp" {
		t.Fatalf("default skew: evt-soon rejected as %v, want [future_timestamp]", got)
	}
	if got := rejected("--max-future-skew", "1h"); len(got) != 0 {
		t.Fatalf("--max-future-skew 1h: evt-soon rejected as %v, want counted", got)
	}
	if code, _, errOut := runCLI(t, "run", "--events", path, "--out", t.TempDir(), "--max-future-skew", "0s"); code != 2 || !strings.Contains(errOut, "--max-future-skew") {
		t.Fatalf("--max-future-skew 0s: exit %d, %q; want 2 naming the flag", code, errOut)
	}
	if code, _, errOut := runCLI(t, "run", "--events", path, "--out", t.TempDir(), "--stall-timeout", "-1s"); code != 2 || !strings.Contains(errOut, "--stall-timeout") {
		t.Fatalf("--stall-timeout -1s: exit %d, %q; want 2 naming the flag", code, errOut)
	}
}

// TestRunMaxRejectRatio (docs/spec.md §6): a run in which every record was
// rejected exits 1 saying so, though its (empty) parity holds; under
// --max-reject-ratio 1 the same run passes; a ratio outside [0, 1] is a
// usage error. Before, such a run exited 0 with "parity holds".
func TestRunMaxRejectRatio(t *testing.T) {
	var b strings.Builder
	for i := range 30 {
		fmt.Fprintf(&b, `{"schema_version":2,"event_id":"bad-%d","type":"submitted"}`+"\n", i)
	}
	path := filepath.Join(t.TempDir(), "bad.ndjson")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	code, out, errOut := runCLI(t, "run", "--events", path, "--out", dir)
	if code != 1 || !strings.Contains(errOut, "30 of 30 records rejected") || !strings.Contains(errOut, "--max-reject-ratio") {
		t.Fatalf("all rejected: exit %d, want 1 naming the ratio\n%s\n%s", code, out, errOut)
	}
	if strings.Contains(out, "parity holds") {
		t.Errorf("all rejected: stdout says parity holds:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "rejected.ndjson")); err != nil {
		t.Errorf("the artifacts are not written: %v", err)
	}
	if code, out, errOut := runCLI(t, "run", "--events", path, "--out", t.TempDir(), "--max-reject-ratio", "1"); code != 0 {
		t.Errorf("--max-reject-ratio 1: exit %d\n%s\n%s", code, out, errOut)
	}
	if code, _, errOut := runCLI(t, "run", "--events", path, "--out", t.TempDir(), "--max-reject-ratio", "1.5"); code != 2 || !strings.Contains(errOut, "--max-reject-ratio") {
		t.Errorf("--max-reject-ratio 1.5: exit %d, want 2 naming the flag\n%s", code, errOut)
	}
}
