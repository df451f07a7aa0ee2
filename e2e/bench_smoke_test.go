package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/e2e/bench"
)

// TestBenchQuick runs the bench behind `make bench` in its quick mode and
// checks only that it runs, prints every row of the table and writes every
// key of bench-results.json; it asserts no speed (benchmarks are
// benchmarks). The services run in-process here: building the service
// binaries for process mode would take most of the time budget, and make
// bench exercises that mode.
func TestBenchQuick(t *testing.T) {
	for _, tool := range []string{"redis-server", "python3"} {
		if _, err := exec.LookPath(tool); err != nil {
			if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
				t.Fatalf("%s not found on PATH with CI=true: the bench smoke test cannot run", tool)
			}
			t.Skipf("!!! %s not found on PATH: the bench smoke test was NOT run !!! install it and run again", tool)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 55*time.Second)
	defer cancel()
	dir := t.TempDir()
	var table, progress bytes.Buffer
	began := time.Now()
	res, err := bench.Run(ctx, bench.Options{
		Quick: true, Mode: bench.ModeInProcess, Work: filepath.Join(dir, "work"), Out: &table, Log: &progress,
	})
	if err != nil {
		t.Fatalf("bench: %v\nprogress:\n%s", err, progress.String())
	}
	t.Logf("quick bench took %s:\n%s", time.Since(began).Round(time.Millisecond), table.String())

	// Rows are "%-24s %18s  note": the label is the first 24 columns.
	printed := map[string]string{}
	for _, line := range strings.Split(table.String(), "\n") {
		if len(line) > 25 {
			printed[strings.TrimSpace(line[:24])] = strings.TrimSpace(line[25:])
		}
	}
	for _, row := range bench.Rows {
		v, ok := printed[row]
		switch {
		case !ok:
			t.Errorf("row %q not printed", row)
		case strings.HasPrefix(v, "skipped"):
			t.Errorf("row %q skipped in a full quick run", row)
		}
	}

	path := filepath.Join(dir, "bench-results.json")
	if err := res.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("bench-results.json: %v", err)
	}
	for _, k := range bench.Keys {
		v, ok := doc[k]
		if !ok {
			t.Errorf("bench-results.json has no key %q", k)
			continue
		}
		if _, num := v.(float64); !num {
			t.Errorf("bench-results.json: %q = %v, want a number", k, v)
		}
	}
}
