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

	"github.com/receiptflow/receiptflow/pkg/config"
	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/reconcile"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// reconcileFlags are reconcile's flags beyond the parameters.
type reconcileFlags struct {
	sec                                                  connect.NATSSecurity
	events, out, ingestedAt, windows, late, natsURL, gen *string
	maxSize                                              *int
	eos, raw                                             *bool
}

func (f *reconcileFlags) register(fs *flag.FlagSet, p *config.Params) {
	p.Register(fs)
	p.RegisterHeartbeat(fs, "ingest's heartbeat period in records, as given to run or ingest (0: no heartbeats)")
	f.sec.Register(fs)
	f.events = fs.String("events", "", "NDJSON file of raw events (- for stdin); or --raw")
	f.raw = fs.Bool("raw", false, "judge the deployment's RAW stream as stored now (its sources, heartbeats and broker times, docs/spec.md §3.1) instead of --events; needs --nats-url")
	f.out = fs.String("out", "", "directory to write batch.json (and parity.json, parity.md) into")
	f.ingestedAt = fs.String("ingested-at", "", "RFC 3339 time standing in for ingested_at in records without one (default now)")
	f.maxSize = fs.Int("max-size", contract.DefaultMaxSize, "largest accepted record in bytes")
	f.windows = fs.String("windows", "", "windows.json of a run to compare with (optional); the run's params.json beside it gives the parameters")
	f.late = fs.String("late", "", "late.ndjson of the same run (with --windows; default: late.ndjson beside windows.json, if present)")
	f.eos = fs.Bool("end-of-stream", true, "ingest sent the end-of-stream heartbeat after the last record (as run does)")
	f.natsURL = fs.String("nats-url", os.Getenv("NATS_URL"), "a deployment whose recorded parameters to judge with (env NATS_URL; not needed with a run's --windows)")
	f.gen = fs.String("generation", "", "the deployment's generation whose parameters to judge with (default: the active one)")
}

// options checks the flags and returns the batch pass's options, with
// the parameters of the run or deployment (reconcileParams).
func (f *reconcileFlags) options(ctx context.Context, fs *flag.FlagSet, p *config.Params) (reconcile.Config, error) {
	switch {
	case fs.NArg() > 0:
		return reconcile.Config{}, usageError("unexpected arguments %q", fs.Args())
	case *f.events == "" && !*f.raw:
		return reconcile.Config{}, usageError("--events (a file) or --raw (the deployment's RAW stream) is required")
	case *f.events != "" && *f.raw:
		return reconcile.Config{}, usageError("--events and --raw exclude each other")
	case *f.raw && *f.natsURL == "":
		return reconcile.Config{}, usageError("--raw needs --nats-url (or NATS_URL)")
	case *f.late != "" && *f.windows == "":
		return reconcile.Config{}, usageError("--late needs --windows")
	}
	if err := reconcileParams(ctx, p, fs, *f.windows, *f.natsURL, *f.gen, f.sec); err != nil {
		return reconcile.Config{}, err
	}
	defIngested := time.Now().UTC()
	if *f.ingestedAt != "" {
		t, err := time.Parse(time.RFC3339Nano, *f.ingestedAt)
		if err != nil {
			return reconcile.Config{}, usageError("--ingested-at: %v", err)
		}
		defIngested = t
	}
	v, err := contract.NewValidator(contract.Config{MaxFutureSkew: p.MaxFutureSkew, MaxSize: *f.maxSize})
	if err != nil {
		return reconcile.Config{}, usageError("%v", err)
	}
	every := p.HeartbeatEvery
	if every < 0 {
		return reconcile.Config{}, usageError("--heartbeat-every must not be negative, got %d", every)
	}
	if every == 0 {
		every = -1 // reconcile.Config: negative places none
	}
	return reconcile.Config{
		Validator: v, DefaultIngestedAt: defIngested, Partitions: p.Partitions, HotKeys: p.Hot(),
		Lateness: p.Lateness, Grace: p.Grace, Horizon: p.ReplayHorizon, HeartbeatEvery: every, EndOfStream: *f.eos,
		SourceIdle: p.SourceIdle,
	}, nil
}

// cmdReconcile runs the independent batch pass (docs/spec.md §8) over an
// NDJSON file, taken as ingest publishes it (in file order, with ingest's
// heartbeats, received at --ingested-at), or over a deployment's RAW
// stream as stored (--raw: several sources judged by their own records and
// heartbeats, docs/spec.md §3.1), and prints every window's
// count and digest. The parameters are the run's (params.json beside
// --windows) or the deployment's (--nats-url); flags given must agree.
// With --out it writes batch.json there; with --windows (and --late) it
// also writes parity.json and parity.md and fails when parity does not
// hold.
func cmdReconcile(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("reconcile", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var p config.Params
	var f reconcileFlags
	f.register(fs, &p)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	opts, err := f.options(ctx, fs, &p)
	if err != nil {
		return err
	}
	b, err := f.count(ctx, opts)
	if err != nil {
		return err
	}
	if err := printBatch(stdout, b); err != nil {
		return err
	}
	if *f.out != "" {
		if err := os.MkdirAll(*f.out, 0o755); err != nil {
			return err
		}
		if err := writeArtifact(filepath.Join(*f.out, "batch.json"), b.WriteJSON); err != nil {
			return err
		}
	}
	if *f.windows == "" {
		return nil
	}
	return compareRun(stdout, b, *f.windows, *f.late, *f.out)
}

// count runs the batch pass over --events, or over the deployment's RAW
// stream as stored now (--raw).
func (f *reconcileFlags) count(ctx context.Context, opts reconcile.Config) (*reconcile.Batch, error) {
	if *f.raw {
		conn, refusals, err := connectOperator(*f.natsURL, "receiptctl-reconcile", f.sec)
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		b, _, err := reconcile.CountRaw(ctx, conn.JS, wire.Raw, opts)
		if err != nil {
			return nil, explainRefusal(err, refusals, f.sec)
		}
		return b, nil
	}
	var in io.Reader = os.Stdin
	if *f.events != "-" {
		file, err := os.Open(*f.events)
		if err != nil {
			return nil, err
		}
		defer file.Close()
		in = file
		opts.RecordsHint = estimateRecords(file)
	}
	return reconcile.Count(ctxReader{ctx, in}, opts)
}

// compareRun compares the batch with a run's windows and late rows (by
// default the late.ndjson beside windowsFile), writes the parity report
// to out (if set) and fails (exit 1) when parity does not hold.
func compareRun(stdout io.Writer, b *reconcile.Batch, windowsFile, lateFile, out string) error {
	windows, err := readWindows(windowsFile)
	if err != nil {
		return err
	}
	var late []reconcile.LateRow
	if lateFile == "" {
		// docs/spec.md §6: late.ndjson beside windows.json by default.
		if beside := filepath.Join(filepath.Dir(windowsFile), "late.ndjson"); fileExists(beside) {
			lateFile = beside
		}
	}
	if lateFile != "" {
		if late, err = readLate(lateFile); err != nil {
			return err
		}
	}
	rep := reconcile.Compare(b, windows, late)
	if out != "" {
		if err := writeArtifact(filepath.Join(out, "parity.json"), rep.WriteJSON); err != nil {
			return err
		}
		if err := writeArtifact(filepath.Join(out, "parity.md"), rep.WriteMarkdown); err != nil {
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
// size and the lines of its first MiB, for reconcile.Config.RecordsHint;
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
