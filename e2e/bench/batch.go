package bench

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/reconcile"
)

//go:embed receipt_hourly_counts.py
var pythonReference []byte

// batchIngestedAt stands in for ingested_at in the batch pass; every
// generated record carries its own, so it only has to be fixed.
const batchIngestedAt = "2026-12-31T00:00:00Z"

// batchResult compares the batch pass with the Python reference.
type batchResult struct {
	Records int
	// Reconcile is the wall time of `receiptctl reconcile --events F`
	// (process start and schema compilation included).
	Reconcile    time.Duration
	ReconcileEPS float64
	// ReconcileCPU is the user and system CPU time of the receiptctl
	// process (0 in process), ReconcileRSS its peak resident set in bytes:
	// steadier than the wall time on a shared host.
	ReconcileCPU time.Duration
	ReconcileRSS int64
	// InProcess is true when reconcile.Count ran inside the bench
	// (in-process mode, or no receiptctl binary).
	InProcess bool
	// Python is the time the Python pass took inside the interpreter
	// (file reading and JSON parsing included, start-up excluded).
	Python    time.Duration
	PythonEPS float64
	// PythonWall is the whole python3 process.
	PythonWall time.Duration
	Ratio      float64
	// Counted is what each side counted (they must agree).
	ReconcileCounted, PythonCounted int64
}

var countedLine = regexp.MustCompile(`records (\d+), valid \d+, submissions \d+ \((\d+) counted in`)

// runBatch times `receiptctl reconcile` and the Python reference over the
// dataset's file.
func (b *bencher) runBatch(ctx context.Context, ds *dataset) (*batchResult, error) {
	res := &batchResult{Records: len(ds.part)}
	bin := filepath.Join(b.o.BinDir, "receiptctl")
	if _, err := os.Stat(bin); err == nil && b.o.Mode == ModeProcess {
		// Through a measuring parent (measure.go): a child started from
		// the bench directly reports the bench's own peak as its RSS.
		var out, errOut bytes.Buffer
		ran, err := measure(ctx, &out, &errOut, bin, "reconcile", "--events", ds.path,
			"--ingested-at", batchIngestedAt, "--partitions", strconv.Itoa(b.o.Partitions))
		if err != nil {
			return nil, fmt.Errorf("bench: receiptctl reconcile: %w: %s", err, errOut.String())
		}
		res.Reconcile, res.ReconcileCPU, res.ReconcileRSS = ran.Wall, ran.User+ran.System, ran.MaxRSS
		m := countedLine.FindSubmatch(out.Bytes())
		if m == nil {
			return nil, fmt.Errorf("bench: receiptctl reconcile printed no totals: %q", tailOf(out.String(), 300))
		}
		res.ReconcileCounted, _ = strconv.ParseInt(string(m[2]), 10, 64)
	} else {
		res.InProcess = true
		v, err := contract.NewValidator(contract.Config{})
		if err != nil {
			return nil, err
		}
		at, _ := time.Parse(time.RFC3339, batchIngestedAt)
		f, err := os.Open(ds.path)
		if err != nil {
			return nil, err
		}
		began := time.Now()
		bt, err := reconcile.Count(f, reconcile.Config{Validator: v, DefaultIngestedAt: at, Partitions: b.o.Partitions})
		f.Close()
		if err != nil {
			return nil, err
		}
		res.Reconcile = time.Since(began)
		res.ReconcileCounted = int64(bt.Counted)
	}
	res.ReconcileEPS = float64(res.Records) / res.Reconcile.Seconds()

	script := filepath.Join(b.work, "receipt_hourly_counts.py")
	if err := os.WriteFile(script, pythonReference, 0o644); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, b.o.Python, script, ds.path)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	began := time.Now()
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("bench: %s %s: %w: %s", b.o.Python, script, err, errOut.String())
	}
	res.PythonWall = time.Since(began)
	var py struct {
		Records int              `json:"records"`
		Seconds float64          `json:"seconds"`
		Counts  map[string]int64 `json:"counts"`
	}
	if err := json.Unmarshal(out.Bytes(), &py); err != nil {
		return nil, fmt.Errorf("bench: python output: %w", err)
	}
	for _, c := range py.Counts {
		res.PythonCounted += c
	}
	res.Python = time.Duration(py.Seconds * float64(time.Second))
	res.PythonEPS = float64(py.Records) / py.Seconds
	res.Ratio = res.ReconcileEPS / res.PythonEPS
	var want int64
	for _, c := range ds.expected {
		want += c
	}
	if res.ReconcileCounted != want || res.PythonCounted != want {
		return nil, fmt.Errorf("bench: batch passes disagree: reconcile counted %d, python %d, generated %d",
			res.ReconcileCounted, res.PythonCounted, want)
	}
	return res, nil
}

func tailOf(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
