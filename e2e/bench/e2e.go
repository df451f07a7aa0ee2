package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/receiptflow/receiptflow/pkg/config"
	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/ingest"
	"github.com/receiptflow/receiptflow/pkg/ledger"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// e2eSpec is one end-to-end run.
type e2eSpec struct {
	name      string
	ds        *dataset
	windowers int
	// rate paces ingest at this many records per second (0: as fast as it
	// goes).
	rate float64
	// limit publishes only the first limit records (0: all).
	limit int
	// latency records, for every counted event, the time from its publish
	// to the first KV snapshot whose partial of its partition includes it.
	latency bool
	// measure reads Redis memory and the services' peak RSS at the end.
	measure bool
	// handover, when set, makes this a hand-over run (handover.go).
	handover *handoverSpec
	// nodes > 1 runs on a cluster of that many nats-server processes,
	// every stream and bucket with as many replicas (process mode).
	nodes int
}

// windowSeen is the last snapshot of a window the bench saw in KV.
type windowSeen struct {
	Count      int64
	Status     window.Status
	Digest     string
	Partitions map[int]int64
}

// e2eResult is what one end-to-end run measured.
type e2eResult struct {
	Records int
	Elapsed time.Duration
	// Published is when ingest had every record stored in RAW.
	Published time.Duration
	// FinalAfter is how long after the last count every window was final
	// (0 with NotFinal set: not within the wait).
	FinalAfter time.Duration
	NotFinal   string
	EPS        float64
	// Windows is the final state of every window.
	Windows map[string]windowSeen
	// LatencyMs are the per-event latencies (latency runs only), sorted.
	LatencyMs []float64
	// Measured when spec.measure: used_memory before the run and the
	// Redis sample that held the most state (see sampleRedisUntil).
	RedisBefore int64
	Redis       redisSample
	RSS         map[string]int64
	KVUpdates   int64
	// CPU is the CPU time each process used from the first publish to
	// completion ("bench" is the embedded nats-server, ingest and the KV
	// watcher).
	CPU map[string]time.Duration
	// Hist holds the services' batch-size and script-latency histograms.
	Hist map[string]histMean
	// Stages splits the latency of a latency run by hop (sorted ms).
	Stages []stage
	// PartitionDone is when each partition's last partial reached its
	// count, from the first publish.
	PartitionDone []time.Duration
	// Commands is Redis's INFO commandstats over the run (measure runs;
	// commands run by scripts are counted too).
	Commands []cmdStat
	// Handover is what a hand-over run measured.
	Handover *handoverResult
}

// runE2E runs the whole pipeline over the spec's records on a fresh
// nats-server and an empty Redis. The run's time ends when every window
// holds its expected count in the KV bucket; it then waits (at most 20 s)
// for every window to turn final too and reports when, or which did not.
func (b *bencher) runE2E(ctx context.Context, spec e2eSpec) (*e2eResult, error) {
	P := b.o.Partitions
	ds := spec.ds
	n := len(ds.part)
	if spec.limit > 0 && spec.limit < n {
		n = spec.limit
	}
	expected := map[string]int64{}
	lists := make([][]int32, len(ds.windows)*P)
	for i := 0; i < n; i++ {
		if w := ds.win[i]; w >= 0 {
			expected[ds.windows[w]]++
			k := int(w)*P + int(ds.part[i])
			lists[k] = append(lists[k], int32(i))
		}
	}
	winIdx := make(map[string]int, len(ds.windows))
	for i, id := range ds.windows {
		winIdx[id] = i
	}

	dir := filepath.Join(b.work, "nats-"+spec.name)
	target, err := b.startTarget(ctx, dir, false, spec.nodes)
	if err != nil {
		return nil, err
	}
	defer target.stop()
	url := target.url
	admin, err := connect.ConnectNATS(url, "bench-admin")
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	names := wire.For("")
	if err := stream.Ensure(ctx, admin.JS, names, stream.Config{Partitions: P, Replicas: target.replicas}); err != nil {
		return nil, err
	}
	if err := b.rdb.FlushAll(ctx).Err(); err != nil {
		return nil, err
	}
	logDir := filepath.Join(b.work, "logs", spec.name)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, err
	}
	var profileDir string
	if b.profiling && b.o.ProfileDir != "" && b.o.Mode == ModeProcess {
		profileDir = filepath.Join(b.o.ProfileDir, spec.name)
	}
	ds2 := deploySpec{mode: b.o.Mode, bin: b.o.BinDir, natsURL: url, redisURL: b.redis.URL(),
		partitions: P, hot: spec.ds.hot.String(), windowers: spec.windowers, logDir: logDir, profileDir: profileDir,
		budget: b.o.LatencyBudget, replicas: target.replicas}
	if spec.handover != nil {
		ds2.group, ds2.leaseTTL = true, spec.handover.ttl
	}
	dep, err := deploy(ctx, ds2)
	if err != nil {
		return nil, err
	}
	defer dep.stop()
	if err := waitConsumers(ctx, admin.JS, names, P, dep); err != nil {
		return nil, err
	}
	var hw *handoverWatch
	if spec.handover != nil {
		if hw, err = settleGroup(ctx, admin.JS, names, P, dep, logDir, *spec.handover); err != nil {
			return nil, err
		}
		lkv, err := admin.JS.KeyValue(ctx, names.LeaseBucket())
		if err != nil {
			return nil, err
		}
		hctx, hcancel := context.WithCancel(ctx)
		defer hcancel()
		if err := hw.follow(hctx, lkv, P); err != nil {
			return nil, err
		}
	}
	res := &e2eResult{Windows: map[string]windowSeen{}}
	if spec.measure {
		if res.RedisBefore, err = usedMemory(ctx, b.rdb); err != nil {
			return nil, err
		}
		resetPeakRSS(os.Getpid())
		resetPeakRSS(b.redis.pid())
		if err := b.rdb.ConfigResetStat(ctx).Err(); err != nil {
			return nil, err
		}
	}
	// A sample walks every claims bucket and ledger shard (HLEN): every 5 s
	// on a full run, so the probe costs Redis little next to what it measures.
	stopSampling := func() redisSample { return redisSample{} }
	if spec.measure {
		every := 5 * time.Second
		if b.o.Events <= 100_000 {
			every = time.Second // a short run would end between two samples
		}
		stopSampling = b.sampleRedisUntil(ctx, every)
		defer stopSampling()
	}

	// The watcher follows every window snapshot from the start.
	kv, err := admin.JS.KeyValue(ctx, names.Bucket())
	if err != nil {
		return nil, err
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	watch, err := kv.Watch(wctx, wire.WindowKey("*"))
	if err != nil {
		return nil, err
	}
	defer watch.Stop()
	pubNs := make([]atomic.Int64, n)
	var seenNs, kvNs []int64 // latency runs: when each event became visible, and its KV entry's time
	if spec.latency {
		seenNs, kvNs = make([]int64, n), make([]int64, n)
	}
	var lat []float64
	if spec.latency {
		lat = make([]float64, 0, n)
	}
	var beganNs atomic.Int64 // set when publishing starts
	// counted fires when every window holds its expected count, final when
	// every one is also final.
	counted, final := make(chan time.Time, 1), make(chan time.Time, 1)
	var mu sync.Mutex // guards res.Windows and lat until final
	// Per partition: cells (window, partition) still short of their count.
	cellsLeft := make([]int, P)
	for k, l := range lists {
		if len(l) > 0 {
			cellsLeft[k%P]++
		}
	}
	cellDone := make([]bool, len(lists))
	res.PartitionDone = make([]time.Duration, P)
	go func() {
		ptr := make([]int, len(lists))
		nCounted, nFinal, countedSent := 0, 0, false
		for e := range watch.Updates() {
			if e == nil {
				continue
			}
			now := time.Now().UnixNano()
			var s wire.Window
			if err := json.Unmarshal(e.Value(), &s); err != nil {
				continue
			}
			mu.Lock()
			res.KVUpdates++
			prev := res.Windows[s.WindowID]
			seen := windowSeen{Count: s.Count, Status: s.Status, Digest: s.Digest, Partitions: map[int]int64{}}
			w, known := winIdx[s.WindowID]
			for _, p := range s.Partitions {
				seen.Partitions[p.Partition] = p.Count
				if !known || p.Partition < 0 || p.Partition >= P {
					continue
				}
				k := w*P + p.Partition
				if !cellDone[k] && int(p.Count) >= len(lists[k]) && len(lists[k]) > 0 {
					cellDone[k] = true
					if cellsLeft[p.Partition]--; cellsLeft[p.Partition] == 0 {
						res.PartitionDone[p.Partition] = time.Duration(now - beganNs.Load())
					}
				}
				if !spec.latency {
					continue
				}
				for ptr[k] < int(p.Count) && ptr[k] < len(lists[k]) {
					i := lists[k][ptr[k]]
					lat = append(lat, float64(now-pubNs[i].Load())/1e6)
					seenNs[i], kvNs[i] = now, e.Created().UnixNano()
					ptr[k]++
				}
			}
			res.Windows[s.WindowID] = seen
			want, ok := expected[s.WindowID]
			wasC, isC := ok && prev.Count == want, ok && s.Count == want
			wasF, isF := wasC && prev.Status == window.StatusFinal, isC && s.Status == window.StatusFinal
			nCounted += b2i(isC) - b2i(wasC)
			nFinal += b2i(isF) - b2i(wasF)
			mu.Unlock()
			if nCounted == len(expected) && !countedSent {
				counted <- time.Unix(0, now)
				countedSent = true
			}
			if nFinal == len(expected) {
				final <- time.Unix(0, now)
				return
			}
		}
	}()

	// Publish through the real ingest code path.
	conn, err := connect.ConnectNATS(url, "bench-ingest")
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	v, err := contract.NewValidator(contract.Config{})
	if err != nil {
		return nil, err
	}
	var rawSeq []uint64 // latency runs: each record's RAW sequence, in publish order
	var onAck func(string, uint64, bool)
	if spec.latency {
		rawSeq = make([]uint64, 0, n)
		onAck = func(_ string, seq uint64, _ bool) { rawSeq = append(rawSeq, seq) }
	}
	in := ingest.New(conn.JS, ingest.Config{Partitions: P, HotKeys: spec.ds.hot, Validator: v, EndOfStream: true, OnAck: onAck,
		Linger: config.WaitsFor(b.o.LatencyBudget).IngestLinger})
	f, err := os.Open(ds.path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<20)
	meter := cpuMeter{"bench": os.Getpid(), "redis-server": b.redis.pid()}
	for name, pid := range dep.pids() {
		meter[name] = pid
	}
	for name, pid := range target.pids {
		meter[name] = pid
	}
	cpu0 := meter.read()
	began := time.Now()
	beganNs.Store(began.UnixNano())
	for i := 0; i < n; {
		line, rerr := br.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			if spec.rate > 0 {
				target := beganNs.Load() + int64(float64(i)*1e9/spec.rate)
				if d := target - time.Now().UnixNano(); d > 200_000 {
					time.Sleep(time.Duration(d))
				}
			}
			if i%1024 == 0 && ctx.Err() != nil {
				in.Close(ctx)
				return nil, ctx.Err()
			}
			if hw != nil && i == spec.handover.at {
				if err := hw.fire(); err != nil {
					in.Close(ctx)
					return nil, fmt.Errorf("bench: hand-over: signal windower-0: %w", err)
				}
				fctx, fcancel := context.WithCancel(ctx)
				defer fcancel()
				go hw.watchFences(fctx, b.rdb, ledger.Keys{Prefix: names.RedisPrefix()})
			}
			pubNs[i].Store(time.Now().UnixNano())
			if err := in.Publish(ctx, line); err != nil {
				in.Close(ctx)
				return nil, err
			}
			i++
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			in.Close(ctx)
			return nil, rerr
		}
	}
	if err := in.Close(ctx); err != nil {
		return nil, err
	}
	published := time.Since(began)

	timeout := time.NewTimer(60*time.Second + time.Duration(n)*time.Second/2000)
	defer timeout.Stop()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	var end time.Time
wait:
	for {
		select {
		case end = <-counted:
			break wait
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-timeout.C:
			mu.Lock()
			msg := b.describeMissing(expected, res.Windows)
			mu.Unlock()
			return nil, fmt.Errorf("%w: %s: windows not complete %s after publishing %d records in %s: %s",
				errTimeout, spec.name, time.Since(began).Round(time.Second), n, published.Round(time.Millisecond), msg)
		case <-tick.C:
			if err := dep.failed(); err != nil {
				return nil, err
			}
		}
	}
	res.CPU = meter.since(cpu0)
	// Final status needs the end-of-stream watermark on every partition;
	// wait for it a bounded time and report what did not get there.
	finalWait := time.NewTimer(20 * time.Second)
	defer finalWait.Stop()
	select {
	case t := <-final:
		res.FinalAfter = t.Sub(end)
	case <-finalWait.C:
		mu.Lock()
		res.NotFinal = b.describeMissing(expected, res.Windows)
		mu.Unlock()
		b.logf("WARNING %s: every count is in KV but not every window turned final within 20s: %s", spec.name, res.NotFinal)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	res.Hist = dep.histograms(ctx, logDir)
	if spec.measure {
		res.Commands, _ = commandStats(ctx, b.rdb)
	}
	if hw != nil {
		if res.Handover, err = hw.result(); err != nil {
			return nil, err
		}
	}
	res.Records = n
	res.Published = published
	res.Elapsed = end.Sub(began)
	res.EPS = float64(n) / res.Elapsed.Seconds()
	if spec.latency {
		slices.Sort(lat)
		res.LatencyMs = lat
		mu.Lock()
		stages, err := b.stages(ctx, admin.JS, names, spec, n, pubNs, rawSeq, seenNs, kvNs)
		mu.Unlock()
		if err != nil {
			return nil, err
		}
		res.Stages = stages
	}
	if spec.measure {
		res.Redis = stopSampling()
		res.RSS = dep.peakRSS()
		if v, err := peakRSS(os.Getpid()); err == nil {
			res.RSS["bench (nats-server + ingest)"] = v
		}
		if v, err := peakRSS(b.redis.pid()); err == nil {
			res.RSS["redis-server"] = v
		}
	}
	return res, nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// describeMissing says which windows have not reached their expected
// count and final status.
func (b *bencher) describeMissing(expected map[string]int64, got map[string]windowSeen) string {
	var parts []string
	for _, id := range slices.Sorted(mapsKeys(expected)) {
		g := got[id]
		if g.Count != expected[id] || g.Status != window.StatusFinal {
			parts = append(parts, fmt.Sprintf("%s %d/%d %s", id, g.Count, expected[id], g.Status))
		}
	}
	if len(parts) > 6 {
		parts = append(parts[:6], fmt.Sprintf("… %d more", len(parts)-6))
	}
	return strings.Join(parts, ", ")
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// waitConsumers waits until every service has opened its consumers, so
// that start-up is not part of the measurement.
func waitConsumers(ctx context.Context, js jetstream.JetStream, names wire.Names, P int, dep *deployment) error {
	want := map[string][]string{names.Stream(wire.Changes): {"publisher"}}
	for p := 0; p < P; p++ {
		want[names.Stream(wire.Raw)] = append(want[names.Stream(wire.Raw)], wire.Durable("validator", p))
		want[names.Stream(wire.Valid)] = append(want[names.Stream(wire.Valid)], wire.Durable("windower", p))
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		var missing []string
		for st, cs := range want {
			for _, c := range cs {
				// A bounded look-up each: on a cluster a request can go
				// unanswered (a consumer whose group is electing), and the
				// next round asks again.
				cctx, cancel := context.WithTimeout(ctx, time.Second)
				_, err := js.Consumer(cctx, st, c)
				cancel()
				if err != nil {
					missing = append(missing, st+"/"+c+": "+err.Error())
				}
			}
		}
		if len(missing) == 0 {
			return nil
		}
		if err := dep.failed(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			slices.Sort(missing)
			return fmt.Errorf("%w: %d consumers still missing after 60s: %s", errTimeout, len(missing), strings.Join(missing, "; "))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// redisSample is one reading of Redis during a run.
type redisSample struct {
	used                    int64
	claimEntries            int64
	ledgerEntries           int64
	claimBytes, claimSubset int64 // MEMORY USAGE of a subset of the claim hashes, and their entries
	ledgerBytes, ledgerSub  int64 // the same for the window ledgers of partition 0
}

// sampleRedis reads used_memory, the entries of every claims hash and
// window ledger, and MEMORY USAGE (estimated from 5 sampled fields, so
// the probe itself costs Redis next to nothing) of a subset of them (every 32nd claims
// bucket, partition 0's ledgers).
func (b *bencher) sampleRedis(ctx context.Context) (redisSample, error) {
	var s redisSample
	var err error
	if s.used, err = usedMemory(ctx, b.rdb); err != nil {
		return s, err
	}
	prefix := wire.For("").RedisPrefix()
	var cursor uint64
	n := 0
	for {
		keys, next, err := b.rdb.Scan(ctx, cursor, prefix+"*", 2000).Result()
		if err != nil {
			return s, err
		}
		pipe := b.rdb.Pipeline()
		type probe struct {
			claims bool
			subset bool
			hlen   *redis.IntCmd
			mem    *redis.IntCmd
		}
		var probes []probe
		for _, k := range keys {
			var pr probe
			switch {
			case strings.Contains(k, "}:claims:"): // not the retired-day marker
				pr.claims = true
				pr.subset = n%32 == 0
				n++
			case strings.Contains(k, "}:l:"):
				pr.subset = strings.HasPrefix(k, prefix+"{p0}:")
			default:
				continue
			}
			pr.hlen = pipe.HLen(ctx, k)
			if pr.subset {
				pr.mem = pipe.MemoryUsage(ctx, k) // SAMPLES 5: O(1), not a walk of the hash
			}
			probes = append(probes, pr)
		}
		if len(probes) > 0 {
			// A key retired between SCAN and the probe answers nil to
			// MEMORY USAGE: it counts as empty, not as a failed sample.
			if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
				return s, err
			}
		}
		for _, pr := range probes {
			h := pr.hlen.Val()
			if pr.claims {
				s.claimEntries += h
			} else {
				s.ledgerEntries += h
			}
			if pr.mem == nil {
				continue
			}
			if pr.claims {
				s.claimBytes += pr.mem.Val()
				s.claimSubset += h
			} else {
				s.ledgerBytes += pr.mem.Val()
				s.ledgerSub += h
			}
		}
		if cursor = next; cursor == 0 {
			return s, nil
		}
	}
}

// sampleRedisUntil samples Redis every interval until the returned
// function is called; that function takes a last sample and returns the
// one that held the most entries (the state is largest just before windows
// are retired at the end of the stream); calling it again only samples
// once more.
func (b *bencher) sampleRedisUntil(ctx context.Context, interval time.Duration) func() redisSample {
	var best redisSample
	take := func(ctx context.Context) {
		s, err := b.sampleRedis(ctx)
		if err != nil {
			b.logf("redis sample: %v", err)
		}
		if err == nil && s.claimEntries+s.ledgerEntries >= best.claimEntries+best.ledgerEntries {
			best = s
		}
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case <-t.C:
				take(sctx)
			}
		}
	}()
	return func() redisSample {
		cancel()
		<-done
		take(ctx) // one more at the end of the run
		return best
	}
}

// resetPeakRSS resets a process's VmHWM (Linux clear_refs 5), so the peak
// covers only what follows. Best effort.
func resetPeakRSS(pid int) {
	_ = os.WriteFile("/proc/"+strconv.Itoa(pid)+"/clear_refs", []byte("5"), 0)
}
