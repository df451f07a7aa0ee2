// Package daemon runs one receiptflow service as its own process: shared
// flags, connections, Prometheus metrics and probes on an HTTP port,
// process-level failpoints, and an ordered, bounded shutdown on SIGTERM.
package daemon

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/receiptflow/receiptflow/pkg/config"
	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/failpoint"
	"github.com/receiptflow/receiptflow/pkg/ledger"
	"github.com/receiptflow/receiptflow/pkg/pipeline"
	"github.com/receiptflow/receiptflow/pkg/stream"
)

// Deps is what a service needs, built by Main from the flags.
type Deps struct {
	Common     config.Common
	Names      stream.Names
	Owned      []int
	NATS       *pipeline.Conn
	Store      *ledger.Store
	Validator  *contract.Validator
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	Failpoints *failpoint.Set
}

// Runner is a service: Run blocks until ctx ends or the service fails.
type Runner interface {
	Run(ctx context.Context) error
}

// Main parses args, connects, builds the service with build and runs it
// until ctx ends. It returns the process exit code.
func Main(ctx context.Context, name string, args []string, stderr io.Writer, build func(*Deps) (Runner, error)) int {
	log := slog.New(slog.NewJSONHandler(stderr, nil)).With("service", name)
	if err := run(ctx, name, args, log, build); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		log.Error("service stopped", "err", err)
		return 1
	}
	return 0
}

func run(ctx context.Context, name string, args []string, log *slog.Logger, build func(*Deps) (Runner, error)) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	var c config.Common
	c.Register(fs)
	owned := fs.String("owned", "", "partitions this instance processes, e.g. 0-3 (default: split by --instance/--instances)")
	instance := fs.Int("instance", envInt("RECEIPTS_INSTANCE", 0), "this instance's index (env RECEIPTS_INSTANCE)")
	instances := fs.Int("instances", envInt("RECEIPTS_INSTANCES", 1), "number of instances splitting the partitions (env RECEIPTS_INSTANCES)")
	httpAddr := fs.String("http-addr", envStr("RECEIPTS_HTTP_ADDR", "127.0.0.1:0"), "address of /metrics, /healthz and /readyz (env RECEIPTS_HTTP_ADDR)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := c.Validate(); err != nil {
		return err
	}
	if c.NATSURL == "" || c.RedisURL == "" {
		return errors.New("--nats-url and --redis-url (or NATS_URL, REDIS_URL) are required for a service process")
	}
	if *instances < 1 || *instance < 0 || *instance >= *instances {
		return fmt.Errorf("--instance %d of --instances %d is out of range", *instance, *instances)
	}
	d := &Deps{Common: c, Names: stream.For(c.Generation), Logger: log}
	var err error
	if d.Owned, err = config.ParseOwned(*owned, c.Partitions); err != nil {
		return err
	}
	if d.Owned == nil {
		d.Owned = config.Split(c.Partitions, *instance, *instances)
	}
	if d.Failpoints, err = failpoint.Parse(c.Failpoints, failpoint.Process); err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	d.Registerer = reg
	if d.Validator, err = contract.NewValidator(contract.Options{}); err != nil {
		return err
	}

	var ready atomic.Bool
	ln, err := net.Listen("tcp", *httpAddr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", *httpAddr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ready\n")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	log.Info("http listening", "addr", ln.Addr().String())

	if d.NATS, err = pipeline.ConnectNATS(c.NATSURL, "receiptflow-"+name); err != nil {
		return err
	}
	rdb, err := pipeline.ConnectRedis(c.RedisURL)
	if err != nil {
		return err
	}
	setupCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := rdb.Ping(setupCtx).Err(); err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	if err := stream.Ensure(setupCtx, d.NATS.JS, d.Names, stream.Config{Partitions: c.Partitions}); err != nil {
		return err
	}
	d.Store = ledger.NewStore(rdb, ledger.Keys{Prefix: d.Names.RedisPrefix()}, c.Lateness, c.Grace)
	svc, err := build(d)
	if err != nil {
		return err
	}
	ready.Store(true)
	log.Info("service started", "partitions", c.Partitions, "owned", d.Owned, "generation", c.Generation)
	runErr := svc.Run(ctx)

	// Ordered shutdown: the service has stopped taking input and finished
	// its batch; then drain the connection, close Redis, stop HTTP.
	ready.Store(false)
	shutdownCtx, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	if err := d.NATS.NC.Drain(); err != nil {
		log.Warn("nats drain", "err", err)
	}
	rdb.Close()
	srv.Shutdown(shutdownCtx)
	log.Info("service stopped cleanly")
	return runErr
}

func envStr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func envInt(k string, def int) int {
	var n int
	if _, err := fmt.Sscan(os.Getenv(k), &n); err == nil {
		return n
	}
	return def
}
