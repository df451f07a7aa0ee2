// Package pipeline runs the whole receiptflow pipeline in one process, as
// `receiptctl run`, `demo` and `rebuild` do and as the end-to-end tests
// do: it starts the embedded servers when no URLs are given, creates the
// streams, and supervises one instance of each service (wired by
// service.Build), restarting an instance that stopped (a failpoint crash,
// a lost connection) with fresh connections after the pause of
// service.Restarts. It also reads what its services wrote (windows, LATE,
// REJECTED) and their consumers' backlog, which it exports as a service
// process does (Config.Registerer). The bounded run with its artifacts is
// pkg/boundedrun.
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/receiptflow/receiptflow/pkg/config"
	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/embedded"
	"github.com/receiptflow/receiptflow/pkg/failpoint"
	"github.com/receiptflow/receiptflow/pkg/ledger"
	"github.com/receiptflow/receiptflow/pkg/service"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/windower"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// Config configures a pipeline.
type Config struct {
	Partitions int
	// HotKeys spreads declared busy partition keys over several
	// partitions (window.Route), in ingest and the validator alike.
	HotKeys    window.HotKeys
	Lateness   time.Duration
	Grace      time.Duration
	StaleAfter time.Duration
	// Contract configures the record validator (contract.Config; the
	// zero value is the contract's defaults).
	Contract contract.Config
	// NATSURL and RedisURL select real servers; empty starts embedded ones.
	NATSURL  string
	RedisURL string
	// DataDir holds the embedded nats-server's store (default: a new
	// temporary directory, removed by Close).
	DataDir string
	// SyncAlways makes the embedded nats-server fsync every write (see
	// docs/recovery.md for the trade-off).
	SyncAlways bool
	Generation string
	Stream     stream.Config
	Failpoints *failpoint.Set
	Logger     *slog.Logger
	// Registerer receives the services' metrics and, sampled every
	// StatsEvery (0: service.DefaultStatsEvery), their consumers' backlog
	// gauges, as a service process exports them (nil: none).
	Registerer prometheus.Registerer
	StatsEvery time.Duration
	// Trace receives the windower's decisions (see windower.Config.Trace).
	Trace func(p int, recs []windower.Trace)
	// Services selects which services to run (default all three).
	Services []string
	// ReplayHorizon is the windower's retirement horizon (0: keep all).
	ReplayHorizon time.Duration
	// SourceIdle is docs/spec.md §3.1's --source-idle (0: its default).
	SourceIdle time.Duration
	// PublisherTick is the publisher's health period (default 1s).
	PublisherTick time.Duration
	// WindowRetention and DayRetention are the publisher's retentions
	// of window snapshots and day rollups (publisher.Config; 0: the
	// defaults), HistoryEvery its history pass period; KeepHistory turns
	// pruning off (Run sets it: a bounded run's artifacts and parity need
	// every window of its input).
	WindowRetention, DayRetention time.Duration
	HistoryEvery                  time.Duration
	KeepHistory                   bool
	// Waits are the hops' waits (config.WaitsFor; zero: those of
	// config.DefaultLatencyBudget).
	Waits config.Waits
}

// Service names (service.Build's).
const (
	Validator = service.Validator
	Windower  = service.Windower
	Publisher = service.Publisher
)

// Pipeline is a running in-process pipeline.
type Pipeline struct {
	cfg       Config
	Names     wire.Names
	NATSURL   string
	RedisURL  string
	Admin     *connect.Conn
	Redis     *redis.Client
	Store     *ledger.Store
	Validator *contract.Validator

	ns      *server.Server
	mr      *miniredis.Miniredis
	tmpDir  string
	dataDir string
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	mu      sync.Mutex
	crashes map[string]int
}

// Start starts the servers (if embedded), creates the streams and starts
// the services. Close stops everything.
func Start(ctx context.Context, cfg Config) (p *Pipeline, err error) {
	d := config.Defaults()
	if cfg.Partitions <= 0 {
		cfg.Partitions = d.Partitions
	}
	if cfg.Lateness <= 0 {
		cfg.Lateness = d.Lateness
	}
	if cfg.Grace <= 0 {
		cfg.Grace = d.Grace
	}
	if cfg.StaleAfter <= 0 {
		cfg.StaleAfter = 2 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Waits == (config.Waits{}) {
		cfg.Waits = config.WaitsFor(config.DefaultLatencyBudget)
	}
	if cfg.Services == nil {
		cfg.Services = []string{Validator, Windower, Publisher}
	}
	cfg.Stream.Partitions = cfg.Partitions
	p = &Pipeline{cfg: cfg, Names: wire.For(cfg.Generation), NATSURL: cfg.NATSURL, RedisURL: cfg.RedisURL, crashes: map[string]int{}}
	started := p // the error returns below set p to nil
	defer func() {
		if err != nil {
			started.Close()
		}
	}()
	if p.NATSURL == "" {
		dir := cfg.DataDir
		if dir == "" {
			p.tmpDir, err = os.MkdirTemp("", "receiptflow-")
			if err != nil {
				return nil, err
			}
			dir = p.tmpDir
		}
		p.dataDir = dir
		p.ns, err = embedded.StartNATS(embedded.NATSConfig{StoreDir: filepath.Join(dir, "jetstream"), SyncAlways: cfg.SyncAlways})
		if err != nil {
			return nil, err
		}
		p.NATSURL = embedded.ClientURL(p.ns)
	}
	if p.RedisURL == "" {
		p.mr, err = embedded.StartRedis()
		if err != nil {
			return nil, err
		}
		p.RedisURL = "redis://" + p.mr.Addr()
	}
	if p.Admin, err = connect.ConnectNATS(p.NATSURL, "receiptflow-admin"); err != nil {
		return nil, err
	}
	if p.Redis, err = connect.ConnectRedis(p.RedisURL); err != nil {
		return nil, err
	}
	if err := p.Redis.Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("pipeline: redis %s: %w", p.RedisURL, err)
	}
	// A given Redis must not evict (docs/spec.md §4). The embedded
	// miniredis never evicts and answers neither INFO memory nor CONFIG.
	if p.mr == nil {
		m, err := connect.ReadRedisMemory(ctx, p.Redis)
		if err == nil {
			err = connect.CheckEviction(m)
		}
		if err != nil {
			return nil, fmt.Errorf("pipeline: redis %s: %w", connect.RedactURL(p.RedisURL), err)
		}
	}
	if err := stream.Ensure(ctx, p.Admin.JS, p.Names, cfg.Stream); err != nil {
		return nil, err
	}
	p.Store = service.NewStore(p.Redis, p.Names, cfg.params())
	if p.Validator, err = contract.NewValidator(cfg.Contract); err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	for _, svc := range cfg.Services {
		p.wg.Add(1)
		go p.supervise(runCtx, svc)
	}
	if cfg.Registerer != nil {
		p.wg.Add(1)
		go p.sampleBacklog(runCtx)
	}
	return p, nil
}

// Config returns the pipeline's configuration (with defaults applied).
func (p *Pipeline) Config() Config { return p.cfg }

// DataDir is the directory of the embedded nats-server's store (Config's
// DataDir, or the temporary one made for it; removed by Close), or "" when
// the pipeline runs against a given NATS URL.
func (p *Pipeline) DataDir() string { return p.dataDir }

// Crashes returns how often each service instance died and was restarted.
func (p *Pipeline) Crashes() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int{}
	for k, v := range p.crashes {
		out[k] = v
	}
	return out
}

// supervise runs svc until ctx ends, each instance with its own
// connections; an instance that returns (crash or error) is torn down
// without acking anything and replaced after the pause of
// service.Restarts.
func (p *Pipeline) supervise(ctx context.Context, svc string) {
	defer p.wg.Done()
	restarts := service.NewRestarts()
	for ctx.Err() == nil {
		began := time.Now()
		err := p.runOnce(ctx, svc)
		if ctx.Err() != nil {
			return
		}
		p.mu.Lock()
		p.crashes[svc]++
		p.mu.Unlock()
		if errors.Is(err, failpoint.ErrCrash) {
			p.cfg.Logger.Info("service crashed on purpose; restarting", "service", svc, "err", err)
		} else {
			p.cfg.Logger.Error("service failed; restarting", "service", svc, "err", err)
		}
		if stream.Pause(ctx, restarts.Next(time.Since(began), err)) != nil {
			return
		}
	}
}

// sampleBacklog sets the backlog gauges of every service's consumers
// (service.BacklogGauges) every StatsEvery until ctx ends.
func (p *Pipeline) sampleBacklog(ctx context.Context) {
	defer p.wg.Done()
	every := p.cfg.StatsEvery
	if every <= 0 {
		every = service.DefaultStatsEvery
	}
	owned := make([]int, p.cfg.Partitions)
	for i := range owned {
		owned[i] = i
	}
	gauges := make([]*service.BacklogGauges, len(p.cfg.Services))
	for i, svc := range p.cfg.Services {
		gauges[i] = service.NewBacklogGauges(svc, p.cfg.Registerer)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		for i, svc := range p.cfg.Services {
			// An error (a server restarting) leaves the last values; the
			// next sample tries again.
			sctx, cancel := context.WithTimeout(ctx, every)
			_ = gauges[i].Sample(sctx, p.Admin.JS, service.Consumers(svc, p.Names, owned))
			cancel()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// params are the parameters the pipeline's services run with.
func (c *Config) params() service.Params {
	return service.Params{
		Partitions: c.Partitions, HotKeys: c.HotKeys, Lateness: c.Lateness, Grace: c.Grace,
		ReplayHorizon: c.ReplayHorizon, SourceIdle: c.SourceIdle, StaleAfter: c.StaleAfter,
		WindowRetention: c.WindowRetention, DayRetention: c.DayRetention, Waits: c.Waits,
	}
}

// runOnce runs one instance of svc with fresh connections until it stops.
func (p *Pipeline) runOnce(ctx context.Context, svc string) error {
	conn, err := connect.ConnectNATS(p.NATSURL, "receiptflow-"+svc)
	if err != nil {
		return err
	}
	defer conn.Close()
	rdb, err := connect.ConnectRedis(p.RedisURL)
	if err != nil {
		return err
	}
	defer rdb.Close()
	run, err := service.Build(svc, service.Deps{
		Params: p.cfg.params(), Names: p.Names, JS: conn.JS, Redis: rdb, Validator: p.Validator,
		Logger: p.cfg.Logger.With("service", svc), Registerer: p.cfg.Registerer, Failpoints: p.cfg.Failpoints,
		Trace: p.cfg.Trace, PublisherTick: p.cfg.PublisherTick, HistoryEvery: p.cfg.HistoryEvery, KeepHistory: p.cfg.KeepHistory,
	})
	if err != nil {
		return fmt.Errorf("pipeline: %w", err)
	}
	return run.Run(ctx)
}

// Backlog returns every consumer's unprocessed messages (pending plus
// unacknowledged) of the pipeline's streams, and whether every expected
// consumer exists.
func (p *Pipeline) Backlog(ctx context.Context) (map[string]uint64, bool, error) {
	return Backlog(ctx, p.Admin.JS, p.Names, p.cfg.Services, p.cfg.Partitions)
}

// Consumer is what one consumer of a generation's services has done.
type Consumer struct {
	// AckFloor is the last stream sequence acknowledged with everything
	// before it; it only moves when the consumer processed something.
	AckFloor uint64
	// Backlog is its unprocessed messages: pending plus unacknowledged.
	Backlog uint64
}

// Consumers returns every consumer of generation n's services by
// "STREAM/consumer" (validator and windower: one per partition;
// publisher: one).
func Consumers(ctx context.Context, js jetstream.JetStream, n wire.Names) (map[string]Consumer, error) {
	out := map[string]Consumer{}
	for _, base := range []string{wire.Raw, wire.Valid, wire.Changes} {
		st, err := js.Stream(ctx, n.Stream(base))
		if err != nil {
			return nil, err
		}
		l := st.ListConsumers(ctx)
		for ci := range l.Info() {
			if !n.OwnsConsumer(ci.Name) {
				continue // another generation's consumer of RAW
			}
			out[ci.Stream+"/"+ci.Name] = Consumer{AckFloor: ci.AckFloor.Stream, Backlog: ci.NumPending + uint64(ci.NumAckPending)}
		}
		if err := l.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Expected returns how many consumers services run: validator and
// windower one per partition, publisher one.
func Expected(services []string, partitions int) map[string]int {
	want := map[string]int{}
	for _, svc := range services {
		if svc == Publisher {
			want[svc] = 1
		} else {
			want[svc] = partitions
		}
	}
	return want
}

// Backlog returns the unprocessed messages of every consumer that services
// of generation n run, and whether all of them exist yet.
func Backlog(ctx context.Context, js jetstream.JetStream, n wire.Names, services []string, partitions int) (map[string]uint64, bool, error) {
	cs, err := Consumers(ctx, js, n)
	if err != nil {
		return nil, false, err
	}
	out := map[string]uint64{}
	for k, c := range cs {
		out[k] = c.Backlog
	}
	want := 0
	for _, n := range Expected(services, partitions) {
		want += n
	}
	return out, len(out) >= want, nil
}

// WaitDrained waits until every consumer of generation n's services has
// processed everything (checked three times in a row).
func WaitDrained(ctx context.Context, js jetstream.JetStream, n wire.Names, services []string, partitions int) error {
	return waitDrained(ctx, func(ctx context.Context) (map[string]uint64, bool, error) {
		return Backlog(ctx, js, n, services, partitions)
	}, nil)
}

// WaitDrained waits until every consumer has processed everything in its
// stream (checked three times in a row), so that KV holds the final state
// of everything published before the call. progress, if set, sees every
// backlog read.
func (p *Pipeline) WaitDrained(ctx context.Context, progress func(map[string]uint64)) error {
	return waitDrained(ctx, p.Backlog, progress)
}

// waitDrained polls backlog every 50ms until it is complete and empty
// three times in a row, or ctx ends.
func waitDrained(ctx context.Context, backlog func(context.Context) (map[string]uint64, bool, error), progress func(map[string]uint64)) error {
	quiet := 0
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		b, complete, err := backlog(ctx)
		if err != nil {
			quiet = 0
			continue // e.g. the server restarting; try again
		}
		if progress != nil {
			progress(b)
		}
		var total uint64
		for _, v := range b {
			total += v
		}
		if complete && total == 0 {
			if quiet++; quiet >= 3 {
				return nil
			}
		} else {
			quiet = 0
		}
	}
}

// KV returns the generation's snapshot bucket.
func (p *Pipeline) KV(ctx context.Context) (jetstream.KeyValue, error) {
	return p.Admin.JS.KeyValue(ctx, p.Names.Bucket())
}

// Close stops the services, then the connections and embedded servers.
func (p *Pipeline) Close() {
	if p.cancel != nil {
		p.cancel()
	}
	p.wg.Wait()
	if p.Admin != nil {
		p.Admin.Close()
	}
	if p.Redis != nil {
		p.Redis.Close()
	}
	if p.ns != nil {
		p.ns.Shutdown()
		p.ns.WaitForShutdown()
	}
	if p.mr != nil {
		p.mr.Close()
	}
	if p.tmpDir != "" {
		os.RemoveAll(p.tmpDir)
	}
}
