package daemon

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

	"github.com/receiptflow/receiptflow/pkg/buildinfo"
	"github.com/receiptflow/receiptflow/pkg/config"
	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/failpoint"
	"github.com/receiptflow/receiptflow/pkg/ledger"
	"github.com/receiptflow/receiptflow/pkg/probe"
	"github.com/receiptflow/receiptflow/pkg/service"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// Deps is what a service needs, built by Main from the flags.
type Deps struct {
	Common config.Common
	Names  wire.Names
	Owned  []int
	// Epochs are the owned partitions' fencing tokens (service.Deps.Epochs):
	// their lease epochs in group mode, --fence-epoch in static mode (nil:
	// not fenced).
	Epochs map[int]uint64
	NATS   *connect.Conn
	// Redis is the client Store uses (a *redis.ClusterClient with
	// --redis-cluster).
	Redis      redis.UniversalClient
	Store      *ledger.Store
	Validator  *contract.Validator
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	Failpoints *failpoint.Set

	name string // the service's
}

// Runner is a service: Run blocks until ctx ends or the service fails.
type Runner = service.Runner

// Service returns the dependencies service.Build wires a service from.
func (d *Deps) Service() service.Deps {
	return service.Deps{
		Params: service.ParamsOf(&d.Common), Names: d.Names, Owned: d.Owned, Epochs: d.Epochs,
		JS: d.NATS.JS, Redis: d.Redis, Validator: d.Validator,
		Logger: d.Logger, Registerer: d.Registerer, Failpoints: d.Failpoints,
	}
}

// Build is Main's build for the pipeline's services: service.Build of the
// service Main runs.
func Build(d *Deps) (Runner, error) { return service.Build(d.name, d.Service()) }

// Main parses args, connects, builds the service with build and runs it
// until ctx ends. It returns the process exit code: 0 also when ctx ends
// while it waits for a server. An unreachable or loading NATS or Redis is
// waited for (connect.WaitFor), never a reason to exit; only refusals
// (credentials, certificates, permissions) and errors that are not about a
// lost connection end it with 1. When the service's Run fails because a
// connection was lost, Main waits for both servers and calls build again
// (the collectors the previous value registered on Deps.Registerer are
// unregistered first), as a supervisor would restart the process. Secrets
// (passwords, credentials in URLs) never reach the log. --version prints
// buildinfo.String to os.Stdout and returns 0.
// Main leaves the calling process's GOMAXPROCS alone (tests run services
// in-process); Command is Main for a service's own process.
func Main(ctx context.Context, name string, args []string, stderr io.Writer, build func(*Deps) (Runner, error)) int {
	return mainTo(ctx, name, args, os.Stdout, stderr, build, false)
}

// Command is Main for a service's own process: it also sets the
// process's GOMAXPROCS from --procs (one thread by default).
func Command(ctx context.Context, name string, args []string, stderr io.Writer, build func(*Deps) (Runner, error)) int {
	return mainTo(ctx, name, args, os.Stdout, stderr, build, true)
}

// MainTo is Main with --version written to stdout.
func MainTo(ctx context.Context, name string, args []string, stdout, stderr io.Writer, build func(*Deps) (Runner, error)) int {
	return mainTo(ctx, name, args, stdout, stderr, build, false)
}

func mainTo(ctx context.Context, name string, args []string, stdout, stderr io.Writer, build func(*Deps) (Runner, error), own bool) int {
	log := slog.New(slog.NewJSONHandler(stderr, nil)).With("service", name)
	if err := run(ctx, name, args, log, build, own); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		if errors.Is(err, errVersion) {
			fmt.Fprintln(stdout, buildinfo.String(name))
			return 0
		}
		log.Error("service stopped", "err", err)
		return 1
	}
	return 0
}

// process is one service process between its flags and its exit.
type process struct {
	name     string
	c        config.Common
	o        options
	log      *slog.Logger
	d        *Deps
	h        *health
	w        waiter
	port     *probe.Port
	reg      *prometheus.Registry
	refused  *refusals
	natsOpts []nats.Option
	topology stream.Config
	role     role
	// roles is the role of the partitions owned now, which the stats
	// follow (it changes in group mode).
	roles atomic.Pointer[role]
}

func run(ctx context.Context, name string, args []string, log *slog.Logger, build func(*Deps) (Runner, error), own bool) error {
	c, o, err := parse(name, args)
	if err != nil {
		return err
	}
	if own {
		o.procs.Apply()
	}
	natsOpts, err := o.natsSec.Options()
	if err != nil {
		return err
	}
	p := &process{name: name, c: c, o: o, log: log, refused: newRefusals(), topology: c.Topology(o.replicas),
		d: &Deps{Common: c, Names: wire.For(c.Generation), Logger: log, name: name}}
	p.natsOpts = append(natsOpts, natsEvents(log, p.refused)...)
	if o.ensureOnly {
		return p.ensureOnly(ctx)
	}
	if o.profileDir != "" {
		stop, err := probe.StartProfiles(o.profileDir, profileBase(name, o.instance, o.instances))
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
	if err := p.prepare(); err != nil {
		return err
	}
	if connected, err := p.connect(ctx); !connected {
		return err
	}
	runErr := p.supervise(ctx, build)
	p.shutdown()
	if ctx.Err() != nil {
		runErr = nil // stopped by SIGTERM, also in the middle of a wait
	}
	if runErr != nil {
		return runErr
	}
	log.Info("service stopped cleanly")
	return nil
}

// ensureOnly is the set-up job: create or update the streams and buckets,
// then return.
func (p *process) ensureOnly(ctx context.Context) error {
	c, log := p.c, p.log
	conn, err := waiter{log: log, dialer: p.o.dialer}.connectNATS(ctx, c.NATSURL, "receiptflow-"+p.name+"-setup", p.natsOpts)
	if err != nil {
		return stopped(ctx, log, err)
	}
	defer conn.NC.Drain()
	// A cluster electing leaders answers "temporarily unavailable":
	// waited out (connect.Transient) for up to a minute.
	setupCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := (waiter{log: log}).adopt(setupCtx, conn.JS, &p.c, p.o.explicit, p.refused); err != nil {
		return err
	}
	c = p.c
	p.topology = c.Topology(p.o.replicas)
	if err := p.ensure(setupCtx, waiter{log: log}, conn); err != nil {
		return err
	}
	log.Info("streams and buckets ensured", "generation", c.Generation, "partitions", c.Partitions, "replicas", p.o.replicas,
		"nats", connect.RedactURL(c.NATSURL), "nats_auth", p.o.natsSec)
	return nil
}

// ensure creates or updates the streams and buckets, waiting out a server
// that is away; a refusal ends the wait.
func (p *process) ensure(ctx context.Context, w waiter, conn *connect.Conn) error {
	return w.until(ctx, "the streams and buckets to be created", "nats", func(ctx context.Context) error {
		ctx, cancel := p.refused.context(ctx, 30*time.Second)
		defer cancel()
		return p.refused.or(stream.Ensure(ctx, conn.JS, p.d.Names, p.topology))
	})
}

// prepare builds what needs no server: partitions, failpoints, the
// registry and the record validator.
func (p *process) prepare() (err error) {
	d, c, o := p.d, p.c, p.o
	if d.Owned, err = config.ParseOwned(o.owned, c.Partitions); err != nil {
		return err
	}
	if d.Owned == nil && !o.group {
		d.Owned = config.Split(c.Partitions, o.instance, o.instances)
	}
	if o.fenceEpoch > 0 {
		d.Epochs = map[int]uint64{}
		for _, q := range d.Owned {
			d.Epochs[q] = o.fenceEpoch
		}
	}
	if d.Failpoints, err = failpoint.Parse(c.Failpoints, failpoint.Process); err != nil {
		return err
	}
	p.reg = prometheus.NewRegistry()
	p.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	d.Registerer = p.reg
	d.Validator, err = contract.NewValidator(c.Contract())
	return err
}

// connect opens the HTTP port, then waits for NATS and Redis (docs/spec.md
// §4: an unreachable or loading server is waited for with backoff while
// /readyz says so; only a refusal or SIGTERM ends the wait), creates the
// streams (--ensure-streams) and waits for the service's own. When it does
// not connect, everything it opened is closed again and err is run's
// (nil when ctx ended during a wait).
func (p *process) connect(ctx context.Context) (connected bool, err error) {
	c, d, log := p.c, p.d, p.log
	p.h = &health{}
	p.h.wait("nats at " + connect.RedactURL(c.NATSURL))
	if p.port, err = probe.Listen(p.o.httpAddr, p.h.notReady); err != nil {
		return false, probe.ListenHint("--http-addr", p.o.httpAddr, err)
	}
	p.port.Metrics(p.reg)
	if p.name == service.Validator || p.name == service.Windower {
		p.port.Detail(p.h.detail)
	}
	log.Info("http listening", "addr", p.port.Addr(), "procs", runtime.GOMAXPROCS(0))
	log.Info("connecting", "nats", connect.RedactURL(c.NATSURL), "nats_auth", p.o.natsSec,
		"redis", connect.RedactURL(c.RedisURL), "redis_auth", p.o.redisSec)
	p.w = waiter{log: log, h: p.h, dialer: p.o.dialer}
	if d.NATS, err = p.w.connectNATS(ctx, c.NATSURL, "receiptflow-"+p.name, p.natsOpts); err != nil {
		p.port.Close()
		return false, stopped(ctx, log, err)
	}
	p.h.nc.Store(d.NATS.NC)
	// The deployment's recorded parameters (docs/architecture.md) win
	// over flags not given; a flag given with another value is refused.
	if err := p.adopt(ctx); err != nil {
		d.NATS.Close()
		p.port.Close()
		return false, stopped(ctx, log, err)
	}
	c = p.c
	if d.Redis, err = connect.ConnectRedisSecure(c.RedisURL, p.o.redisSec); err != nil {
		d.NATS.Close()
		p.port.Close()
		return false, err
	}
	if err := p.w.until(ctx, "redis", connect.RedactURL(c.RedisURL), p.pingRedis); err != nil {
		p.shutdown()
		return false, stopped(ctx, log, fmt.Errorf("redis %s: %w", connect.RedactURL(c.RedisURL), err))
	}
	p.h.redisOK.Store(time.Now().UnixNano())
	if p.o.ensure {
		if err := p.ensure(ctx, p.w, d.NATS); err != nil {
			p.shutdown()
			if ctx.Err() != nil {
				return false, stopped(ctx, log, err)
			}
			return false, ensureFailed(err)
		}
	}
	p.role = roleOf(p.name, d.Names, p.topologyOwned(), c.Partitions)
	if err := p.role.waitTopology(ctx, d.NATS.JS, p.w, p.refused); err != nil {
		p.shutdown()
		return false, stopped(ctx, log, err)
	}
	if !p.o.ensure { // the set-up job may have recorded the parameters meanwhile
		if err := p.adopt(ctx); err != nil {
			p.shutdown()
			return false, stopped(ctx, log, err)
		}
		c = p.c
		p.role = roleOf(p.name, d.Names, p.topologyOwned(), c.Partitions)
	}
	d.Store = service.NewStore(d.Redis, d.Names, service.ParamsOf(&c))
	return true, nil
}

// adopt reads the deployment's parameters into p.c and what derives from
// them (Deps.configure, the topology).
func (p *process) adopt(ctx context.Context) error {
	if err := p.d.adopt(ctx, p.w, &p.c, p.o, p.o.explicit, p.refused); err != nil {
		return err
	}
	p.topology = p.c.Topology(p.o.replicas)
	return nil
}

// topologyOwned is the partitions whose consumers connect waits for: all
// of them in group mode (any may come to this instance), else the owned.
func (p *process) topologyOwned() []int {
	if !p.o.group {
		return p.d.Owned
	}
	all := make([]int, p.c.Partitions)
	for i := range all {
		all[i] = i
	}
	return all
}

func (p *process) pingRedis(ctx context.Context) error { return pingRedis(ctx, p.d.Redis) }

// shutdown is the ordered end: the service has stopped taking input and
// finished its batch; drain the connection, close Redis, stop HTTP.
func (p *process) shutdown() {
	p.h.ready.Store(false)
	if err := p.d.NATS.NC.Drain(); err != nil {
		p.log.Warn("nats drain", "err", err)
	}
	p.d.Redis.Close()
	p.port.Shutdown(10 * time.Second)
}

// supervise builds the service and runs it until ctx ends or it fails for
// good, sampling stats meanwhile; it returns the service's last error. In
// group mode it first joins the kind's group, builds the service over the
// partitions the group holds, and builds it again whenever they change
// (the service stops cleanly first, then the partitions to hand over are
// released); at the end it releases every lease.
func (p *process) supervise(ctx context.Context, build func(*Deps) (Runner, error)) error {
	// Each start of the service gets a fresh value built against the
	// same connections; the collectors the previous one registered are
	// unregistered first.
	svcReg := &ownedRegisterer{Registerer: p.reg}
	p.d.Registerer = svcReg
	var gs *groups
	if p.o.group {
		var err error
		if gs, err = p.joinGroup(ctx); err != nil {
			return err
		}
		defer gs.leave(p)
		p.takeOwned(gs)
	} else {
		p.setOwned(p.d.Owned)
	}
	svc, err := p.build(gs, build)
	if err != nil {
		return err
	}
	// Redis must not evict (docs/spec.md §4): its policy is read before
	// every start of the service and at every stats sample.
	guard := newRedisGuard(p.name, p.d.Redis, p.h, p.reg, p.log)
	statsCtx, stopStats := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		st := newStats(p.name, p.role, p.d, p.h, guard, p.reg, p.log)
		st.roles = &p.roles
		st.stallAfter = p.o.stallAfter
		st.loop(statsCtx, p.o.statsEvery)
	}()
	defer func() { stopStats(); wg.Wait() }()

	restarts := service.NewRestarts()
	for {
		if err := guard.waitSafe(ctx); err != nil {
			return err
		}
		began := time.Now()
		runCtx, cancelRun := context.WithCancelCause(ctx)
		gs.watchOwnership(runCtx, cancelRun, p.d.Owned)
		next, runErr := p.runOnce(runCtx, svc, guard)
		reassigned := errors.Is(context.Cause(runCtx), errReassigned)
		cancelRun(nil)
		if gs != nil && ctx.Err() == nil && (reassigned || lostPartition(runErr)) {
			if !reassigned {
				p.log.Warn("a later owner holds a partition: reading the leases again", "err", runErr)
			}
			gs.handOver(ctx, p)
			next = rebuild
		}
		switch next {
		case stop:
			return runErr
		case restart:
			if err := p.waitServers(ctx, restarts.Next(time.Since(began), runErr), runErr); err != nil {
				return err
			}
		}
		svcReg.reset()
		if gs != nil {
			p.takeOwned(gs)
		}
		if svc, err = p.build(gs, build); err != nil {
			return err
		}
	}
}

// build builds the service over Deps.Owned; a group member that owns
// nothing runs idle until its partitions change.
func (p *process) build(gs *groups, build func(*Deps) (Runner, error)) (Runner, error) {
	if gs != nil && len(p.d.Owned) == 0 {
		return idle{}, nil
	}
	return build(p.d)
}

// What supervise does after the service stopped.
type afterStop int

const (
	stop    afterStop = iota // return the service's error
	rebuild                  // build and start it again at once (after Redis is safe)
	restart                  // pause, wait for the servers, then build and start it again
)

// runOnce runs svc once and says what comes next: rebuild when it stopped
// because Redis may now evict, restart for a full broker store or a lost
// connection, else stop.
func (p *process) runOnce(ctx context.Context, svc Runner, guard *redisGuard) (afterStop, error) {
	h, c := p.h, p.c
	h.wait("")
	h.ready.Store(true)
	p.log.Info("service started", "partitions", c.Partitions, "owned", p.d.Owned, "generation", c.Generation)
	h.restartFull.Store(false)
	runCtx, done := guard.running(stream.WithStoreWatch(ctx, &h.full))
	runErr := svc.Run(runCtx)
	unsafe := errors.Is(context.Cause(runCtx), errUnsafeRedis)
	done()
	h.ready.Store(false)
	if unsafe && ctx.Err() == nil {
		// Stopped because Redis may now evict: wait for a safe policy
		// (supervise's loop top), then start a fresh service.
		p.log.Warn("service stopped: redis may evict keys", "cause", context.Cause(runCtx))
		return rebuild, runErr
	}
	storeFull := stream.StoreFull(runErr) && ctx.Err() == nil
	h.restartFull.Store(storeFull)
	if storeFull {
		// A write the broker refused for a full store outside the consume
		// loop (the publisher's first pass): wait for room as for a
		// server, and start again (docs/spec.md §4).
		h.fullRestarts.Add(1)
		p.log.Warn("the broker's store is full: waiting for room and starting the service again", "err", runErr)
		return restart, runErr
	}
	if errors.Is(runErr, ledger.ErrFenced) && ctx.Err() == nil && !p.o.group {
		// A later owner holds a partition: this instance changes nothing
		// more there. Static mode has no lease to read again: it stays up,
		// not ready, serving /metrics, until it is stopped. (A group
		// member reads its leases again: supervise.)
		p.log.Error("fenced: a later owner holds a partition; this instance processes nothing more until it is stopped", "err", runErr)
		h.wait("SIGTERM: fenced by a later owner, this instance processes nothing more (" + runErr.Error() + ")")
		<-ctx.Done()
		return stop, nil
	}
	if runErr == nil || ctx.Err() != nil || !p.w.connectionLost(ctx, runErr, p.d) {
		return stop, runErr
	}
	return restart, runErr
}

// waitServers pauses, then waits until both servers answer, after the
// service stopped with runErr (docs/spec.md §4: never exit for a lost
// connection), as a supervisor would before restarting the process.
func (p *process) waitServers(ctx context.Context, pause time.Duration, runErr error) error {
	if p.h.restartFull.Load() {
		p.h.wait("room in the broker's store (it is full): " + runErr.Error())
	} else {
		p.log.Warn("service stopped on a connection error; waiting for the servers and starting it again", "err", runErr, "after", pause)
		p.h.wait("the servers after: " + runErr.Error())
	}
	_ = stream.Pause(ctx, pause) // an ended ctx ends the wait below
	if err := p.w.until(ctx, "nats", connect.RedactURL(p.c.NATSURL), func(context.Context) error { return natsUp(p.d.NATS.NC) }); err != nil {
		return err
	}
	return p.w.until(ctx, "redis", connect.RedactURL(p.c.RedisURL), p.pingRedis)
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
