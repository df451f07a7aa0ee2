package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/receiptflow/receiptflow/pkg/config"
	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/generation"
	"github.com/receiptflow/receiptflow/pkg/pipeline"
	"github.com/receiptflow/receiptflow/pkg/reconcile"
)

// generationFlags are the flags rebuild and backfill share: the common
// ones (--generation names the new generation), --no-switch and --out.
type generationFlags struct {
	common   config.Common
	noSwitch *bool
	out      *string
}

func registerGenerationFlags(fs *flag.FlagSet) *generationFlags {
	g := &generationFlags{}
	g.common.Register(fs)
	g.noSwitch = fs.Bool("no-switch", false, "reconcile the new generation but do not switch readers to it")
	g.out = fs.String("out", "", "write the parity report (parity.json, parity.md) here")
	return g
}

// config checks the parsed flags (usage errors), takes the parameters
// from the deployment (generationParams) and returns the pipeline
// configuration of the new generation, logging warnings to stderr.
func (g *generationFlags) config(ctx context.Context, fs *flag.FlagSet, stderr io.Writer) (pipeline.Config, error) {
	c := &g.common
	if c.Generation == "" || c.Generation == "1" && !flagSet(fs, "generation") {
		return pipeline.Config{}, usageError("--generation G is required (a new generation, e.g. 2)")
	}
	if c.NATSURL == "" || c.RedisURL == "" {
		return pipeline.Config{}, usageError("--nats-url and --redis-url (or NATS_URL, REDIS_URL) of the running deployment are required")
	}
	if err := c.Validate(); err != nil {
		return pipeline.Config{}, usageError("%v", err)
	}
	if err := g.generationParams(ctx, fs); err != nil {
		return pipeline.Config{}, err
	}
	pc := pipelineConfig(c)
	pc.Logger = slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return pc, nil
}

// generationParams sets the new generation's parameters: its own record,
// if it has one (a flag given must agree), else the flags given and, for
// the others, the active generation's record.
func (g *generationFlags) generationParams(ctx context.Context, fs *flag.FlagSet) error {
	c := &g.common
	meta, active, err := deploymentRecord(ctx, c.NATSURL, connect.NATSSecurity{})
	if err != nil {
		return err
	}
	if config.HasRecord(meta, c.Generation) {
		return adoptParams(&c.Params, fs, meta, c.Generation)
	}
	if err := c.Params.Inherit(meta, active, config.Explicit(fs)); err != nil {
		return err
	}
	if err := c.Validate(); err != nil {
		return usageError("%v", err)
	}
	return nil
}

// report writes the parity report when --out is set, and fails (exit 1)
// when parity does not hold, naming the generation readers stay on.
func (g *generationFlags) report(rep *reconcile.Report, stayOn string) error {
	if *g.out != "" {
		if err := writeReport(*g.out, rep); err != nil {
			return err
		}
	}
	if !rep.Holds {
		return &exitError{code: 1, msg: fmt.Sprintf("generation %s failed parity (%d unexplained differences); readers stay on %s", g.common.Generation, len(rep.Unexplained), stayOn)}
	}
	return nil
}

func cmdRebuild(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("rebuild", flag.ContinueOnError)
	fs.SetOutput(stderr)
	g := registerGenerationFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	pc, err := g.config(ctx, fs, stderr)
	if err != nil {
		return err
	}
	res, err := generation.Rebuild(ctx, generation.RebuildConfig{
		Config:   pc,
		NoSwitch: *g.noSwitch, Progress: stderr, Params: g.common.Params,
	})
	if err != nil {
		return err
	}
	if err := g.report(res.Report, "the active generation"); err != nil {
		return err
	}
	gen := pc.Generation
	if res.Switched {
		fmt.Fprintf(stdout, "rebuild: generation %s reconciled and active (previous %s; roll back with: receiptctl switch %s)\n", gen, res.Pointer.Previous, res.Pointer.Previous)
		fmt.Fprintf(stdout, "rebuild: restart the services with --generation %s so it keeps up with new events\n", gen)
	} else {
		fmt.Fprintf(stdout, "rebuild: generation %s reconciled; not switched (--no-switch). Switch with: receiptctl switch %s\n", gen, gen)
	}
	return nil
}

func cmdSwitch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("switch", flag.ContinueOnError)
	fs.SetOutput(stderr)
	natsURL := fs.String("nats-url", os.Getenv("NATS_URL"), "NATS server URL (env NATS_URL)")
	force := fs.Bool("force", false, "switch even without a passing parity record")
	if err := parseFlags(fs, reorder(args)); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError("usage: receiptctl switch G [--force]")
	}
	if *natsURL == "" {
		return usageError("--nats-url (or NATS_URL) is required")
	}
	conn, err := connect.ConnectNATS(*natsURL, "receiptctl-switch")
	if err != nil {
		return err
	}
	defer conn.Close()
	p, err := generation.Switch(ctx, conn.JS, fs.Arg(0), *force)
	if err != nil {
		return &exitError{code: 1, msg: err.Error()}
	}
	fmt.Fprintf(stdout, "switch: readers now follow generation %s (previous %s%s)\n", p.Generation, p.Previous, map[bool]string{true: ", forced"}[p.Forced])
	return nil
}

// reorder puts flags before positional arguments so "switch 2 --force"
// parses like "switch --force 2".
func reorder(args []string) []string {
	var flags, pos []string
	for _, a := range args {
		if len(a) > 1 && a[0] == '-' {
			flags = append(flags, a)
		} else {
			pos = append(pos, a)
		}
	}
	return append(flags, pos...)
}

func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

type reportWriter interface {
	WriteJSON(io.Writer) error
	WriteMarkdown(io.Writer) error
}

func writeReport(dir string, r reportWriter) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, write := range map[string]func(io.Writer) error{"parity.json": r.WriteJSON, "parity.md": r.WriteMarkdown} {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		if err := write(f); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	return nil
}
