package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"strings"

	"github.com/receiptflow/receiptflow/pkg/config"
	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/explain"
	"github.com/receiptflow/receiptflow/pkg/window"
)

// cmdExplain explains one window (docs/spec.md §6): from a run's
// artifacts (--out D) or from a running deployment (its URLs). Flags may
// come before or after the window id.
func cmdExplain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("explain", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config.Common
	c.Register(fs)
	var natsSec connect.NATSSecurity
	natsSec.Register(fs)
	var redisSec connect.RedisSecurity
	redisSec.Register(fs)
	format := fs.String("format", "text", "output: text or json")
	out := fs.String("out", "", "artifact directory of a run (receiptctl run --out D); empty: the deployment at --nats-url and --redis-url")
	parity := fs.String("parity", "", "parity report to read the verdict from (default: parity.json in --out, when there)")
	var ids []string
	for {
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if rest[0] == "--" {
			ids = append(ids, rest[1:]...)
			break
		}
		ids, args = append(ids, rest[0]), rest[1:]
	}
	switch {
	case len(ids) != 1:
		return usageError("want exactly one WINDOW_ID (like 2026-12-02T10), got %d: %s", len(ids), strings.Join(ids, " "))
	case *format != "text" && *format != "json":
		return usageError("--format must be text or json, got %q", *format)
	}
	id := ids[0]
	if _, err := window.ParseID(id); err != nil {
		return usageError("WINDOW_ID %q is not a window id like 2026-12-02T10", id)
	}
	var e *explain.Explanation
	var err error
	if *out != "" {
		e, err = explain.FromRun(*out, *parity, id)
	} else {
		e, err = explainLive(ctx, &c, fs, natsSec, redisSec, *parity, id)
	}
	if err != nil {
		return err
	}
	if *format == "json" {
		return explain.WriteJSON(stdout, e)
	}
	return explain.WriteText(stdout, e)
}

// explainLive explains window id from the deployment at c's URLs.
func explainLive(ctx context.Context, c *config.Common, fs *flag.FlagSet, natsSec connect.NATSSecurity, redisSec connect.RedisSecurity, parity, id string) (*explain.Explanation, error) {
	return nil, errors.New("explaining a live deployment is not built yet: give --out D of a run")
}
