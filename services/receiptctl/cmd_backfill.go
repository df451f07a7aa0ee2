package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/receiptflow/receiptflow/pkg/config"
	"github.com/receiptflow/receiptflow/pkg/generation"
)

// cmdBackfill re-admits the events the active generation found too late
// (LATE, after_grace) by rebuilding RAW into a new generation with a grace
// wide enough for all of them; readers switch only if parity holds.
func cmdBackfill(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("backfill", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config.Common
	c.Register(fs)
	margin := fs.Duration("margin", generation.DefaultBackfillMargin, "added to the grace the latest LATE event needs (then rounded up to a minute)")
	noSwitch := fs.Bool("no-switch", false, "reconcile the new generation but do not switch readers to it")
	out := fs.String("out", "", "write the parity report (parity.json, parity.md) here")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if c.Generation == "" || c.Generation == "1" && !flagSet(fs, "generation") {
		return usageError("--generation G is required (a new generation, e.g. 2)")
	}
	if c.NATSURL == "" || c.RedisURL == "" {
		return usageError("--nats-url and --redis-url (or NATS_URL, REDIS_URL) of the running deployment are required")
	}
	if *margin <= 0 {
		return usageError("--margin must be positive, got %s", *margin)
	}
	if err := c.Validate(); err != nil {
		return usageError("%v", err)
	}
	pc := pipelineConfig(&c)
	pc.Logger = slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	res, err := generation.Backfill(ctx, generation.BackfillConfig{
		RebuildConfig: generation.RebuildConfig{Config: pc, NoSwitch: *noSwitch, Progress: stderr},
		Margin:        *margin,
	})
	if errors.Is(err, generation.ErrNothingToBackfill) {
		fmt.Fprintf(stdout, "backfill: generation %s has no too-late events; nothing to do\n", res.From)
		return nil
	}
	if err != nil {
		return err
	}
	rb := res.Rebuild
	if *out != "" {
		if err := writeReport(*out, rb.Report); err != nil {
			return err
		}
	}
	switch {
	case !rb.Report.Holds:
		return &exitError{code: 1, msg: fmt.Sprintf("generation %s failed parity (%d unexplained differences); readers stay on generation %s", c.Generation, len(rb.Report.Unexplained), res.From)}
	case res.Readmitted < res.TooLate:
		return &exitError{code: 1, msg: fmt.Sprintf("generation %s counts %d of the %d too-late events of generation %s; %d are still too late", c.Generation, res.Readmitted, res.TooLate, res.From, res.TooLate-res.Readmitted)}
	}
	fmt.Fprintf(stdout, "backfill: generation %s counts the %d too-late events of generation %s (grace %s)", c.Generation, res.TooLate, res.From, res.Grace)
	if res.Retired > 0 {
		fmt.Fprintf(stdout, "; %d retired events (past the replay horizon) are not re-admitted", res.Retired)
	}
	fmt.Fprintln(stdout)
	if rb.Switched {
		fmt.Fprintf(stdout, "backfill: generation %s reconciled and active (previous %s; roll back with: receiptctl switch %s)\n", c.Generation, rb.Pointer.Previous, rb.Pointer.Previous)
		fmt.Fprintf(stdout, "backfill: restart the services with --generation %s --grace %s so it keeps up with new events\n", c.Generation, res.Grace)
	} else {
		fmt.Fprintf(stdout, "backfill: generation %s reconciled; not switched (--no-switch). Switch with: receiptctl switch %s\n", c.Generation, c.Generation)
	}
	return nil
}
