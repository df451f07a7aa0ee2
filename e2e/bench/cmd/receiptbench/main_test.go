package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFlags: -h prints the flags; bad windower counts, stray arguments and
// an unknown scenario are errors that say what is wrong.
func TestFlags(t *testing.T) {
	var stderr bytes.Buffer
	if err := run(context.Background(), []string{"-h"}, &bytes.Buffer{}, &stderr); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h = %v, want flag.ErrHelp", err)
	}
	for _, f := range []string{"-events", "-quick", "-mode", "-only", "-windowers", "-json"} {
		if !strings.Contains(stderr.String(), f) {
			t.Errorf("-h does not list %s:\n%s", f, stderr.String())
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--windowers", "1,0"}, `--windowers: bad count "0"`},
		{[]string{"--windowers", "1,two"}, `--windowers: bad count "two"`},
		{[]string{"--mode", "inprocess", "extra"}, `unexpected arguments ["extra"]`},
		{[]string{"--mode", "inprocess", "--only", "b0,fast"}, `unknown scenario "fast"`},
		{[]string{"--no-such-flag"}, "flag provided but not defined"},
	} {
		err := run(context.Background(), c.args, &bytes.Buffer{}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("run %q = %v, want an error with %q", c.args, err, c.want)
		}
	}
}

// TestTinyRunWritesResults: a B0-only run of 200 records prints the table,
// writes the results file named by --json with the B0 figures filled and
// the scenarios not run left null.
func TestTinyRunWritesResults(t *testing.T) {
	out := filepath.Join(t.TempDir(), "bench.json")
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"--mode", "inprocess", "--only", "b0", "--events", "200", "--partitions", "2",
		"--quick", "-q", "--work", t.TempDir(), "--json", out}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "results in "+out) || strings.Contains("\n"+stderr.String(), "\nbench: ") {
		t.Fatalf("stderr with -q should hold only the results line:\n%s", stderr.String())
	}
	if !strings.Contains(stdout.String(), "B0") {
		t.Fatalf("no B0 row printed:\n%s", stdout.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	if v, ok := m["b0_publish_eps"].(float64); !ok || v <= 0 {
		t.Fatalf("b0_publish_eps = %v in %s", m["b0_publish_eps"], b)
	}
	if m["e2e_eps"] != nil {
		t.Fatalf("e2e_eps = %v, want null for a B0-only run", m["e2e_eps"])
	}
}
