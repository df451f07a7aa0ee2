// Command dashboard serves the live dashboard: it follows the active
// generation's KV bucket on NATS and serves the web page, its event
// stream, GET /api/windows, GET /api/health, /healthz, /readyz and /metrics
// on one port. It needs NATS only.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/receiptflow/receiptflow/pkg/dashboard"
	"github.com/receiptflow/receiptflow/pkg/pipeline"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stderr io.Writer) int {
	log := slog.New(slog.NewJSONHandler(stderr, nil)).With("service", "dashboard")
	fs := flag.NewFlagSet("dashboard", flag.ContinueOnError)
	fs.SetOutput(stderr)
	natsURL := fs.String("nats-url", os.Getenv("NATS_URL"), "NATS server URL (env NATS_URL)")
	listen := fs.String("listen", "127.0.0.1:8080", "address of the page, the API and the probes")
	staleAfter := fs.Duration("stale-after", 2*time.Minute, "silence of the source (or the publisher) after which the data is shown as stale")
	generation := fs.String("generation", "", "generation to show (default: follow the active-generation pointer)")
	var sec pipeline.NATSSecurity
	sec.Register(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if err := serve(ctx, log, *natsURL, sec, *listen, *staleAfter, *generation); err != nil {
		log.Error("dashboard stopped", "err", err)
		return 1
	}
	return 0
}

func serve(ctx context.Context, log *slog.Logger, natsURL string, sec pipeline.NATSSecurity, listen string, staleAfter time.Duration, gen string) error {
	if natsURL == "" {
		return errors.New("--nats-url (or NATS_URL) is required")
	}
	if staleAfter <= 0 {
		return errors.New("--stale-after must be positive")
	}
	// Keep trying to connect: the page is served (and says so) while NATS
	// is away.
	opts, err := sec.Options()
	if err != nil {
		return err
	}
	conn, err := pipeline.ConnectNATS(natsURL, "receiptflow-dashboard", append(opts, nats.RetryOnFailedConnect(true))...)
	if err != nil {
		return err
	}
	defer conn.Close()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", listen, err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	svc, err := dashboard.New(conn.NC, dashboard.Config{
		Generation: gen, StaleAfter: staleAfter, Listener: ln,
		Gatherer: reg, Registerer: reg, Logger: log,
	})
	if err != nil {
		ln.Close()
		return err
	}
	log.Info("dashboard started", "url", "http://"+ln.Addr().String(), "nats", pipeline.RedactURL(natsURL), "auth", sec)
	err = svc.Run(ctx)
	log.Info("dashboard stopped cleanly")
	return err
}
