package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/reconcile"
	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// cmdReconcile runs the independent batch pass (docs/spec.md §8) over an
// NDJSON file and prints every window's count and digest with the rejected
// and duplicate totals. The file is taken as ingest publishes it: in file
// order, with ingest's heartbeats (--heartbeat-every, --end-of-stream, as
// run places them) and --ingested-at as the receive time; the pass replays
// the partition watermarks with --lateness, --grace and --replay-horizon
// and judges every event's lateness itself. With --out it writes
// batch.json there. With --windows (a windows.json of a run) and --late
// (its late.ndjson; by default the late.ndjson beside windows.json, if
// there is one) it also compares the batch with those windows, writes
// parity.json and parity.md to --out, and fails when parity does not hold.
func cmdReconcile(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("reconcile", flag.ContinueOnError)
	fs.SetOutput(stderr)
	events := fs.String("events", "", "NDJSON file of raw events (required; - for stdin)")
	partitions := fs.Int("partitions", reconcile.DefaultPartitions, "number of partitions P, for the per-partition counts")
	hotKeys := fs.String("hot-keys", os.Getenv("RECEIPTS_HOT_KEYS"), "the pipeline's hot keys key=k,... (env RECEIPTS_HOT_KEYS), for the per-partition counts")
	out := fs.String("out", "", "directory to write batch.json (and parity.json, parity.md) into")
	ingestedAt := fs.String("ingested-at", "", "RFC 3339 time standing in for ingested_at in records without one (default now)")
	skew := fs.Duration("max-future-skew", contract.DefaultMaxFutureSkew, "how far after ingested_at an event may have occurred")
	maxSize := fs.Int("max-size", contract.DefaultMaxSize, "largest accepted record in bytes")
	windowsFile := fs.String("windows", "", "windows.json of a run to compare with (optional)")
	lateFile := fs.String("late", "", "late.ndjson of the same run (with --windows; default: late.ndjson beside windows.json, if present)")
	lateness := fs.Duration("lateness", reconcile.DefaultLateness, "watermark lateness: W_p = max event time - lateness")
	grace := fs.Duration("grace", reconcile.DefaultGrace, "grace after a window's end during which late events are counted as corrections")
	horizon := fs.Duration("replay-horizon", 24*time.Hour, "the run's replay horizon: events whose window ended grace + this before the watermark are judged retired (0: never)")
	hbEvery := fs.Int("heartbeat-every", reconcile.DefaultHeartbeatEvery, "ingest's heartbeat period in records, as given to run or ingest (0: no heartbeats)")
	eos := fs.Bool("end-of-stream", true, "ingest sent the end-of-stream heartbeat after the last record (as run does)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return usageError("unexpected arguments %q", fs.Args())
	case *events == "":
		return usageError("--events is required")
	case *partitions < 1:
		return usageError("--partitions must be positive, got %d", *partitions)
	case *lateFile != "" && *windowsFile == "":
		return usageError("--late needs --windows")
	case *lateness < 0:
		return usageError("--lateness must not be negative")
	case *grace < 0:
		return usageError("--grace must not be negative")
	case *horizon < 0:
		return usageError("--replay-horizon must not be negative")
	case *hbEvery < 0:
		return usageError("--heartbeat-every must not be negative, got %d", *hbEvery)
	}
	every := *hbEvery
	if every == 0 {
		every = -1 // reconcile.Options: negative places none
	}
	hot, err := window.ParseHotKeys(*hotKeys, *partitions)
	if err != nil {
		return usageError("--hot-keys: %v", err)
	}
	defIngested := time.Now().UTC()
	if *ingestedAt != "" {
		t, err := time.Parse(time.RFC3339Nano, *ingestedAt)
		if err != nil {
			return usageError("--ingested-at: %v", err)
		}
		defIngested = t
	}
	v, err := contract.NewValidator(contract.Options{MaxFutureSkew: *skew, MaxSize: *maxSize})
	if err != nil {
		return usageError("%v", err)
	}

	var in io.Reader = os.Stdin
	hint := 0
	if *events != "-" {
		f, err := os.Open(*events)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
		hint = estimateRecords(f)
	}
	b, err := reconcile.Count(ctxReader{ctx, in}, reconcile.Options{
		Validator: v, DefaultIngestedAt: defIngested, Partitions: *partitions, HotKeys: hot, RecordsHint: hint,
		Lateness: *lateness, Grace: *grace, Horizon: *horizon, HeartbeatEvery: every, EndOfStream: *eos,
	})
	if err != nil {
		return err
	}
	if err := printBatch(stdout, b); err != nil {
		return err
	}
	if *out != "" {
		if err := os.MkdirAll(*out, 0o755); err != nil {
			return err
		}
		if err := writeArtifact(filepath.Join(*out, "batch.json"), b.WriteJSON); err != nil {
			return err
		}
	}
	if *windowsFile == "" {
		return nil
	}

	windows, err := readWindows(*windowsFile)
	if err != nil {
		return err
	}
	var late []reconcile.LateRow
	if *lateFile == "" {
		// docs/spec.md §6: late.ndjson beside windows.json by default.
		if beside := filepath.Join(filepath.Dir(*windowsFile), "late.ndjson"); fileExists(beside) {
			*lateFile = beside
		}
	}
	if *lateFile != "" {
		if late, err = readLate(*lateFile); err != nil {
			return err
		}
	}
	rep := reconcile.Compare(b, windows, late)
	if *out != "" {
		if err := writeArtifact(filepath.Join(*out, "parity.json"), rep.WriteJSON); err != nil {
			return err
		}
		if err := writeArtifact(filepath.Join(*out, "parity.md"), rep.WriteMarkdown); err != nil {
			return err
		}
	}
	s := rep.Summary
	if !rep.Holds {
		for _, d := range rep.Unexplained[:min(10, len(rep.Unexplained))] {
			fmt.Fprintf(stdout, "UNEXPLAINED %s %s %s: %s\n", d.WindowID, d.Kind, d.EventID, d.Detail)
		}
		return &exitError{code: 1, msg: fmt.Sprintf("parity FAILED: %d unexplained differences over %d final windows",
			len(rep.Unexplained), s.Final)}
	}
	fmt.Fprintf(stdout, "parity holds: %d final windows (%d matched, %d explained by %d late events), %d provisional\n",
		s.Final, s.Matched, s.Explained, s.LateAfterGrace, s.Provisional)
	return nil
}

// fileExists reports whether path names an existing regular file.
func fileExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

// estimateRecords guesses how many lines the regular file f holds from its
// size and the lines of its first MiB, for reconcile.Options.RecordsHint;
// 0 when it cannot tell. It reads with ReadAt, so f's offset is unchanged.
func estimateRecords(f *os.File) int {
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() || st.Size() == 0 {
		return 0
	}
	head := make([]byte, min(st.Size(), 1<<20))
	n, _ := f.ReadAt(head, 0)
	lines := bytes.Count(head[:n], []byte{'\n'})
	if n == 0 || lines == 0 {
		return 0
	}
	return int(st.Size() * int64(lines) / int64(n))
}

// printBatch writes the window table and the totals.
func printBatch(w io.Writer, b *reconcile.Batch) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "WINDOW\tCOUNT\tDIGEST\tRETRIES\tREJECTED\tCORRECTIONS\tLATE")
	for _, bw := range b.Summary().Windows {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%d\t%d\n", bw.WindowID, bw.Count, bw.Digest, bw.Duplicates, bw.Rejected,
			bw.Corrections, bw.LateDropped)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	s := b.Summary()
	_, err := fmt.Fprintf(w, "records %d, valid %d, submissions %d (%d counted in %d windows, %d too late), never count %d, duplicates %d, rejected %d%s\n",
		s.Records, s.Valid, s.Counted, s.InWindows, len(s.Windows), len(s.Late), s.Other, s.Duplicates, s.Rejected, byReason(s.ByReason))
	return err
}

// byReason renders rejection counts as " (reason n, ...)" in reason order.
func byReason(m map[contract.Reason]int) string {
	if len(m) == 0 {
		return ""
	}
	parts := make([]string, 0, len(m))
	for _, r := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", r, m[r]))
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

func writeArtifact(path string, write func(io.Writer) error) error {
	_, err := writeFileAtomic(path, func(w io.Writer) (struct{}, error) { return struct{}{}, write(w) })
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// readWindows reads a windows.json: an array of snapshots.
func readWindows(path string) ([]wire.Window, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var ws []wire.Window
	if err := json.Unmarshal(data, &ws); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ws, nil
}

// readLate reads a late.ndjson: one LateRow per line.
func readLate(path string) ([]reconcile.LateRow, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var rows []reconcile.LateRow
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var r reconcile.LateRow
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		rows = append(rows, r)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return rows, nil
}

// ctxReader fails reads once ctx is done, so an interrupt stops a long pass.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
