package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/receiptflow/receiptflow/pkg/generation"
)

// cmdBackfill re-admits the events the active generation found too late
// (LATE, after_grace) by rebuilding RAW into a new generation with a grace
// wide enough for all of them; readers switch only if parity holds.
func cmdBackfill(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("backfill", flag.ContinueOnError)
	fs.SetOutput(stderr)
	g := registerGenerationFlags(fs)
	margin := fs.Duration("margin", generation.DefaultBackfillMargin, "added to the grace the latest LATE event needs (then rounded up to a minute)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *margin <= 0 {
		return usageError("--margin must be positive, got %s", *margin)
	}
	pc, err := g.config(ctx, fs, stderr)
	if err != nil {
		return err
	}
	res, err := generation.Backfill(ctx, generation.BackfillConfig{
		RebuildConfig: generation.RebuildConfig{Config: pc, NoSwitch: *g.noSwitch, Progress: stderr, Params: g.common.Params},
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
	if err := g.report(rb.Report, "generation "+res.From); err != nil {
		return err
	}
	gen := pc.Generation
	if res.Readmitted < res.TooLate {
		return &exitError{code: 1, msg: fmt.Sprintf("generation %s counts %d of the %d too-late events of generation %s; %d are still too late", gen, res.Readmitted, res.TooLate, res.From, res.TooLate-res.Readmitted)}
	}
	fmt.Fprintf(stdout, "backfill: generation %s counts the %d too-late events of generation %s (grace %s)", gen, res.TooLate, res.From, res.Grace)
	if res.Retired > 0 {
		fmt.Fprintf(stdout, "; %d retired events (past the replay horizon) are not re-admitted", res.Retired)
	}
	fmt.Fprintln(stdout)
	if rb.Switched {
		fmt.Fprintf(stdout, "backfill: generation %s reconciled and active (previous %s; roll back with: receiptctl switch %s)\n", gen, rb.Pointer.Previous, rb.Pointer.Previous)
		fmt.Fprintf(stdout, "backfill: restart the services with --generation %s so it keeps up with new events (they read its grace, %s, from the deployment)\n", gen, res.Grace)
	} else {
		fmt.Fprintf(stdout, "backfill: generation %s reconciled; not switched (--no-switch). Switch with: receiptctl switch %s\n", gen, gen)
	}
	return nil
}
