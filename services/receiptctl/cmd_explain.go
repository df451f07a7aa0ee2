package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/receiptflow/receiptflow/pkg/config"
	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/explain"
	"github.com/receiptflow/receiptflow/pkg/generation"
	"github.com/receiptflow/receiptflow/pkg/reconcile"
	"github.com/receiptflow/receiptflow/pkg/service"
	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
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

// explainLive explains window id from the deployment at c's URLs (the
// generation's recorded parameters adopted, as replay does).
func explainLive(ctx context.Context, c *config.Common, fs *flag.FlagSet, natsSec connect.NATSSecurity, redisSec connect.RedisSecurity, parity, id string) (*explain.Explanation, error) {
	if c.NATSURL == "" || c.RedisURL == "" {
		return nil, usageError("give --out D of a run, or --nats-url and --redis-url (or NATS_URL, REDIS_URL) of a deployment")
	}
	if err := c.Validate(); err != nil {
		return nil, usageError("%v", err)
	}
	var report *reconcile.Report
	if parity != "" {
		report = &reconcile.Report{}
		b, err := os.ReadFile(parity)
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(b, report); err != nil {
			return nil, fmt.Errorf("%s: %w", parity, err)
		}
	}
	conn, refusals, err := connectOperator(c.NATSURL, "receiptctl-explain", natsSec)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, stop := refusals.Context(ctx)
	defer stop()
	explicit := config.Explicit(fs)
	if !explicit("generation") {
		active, _, err := generation.Active(ctx, conn.JS)
		if err != nil {
			return nil, explainRefusal(err, refusals, natsSec)
		}
		c.Generation = active.Generation
	}
	if err := c.AdoptRecorded(ctx, conn.JS, explicit); err != nil {
		return nil, explainRefusal(err, refusals, natsSec)
	}
	rdb, err := connect.ConnectRedisSecure(c.RedisURL, redisSec)
	if err != nil {
		return nil, err
	}
	defer rdb.Close()
	names := wire.For(c.Generation)
	d := explain.Deployment{JS: conn.JS, Store: service.NewStore(rdb, names, service.ParamsOf(c)), Names: names, Parity: report}
	e, err := d.Explain(ctx, id)
	if err != nil {
		return nil, explainRefusal(err, refusals, natsSec)
	}
	return e, nil
}
