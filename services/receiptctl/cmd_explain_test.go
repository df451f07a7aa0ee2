package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/boundedrun"
	"github.com/receiptflow/receiptflow/pkg/pipeline"
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

// TestExplainLiveDeployment: explain against a running deployment (the
// in-process pipeline of a run, by its URLs) prints what explain over the
// run's artifacts prints, parity aside; an unknown window is exit 1
// naming it; without --out or URLs it is a usage error.
func TestExplainLiveDeployment(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	var live string
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := boundedrun.Run(ctx, boundedrun.Config{Config: pipeline.Config{DataDir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		Events: seed, Out: out, AfterDrain: func(ctx context.Context, p *pipeline.Pipeline) error {
			code, o, e := runCLI(t, "explain", "--nats-url", p.NATSURL, "--redis-url", p.RedisURL, "--format", "json", "2026-12-02T10")
			if code != 0 {
				t.Errorf("live: exit %d %s", code, e)
			}
			live = o
			code, _, e = runCLI(t, "explain", "--nats-url", p.NATSURL, "--redis-url", p.RedisURL, "2026-12-02T19")
			if code != 1 || !strings.Contains(e, "2026-12-02T19") {
				t.Errorf("live unknown window: exit %d, %q", code, e)
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	code, _, e := runCLI(t, "explain", "--out", out, "--format", "json", "--parity", filepath.Join(dir, "none.json"), "2026-12-02T10")
	if code != 1 || !strings.Contains(e, "none.json") {
		t.Fatalf("a named parity report that is missing: exit %d %q", code, e)
	}
	code, fromOut, e := runCLI(t, "explain", "--out", out, "--format", "json", "2026-12-02T10")
	if code != 0 {
		t.Fatalf("--out: exit %d %s", code, e)
	}
	var a, b map[string]any
	if err := json.Unmarshal([]byte(live), &a); err != nil {
		t.Fatalf("live: %v: %q", err, live)
	}
	if err := json.Unmarshal([]byte(fromOut), &b); err != nil {
		t.Fatal(err)
	}
	delete(b, "parity")
	delete(b, "ingest_duplicates")
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("live %v\n--out %v", a, b)
	}
	if code, _, e := runCLI(t, "explain", "--nats-url", "", "--redis-url", "", "2026-12-02T10"); code != 2 {
		t.Fatalf("no source: exit %d %q", code, e)
	}
}
