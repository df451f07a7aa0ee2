// Package bench is receiptflow's performance bench (make bench): in one
// run on one machine it measures raw JetStream (B0), the whole pipeline
// end to end, latency at half load, Redis memory per event id, the
// services' peak RSS, the batch pass against a Python reference, the cost
// of duplicates, a skewed key, windower scaling and the hand-over of a
// stopped windower's partitions in a lease group, prints a table and
// writes bench-results.json. Everything runs on loopback: an embedded
// nats-server on a file store, a redis-server child process and the
// services as processes from the bin directory (or in-process).
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/receiptflow/receiptflow/pkg/config"
	"github.com/receiptflow/receiptflow/pkg/window"
)

// Scenario names, for Options.Only and Options.Profile.
const (
	ScenarioB0      = "b0"
	ScenarioE2E     = "e2e"
	ScenarioLatency = "latency"
	ScenarioBatch   = "batch"
	ScenarioDup     = "dup"
	ScenarioSkew    = "skew"
	// SkewSplit is how many partitions the skew scenario's split run
	// spreads the hot key over.
	SkewSplit     = 4
	ScenarioScale = "scale"
	// ScenarioHandover: two windowers as a lease group, one stopped by
	// SIGTERM, then (another run) by SIGKILL, at most HandoverRecords.
	ScenarioHandover = "handover"
)

// Scenarios lists every scenario in the order a run performs them.
var Scenarios = []string{ScenarioB0, ScenarioE2E, ScenarioLatency, ScenarioBatch, ScenarioDup, ScenarioSkew, ScenarioScale, ScenarioHandover, ScenarioDoor, ScenarioIdle, ScenarioCluster}

// Options configure a bench run.
type Options struct {
	// Events is the number of records of every dataset (default 1,000,000;
	// Quick: 20,000).
	Events int
	// Quick shrinks the run for a smoke test.
	Quick bool
	// Partitions is P (default 8).
	Partitions int
	// Mode is ModeProcess (default) or ModeInProcess.
	Mode string
	// BinDir holds validator, windower, publisher and receiptctl
	// (ModeProcess; make build writes them to bin/).
	BinDir string
	// Work is the scratch directory (default: a new temporary directory,
	// removed at the end).
	Work string
	// Redis is the redis-server binary (default: redis-server on PATH).
	Redis string
	// Python is the python3 binary (default: python3 on PATH).
	Python string
	// LatencyFor is how long the latency run publishes (default 15 s;
	// Quick: 2 s).
	LatencyFor time.Duration
	// LatencyLoad is the latency run's rate as a share of the E2E run's
	// (default 0.5, the half load the p99 target is set at; at most 1).
	// Other loads show how much of the latency is load and how much the
	// pipeline's own waits and round trips.
	LatencyLoad float64
	// LatencyBudget is the --latency-budget every service is given, and
	// the bench's ingest lingers as that budget says (default
	// config.DefaultLatencyBudget). Pairs of runs at two budgets show
	// what the waits it configures cost in latency and CPU.
	LatencyBudget time.Duration
	// Windowers are the instance counts of the scaling runs (default 1, 2,
	// 4; the 1-instance figure is the E2E run itself).
	Windowers []int
	// Only runs just these scenarios (default all); rows of the others are
	// printed as skipped.
	Only []string
	// DoorRuns are the front door's producer runs (default all of
	// DoorRunNames); the half-load and memory runs follow http-100.
	DoorRuns []string
	// CPUProfile and MemProfile, when set, receive a CPU profile and an
	// allocation profile of the Profile scenario (MemProfile+".base" holds
	// the allocations before it, for pprof -base).
	CPUProfile, MemProfile string
	Profile                string
	// ProfileDir, when set, receives the profiles of every process of the
	// Profile scenario: the bench's own (bench.cpu.pprof and
	// bench.allocs.pprof, unless CPUProfile or MemProfile say otherwise)
	// and, in ModeProcess, each service's (--profile-dir
	// ProfileDir/<run>/, written when the bench stops it).
	ProfileDir string
	// Out receives the table, Log the progress lines.
	Out, Log io.Writer
}

func (o *Options) defaults() error {
	if o.Events <= 0 {
		o.Events = 1_000_000
		if o.Quick {
			o.Events = 20_000
		}
	}
	if o.Partitions <= 0 {
		o.Partitions = config.Defaults().Partitions
	}
	if o.Partitions > 255 {
		return errors.New("bench: at most 255 partitions")
	}
	if o.Mode == "" {
		o.Mode = ModeProcess
	}
	if o.Mode != ModeProcess && o.Mode != ModeInProcess {
		return fmt.Errorf("bench: unknown mode %q", o.Mode)
	}
	if o.LatencyFor <= 0 {
		o.LatencyFor = 15 * time.Second
		if o.Quick {
			o.LatencyFor = 2 * time.Second
		}
	}
	switch {
	case o.LatencyLoad == 0:
		o.LatencyLoad = 0.5
	case o.LatencyLoad < 0 || o.LatencyLoad > 1 || math.IsNaN(o.LatencyLoad):
		return fmt.Errorf("bench: latency load %v: want a share of the E2E rate in (0, 1]", o.LatencyLoad)
	}
	switch {
	case o.LatencyBudget == 0:
		o.LatencyBudget = config.DefaultLatencyBudget
	case o.LatencyBudget < 0 || o.LatencyBudget > config.MaxLatencyBudget:
		return fmt.Errorf("bench: latency budget %s: want more than 0 and at most %s", o.LatencyBudget, config.MaxLatencyBudget)
	}
	if len(o.DoorRuns) == 0 {
		o.DoorRuns = DoorRunNames
	}
	for _, r := range o.DoorRuns {
		if !slices.Contains(DoorRunNames, r) {
			return fmt.Errorf("bench: unknown door run %q (want some of %s)", r, strings.Join(DoorRunNames, ","))
		}
	}
	if len(o.Windowers) == 0 {
		o.Windowers = []int{1, 2, 4}
	}
	if o.Redis == "" {
		o.Redis = "redis-server"
	}
	if o.Python == "" {
		o.Python = "python3"
	}
	if o.Profile == "" {
		o.Profile = ScenarioE2E
	}
	if o.ProfileDir != "" {
		if err := os.MkdirAll(o.ProfileDir, 0o755); err != nil {
			return fmt.Errorf("bench: profile dir: %w", err)
		}
		if o.CPUProfile == "" {
			o.CPUProfile = filepath.Join(o.ProfileDir, "bench.cpu.pprof")
		}
		if o.MemProfile == "" {
			o.MemProfile = filepath.Join(o.ProfileDir, "bench.allocs.pprof")
		}
	}
	if o.Out == nil {
		o.Out = os.Stdout
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	for _, s := range o.Only {
		if !slices.Contains(Scenarios, s) {
			return fmt.Errorf("bench: unknown scenario %q (have %s)", s, strings.Join(Scenarios, ", "))
		}
	}
	if o.Mode == ModeProcess {
		for _, svc := range []string{"validator", "windower", "publisher"} {
			if _, err := os.Stat(filepath.Join(o.BinDir, svc)); err != nil {
				return fmt.Errorf("bench: %s: %w (run make build, or pass --bin, or --mode inprocess)", svc, err)
			}
		}
	}
	return nil
}

// bencher holds what the scenarios share.
type bencher struct {
	o Options
	// profiling is set while the Profile scenario runs.
	profiling bool
	work      string
	redis     *redisServer
	rdb       *redis.Client
	logf      func(format string, args ...any)
}

func (b *bencher) wants(s string) bool { return len(b.o.Only) == 0 || slices.Contains(b.o.Only, s) }

// Run runs the bench, prints the table to o.Out and returns the results.
func Run(ctx context.Context, o Options) (*Results, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	b := &bencher{o: o}
	b.logf = func(format string, args ...any) {
		fmt.Fprintf(o.Log, "bench: %s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
	}
	began := time.Now()
	b.work = o.Work
	if b.work == "" {
		dir, err := os.MkdirTemp("", "receiptbench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		b.work = dir
	}
	redisBin, err := exec.LookPath(o.Redis)
	if err != nil {
		return nil, fmt.Errorf("bench: redis-server is needed: %w", err)
	}
	if b.redis, err = startRedis(ctx, redisBin, filepath.Join(b.work, "redis")); err != nil {
		return nil, err
	}
	defer b.redis.stop()
	b.rdb = redis.NewClient(&redis.Options{Addr: b.redis.addr})
	defer b.rdb.Close()

	r := newResults(o)
	r.Load = append(r.Load, loadAvg())
	r.RedisVersion = redisVersion(ctx, b.rdb)

	b.logf("generating %d records per dataset", o.Events)
	base, err := generate(b.work, "base", mix("base", o.Events), o.Partitions, nil)
	if err != nil {
		return nil, err
	}
	r.RecordBytes = float64(base.bytes) / float64(len(base.part))
	r.Windows = len(base.expected)

	stopProfile := func() {}
	profile := func(s string) {
		if s != o.Profile || (o.CPUProfile == "" && o.MemProfile == "") {
			return
		}
		b.profiling = true
		if o.MemProfile != "" {
			writeHeap(o.MemProfile + ".base")
		}
		if o.CPUProfile != "" {
			f, err := os.Create(o.CPUProfile)
			if err == nil && pprof.StartCPUProfile(f) == nil {
				stopProfile = func() {
					pprof.StopCPUProfile()
					f.Close()
					if o.MemProfile != "" {
						writeHeap(o.MemProfile)
					}
				}
				return
			}
		}
		stopProfile = func() { writeHeap(o.MemProfile) }
	}
	endProfile := func() { stopProfile(); stopProfile = func() {}; b.profiling = false }

	if b.wants(ScenarioB0) {
		b.logf("B0: raw JetStream publish + consume of %d records", len(base.part))
		profile(ScenarioB0)
		b0, err := b.runB0(ctx, base, b0Spec{})
		endProfile()
		if err != nil {
			return nil, err
		}
		r.B0 = &b0
		b.logf("B0: publish %.0f ev/s, consume %.0f ev/s", b0.PublishEPS, b0.ConsumeEPS)
		// The cost of durability against power loss (docs/recovery.md):
		// the same publish with sync_interval: always.
		limit := b0SyncLimit
		if b.o.Quick {
			limit = b0SyncLimitQuick
		}
		b.logf("B0 sync always: publish of at most %d records, fsync before every ack", limit)
		bs, err := b.runB0(ctx, base, b0Spec{syncAlways: true, limit: limit, publishOnly: true})
		if err != nil {
			return nil, err
		}
		r.B0Sync = &bs
		b.logf("B0 sync always: publish %.0f ev/s", bs.PublishEPS)
		b.logf("ingest alone: %d records through pkg/ingest, no services", len(base.part))
		bi, err := b.runB0(ctx, base, b0Spec{viaIngest: true})
		if err != nil {
			return nil, err
		}
		r.Ingest = &bi
		b.logf("ingest alone: %.0f ev/s", bi.PublishEPS)
	}
	if b.wants(ScenarioE2E) || b.wants(ScenarioLatency) || b.wants(ScenarioDup) || b.wants(ScenarioScale) {
		b.logf("E2E: %d records, 1 windower", len(base.part))
		profile(ScenarioE2E)
		e, err := b.runE2E(ctx, e2eSpec{name: "e2e", ds: base, windowers: 1, measure: true})
		endProfile()
		if err != nil {
			return nil, err
		}
		r.E2E = e
		b.logf("E2E: %.0f ev/s in %s", e.EPS, e.Elapsed.Round(time.Millisecond))
	}
	if b.wants(ScenarioLatency) && r.E2E != nil {
		rate := r.E2E.EPS * o.LatencyLoad
		limit := min(len(base.part), int(rate*o.LatencyFor.Seconds()))
		b.logf("latency: %d records at %.0f ev/s", limit, rate)
		profile(ScenarioLatency)
		l, err := b.runE2E(ctx, e2eSpec{name: "latency", ds: base, windowers: 1, rate: rate, limit: limit, latency: true})
		endProfile()
		if err != nil {
			return nil, err
		}
		r.Latency = &latencyResult{Rate: rate, Load: o.LatencyLoad, Records: l.Records, Achieved: l.EPS, CPU: l.CPU, Ms: l.LatencyMs, Stages: l.Stages, Hist: l.Hist}
		b.logf("latency: p50 %.1f ms p99 %.1f ms max %.1f ms", r.Latency.quantile(0.5), r.Latency.quantile(0.99), r.Latency.max())
	}
	if b.wants(ScenarioBatch) {
		b.logf("batch: receiptctl reconcile and python over %s", base.path)
		profile(ScenarioBatch)
		bt, err := b.runBatch(ctx, base)
		endProfile()
		if err != nil {
			return nil, err
		}
		r.Batch = bt
		b.logf("batch: reconcile %.0f ev/s, python %.0f ev/s", bt.ReconcileEPS, bt.PythonEPS)
	}
	if b.wants(ScenarioDup) && r.E2E != nil {
		ds, err := generate(b.work, "dup10", mix("dup10", o.Events), o.Partitions, nil)
		if err != nil {
			return nil, err
		}
		b.logf("dup: %d records, %d retries", len(ds.part), ds.stats.Duplicates)
		profile(ScenarioDup)
		e, err := b.runE2E(ctx, e2eSpec{name: "dup10", ds: ds, windowers: 1})
		endProfile()
		if err != nil {
			return nil, err
		}
		r.Dup = &dupResult{CleanEPS: r.E2E.EPS, DupEPS: e.EPS, Duplicates: ds.stats.Duplicates, Records: len(ds.part)}
		os.Remove(ds.path)
		b.logf("dup: %.0f ev/s", e.EPS)
	}
	if b.wants(ScenarioSkew) {
		// The same skewed traffic twice: as it comes, then with store-0
		// declared hot (spread over SkewSplit partitions by event id).
		runSkew := func(name string, hot window.HotKeys) (*skewResult, error) {
			ds, err := generate(b.work, name, mix("skew50", o.Events), o.Partitions, hot)
			if err != nil {
				return nil, err
			}
			defer os.Remove(ds.path)
			b.logf("%s: %d records, busiest partition %.0f%%", name, len(ds.part), 100*ds.hotShare())
			e, err := b.runE2E(ctx, e2eSpec{name: name, ds: ds, windowers: 1})
			if err != nil {
				return nil, err
			}
			res := &skewResult{EPS: e.EPS, HotPartitionShare: ds.hotShare(), Published: e.Published, Hot: hot.String()}
			busiest := 0
			for p, c := range ds.perPartition {
				if c > ds.perPartition[busiest] {
					busiest = p
				}
			}
			for p, d := range e.PartitionDone {
				if p == busiest {
					res.HotDone = d
				} else {
					res.OthersDone = max(res.OthersDone, d)
				}
			}
			if r.E2E != nil {
				res.BaseEPS = r.E2E.EPS
			}
			b.logf("%s: %.0f ev/s", name, e.EPS)
			return res, nil
		}
		profile(ScenarioSkew)
		var err error
		r.Skew, err = runSkew("skew50", nil)
		endProfile()
		if err != nil {
			return nil, err
		}
		if r.SkewSplit, err = runSkew("skew50-split", window.HotKeys{"store-0": SkewSplit}); err != nil {
			return nil, err
		}
	}
	if b.wants(ScenarioScale) && r.E2E != nil {
		for _, n := range o.Windowers {
			var e *e2eResult
			if n == 1 {
				e = r.E2E
			} else {
				b.logf("scale: %d windowers", n)
				profile(ScenarioScale)
				e, err = b.runE2E(ctx, e2eSpec{name: fmt.Sprintf("scale%d", n), ds: base, windowers: n})
				endProfile()
				if err != nil {
					return nil, err
				}
				b.logf("scale: %d windowers %.0f ev/s", n, e.EPS)
			}
			r.Scale = append(r.Scale, scaleResult{Windowers: n, EPS: e.EPS, Equal: sameWindows(r.E2E.Windows, e.Windows),
				Records: e.Records, CPU: e.CPU, Share: windowerShare(base, n)})
		}
	}
	r.HandoverNA = b.wants(ScenarioHandover) && o.Mode != ModeProcess
	if b.wants(ScenarioHandover) && o.Mode == ModeProcess {
		n := min(len(base.part), HandoverRecords)
		for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
			b.logf("hand-over: %d records, 2 windowers as a group (--lease-ttl %s), %s to windower-0 after %d", n, HandoverTTL, signalName(sig), n*3/10)
			profile(ScenarioHandover)
			e, err := b.runE2E(ctx, e2eSpec{name: "handover-" + strings.ToLower(signalName(sig)), ds: base, windowers: 2, limit: n,
				handover: &handoverSpec{sig: sig, ttl: HandoverTTL, at: n * 3 / 10}})
			endProfile()
			if err != nil {
				return nil, err
			}
			h := e.Handover
			h.Records, h.EPS = e.Records, e.EPS
			r.Handover = append(r.Handover, *h)
			b.logf("hand-over %s: released %s, taken %s, resumed %s after the signal", h.Signal, dur(h.Released), dur(h.Taken), dur(h.Resumed))
		}
	}
	r.DoorNA = b.wants(ScenarioDoor) && o.Mode != ModeProcess
	if b.wants(ScenarioDoor) && o.Mode == ModeProcess {
		b.logf("door: the front door (bin/ingest) against a nats-server process, beside receiptctl ingest")
		profile(ScenarioDoor)
		d, err := b.runDoor(ctx, base)
		endProfile()
		if err != nil {
			return nil, err
		}
		r.Door = d
	}
	r.IdleNA = b.wants(ScenarioIdle) && o.Mode != ModeProcess
	if b.wants(ScenarioIdle) && o.Mode == ModeProcess {
		b.logf("idle: the deployed pipeline with no traffic")
		profile(ScenarioIdle)
		id, err := b.runIdle(ctx)
		endProfile()
		if err != nil {
			return nil, err
		}
		r.Idle = id
	}
	r.ClusterNA = b.wants(ScenarioCluster) && o.Mode != ModeProcess
	if b.wants(ScenarioCluster) && o.Mode == ModeProcess {
		c, err := b.runCluster(ctx, base, profile, endProfile)
		if err != nil {
			return nil, err
		}
		r.Cluster = c
	}
	r.Load = append(r.Load, loadAvg())
	r.Elapsed = time.Since(began)
	r.print(o.Out)
	return r, nil
}

// windowerShare returns how many of ds's records go to the partitions of
// each of n windower instances, by instance name as the bench runs them.
func windowerShare(ds *dataset, n int) map[string]int {
	out := map[string]int{}
	for i := 0; i < n; i++ {
		name := "windower"
		if n > 1 {
			name += "-" + strconv.Itoa(i)
		}
		for _, p := range config.Split(len(ds.perPartition), i, n) {
			out[name] += ds.perPartition[p]
		}
	}
	return out
}

// sameWindows reports whether two runs published identical windows:
// count, digest and every partition's partial count (status aside: final
// status is reported on its own).
func sameWindows(a, b map[string]windowSeen) bool {
	if len(a) != len(b) {
		return false
	}
	for id, x := range a {
		y, ok := b[id]
		if !ok || x.Count != y.Count || x.Digest != y.Digest || len(x.Partitions) != len(y.Partitions) {
			return false
		}
		for p, c := range x.Partitions {
			if y.Partitions[p] != c {
				return false
			}
		}
	}
	return true
}

func writeHeap(path string) {
	if path == "" {
		return
	}
	runtime.GC()
	f, err := os.Create(path)
	if err != nil {
		return
	}
	defer f.Close()
	_ = pprof.Lookup("allocs").WriteTo(f, 0)
}

func redisVersion(ctx context.Context, c *redis.Client) string {
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	return "?"
}
