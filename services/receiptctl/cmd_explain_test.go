package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestExplainOverARunsArtifacts: explain over a run of the seed fixture,
// flags before and after the window id: the text names the sum and the
// late event, the JSON has the spec's fields; an unknown window is exit 1
// naming it; bad invocations are exit 2 with one line.
func TestExplainOverARunsArtifacts(t *testing.T) {
	dir := t.TempDir()
	if code, out, e := runCLI(t, "run", "--events", seed, "--out", dir); code != 0 {
		t.Fatalf("run: %d %s %s", code, out, e)
	}
	code, out, e := runCLI(t, "explain", "2026-12-02T10", "--out", dir)
	if code != 0 || !strings.Contains(out, "count 7 = 5 on time + 2 corrections") || !strings.Contains(out, "evt-seed-22") {
		t.Fatalf("text: exit %d\n%s\n%s", code, out, e)
	}
	code, out, e = runCLI(t, "explain", "--format", "json", "--out", dir, "2026-12-02T10")
	if code != 0 {
		t.Fatalf("json: exit %d %s", code, e)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"window_id", "status", "version", "count", "on_time", "corrections", "late", "duplicates", "conflicts", "digest", "parity"} {
		if _, ok := got[f]; !ok {
			t.Fatalf("json lacks %q: %s", f, out)
		}
	}

	code, _, e = runCLI(t, "explain", "--out", dir, "2026-12-02T19")
	if code != 1 || !strings.Contains(e, "2026-12-02T19") {
		t.Fatalf("unknown window: exit %d, %q", code, e)
	}
	for _, args := range [][]string{
		{"explain", "--out", dir},
		{"explain", "--out", dir, "2026-12-02T10", "2026-12-02T11"},
		{"explain", "--out", dir, "--format", "xml", "2026-12-02T10"},
		{"explain", "--out", dir, "yesterday"},
		{"explain", "--bogus", "2026-12-02T10"},
	} {
		code, _, e := runCLI(t, args...)
		if code != 2 || strings.Count(strings.TrimSpace(e), "\n") != 0 {
			t.Fatalf("%v: exit %d, %q; want 2 and one line", args, code, e)
		}
	}
}
