// Command receiptctl is receiptflow's operator command line
// (docs/spec.md §6): demo, run, ingest, replay, reconcile, gen and friends.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/receiptflow/receiptflow/pkg/buildinfo"
	"github.com/receiptflow/receiptflow/pkg/config"
	"github.com/receiptflow/receiptflow/pkg/pipeline"
)

type command struct {
	run   func(ctx context.Context, args []string, stdout, stderr io.Writer) error
	usage string
}

// commands is set in init: the commands' flag parsing (parseFlags) reads
// their summaries.
var commands map[string]command

func init() {
	commands = map[string]command{
		"demo":      {cmdDemo, "the whole pipeline on the embedded default with live sample traffic, until interrupted"},
		"run":       {cmdRun, "bounded replay of an NDJSON file through the whole pipeline; writes artifacts; exit 0 only if parity holds"},
		"ingest":    {cmdIngest, "publish an NDJSON file to a running deployment"},
		"reconcile": {cmdReconcile, "independent batch pass over a fixed raw snapshot"},
		"gen":       {cmdGen, "deterministic synthetic traffic (seeded)"},
		"handoff":   {cmdHandoff, "write the hand-off bundle from a run over the seed fixture"},
		"replay":    {cmdReplay, "re-drive a RAW or VALID sequence range through the downstream services (a no-op for every count)"},
		"rebuild":   {cmdRebuild, "replay RAW into a new generation, reconcile it, and switch readers only if parity holds"},
		"backfill":  {cmdBackfill, "re-admit the active generation's too-late LATE events into a new generation with a wider grace; switch only if parity holds"},
		"switch":    {cmdSwitch, "switch readers to generation G (refused without a passing parity record unless --force)"},
		"status":    {cmdStatus, "the live validator and windower instances of each group: their partitions and lease age (docs/spec.md §9)"},
		"watch":     {cmdWatch, "follow the KV bucket of a running deployment in a terminal (live table)"},
		"explain":   {cmdExplain, "why a window holds its number: on-time count, corrections, late events, duplicates, conflicts, parity (--out D of a run, or a deployment)"},
		"windows":   {cmdWindows, "query the retained history: hourly windows (pruned hours from their day rollup) or day rollups in [--from, --to); --time-zone for local hours and days"},
	}
}

// exitError carries a specific exit code (e.g. parity failed).
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if args[0] == "--version" || args[0] == "-version" {
		fmt.Fprintln(stdout, buildinfo.String("receiptctl"))
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "receiptctl: unknown command %q (receiptctl -h lists the commands)\n", args[0])
		return 2
	}
	err := cmd.run(ctx, args[1:], stdout, stderr)
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	code := 1
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
	}
	// Errors of the packages a command calls may begin with the command's
	// own name (boundedrun.Run's "run: ..."): say it once.
	msg := strings.TrimPrefix(err.Error(), args[0]+": ")
	fmt.Fprintf(stderr, "receiptctl %s: %s\n", args[0], msg)
	return code
}

// parseFlags parses args into fs (docs/spec.md §6). -h or --help prints
// the command's full usage and returns flag.ErrHelp (exit 0); any other
// parse error is a usage error (exit 2) of one line naming the flag or the
// value, without the usage.
func parseFlags(fs *flag.FlagSet, args []string) error {
	out := fs.Output()
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.SetOutput(out)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(out, "usage: receiptctl %s [flags]\n\n%s\n\nflags:\n", fs.Name(), commands[fs.Name()].usage)
		fs.PrintDefaults()
		return err
	}
	if err != nil {
		return usageError("%v (receiptctl %s -h lists the flags)", err, fs.Name())
	}
	return nil
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: receiptctl <command> [flags]   (receiptctl --version: the build)\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].usage)
	}
	fmt.Fprintln(w, "\nrun 'receiptctl <command> -h' for its flags")
}

// usageError is a bad invocation (exit 2).
func usageError(format string, args ...any) error {
	return &exitError{code: 2, msg: fmt.Sprintf(format, args...)}
}

// pipelineConfig is the in-process pipeline's configuration from the
// common flags (run, demo and rebuild add their own settings).
func pipelineConfig(c *config.Common) pipeline.Config {
	return pipeline.Config{
		Partitions: c.Partitions, HotKeys: c.Hot(), Lateness: c.Lateness, Grace: c.Grace, StaleAfter: c.StaleAfter,
		Contract: c.Contract(), Stream: c.Topology(0), NATSURL: c.NATSURL, RedisURL: c.RedisURL,
		Generation: c.Generation, ReplayHorizon: c.ReplayHorizon, SourceIdle: c.SourceIdle, Waits: c.Waits(),
		WindowRetention: c.WindowRetention, DayRetention: c.DayRetention,
	}
}
