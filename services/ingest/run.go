package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/receiptflow/receiptflow/pkg/auth"
	"github.com/receiptflow/receiptflow/pkg/buildinfo"
	"github.com/receiptflow/receiptflow/pkg/config"
	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/frontdoor"
	"github.com/receiptflow/receiptflow/pkg/ingest"
	"github.com/receiptflow/receiptflow/pkg/probe"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// options are the service's own flags (the deployment's parameters are
// config.Common's, adopted from RAW's record).
type options struct {
	listen, httpAddr               string
	tokensFile, tlsCert, tlsKey    string
	maxBytes                       int64
	maxEvents, maxInflight, maxCon int
	sourceID                       string
	beatInterval, retryFor, drain  time.Duration
	profileDir                     string
	procs                          config.Procs
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	log := slog.New(slog.NewJSONHandler(stderr, nil)).With("service", "ingest")
	fs := flag.NewFlagSet("ingest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config.Common
	c.Register(fs)
	c.RegisterHeartbeat(fs, "a progress heartbeat to every partition after this many records (the deployment's recorded value)")
	var sec connect.NATSSecurity
	sec.Register(fs)
	var o options
	fs.StringVar(&o.listen, "listen", envStr("RECEIPTS_LISTEN", "127.0.0.1:8090"), "address of the HTTP door, POST /v1/events (env RECEIPTS_LISTEN); without --tokens-file it must be a loopback address")
	fs.StringVar(&o.httpAddr, "http-addr", envStr("RECEIPTS_HTTP_ADDR", "127.0.0.1:0"), "address of /metrics, /healthz and /readyz (env RECEIPTS_HTTP_ADDR)")
	fs.StringVar(&o.tokensFile, "tokens-file", os.Getenv("RECEIPTS_TOKENS_FILE"), "bearer tokens admitted on the HTTP door, one name:sha256-hex line each (env RECEIPTS_TOKENS_FILE); read again when it changes")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "serve the HTTP door over TLS with this certificate (PEM), with --tls-key")
	fs.StringVar(&o.tlsKey, "tls-key", "", "the private key (PEM) of --tls-cert")
	fs.Int64Var(&o.maxBytes, "max-request-bytes", frontdoor.DefaultMaxRequestBytes, "largest request body (413 beyond)")
	fs.IntVar(&o.maxEvents, "max-request-events", frontdoor.DefaultMaxRequestEvents, "most records in one request (413 beyond)")
	fs.IntVar(&o.maxInflight, "max-inflight-events", frontdoor.DefaultMaxInflight, "most records admitted and not yet answered, over all requests (503 beyond): bounds the instance's memory")
	fs.IntVar(&o.maxCon, "max-connections", frontdoor.DefaultMaxConnections, "most open HTTP connections (more wait to be accepted)")
	fs.StringVar(&o.sourceID, "source-id", os.Getenv("RECEIPTS_SOURCE_ID"), "this instance's id as a source of RAW (docs/spec.md §3.1; env RECEIPTS_SOURCE_ID; default the host name and --listen's port, so a restarted instance continues its source)")
	fs.DurationVar(&o.beatInterval, "heartbeat-interval", time.Second, "a progress heartbeat this long after the last one while records come")
	fs.DurationVar(&o.retryFor, "retry-for", 10*time.Second, "how long a batch RAW does not confirm is retried before its records are answered 503")
	fs.DurationVar(&o.drain, "drain-timeout", 30*time.Second, "on SIGTERM, how long the requests in flight may take to be answered")
	fs.StringVar(&o.profileDir, "profile-dir", os.Getenv(probe.ProfileEnv), "write a CPU profile of the process's life and, at exit, an allocation profile into this directory as ingest.{cpu,allocs}.pprof (env "+probe.ProfileEnv+"; default none)")
	o.procs.Register(fs)
	version := buildinfo.Flag(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *version {
		fmt.Fprintln(stdout, buildinfo.String("ingest"))
		return 0
	}
	if err := o.check(&c); err != nil {
		fmt.Fprintf(stderr, "ingest: %v\n", err)
		return 2
	}
	o.procs.Apply()
	if o.profileDir != "" {
		stop, err := probe.StartProfiles(o.profileDir, "ingest")
		if err != nil {
			fmt.Fprintf(stderr, "ingest: %v\n", err)
			return 1
		}
		defer func() {
			if err := stop(); err != nil {
				log.Warn("profiles not written", "err", err)
			}
		}()
	}
	if err := serve(ctx, log, &c, fs, sec, o); err != nil {
		log.Error("ingest stopped", "err", err)
		return 1
	}
	return 0
}

// check refuses bad flag values (exit 2).
func (o *options) check(c *config.Common) error {
	switch {
	case c.NATSURL == "":
		return errors.New("--nats-url (or NATS_URL) is required")
	case o.maxBytes <= 0 || o.maxEvents <= 0 || o.maxInflight <= 0 || o.maxCon <= 0:
		return errors.New("--max-request-bytes, --max-request-events, --max-inflight-events and --max-connections must be positive")
	case o.maxInflight < o.maxEvents:
		return fmt.Errorf("--max-inflight-events %d is below --max-request-events %d: no full request could be admitted", o.maxInflight, o.maxEvents)
	case o.procs.Validate() != nil:
		return o.procs.Validate()
	case o.beatInterval <= 0 || o.retryFor <= 0 || o.drain <= 0:
		return errors.New("--heartbeat-interval, --retry-for and --drain-timeout must be positive")
	case (o.tlsCert == "") != (o.tlsKey == ""):
		return errors.New("--tls-cert and --tls-key go together")
	case o.tokensFile == "" && !auth.LoopbackListen(o.listen):
		return fmt.Errorf("--listen %s is not a loopback address: give --tokens-file, so that only producers with a token are admitted (docs/security.md)", o.listen)
	}
	if err := connect.CheckNATSURL(c.NATSURL); err != nil {
		return fmt.Errorf("--nats-url %w", err)
	}
	if o.sourceID == "" {
		host, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("no host name for the default --source-id (give one): %w", err)
		}
		_, port, err := net.SplitHostPort(o.listen)
		if err != nil {
			return fmt.Errorf("--listen %s: %w", o.listen, err)
		}
		o.sourceID = host + ":" + port
	}
	return nil
}

func serve(ctx context.Context, log *slog.Logger, c *config.Common, fs *flag.FlagSet, sec connect.NATSSecurity, o options) error {
	var tokens *auth.Tokens
	if o.tokensFile != "" {
		var err error
		if tokens, err = auth.LoadTokens(o.tokensFile); err != nil {
			return err
		}
	}
	var tlsCfg *tls.Config
	if o.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(o.tlsCert, o.tlsKey)
		if err != nil {
			return fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		tlsCfg = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	natsOpts, err := sec.Options()
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	r := &readiness{}
	r.wait("nats at " + connect.RedactURL(c.NATSURL))
	port, err := probe.Listen(o.httpAddr, r.notReady)
	if err != nil {
		return probe.ListenHint("--http-addr", o.httpAddr, err)
	}
	defer port.Close()
	port.Metrics(reg)

	var conn *connect.Conn
	err = connect.WaitFor(ctx, func(context.Context) error {
		var err error
		conn, err = connect.ConnectNATS(c.NATSURL, "receiptflow-ingest", natsOpts...)
		return err
	}, func(attempt int, err error, next time.Duration) {
		r.wait("nats: " + err.Error())
		log.Warn("waiting for nats", "attempt", attempt, "retry_in", next.Round(time.Millisecond).String(), "err", err)
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer conn.Close()
	// RAW must exist (the set-up job makes it); its record gives the
	// deployment's partitions, hot keys and heartbeat period.
	err = connect.WaitFor(ctx, func(ctx context.Context) error {
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if _, err := conn.JS.Stream(lctx, wire.Raw); err != nil {
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				return fmt.Errorf("%w: stream %s does not exist yet: run the set-up job (docs/deployment.md)", connect.ErrNotYet, wire.Raw)
			}
			return err
		}
		return c.AdoptRecorded(lctx, conn.JS, config.Explicit(fs))
	}, func(attempt int, err error, next time.Duration) {
		r.wait("RAW: " + err.Error())
		log.Warn("waiting for RAW", "attempt", attempt, "retry_in", next.Round(time.Millisecond).String(), "err", err)
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	v, err := contract.NewValidator(c.Contract())
	if err != nil {
		return err
	}
	door := frontdoor.New(frontdoor.Config{
		MaxRequestBytes: o.maxBytes, MaxRequestEvents: o.maxEvents, MaxInflight: o.maxInflight,
		Connected: func() bool { return conn.NC.Status() == nats.CONNECTED },
	}, func() *ingest.Ingester {
		return ingest.New(conn.JS, ingest.Config{Partitions: c.Partitions, HotKeys: c.Hot(), Validator: v,
			HeartbeatEvery: c.HeartbeatEvery, HeartbeatInterval: o.beatInterval, RetryFor: o.retryFor,
			MaxInFlight: o.maxInflight, Linger: c.Waits().IngestLinger, SourceID: o.sourceID})
	}, frontdoor.NewMetrics(reg))

	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return probe.ListenHint("--listen", o.listen, err)
	}
	ln = frontdoor.LimitListener(ln, o.maxCon)
	if tlsCfg != nil {
		ln = tls.NewListener(ln, tlsCfg)
	}
	srv := frontdoor.NewServer(door.Handler(tokens), frontdoor.Timeouts{})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	svc, err := door.ServeNATS(conn.NC, frontdoor.ServiceVersion)
	if err != nil {
		srv.Close()
		return fmt.Errorf("the NATS door %s: %w", frontdoor.Subject, err)
	}
	r.ready(door)
	go r.probeRAW(ctx, conn.JS)
	scheme := "http"
	if tlsCfg != nil {
		scheme = "https"
	}
	log.Info("ingest started", "http_door", scheme+"://"+ln.Addr().String()+frontdoor.Path, "nats_door", frontdoor.Subject,
		"probes", "http://"+port.Addr(), "source_id", o.sourceID, "tokens", o.tokensFile != "", "partitions", c.Partitions)

	select {
	case <-ctx.Done():
	case err := <-served:
		svc.Stop()
		return fmt.Errorf("the HTTP door stopped: %w", err)
	}
	// SIGTERM: stop admitting (503, the NATS door unsubscribed), answer
	// what is in flight, then leave as a source (docs/spec.md §10).
	log.Info("ingest stopping: answering the requests in flight")
	door.Drain()
	_ = svc.Stop()
	dctx, cancel := context.WithTimeout(context.Background(), o.drain)
	defer cancel()
	if err := srv.Shutdown(dctx); err != nil {
		log.Warn("requests still in flight at the drain time-out", "err", err)
	}
	if err := door.Close(dctx); err != nil {
		return fmt.Errorf("leaving as a source: %w", err)
	}
	// The NATS door's last answers were published as RAW confirmed their
	// records: see that they left before the connection closes.
	if err := conn.NC.FlushWithContext(dctx); err != nil {
		log.Warn("the last NATS answers may not have left", "err", err)
	}
	st := door.Stats()
	log.Info("ingest stopped cleanly", "source_id", o.sourceID, "records", st.Records, "published", st.Published,
		"duplicates", st.Duplicates, "invalid", st.Invalid, "commits", st.Commits)
	return nil
}

// readiness is /readyz: what the process waits for, then the door's own,
// and whether RAW's leader answered the last look.
type readiness struct {
	waiting atomic.Pointer[string]
	door    atomic.Pointer[frontdoor.Door]
	raw     atomic.Pointer[string] // why RAW did not answer; nil: it did
}

// rawProbe is how often /readyz's view of RAW is renewed.
const rawProbe = 5 * time.Second

// probeRAW looks RAW up every rawProbe until ctx ends: a stream without a
// leader (no quorum) makes the instance not ready, though NATS answers.
func (r *readiness) probeRAW(ctx context.Context, js jetstream.JetStream) {
	t := time.NewTicker(rawProbe)
	defer t.Stop()
	for {
		lctx, cancel := context.WithTimeout(ctx, rawProbe/2)
		_, err := js.Stream(lctx, wire.Raw)
		cancel()
		if err != nil && ctx.Err() == nil {
			why := "RAW does not answer: " + err.Error()
			r.raw.Store(&why)
		} else {
			r.raw.Store(nil)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (r *readiness) wait(what string)        { r.waiting.Store(&what) }
func (r *readiness) ready(d *frontdoor.Door) { r.door.Store(d) }
func (r *readiness) notReady() string {
	if d := r.door.Load(); d != nil {
		if why := d.NotReady(); why != "" {
			return why
		}
		if why := r.raw.Load(); why != nil {
			return *why
		}
		return ""
	}
	what := "nats"
	if p := r.waiting.Load(); p != nil {
		what = *p
	}
	return "waiting for " + what
}

func envStr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
