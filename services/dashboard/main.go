// Command dashboard serves the live dashboard: it follows the active
// generation's KV bucket on NATS and serves the web page, its event
// stream, GET /api/windows, GET /api/health, /healthz, /readyz and /metrics
// on one port. It needs NATS only; with --prometheus-url it also shows the
// pipeline's firing alerts (docs/alerts.md).
//
// The page shows per-store amounts, so its data has a guard
// (docs/security.md, "Dashboard readers"): with --tokens-file every reader
// presents a token of that file; without one it serves loopback peers
// only, and refuses to start on a --listen off the loopback unless
// --trusted-proxy says an authenticating proxy in front admits the
// readers.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/receiptflow/receiptflow/pkg/auth"
	"github.com/receiptflow/receiptflow/pkg/buildinfo"
	"github.com/receiptflow/receiptflow/pkg/config"
	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/dashboard"
	"github.com/receiptflow/receiptflow/pkg/explain"
	"github.com/receiptflow/receiptflow/pkg/ledger"
	"github.com/receiptflow/receiptflow/pkg/probe"
)

// ownProcess: run sets the process's GOMAXPROCS from --procs (main
// only; tests call run in-process).
var ownProcess bool

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	ownProcess = true
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	log := slog.New(slog.NewJSONHandler(stderr, nil)).With("service", "dashboard")
	fs := flag.NewFlagSet("dashboard", flag.ContinueOnError)
	fs.SetOutput(stderr)
	natsURL := fs.String("nats-url", os.Getenv("NATS_URL"), "NATS server URL (env NATS_URL)")
	listen := fs.String("listen", "127.0.0.1:8080", "address of the page, the API and the probes; without --tokens-file or --trusted-proxy it must be a loopback address")
	tokensFile := fs.String("tokens-file", "", "readers' tokens, one name:sha256-hex line each (the hex SHA-256 of the token; blank and # lines skipped), read again when it changes: every reader of the page and the API presents one (docs/security.md)")
	trustedProxy := fs.Bool("trusted-proxy", false, "without --tokens-file: an authenticating proxy in front of the dashboard admits the readers, so every peer it sends is served (and --listen may be off the loopback)")
	staleAfter := fs.Duration("stale-after", 2*time.Minute, "silence of the source (or the publisher) after which the data is shown as stale")
	generation := fs.String("generation", "", "generation to show (default: follow the active-generation pointer)")
	promURL := fs.String("prometheus-url", os.Getenv("PROMETHEUS_URL"), "Prometheus whose receiptflow alerts the health panel shows, http(s)://host:port (env PROMETHEUS_URL; empty: alerts not configured)")
	redisURL := fs.String("redis-url", os.Getenv("REDIS_URL"), "Redis of the deployment (env REDIS_URL): with it, clicking a window explains its number (GET /api/explain/{id}); empty: explanations are off")
	var sec connect.NATSSecurity
	sec.Register(fs)
	version := buildinfo.Flag(fs)
	var redisSec connect.RedisSecurity
	redisSec.Register(fs)
	var procs config.Procs
	procs.Register(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *version {
		fmt.Fprintln(stdout, buildinfo.String("dashboard"))
		return 0
	}
	if err := procs.Validate(); err != nil {
		fmt.Fprintf(stderr, "dashboard: %v\n", err)
		return 2
	}
	if ownProcess {
		procs.Apply()
	}
	var readers *auth.Tokens
	switch {
	case *tokensFile != "":
		var err error
		if readers, err = auth.LoadTokens(*tokensFile); err != nil {
			fmt.Fprintf(stderr, "dashboard: %v\n", err)
			return 2
		}
	case !*trustedProxy && !auth.LoopbackListen(*listen):
		err := fmt.Errorf("--listen %s is not a loopback address: give --tokens-file, so that only readers with a token see the per-store amounts, or --trusted-proxy when an authenticating proxy in front admits the readers (docs/security.md)", *listen)
		fmt.Fprintf(stderr, "dashboard: %v\n", err)
		return 2
	}
	var rdb ledger.Client
	if *redisURL != "" {
		c, err := connect.ConnectRedisSecure(*redisURL, redisSec)
		if err != nil {
			log.Error("dashboard stopped", "err", err)
			return 2
		}
		defer c.Close()
		rdb = c
	}
	g := guard{readers: readers, trustedProxy: *trustedProxy}
	if err := serve(ctx, log, *natsURL, sec, rdb, *listen, *staleAfter, *generation, *promURL, g); err != nil {
		log.Error("dashboard stopped", "err", err)
		return 1
	}
	return 0
}

// guard is who may read the dashboard (dashboard.Config.Readers,
// TrustedProxy).
type guard struct {
	readers      *auth.Tokens
	trustedProxy bool
}

// String names the guard in the start-up log.
func (g guard) String() string {
	switch {
	case g.readers != nil:
		return "readers' tokens (--tokens-file)"
	case g.trustedProxy:
		return "an authenticating proxy in front (--trusted-proxy)"
	}
	return "loopback peers only"
}

func serve(ctx context.Context, log *slog.Logger, natsURL string, sec connect.NATSSecurity, rdb ledger.Client, listen string, staleAfter time.Duration, gen, promURL string, g guard) error {
	if natsURL == "" {
		return errors.New("--nats-url (or NATS_URL) is required")
	}
	if staleAfter <= 0 {
		return errors.New("--stale-after must be positive")
	}
	if err := dashboard.CheckPrometheusURL(promURL); err != nil {
		return fmt.Errorf("--prometheus-url (or PROMETHEUS_URL): %w", err)
	}
	opts, err := sec.Options()
	if err != nil {
		return err
	}
	// The probes answer from the start: alive, and not ready while NATS is
	// waited for (docs/spec.md §4); the page and the API come once connected.
	at := connect.RedactURL(natsURL)
	r := &readiness{}
	r.wait("nats at " + at)
	port, err := probe.Listen(listen, r.notReady)
	if err != nil {
		return probe.ListenHint("--listen", listen, err)
	}
	defer port.Close()
	log.Info("dashboard listening", "url", "http://"+port.Addr(), "procs", runtime.GOMAXPROCS(0))

	var conn *connect.Conn
	err = connect.WaitFor(ctx, func(context.Context) error {
		var err error
		conn, err = connect.ConnectNATS(natsURL, "receiptflow-dashboard", opts...)
		return err
	}, func(attempt int, err error, next time.Duration) {
		r.wait("nats at " + at + ": " + err.Error())
		log.Warn("waiting for nats", "at", at, "attempt", attempt, "retry_in", next.Round(time.Millisecond).String(), "err", err)
	})
	if err != nil {
		if ctx.Err() != nil {
			log.Info("dashboard stopped while waiting for nats", "err", err)
			return nil
		}
		return err
	}
	// From here on nats.go reconnects by itself (connect.ConnectNATS never
	// gives up), and the page says when it is disconnected.
	defer conn.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	dc := dashboard.Config{
		Generation: gen, StaleAfter: staleAfter, PrometheusURL: promURL,
		Gatherer: reg, Registerer: reg, Logger: log,
		Readers: g.readers, TrustedProxy: g.trustedProxy,
	}
	if rdb != nil {
		dc.Explain = explain.ForDeployment(conn.JS, rdb)
	}
	svc, err := dashboard.New(conn.NC, dc)
	if err != nil {
		return err
	}
	svc.Mount(port)
	r.ready(svc)
	log.Info("dashboard started", "url", "http://"+port.Addr(), "nats", at, "auth", sec, "readers", g.String())
	err = svc.Run(ctx)
	// Run has ended the event streams; let the server finish what is in
	// flight.
	port.Shutdown(dashboard.ShutdownTimeout)
	log.Info("dashboard stopped cleanly")
	return err
}

// readiness is the dashboard port's readiness check: what the process
// waits for until the dashboard runs, then the dashboard's own. Safe for
// concurrent use.
type readiness struct {
	waiting atomic.Pointer[string]
	svc     atomic.Pointer[dashboard.Service]
}

func (r *readiness) wait(what string) { r.waiting.Store(&what) }

func (r *readiness) ready(svc *dashboard.Service) { r.svc.Store(svc) }

func (r *readiness) notReady() string {
	if svc := r.svc.Load(); svc != nil {
		return svc.NotReady()
	}
	what := "nats"
	if p := r.waiting.Load(); p != nil {
		what = *p
	}
	return "waiting for " + what
}
