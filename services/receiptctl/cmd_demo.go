package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/receiptflow/receiptflow/pkg/config"
	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/dashboard"
	"github.com/receiptflow/receiptflow/pkg/demo"
	"github.com/receiptflow/receiptflow/pkg/failpoint"
	"github.com/receiptflow/receiptflow/pkg/ingest"
	"github.com/receiptflow/receiptflow/pkg/pipeline"
)

func cmdDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config.Common
	c.Register(fs)
	dataDir := fs.String("data-dir", "", "embedded nats-server store directory (default: a temporary one)")
	caseEvery := fs.Duration("case-every", 15*time.Second, "how often a seed case is injected")
	idleEvery := fs.Duration("idle-every", 3*time.Minute, "how often the source goes silent (negative: never)")
	idleFor := fs.Duration("idle-for", 150*time.Second, "how long the source stays silent")
	rows := fs.Int("rows", 12, "table rows (most recent windows)")
	listen := fs.String("listen", "127.0.0.1:8080", "address of the dashboard (the live web page)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := c.Validate(); err != nil {
		return usageError("%v", err)
	}
	fps, _ := failpoint.Parse(c.Failpoints, failpoint.InProcess)
	pc := pipelineConfig(&c)
	pc.DataDir, pc.Failpoints = *dataDir, fps
	pc.Logger = slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	p, err := pipeline.Start(ctx, pc)
	if err != nil {
		return err
	}
	defer p.Close()
	fmt.Fprintf(stdout, "receiptflow demo: NATS %s, Redis %s, %d partitions; Ctrl-C to stop\n", p.NATSURL, p.RedisURL, c.Partitions)
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("dashboard: listen %s: %w", *listen, err)
	}
	dconn, err := connect.ConnectNATS(p.NATSURL, "receiptflow-dashboard")
	if err != nil {
		ln.Close()
		return err
	}
	defer dconn.Close()
	dash, err := dashboard.New(dconn.NC, dashboard.Config{StaleAfter: c.StaleAfter, Listener: ln})
	if err != nil {
		ln.Close()
		return err
	}
	dashCtx, stopDash := context.WithCancel(ctx)
	dashDone := make(chan error, 1)
	go func() { dashDone <- dash.Run(dashCtx) }()
	defer func() { stopDash(); <-dashDone }()
	fmt.Fprintf(stdout, "receiptflow demo: dashboard at http://%s\n", ln.Addr())

	in := ingest.New(p.Admin.JS, ingest.Options{Partitions: c.Partitions, HotKeys: c.Hot(), Validator: p.Validator, HeartbeatEvery: 50, HeartbeatInterval: time.Second,
		Linger: c.Waits().IngestLinger})
	defer in.Close(context.Background())
	b, err := openBoard(ctx, p.Admin.JS, c.Generation)
	if err != nil {
		return err
	}
	feedErr := make(chan error, 1)
	go func() {
		feedErr <- demo.Run(ctx, in, demo.Options{
			CaseEvery: *caseEvery, IdleEvery: *idleEvery, IdleFor: *idleFor, Seed: uint64(time.Now().UnixNano()),
			OnCase: func(name string) { fmt.Fprintf(stdout, "\n-- feed: %s\n", name) },
		})
	}()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fmt.Fprintln(stdout, "\nreceiptflow demo: stopping")
			return nil
		case err := <-feedErr:
			if err != nil {
				return err
			}
		case <-t.C:
			b.render(stdout, *rows, false)
		}
	}
}
