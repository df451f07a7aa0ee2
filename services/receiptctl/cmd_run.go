package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/receiptflow/receiptflow/pkg/boundedrun"
	"github.com/receiptflow/receiptflow/pkg/config"
	"github.com/receiptflow/receiptflow/pkg/failpoint"
)

func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config.Common
	c.Register(fs)
	events := fs.String("events", "", "NDJSON file of events (required)")
	out := fs.String("out", "", "artifact directory (required)")
	c.RegisterHeartbeat(fs, "send a source progress heartbeat to every partition after this many records")
	dataDir := fs.String("data-dir", "", "embedded nats-server store directory (default: a temporary one)")
	syncAlways := fs.Bool("sync-always", false, "embedded nats-server fsyncs every write (sync_interval: always)")
	timeout := fs.Duration("timeout", 30*time.Minute, "give up if the pipeline has not drained by then")
	verbose := fs.Bool("v", false, "log service events to stderr")
	stall := fs.Duration("stall-timeout", boundedrun.DefaultStallTimeout, "stop, naming the stuck stage, when a stage with work left makes no progress for this long (exit 1)")
	maxReject := fs.Float64("max-reject-ratio", 0.5, "fail (exit 1) when more than this share of the records were rejected: parity over nothing is not parity")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *events == "" || *out == "" {
		return usageError("--events and --out are required")
	}
	if err := c.Validate(); err != nil {
		return usageError("%v", err)
	}
	if *maxReject < 0 || *maxReject > 1 {
		return usageError("--max-reject-ratio must be between 0 and 1, got %v", *maxReject)
	}
	if *stall <= 0 {
		return usageError("--stall-timeout must be positive, got %s", *stall)
	}
	// The run's parameters beside its artifacts: reconcile of them needs
	// no flags (docs/reconciliation.md).
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	if err := config.WriteParams(*out, c.Generation, c.Params); err != nil {
		return err
	}
	fps, _ := failpoint.Parse(c.Failpoints, failpoint.InProcess)
	log := slog.New(slog.DiscardHandler)
	if *verbose {
		log = slog.New(slog.NewJSONHandler(stderr, nil))
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	pc := pipelineConfig(&c)
	pc.DataDir, pc.SyncAlways, pc.Failpoints, pc.Logger = *dataDir, *syncAlways, fps, log
	res, err := boundedrun.Run(ctx, boundedrun.Config{
		Config: pc,
		Events: *events, Out: *out, Progress: stderr, HeartbeatEvery: c.HeartbeatEvery, StallTimeout: *stall,
	})
	if err != nil {
		return err
	}
	s := res.Report.Summary
	fmt.Fprintf(stdout, "run: %s, %s (%d final), %d late, %d rejected, %d counted in %.1fs; crashes %v\n",
		plural(res.Ingest.Records, "record", ""), plural(len(res.Windows), "window", ""), s.Final, len(res.Late), len(res.Rejected),
		s.StreamCount, res.Elapsed.Seconds(), res.Crashes)
	fmt.Fprintf(stdout, "run: artifacts in %s\n", *out)
	if n := res.Ingest.Records; n == 0 || float64(len(res.Rejected)) > *maxReject*float64(n) {
		return &exitError{code: 1, msg: fmt.Sprintf("%d of %d records rejected, more than --max-reject-ratio %v allows: parity over nothing is not parity (see %s/rejected.ndjson)",
			len(res.Rejected), n, *maxReject, *out)}
	}
	if !res.Report.Holds {
		return &exitError{code: 1, msg: fmt.Sprintf("parity FAILED: %d unexplained differences (see %s/parity.md)", len(res.Report.Unexplained), *out)}
	}
	fmt.Fprintf(stdout, "run: parity holds (%d final windows: %d matched, %d explained by late events)\n", s.Final, s.Matched, s.Explained)
	return nil
}
