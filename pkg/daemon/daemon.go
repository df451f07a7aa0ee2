// Package daemon runs one receiptflow service as its own process: shared
// flags, credentials and TLS for NATS and Redis, connections, Prometheus
// metrics and probes on an HTTP port, process-level failpoints, waiting
// for servers that are unreachable or loading (docs/spec.md §4), CPU and
// allocation profiles on request (--profile-dir), and an ordered,
// bounded shutdown on SIGTERM.
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
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/receiptflow/receiptflow/pkg/config"
	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/failpoint"
	"github.com/receiptflow/receiptflow/pkg/ledger"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// Deps is what a service needs, built by Main from the flags.
type Deps struct {
	Common config.Common
	Names  wire.Names
	Owned  []int
	NATS   *connect.Conn
	// Redis is the client Store uses (a *redis.ClusterClient with
	// --redis-cluster).
	Redis      redis.UniversalClient
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
// until ctx ends. It returns the process exit code: 0 also when ctx ends
// while it waits for a server. An unreachable or loading NATS or Redis is
// waited for (connect.WaitFor), never a reason to exit; only refusals
// (credentials, certificates, permissions) and errors that are not about a
// lost connection end it with 1. When the service's Run fails because a
// connection was lost, Main waits for both servers and calls build again
// (the collectors the previous value registered on Deps.Registerer are
// unregistered first), as a supervisor would restart the process. Secrets
// (passwords, credentials in URLs) never reach the log.
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

// options are the process flags beyond config.Common.
type options struct {
	natsSec    connect.NATSSecurity
	redisSec   connect.RedisSecurity
	owned      string
	instance   int
	instances  int
	httpAddr   string
	ensure     bool
	ensureOnly bool
	replicas   int
	statsEvery time.Duration
	stallAfter time.Duration
	profileDir string
	dialer     connect.Dialer
}

// DefaultStallAfter is --stall-after's default: /readyz says not ready
// 15–20 s (one stats interval more) after the service stopped making
// progress.
const DefaultStallAfter = 15 * time.Second

func (o *options) register(fs *flag.FlagSet) {
	o.natsSec.Register(fs)
	o.redisSec.Register(fs)
	fs.StringVar(&o.owned, "owned", "", "partitions this instance processes, e.g. 0-3 (default: split by --instance/--instances)")
	fs.IntVar(&o.instance, "instance", envInt("RECEIPTS_INSTANCE", 0), "this instance's index (env RECEIPTS_INSTANCE)")
	fs.IntVar(&o.instances, "instances", envInt("RECEIPTS_INSTANCES", 1), "number of instances splitting the partitions (env RECEIPTS_INSTANCES)")
	fs.StringVar(&o.httpAddr, "http-addr", envStr("RECEIPTS_HTTP_ADDR", "127.0.0.1:0"), "address of /metrics, /healthz and /readyz (env RECEIPTS_HTTP_ADDR)")
	fs.BoolVar(&o.ensure, "ensure-streams", envBool("RECEIPTS_ENSURE_STREAMS", true),
		"create or update the streams and buckets at start (env RECEIPTS_ENSURE_STREAMS); needs admin rights, so least-privilege deployments set it false and run --ensure-only once")
	fs.BoolVar(&o.ensureOnly, "ensure-only", false, "create or update the streams and buckets, then exit (the set-up job; admin credentials, no Redis)")
	fs.IntVar(&o.replicas, "replicas", envInt("RECEIPTS_REPLICAS", 1), "replicas of every stream and bucket created (env RECEIPTS_REPLICAS; 3 on a 3-node cluster)")
	fs.DurationVar(&o.dialer.PublishAckTimeout, "publish-ack-timeout", envDuration("RECEIPTS_PUBLISH_ACK_TIMEOUT", connect.DefaultPublishAckTimeout),
		"how long an asynchronous publish waits for its ack before the batch fails and is redelivered (env RECEIPTS_PUBLISH_ACK_TIMEOUT)")
	fs.DurationVar(&o.stallAfter, "stall-after", envDuration("RECEIPTS_STALL_AFTER", DefaultStallAfter),
		"how long a consumer may make no progress with messages pending, or go without an answer from its leader, before /readyz says not ready (env RECEIPTS_STALL_AFTER)")
	fs.StringVar(&o.profileDir, "profile-dir", envStr(ProfileEnv, ""),
		"write a CPU profile of the process's life and, at exit, an allocation profile into this directory as <service>[-<instance>].{cpu,allocs}.pprof (env "+ProfileEnv+"; default none)")
	fs.DurationVar(&o.statsEvery, "stats-interval", envDuration("RECEIPTS_STATS_INTERVAL", 5*time.Second), "how often consumer backlog, state size and Redis health are sampled for /metrics and /readyz (env RECEIPTS_STATS_INTERVAL)")
}

func run(ctx context.Context, name string, args []string, log *slog.Logger, build func(*Deps) (Runner, error)) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	var c config.Common
	c.Register(fs)
	var o options
	o.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := c.Validate(); err != nil {
		return err
	}
	switch {
	case c.NATSURL == "":
		return errors.New("--nats-url (or NATS_URL) is required for a service process")
	case c.RedisURL == "" && !o.ensureOnly:
		return errors.New("--redis-url (or REDIS_URL) is required for a service process")
	case o.instances < 1 || o.instance < 0 || o.instance >= o.instances:
		return fmt.Errorf("--instance %d of --instances %d is out of range", o.instance, o.instances)
	case o.replicas < 1 || o.replicas > 5:
		return fmt.Errorf("--replicas must be between 1 and 5, got %d", o.replicas)
	case o.statsEvery <= 0:
		return errors.New("--stats-interval must be positive")
	case o.stallAfter <= 0:
		return errors.New("--stall-after must be positive")
	}
	natsOpts, err := o.natsSec.Options()
	if err != nil {
		return err
	}
	d := &Deps{Common: c, Names: wire.For(c.Generation), Logger: log}
	topology := c.Topology(o.replicas)
	explicit := config.Explicit(fs)
	refused := newRefusals()
	natsOpts = append(natsOpts, natsEvents(log, refused)...)

	if o.ensureOnly {
		conn, err := waiter{log: log, dialer: o.dialer}.connectNATS(ctx, c.NATSURL, "receiptflow-"+name+"-setup", natsOpts)
		if err != nil {
			return stopped(ctx, log, err)
		}
		defer conn.NC.Drain()
		// A cluster electing leaders answers "temporarily unavailable":
		// waited out (connect.Transient) for up to a minute.
		setupCtx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := (waiter{log: log}).adopt(setupCtx, conn.JS, &c, explicit, refused); err != nil {
			return err
		}
		topology = c.Topology(o.replicas)
		err = waiter{log: log}.until(setupCtx, "the streams and buckets to be created", "nats", func(ctx context.Context) error {
			ctx, cancel := refused.context(ctx, 30*time.Second)
			defer cancel()
			return refused.or(stream.Ensure(ctx, conn.JS, d.Names, topology))
		})
		if err != nil {
			return err
		}
		log.Info("streams and buckets ensured", "generation", c.Generation, "partitions", c.Partitions, "replicas", o.replicas,
			"nats", connect.RedactURL(c.NATSURL), "nats_auth", o.natsSec)
		return nil
	}

	if o.profileDir != "" {
		stop, err := startProfiles(o.profileDir, profileBase(name, o.instance, o.instances))
		if err != nil {
			return err
		}
		defer func() {
			if err := stop(); err != nil {
				log.Warn("writing profiles", "err", err)
				return
			}
			log.Info("profiles written", "dir", o.profileDir)
		}()
	}
	if err := d.configure(c, o); err != nil { // again once the record is read
		return err
	}
	if d.Failpoints, err = failpoint.Parse(c.Failpoints, failpoint.Process); err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	d.Registerer = reg

	h := &health{}
	h.wait("nats at " + connect.RedactURL(c.NATSURL))
	ln, err := net.Listen("tcp", o.httpAddr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", o.httpAddr, err)
	}
	srv := &http.Server{Handler: h.mux(reg), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	log.Info("http listening", "addr", ln.Addr().String())
	log.Info("connecting", "nats", connect.RedactURL(c.NATSURL), "nats_auth", o.natsSec,
		"redis", connect.RedactURL(c.RedisURL), "redis_auth", o.redisSec)

	// Wait for the servers (docs/spec.md §4): an unreachable or loading server is
	// waited for with backoff while /readyz says so; only a refusal
	// (credentials, certificates, permissions) or SIGTERM ends the wait.
	w := waiter{log: log, h: h, dialer: o.dialer}
	if d.NATS, err = w.connectNATS(ctx, c.NATSURL, "receiptflow-"+name, natsOpts); err != nil {
		return stopped(ctx, log, err)
	}
	h.nc.Store(d.NATS.NC)
	// The deployment's recorded parameters (docs/architecture.md) win
	// over flags not given; a flag given with another value is refused.
	if err := d.adopt(ctx, w, &c, o, explicit, refused); err != nil {
		d.NATS.Close()
		return stopped(ctx, log, err)
	}
	topology = c.Topology(o.replicas)
	if d.Redis, err = connect.ConnectRedisSecure(c.RedisURL, o.redisSec); err != nil {
		d.NATS.Close()
		return err
	}
	shutdown := func() {
		// Ordered shutdown: the service has stopped taking input and
		// finished its batch; drain the connection, close Redis, stop HTTP.
		h.ready.Store(false)
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := d.NATS.NC.Drain(); err != nil {
			log.Warn("nats drain", "err", err)
		}
		d.Redis.Close()
		srv.Shutdown(shutdownCtx)
	}
	redisAt := connect.RedactURL(c.RedisURL)
	if err := w.until(ctx, "redis", redisAt, func(ctx context.Context) error { return pingRedis(ctx, d.Redis) }); err != nil {
		shutdown()
		return stopped(ctx, log, fmt.Errorf("redis %s: %w", connect.RedactURL(c.RedisURL), err))
	}
	h.redisOK.Store(time.Now().UnixNano())
	if o.ensure {
		err := w.until(ctx, "the streams and buckets to be created", "nats", func(ctx context.Context) error {
			ctx, cancel := refused.context(ctx, 30*time.Second)
			defer cancel()
			return refused.or(stream.Ensure(ctx, d.NATS.JS, d.Names, topology))
		})
		if err != nil {
			shutdown()
			if ctx.Err() != nil {
				return stopped(ctx, log, err)
			}
			return ensureFailed(err)
		}
	}
	r := roleOf(name, d.Names, d.Owned, c.Partitions)
	if err := r.waitTopology(ctx, d.NATS.JS, w, refused); err != nil {
		shutdown()
		return stopped(ctx, log, err)
	}
	if !o.ensure { // the set-up job may have recorded the parameters meanwhile
		if err := d.adopt(ctx, w, &c, o, explicit, refused); err != nil {
			shutdown()
			return stopped(ctx, log, err)
		}
		r = roleOf(name, d.Names, d.Owned, c.Partitions)
	}
	d.Store = ledger.NewStore(d.Redis, ledger.Keys{Prefix: d.Names.RedisPrefix()}, c.Lateness, c.Grace, ledger.WithHorizon(c.ReplayHorizon))
	// Each start of the service gets a fresh value built against the
	// same connections; the collectors the previous one registered are
	// unregistered first.
	svcReg := &ownedRegisterer{Registerer: reg}
	d.Registerer = svcReg
	svc, err := build(d)
	if err != nil {
		shutdown()
		return err
	}

	// Redis must not evict (docs/spec.md §4): its policy is read before
	// every start of the service and at every stats sample.
	guard := newRedisGuard(name, d.Redis, h, reg, log)
	statsCtx, stopStats := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		st := newStats(name, r, d, h, guard, reg, log)
		st.stallAfter = o.stallAfter
		st.loop(statsCtx, o.statsEvery)
	}()

	var runErr error
	restarts := connect.WaitBackOff()
	for {
		if runErr = guard.waitSafe(ctx); runErr != nil {
			break
		}
		h.wait("")
		h.ready.Store(true)
		log.Info("service started", "partitions", c.Partitions, "owned", d.Owned, "generation", c.Generation)
		began := time.Now()
		h.restartFull.Store(false)
		runCtx, done := guard.running(stream.WithStoreWatch(ctx, &h.full))
		runErr = svc.Run(runCtx)
		unsafe := errors.Is(context.Cause(runCtx), errUnsafeRedis)
		done()
		h.ready.Store(false)
		if unsafe && ctx.Err() == nil {
			// Stopped because Redis may now evict: wait for a safe
			// policy (the loop's top), then start a fresh service.
			log.Warn("service stopped: redis may evict keys", "cause", context.Cause(runCtx))
			svcReg.reset()
			if svc, runErr = build(d); runErr != nil {
				break
			}
			continue
		}
		storeFull := stream.StoreFull(runErr) && ctx.Err() == nil
		h.restartFull.Store(storeFull)
		if storeFull {
			// A write the broker refused for a full store outside the
			// consume loop (the publisher's first pass): wait for room as
			// for a server, and start again (docs/spec.md §4).
			h.fullRestarts.Add(1)
			log.Warn("the broker's store is full: waiting for room and starting the service again", "err", runErr)
		} else if runErr == nil || ctx.Err() != nil || !w.connectionLost(ctx, runErr, d) {
			break
		}
		// A connection error (docs/spec.md §4: never exit for that): wait until both
		// servers answer, then start the service again, as a supervisor
		// would restart the process.
		if time.Since(began) > time.Minute {
			restarts.Reset()
		}
		pause := restarts.NextBackOff()
		if storeFull {
			h.wait("room in the broker's store (it is full): " + runErr.Error())
		} else {
			log.Warn("service stopped on a connection error; waiting for the servers and starting it again", "err", runErr, "after", pause)
			h.wait("the servers after: " + runErr.Error())
		}
		_ = stream.Pause(ctx, pause) // an ended ctx ends the wait below
		if err := w.until(ctx, "nats", connect.RedactURL(c.NATSURL), func(context.Context) error { return natsUp(d.NATS.NC) }); err != nil {
			runErr = err
			break
		}
		if err := w.until(ctx, "redis", redisAt, func(ctx context.Context) error { return pingRedis(ctx, d.Redis) }); err != nil {
			runErr = err
			break
		}
		svcReg.reset()
		if svc, err = build(d); err != nil {
			runErr = err
			break
		}
	}
	stopStats()
	wg.Wait()
	shutdown()
	if ctx.Err() != nil {
		runErr = nil // stopped by SIGTERM, also in the middle of a wait
	}
	if runErr != nil {
		return runErr
	}
	log.Info("service stopped cleanly")
	return nil
}

// ensureFailed is the error of a failed stream set-up at start. Only a
// refusal (permissions, credentials) points at a least-privilege user.
func ensureFailed(err error) error {
	if connect.Refused(err) {
		return fmt.Errorf("%w (a least-privilege user cannot create streams: run the set-up job with --ensure-only and admin credentials, and start services with --ensure-streams=false)", err)
	}
	return fmt.Errorf("stream set-up: %w", err)
}

// natsEvents logs the connection's life, and every asynchronous error the
// server sends (a permissions violation arrives this way: the request that
// caused it only times out).
func natsEvents(log *slog.Logger, refused *refusals) []nats.Option {
	return []nats.Option{
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			refused.note(err)
			attrs := []any{"err", err}
			if sub != nil {
				attrs = append(attrs, "subject", sub.Subject)
			}
			if errors.Is(err, nats.ErrPermissionViolation) {
				log.Error("nats refused an operation: check the user's permissions in deploy/nats/auth.conf", attrs...)
				return
			}
			log.Error("nats async error", attrs...)
		}),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			log.Warn("nats disconnected", "err", err)
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("nats reconnected", "server", nc.ConnectedServerName(), "url", nc.ConnectedUrlRedacted())
		}),
	}
}

// health serves /healthz (the process is alive) and /readyz (the service
// runs, NATS is connected and Redis answered recently).
type health struct {
	ready   atomic.Bool
	waiting atomic.Pointer[string] // what the service waits for, if anything
	nc      atomic.Pointer[nats.Conn]
	redisOK atomic.Int64           // unix nanos of the last successful Redis ping
	maxAge  atomic.Int64           // how old that ping may be, nanos
	stalled atomic.Pointer[string] // why the service makes no progress ("" or nil: it does)
	// full learns from the consume loops while the broker's store is
	// full; restartFull is set while the service waits to start again
	// after a refusal outside them, counted in fullRestarts.
	full         stream.StoreWatch
	restartFull  atomic.Bool
	fullRestarts atomic.Int64
	// redisRefused is why Redis is refused (its eviction policy), "" when
	// it is not; redisFull follows its OOM refusals.
	redisRefused atomic.Pointer[string]
	redisFull    atomic.Pointer[connect.FullWatch]
}

// storeFull reports whether the service waits for room in the broker's
// store.
func (h *health) storeFull() bool {
	full, _, _ := h.full.Full()
	return full || h.restartFull.Load()
}

func (h *health) mux(reg *prometheus.Registry) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if reason := h.notReady(); reason != "" {
			http.Error(w, "not ready: "+reason, http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ready\n")
	})
	return mux
}

// wait records what the service waits for ("" when nothing); /readyz
// names it. Safe on a nil h.
func (h *health) wait(what string) {
	if h != nil {
		h.waiting.Store(&what)
	}
}

func (h *health) notReady() string {
	if w := h.waiting.Load(); w != nil && *w != "" {
		return "waiting for " + *w
	}
	if r := h.redisRefused.Load(); r != nil && *r != "" {
		return "redis refused: " + *r
	}
	if !h.ready.Load() {
		return "service not running"
	}
	if nc := h.nc.Load(); nc == nil || !nc.IsConnected() {
		return "nats not connected"
	}
	if full, since, last := h.full.Full(); full {
		return "the broker's store is full since " + since.UTC().Format(time.RFC3339) + ": waiting for room, nothing acknowledged (" + last + ")"
	}
	if age := time.Duration(time.Now().UnixNano() - h.redisOK.Load()); h.maxAge.Load() > 0 && age > time.Duration(h.maxAge.Load()) {
		return "redis not answering for " + age.Round(time.Second).String()
	}
	if w := h.redisFull.Load(); w != nil {
		if err := w.Full(); err != nil {
			return "redis is full, writes wait until memory is freed: " + err.Error()
		}
	}
	if s := h.stalled.Load(); s != nil && *s != "" {
		return *s
	}
	return ""
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

func envBool(k string, def bool) bool {
	if b, err := strconv.ParseBool(os.Getenv(k)); err == nil {
		return b
	}
	return def
}

func envDuration(k string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(k)); err == nil {
		return d
	}
	return def
}

// consumerRef names one durable consumer a service owns.
type consumerRef struct{ stream, durable string }

// role is what the daemon knows of a service beyond its Runner: the
// consumers it owns and the partitions whose state it reads.
type role struct {
	name      string
	consumers []consumerRef
	// state: partitions whose checkpoint and window index are sampled;
	// perPartition reports them one by one (windower) or summed (publisher).
	state        []int
	perPartition bool
	bucket       string
}

// roleOf mirrors the durable names of pkg/validator, pkg/windower and
// pkg/publisher ("<svc>[-g<gen>]-p<p>", "publisher[-g<gen>]").
func roleOf(name string, n wire.Names, owned []int, partitions int) role {
	base := name
	if n.Generation != wire.DefaultGeneration {
		base += "-g" + n.Generation
	}
	r := role{name: name}
	switch name {
	case "validator", "windower":
		src := wire.Raw
		if name == "windower" {
			src = wire.Valid
			r.state, r.perPartition = owned, true
		}
		for _, p := range owned {
			r.consumers = append(r.consumers, consumerRef{n.Stream(src), wire.Durable(base, p)})
		}
	case "publisher":
		r.consumers = []consumerRef{{n.Stream(wire.Changes), wire.Durable(base, -1)}}
		for p := 0; p < partitions; p++ {
			r.state = append(r.state, p)
		}
		r.bucket = n.Bucket()
	}
	return r
}

// waitTopology waits until the stream the service consumes (and its
// bucket) exists, so services started before the set-up job do not crash
// in a loop. It asks only what the service may ask anyway: its own
// consumer (a missing stream answers "stream not found") and its bucket.
// A server that is away is waited for too; a refusal ends the wait.
func (r role) waitTopology(ctx context.Context, js jetstream.JetStream, w waiter, refused *refusals) error {
	if len(r.consumers) == 0 {
		return nil
	}
	first := r.consumers[0]
	return w.until(ctx, "the streams and buckets (run the set-up job: --ensure-only)", first.stream+" "+r.bucket, func(ctx context.Context) error {
		lookCtx, cancel := refused.context(ctx, 10*time.Second)
		defer cancel()
		_, err := js.Consumer(lookCtx, first.stream, first.durable)
		if err == nil || errors.Is(err, jetstream.ErrConsumerNotFound) {
			err = nil
			if r.bucket != "" {
				_, err = js.KeyValue(lookCtx, r.bucket)
			}
		}
		switch {
		case err == nil:
			return nil
		case errors.Is(err, jetstream.ErrStreamNotFound), errors.Is(err, jetstream.ErrBucketNotFound):
			return fmt.Errorf("%w: %w", connect.ErrNotYet, err)
		}
		return refused.or(fmt.Errorf("look up %s/%s: %w", first.stream, first.durable, err))
	})
}
