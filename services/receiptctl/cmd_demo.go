package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/receiptflow/receiptflow/pkg/auth"
	"github.com/receiptflow/receiptflow/pkg/config"
	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/dashboard"
	"github.com/receiptflow/receiptflow/pkg/demo"
	"github.com/receiptflow/receiptflow/pkg/explain"
	"github.com/receiptflow/receiptflow/pkg/failpoint"
	"github.com/receiptflow/receiptflow/pkg/frontdoor"
	"github.com/receiptflow/receiptflow/pkg/ingest"
	"github.com/receiptflow/receiptflow/pkg/pipeline"
	"github.com/receiptflow/receiptflow/pkg/probe"
)

// demoURLs is what the demo writes to urls.json in its data directory:
// where its dashboard, metrics and servers are.
type demoURLs struct {
	Dashboard string `json:"dashboard"`
	// Ingest is the front door's HTTP door, where the feed sends its
	// records (docs/spec.md §10).
	Ingest  string `json:"ingest"`
	Metrics string `json:"metrics"`
	NATS    string `json:"nats"`
	Redis   string `json:"redis"`
	DataDir string `json:"data_dir"`
}

// demoIdleFor is how long the demo's source stays silent when --idle-for
// is not given: long enough that STALE shows for 90 s of each idle phase
// (the source is judged stale --stale-after into the silence).
func demoIdleFor(staleAfter time.Duration) time.Duration { return staleAfter + 90*time.Second }

func cmdDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config.Common
	c.Register(fs)
	dataDir := fs.String("data-dir", "", "embedded nats-server store directory, also holding urls.json (default: a temporary one)")
	caseEvery := fs.Duration("case-every", 15*time.Second, "how often a seed case is injected")
	idleEvery := fs.Duration("idle-every", 3*time.Minute, "how long the source sends between its silent phases (negative: never silent)")
	idleFor := fs.Duration("idle-for", 0, "how long the source stays silent (default: --stale-after + 90s, so that STALE shows for 90 s)")
	rows := fs.Int("rows", 12, "table rows (most recent windows)")
	listen := fs.String("listen", "127.0.0.1:8080", "address of the dashboard (the live web page and /metrics)")
	ingestListen := fs.String("ingest-listen", "127.0.0.1:8090", "address of the front door's HTTP door (POST /v1/events), through which the feed sends its records; a loopback address")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := c.Validate(); err != nil {
		return usageError("%v", err)
	}
	if *idleFor < 0 || *rows < 1 {
		return usageError("--idle-for must not be negative, --rows at least 1")
	}
	if !auth.LoopbackListen(*ingestListen) {
		return usageError("--ingest-listen %s: the demo's front door admits no tokens, so it serves a loopback address only", *ingestListen)
	}
	if *idleFor == 0 {
		*idleFor = demoIdleFor(c.StaleAfter)
	}
	fps, _ := failpoint.Parse(c.Failpoints, failpoint.InProcess)
	// One registry for the services and the dashboard, served as /metrics
	// as the deployed services serve theirs.
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	pc := pipelineConfig(&c)
	pc.DataDir, pc.Failpoints, pc.Registerer = *dataDir, fps, reg
	pc.Logger = slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	p, err := pipeline.Start(ctx, pc)
	if err != nil {
		return err
	}
	defer p.Close()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return probe.ListenHint("--listen", *listen, fmt.Errorf("dashboard: %w", err))
	}
	dconn, err := connect.ConnectNATS(p.NATSURL, "receiptflow-dashboard")
	if err != nil {
		ln.Close()
		return err
	}
	defer dconn.Close()
	dash, err := dashboard.New(dconn.NC, dashboard.Config{Generation: c.Generation, StaleAfter: c.StaleAfter, Listener: ln,
		Gatherer: reg, Registerer: reg, Explain: explain.ForDeployment(p.Admin.JS, p.Redis)})
	if err != nil {
		ln.Close()
		return err
	}
	dashCtx, stopDash := context.WithCancel(ctx)
	dashDone := make(chan error, 1)
	go func() { dashDone <- dash.Run(dashCtx) }()
	defer func() { stopDash(); <-dashDone }()

	// The front door, as a deployment's ingest service runs it: the feed
	// sends its records through it, as any producer would.
	door := frontdoor.New(frontdoor.Config{}, func() *ingest.Ingester {
		return ingest.New(p.Admin.JS, ingest.Config{Partitions: c.Partitions, HotKeys: c.Hot(), Validator: p.Validator, HeartbeatEvery: 50,
			HeartbeatInterval: time.Second, Linger: c.Waits().IngestLinger, SourceID: "demo-ingest"})
	}, frontdoor.NewMetrics(reg))
	dln, err := net.Listen("tcp", *ingestListen)
	if err != nil {
		return probe.ListenHint("--ingest-listen", *ingestListen, fmt.Errorf("front door: %w", err))
	}
	doorSrv := frontdoor.NewServer(door.Handler(nil), frontdoor.Timeouts{})
	go doorSrv.Serve(frontdoor.LimitListener(dln, frontdoor.DefaultMaxConnections))
	natsDoor, err := door.ServeNATS(p.Admin.NC, frontdoor.ServiceVersion)
	if err != nil {
		return fmt.Errorf("front door on NATS: %w", err)
	}
	defer func() {
		door.Drain()
		_ = natsDoor.Stop()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = doorSrv.Shutdown(sctx)
		_ = door.Close(sctx)
	}()

	base := "http://" + ln.Addr().String()
	urls := demoURLs{Dashboard: base + "/", Ingest: "http://" + dln.Addr().String() + frontdoor.Path, Metrics: base + "/metrics",
		NATS: p.NATSURL, Redis: p.RedisURL, DataDir: p.DataDir()}
	urlsFile := filepath.Join(p.DataDir(), "urls.json")
	if err := writeArtifact(urlsFile, func(w io.Writer) error {
		e := json.NewEncoder(w)
		e.SetIndent("", "  ")
		return e.Encode(urls)
	}); err != nil {
		return err
	}
	banner := fmt.Sprintf("receiptflow demo · %d partitions · Ctrl-C to stop\n"+
		"  dashboard  %s\n  ingest     %s (POST events; nats req rf.submit on NATS)\n  metrics    %s\n  NATS       %s\n  Redis      %s\n  (these in %s)\n"+
		"  feed       sample submissions through the front door, and every %s one fault case, named in a \"feed:\" line with what it sends\n"+
		"  try        %s\n",
		c.Partitions, urls.Dashboard, urls.Ingest, urls.Metrics, urls.NATS, urls.Redis, urlsFile, *caseEvery, curlLine(urls.Ingest, time.Now()))
	tty := isTerminal(stdout)
	if !tty {
		io.WriteString(stdout, banner) // once; a terminal keeps it at the top
	}
	scr := newScreen(stdout, tty, banner, *rows)

	in := demo.NewHTTPSink(urls.Ingest, "")
	defer in.Close()
	feedErr := make(chan error, 1)
	cases := make(chan string, 16)
	go func() {
		feedErr <- demo.Run(ctx, in, demo.Config{
			CaseEvery: *caseEvery, IdleEvery: *idleEvery, IdleFor: *idleFor, Seed: uint64(time.Now().UnixNano()),
			OnCase: func(name string) {
				select {
				case cases <- name:
				default: // the screen is behind; the next case will show
				}
			},
		})
	}()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fmt.Fprintln(stdout, "receiptflow demo: stopping")
			return nil
		case err := <-feedErr:
			if err != nil {
				return err
			}
		case name := <-cases:
			scr.note(feedLine(name, *idleFor, c.StaleAfter))
		case <-t.C:
			if v := dash.View(*rows); v.Loaded {
				scr.show(v)
			}
		}
	}
}

// curlLine is a command a newcomer can paste to send one submission of
// now to the front door at url.
func curlLine(url string, now time.Time) string {
	ev := fmt.Sprintf(`{"schema_version":2,"event_id":"try-%d","receipt_id":"r-try","type":"submitted","occurred_at":"%s","partition_key":"store-try","producer_version":"curl"}`,
		now.Unix(), now.UTC().Format(time.RFC3339))
	return "curl -sS " + url + " -H 'Content-Type: application/x-ndjson' --data-binary '" + ev + "'"
}

// feedLine is the demo's line for a case the feed just sent: its name and
// what it is (demo.What), so a reader knows what to look for on the page.
func feedLine(name string, idleFor, staleAfter time.Duration) string {
	if name == "idle" {
		return fmt.Sprintf("feed: idle for %s (STALE from %s in) — %s", idleFor, staleAfter, demo.What(name))
	}
	return "feed: " + name + " — " + demo.What(name)
}
