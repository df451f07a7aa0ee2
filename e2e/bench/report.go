package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Targets on the reference 2-core machine (docs/performance.md). The batch
// pass has no target against the Python reference any more: that one
// validates nothing, so the ratio says little; the row is kept for
// information.
const (
	TargetE2ERatio      = 0.25
	TargetCPUPerEventUs = 70.0
	// TargetHalfLoadCPU bounds the CPU per event at half load, as a
	// multiple of the full-load run's.
	TargetHalfLoadCPU = 1.3
	TargetP99Ms       = 60.0
	TargetLedgerBytes = 56.0 // claims and ledger together, at 200k ids
	TargetBatchEPS    = 1_000_000.0
	TargetDupCost     = 0.15
	// The front door (issue "The front door"): CPU per event of 100-record
	// and of single-record requests as a multiple of receiptctl ingest's,
	// and the p99 of a 100-record request at half the door's rate.
	TargetDoor100    = 1.3
	TargetDoorSingle = 4.0
	TargetDoorP99Ms  = 50.0
	// TargetIdlePercent bounds the whole deployment's CPU with no traffic,
	// as a share of one core.
	TargetIdlePercent = 2.0
)

// Keys are the top-level keys of bench-results.json, in order.
var Keys = []string{
	"b0_publish_eps", "b0_sync_publish_eps", "b0_consume_eps", "e2e_eps", "e2e_ratio", "p50_ms", "p99_ms",
	"ledger_bytes_per_id", "batch_eps", "python_eps", "dup_cost", "skew_eps",
}

// Rows are the labels of the printed table, in order.
var Rows = []string{
	"B0 publish", "B0 publish sync always", "B0 consume", "B0 CPU per event", "Ingest alone", "E2E", "E2E / B0 publish", "E2E CPU per event",
	"Latency p50", "Latency CPU per event", "Latency p99", "Latency max", "Latency by hop p50", "Latency by hop p99", "Latency dominant hop",
	"Latency inside hops",
	"Redis per event id", "Redis claims", "Redis window ledger", "Redis CPU by command",
	"RSS validator", "RSS windower", "RSS publisher", "RSS nats-server+ingest", "RSS redis-server",
	"Batch reconcile", "Batch python", "Batch ratio",
	"Dedup 0% dups", "Dedup 10% dups", "Dedup cost",
	"Skew 50% one store", "Skew hot key split", "Skew split gain",
	"Scale 1 windower", "Scale 2 windowers", "Scale 4 windowers", "Scale windower CPU/event",
	"Hand-over SIGTERM", "Hand-over SIGKILL",
	"Door receiptctl ingest", "Door HTTP 100 per req", "Door NATS 100 per req", "Door HTTP 1 per req", "Door NATS 1 per req", "Door NATS routing", "Door NATS floor", "Door p99 half load", "Door RSS 200 producers",
	"Idle cost",
	"Cluster B0 CPU/event", "Cluster E2E", "Cluster E2E CPU/event",
}

// Results is everything one run measured.
type Results struct {
	Events      int
	RecordBytes float64
	Windows     int
	Partitions  int
	CPUs        int
	Mode        string
	// Budget is the services' --latency-budget (and the bench ingest's).
	Budget       time.Duration
	GoVersion    string
	NATSVersion  string
	RedisVersion string
	Load         []string
	Elapsed      time.Duration

	B0 *b0Result
	// B0Sync is B0's publish with sync_interval: always (at most
	// b0SyncLimit records, no consume phase).
	B0Sync *b0Result
	// Ingest is B0's publish done by pkg/ingest (no services).
	Ingest  *b0Result
	E2E     *e2eResult
	Latency *latencyResult
	Batch   *batchResult
	Dup     *dupResult
	Skew    *skewResult
	// SkewSplit is the skew run with the hot key declared (--hot-keys).
	SkewSplit *skewResult
	Scale     []scaleResult
	// Handover are the hand-over runs, SIGTERM then SIGKILL (process
	// mode only).
	Handover []handoverResult
	// Door is the front door's runs; DoorNA: asked for in in-process mode,
	// where there is no bin/ingest process to run.
	Door   *doorResult
	DoorNA bool
	// Idle is the deployed pipeline's CPU with no traffic; IdleNA: asked
	// for in in-process mode.
	Idle   *idleResult
	IdleNA bool
	// Cluster is B0 and E2E on a 3-node cluster of nats-server processes;
	// ClusterNA: asked for in in-process mode.
	Cluster   *clusterResult
	ClusterNA bool
	// HandoverNA: the hand-over runs were asked for in in-process mode,
	// where there is no process to stop.
	HandoverNA bool
}

type latencyResult struct {
	Rate float64
	// Load is Rate as a share of the E2E rate (0.5 unless --latency-load).
	Load     float64
	Achieved float64
	Records  int
	// CPU is each process's CPU time over the run, as E2E's.
	CPU map[string]time.Duration
	// Ms are the per-event latencies, sorted.
	Ms []float64
	// Stages split them by hop.
	Stages []stage
	// Hist are the services' histograms and counters over the run.
	Hist map[string]histMean
}

// cpuPerEvent is the CPU of every process over the run per record
// published, in µs (NaN when not measured).
func (l *latencyResult) cpuPerEvent() float64 {
	if len(l.CPU) == 0 || l.Records == 0 {
		return math.NaN()
	}
	return float64(sumCPU(l.CPU).Microseconds()) / float64(l.Records)
}

// e2eCPUPerEvent is the E2E run's CPU per record over every process, in
// µs (NaN without an E2E run).
func (r *Results) e2eCPUPerEvent() float64 {
	if r.E2E == nil {
		return math.NaN()
	}
	return float64(sumCPU(r.E2E.CPU).Microseconds()) / float64(max(r.E2E.Records, 1))
}

// halfLoad tells whether the run was at the half load the p99 target is
// set at (Load 0 is a result from before --latency-load: half).
func (l *latencyResult) halfLoad() bool { return l.Load == 0 || l.Load == 0.5 }

// loadName is the run's load as the table says it.
func (l *latencyResult) loadName() string {
	if l.halfLoad() {
		return "half"
	}
	return strconv.FormatFloat(l.Load, 'g', 3, 64)
}

// barrierWait is the mean time a validator batch waited at the
// publication barrier, in ms, and the batches; ok is false without the
// validator's metrics.
func (l *latencyResult) barrierWait() (ms float64, batches float64, ok bool) {
	w, okW := l.Hist["receiptflow_validator_barrier_wait_seconds_total"]
	b, okB := l.Hist["receiptflow_validator_batch_size_messages"]
	if !okW || !okB || b.Count == 0 {
		return 0, 0, false
	}
	return 1000 * w.Sum / b.Count, b.Count, true
}

// dominant is the hop with the highest p99 and that p99's share of the
// end-to-end p99 (hops' p99s do not add up to it: each is its own
// order statistic).
func (l *latencyResult) dominant() (name string, p99, share float64) {
	for _, s := range l.Stages {
		if q := quantile(s.Ms, 0.99); name == "" || q > p99 {
			name, p99 = s.Name, q
		}
	}
	if total := l.quantile(0.99); total > 0 {
		share = p99 / total
	}
	return name, p99, share
}

// hops renders quantile q of every hop.
func (l *latencyResult) hops(q float64) string {
	var parts []string
	for _, s := range l.Stages {
		parts = append(parts, fmt.Sprintf("%s %.1f", s.Name, quantile(s.Ms, q)))
	}
	return strings.Join(parts, ", ") + " (ms)"
}

func (l *latencyResult) quantile(q float64) float64 {
	if l == nil || len(l.Ms) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(q*float64(len(l.Ms)))) - 1
	return l.Ms[min(max(i, 0), len(l.Ms)-1)]
}

func (l *latencyResult) max() float64 {
	if l == nil || len(l.Ms) == 0 {
		return math.NaN()
	}
	return l.Ms[len(l.Ms)-1]
}

type dupResult struct {
	Records    int
	Duplicates int
	CleanEPS   float64
	DupEPS     float64
}

// cost is the share of throughput lost to duplicates (records per second,
// retries included).
func (d *dupResult) cost() float64 { return 1 - d.DupEPS/d.CleanEPS }

type skewResult struct {
	// Hot is the --hot-keys declaration of the run ("" for none).
	Hot               string
	EPS               float64
	BaseEPS           float64
	HotPartitionShare float64
	// Published is when ingest was done; HotDone when the hot partition's
	// counts were all in KV, OthersDone when the last other one's were.
	Published, HotDone, OthersDone time.Duration
}

type scaleResult struct {
	Windowers int
	EPS       float64
	// Equal is true when the run published exactly the windows of the
	// 1-windower run (counts, digests, every partition's partial).
	Equal bool
	// Records is the run's records; CPU each process's CPU time over it
	// (windower instances as "windower" or "windower-<i>"); Share how
	// many of the records went to each windower instance's partitions.
	Records int
	CPU     map[string]time.Duration
	Share   map[string]int
}

// windowerCPU returns the windower instances' CPU summed, and each one's
// CPU per record of its own partitions, in instance order ("" when the
// run has no per-process figures: in-process mode).
func (s scaleResult) windowerCPU() (total time.Duration, perOwn []string) {
	names := slices.Sorted(mapsKeys(s.Share))
	for _, name := range names {
		c, ok := s.CPU[name]
		if !ok {
			return 0, nil
		}
		total += c
		perOwn = append(perOwn, us(c, s.Share[name]))
	}
	return total, perOwn
}

// totalCPU is every process's CPU over the run.
func (s scaleResult) totalCPU() time.Duration { return sumCPU(s.CPU) }

// sumCPU is the CPU of every process of cpu.
func sumCPU(cpu map[string]time.Duration) time.Duration {
	var t time.Duration
	for _, c := range cpu {
		t += c
	}
	return t
}

func newResults(o Options) *Results {
	return &Results{
		Events: o.Events, Partitions: o.Partitions, CPUs: runtime.NumCPU(), Mode: o.Mode, Budget: o.LatencyBudget,
		GoVersion: runtime.Version(), NATSVersion: server.VERSION,
	}
}

// ledgerBytesPerID is the growth of Redis used_memory over the E2E run
// divided by the distinct valid event ids (every one has a claim; counted
// submissions also have a window-ledger entry).
func (r *Results) ledgerBytesPerID() float64 {
	if r.E2E == nil || r.E2E.Redis.claimEntries == 0 {
		return math.NaN()
	}
	return float64(r.E2E.Redis.used-r.E2E.RedisBefore) / float64(r.E2E.Redis.claimEntries)
}

func (r *Results) ratio() float64 {
	if r.E2E == nil || r.B0 == nil {
		return math.NaN()
	}
	return r.E2E.EPS / r.B0.PublishEPS
}

// JSON returns the bench-results.json document: the keys of Keys (null
// when the scenario was skipped) and a "details" object.
func (r *Results) JSON() map[string]any {
	num := func(v float64) any {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil
		}
		return math.Round(v*1000) / 1000
	}
	m := map[string]any{}
	get := func(ok bool, v func() float64) any {
		if !ok {
			return nil
		}
		return num(v())
	}
	m["b0_publish_eps"] = get(r.B0 != nil, func() float64 { return r.B0.PublishEPS })
	m["b0_sync_publish_eps"] = get(r.B0Sync != nil, func() float64 { return r.B0Sync.PublishEPS })
	m["b0_consume_eps"] = get(r.B0 != nil, func() float64 { return r.B0.ConsumeEPS })
	m["e2e_eps"] = get(r.E2E != nil, func() float64 { return r.E2E.EPS })
	m["e2e_ratio"] = num(r.ratio())
	m["p50_ms"] = get(r.Latency != nil, func() float64 { return r.Latency.quantile(0.5) })
	m["p99_ms"] = get(r.Latency != nil, func() float64 { return r.Latency.quantile(0.99) })
	m["ledger_bytes_per_id"] = num(r.ledgerBytesPerID())
	m["batch_eps"] = get(r.Batch != nil, func() float64 { return r.Batch.ReconcileEPS })
	m["python_eps"] = get(r.Batch != nil, func() float64 { return r.Batch.PythonEPS })
	m["dup_cost"] = get(r.Dup != nil, func() float64 { return r.Dup.cost() })
	m["skew_eps"] = get(r.Skew != nil, func() float64 { return r.Skew.EPS })

	d := map[string]any{
		"events": r.Events, "record_bytes": num(r.RecordBytes), "windows": r.Windows, "partitions": r.Partitions,
		"cpus": r.CPUs, "mode": r.Mode, "go": r.GoVersion, "nats_server": r.NATSVersion, "redis": r.RedisVersion,
		"loadavg_start_end": r.Load, "latency_budget_ms": num(float64(r.Budget.Microseconds()) / 1000), "elapsed_s": num(r.Elapsed.Seconds()),
		"max_ms": get(r.Latency != nil, func() float64 { return r.Latency.max() }),
	}
	if r.Latency != nil {
		d["latency_rate_eps"] = num(r.Latency.Rate)
		d["latency_load"] = num(r.Latency.Load)
		d["latency_cpu_us_per_event"] = num(r.Latency.cpuPerEvent())
		byProc := map[string]any{}
		for k, v := range r.Latency.CPU {
			byProc[k] = num(float64(v.Microseconds()) / float64(max(r.Latency.Records, 1)))
		}
		d["latency_cpu_us_per_event_by_process"] = byProc
		if steps := stepMeans(r.Latency.Hist); len(steps) > 0 {
			d["latency_steps_ms"] = steps
		}
		d["latency_achieved_eps"] = num(r.Latency.Achieved)
		d["latency_events"] = len(r.Latency.Ms)
		hops := map[string]any{}
		for _, st := range r.Latency.Stages {
			hops[st.Name] = map[string]any{"p50_ms": num(quantile(st.Ms, 0.5)), "p99_ms": num(quantile(st.Ms, 0.99))}
		}
		d["latency_hops"] = hops
		if name, _, _ := r.Latency.dominant(); name != "" {
			d["latency_dominant_hop"] = name
		}
		if w, _, ok := r.Latency.barrierWait(); ok {
			d["latency_barrier_wait_ms"] = num(w)
		}
	}
	if r.E2E != nil {
		d["e2e_seconds"] = num(r.E2E.Elapsed.Seconds())
		d["e2e_ingest_done_s"] = num(r.E2E.Published.Seconds())
		d["e2e_final_after_s"] = num(r.E2E.FinalAfter.Seconds())
		d["e2e_not_final"] = r.E2E.NotFinal
		d["redis_used_before"] = r.E2E.RedisBefore
		rs := r.E2E.Redis
		d["redis_used_at_sample"] = rs.used
		d["claim_entries"] = rs.claimEntries
		d["ledger_entries"] = rs.ledgerEntries
		d["claims_bytes_per_entry"] = num(perEntry(rs.claimBytes, rs.claimSubset))
		d["ledger_bytes_per_entry"] = num(perEntry(rs.ledgerBytes, rs.ledgerSub))
		rss := map[string]any{}
		for k, v := range r.E2E.RSS {
			rss[k] = v
		}
		d["peak_rss_bytes"] = rss
		d["kv_updates"] = r.E2E.KVUpdates
		var cs []any
		for _, c := range r.E2E.Commands {
			cs = append(cs, map[string]any{"cmd": c.Name, "calls": c.Calls, "usec": c.Usec})
		}
		d["redis_commandstats"] = cs
		for k, h := range r.E2E.Hist {
			d[strings.TrimPrefix(k, "receiptflow_")+"_mean"] = num(h.mean())
		}
		cpu := map[string]any{}
		for k, v := range r.E2E.CPU {
			cpu[k] = num(float64(v.Microseconds()) / float64(r.E2E.Records))
		}
		d["e2e_cpu_us_per_event"] = cpu
	}
	if r.Ingest != nil {
		d["ingest_alone_eps"] = num(r.Ingest.PublishEPS)
		d["ingest_alone_cpu_us_per_event"] = num(float64(r.Ingest.PublishCPU.Microseconds()) / float64(r.Ingest.Records))
	}
	if dr := r.Door; dr != nil {
		runs := map[string]any{}
		for _, run := range append([]doorRun{dr.CLI}, dr.Runs...) {
			runs[run.Name] = map[string]any{"eps": num(run.EPS), "cpu_us_per_event": num(run.cpuPerEvent()), "p99_ms": num(run.p99()), "records": run.Records}
		}
		d["door"] = runs
		if dr.Half != nil {
			d["door_half_load_p99_ms"] = num(dr.Half.p99())
		}
		if dr.RSS != nil {
			d["door_rss_200_producers_bytes"] = dr.RSS.PeakRSS
		}
		if rt := dr.Routing; rt != nil {
			parts := map[string]any{}
			for k, v := range rt.CPU {
				parts[k] = num(float64(v.Microseconds()) / float64(rt.Records))
			}
			d["door_routing_cpu_us_per_request"] = parts
		}
	}
	if id := r.Idle; id != nil {
		d["idle_percent_of_one_core"] = num(id.share(id.total()))
		d["idle_js_api_requests_per_s"] = num(float64(id.APIRequests) / id.Window.Seconds())
		sw := map[string]any{}
		for k, v := range id.Switches {
			sw[k] = num(float64(v) / id.Window.Seconds())
		}
		d["idle_context_switches_per_s"] = sw
	}
	if c := r.Cluster; c != nil {
		d["cluster_b0_cpu_us_per_event"] = num(c.b0CPU())
		d["cluster_e2e_eps"] = num(c.E2E.EPS)
		d["cluster_e2e_cpu_us_per_event"] = num(c.e2eCPU())
	}
	if r.B0 != nil {
		d["b0_publish_cpu_us_per_event"] = num(float64(r.B0.PublishCPU.Microseconds()) / float64(r.B0.Records))
		d["b0_consume_cpu_us_per_event"] = num(float64(r.B0.ConsumeCPU.Microseconds()) / float64(r.B0.Records))
	}
	if r.Batch != nil {
		d["batch_ratio"] = num(r.Batch.Ratio)
		if !r.Batch.InProcess {
			d["batch_cpu_us_per_event"] = num(float64(r.Batch.ReconcileCPU.Nanoseconds()) / 1000 / float64(r.Batch.Records))
			d["batch_rss_bytes"] = r.Batch.ReconcileRSS
		}
		d["batch_inprocess"] = r.Batch.InProcess
		d["python_wall_s"] = num(r.Batch.PythonWall.Seconds())
	}
	if r.Dup != nil {
		d["dup_eps"] = num(r.Dup.DupEPS)
		d["dup_records"] = r.Dup.Duplicates
	}
	if r.Skew != nil {
		d["skew_hot_partition_share"] = num(r.Skew.HotPartitionShare)
		d["skew_vs_e2e"] = num(r.Skew.EPS / r.Skew.BaseEPS)
		d["skew_hot_partition_done_s"] = num(r.Skew.HotDone.Seconds())
		d["skew_other_partitions_done_s"] = num(r.Skew.OthersDone.Seconds())
	}
	if r.SkewSplit != nil && r.Skew != nil {
		d["skew_split_hot_keys"] = r.SkewSplit.Hot
		d["skew_split_eps"] = num(r.SkewSplit.EPS)
		d["skew_split_gain"] = num(r.SkewSplit.EPS / r.Skew.EPS)
		d["skew_split_busiest_partition_share"] = num(r.SkewSplit.HotPartitionShare)
	}
	var sc []any
	for _, s := range r.Scale {
		e := map[string]any{"windowers": s.Windowers, "eps": num(s.EPS), "windows_equal": s.Equal}
		if total, _ := s.windowerCPU(); total > 0 {
			own := map[string]any{}
			for name, c := range s.CPU {
				if n, ok := s.Share[name]; ok && n > 0 {
					own[name] = num(float64(c.Microseconds()) / float64(n))
				}
			}
			e["windower_cpu_us_per_event"] = num(float64(total.Microseconds()) / float64(s.Records))
			e["windower_cpu_us_per_own_event"] = own
			e["total_cpu_us_per_event"] = num(float64(s.totalCPU().Microseconds()) / float64(s.Records))
		}
		sc = append(sc, e)
	}
	d["scale"] = sc
	var ho []any
	for _, h := range r.Handover {
		ho = append(ho, map[string]any{"signal": h.Signal, "lease_ttl_s": num(h.TTL.Seconds()), "records": h.Records, "eps": num(h.EPS),
			"moved_partitions": h.Moved, "released_ms": num(msOf(h.Released)), "taken_ms": num(msOf(h.Taken)),
			"resumed_ms": num(msOf(h.Resumed)), "no_owner_ms": num(msOf(h.NoOwner))})
	}
	d["handover"] = ho
	m["details"] = d
	return m
}

// WriteJSON writes the JSON document to path.
func (r *Results) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r.JSON(), "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// print writes the table.
func (r *Results) print(w io.Writer) {
	fmt.Fprintf(w, "receiptflow bench: %d records of %.0f B in %d windows, P=%d, %d CPUs, services %s; %s, nats-server %s (embedded, file store), redis-server %s; latency budget %s; load avg %s; %s\n",
		r.Events, r.RecordBytes, r.Windows, r.Partitions, r.CPUs, r.Mode, r.GoVersion, r.NATSVersion, r.RedisVersion, r.Budget,
		strings.Join(r.Load, "→"), r.Elapsed.Round(time.Second))
	fmt.Fprintf(w, "%-24s %18s  %s\n", "ROW", "VALUE", "NOTE")
	row := func(label, value, note string) { fmt.Fprintf(w, "%-24s %18s  %s\n", label, value, note) }
	skipped := func(labels ...string) {
		for _, l := range labels {
			row(l, "skipped", "")
		}
	}
	if b := r.B0; b != nil {
		row("B0 publish", eps(b.PublishEPS), fmt.Sprintf("raw async publish, Nats-Msg-Id, %d in flight, %d records in %s", b0InFlight, b.Records, dur(b.Publish)))
		if bs := r.B0Sync; bs != nil {
			row("B0 publish sync always", eps(bs.PublishEPS), fmt.Sprintf("the same with sync_interval: always (fsync before every ack), %d records in %s; %.1f× slower",
				bs.Records, dur(bs.Publish), b.PublishEPS/bs.PublishEPS))
		} else {
			skipped("B0 publish sync always")
		}
		row("B0 consume", eps(b.ConsumeEPS), "one durable pull consumer, ack-all every 500, in "+dur(b.Consume))
		row("B0 CPU per event", us(b.PublishCPU+b.ConsumeCPU, b.Records),
			fmt.Sprintf("publish %s + consume %s (nats-server and client, one process)", us(b.PublishCPU, b.Records), us(b.ConsumeCPU, b.Records)))
		if in := r.Ingest; in != nil {
			row("Ingest alone", eps(in.PublishEPS), fmt.Sprintf("pkg/ingest (ordered batches, heartbeats) publishing the same records, no services, in %s; %.2f× B0 publish; CPU %s per event = %.2f× B0 publish's %s",
				dur(in.Publish), in.PublishEPS/b.PublishEPS, us(in.PublishCPU, in.Records),
				(float64(in.PublishCPU)/float64(in.Records))/(float64(b.PublishCPU)/float64(b.Records)), us(b.PublishCPU, b.Records)))
		} else {
			skipped("Ingest alone")
		}
	} else {
		skipped("B0 publish", "B0 publish sync always", "B0 consume", "B0 CPU per event", "Ingest alone")
	}
	if e := r.E2E; e != nil {
		lo, hi := slices.Min(e.PartitionDone), slices.Max(e.PartitionDone)
		fin := fmt.Sprintf("partitions complete between %s and %s; all final %s later", dur(lo), dur(hi), dur(e.FinalAfter))
		if e.NotFinal != "" {
			fin = fmt.Sprintf("partitions complete between %s and %s; NOT ALL FINAL within 20s: %s", dur(lo), dur(hi), e.NotFinal)
		}
		row("E2E", eps(e.EPS), fmt.Sprintf("ingest→validator→windower→publisher until every count is in KV, %s (ingest done at %s; %s); %s",
			dur(e.Elapsed), dur(e.Published), fin, describeBatches(e.Hist)))
		row("E2E / B0 publish", fmt.Sprintf("%.3f", r.ratio()), verdict(r.ratio() >= TargetE2ERatio, fmt.Sprintf("target ≥ %.2f", TargetE2ERatio)))
		var parts []string
		for _, k := range slices.Sorted(mapsKeys(e.CPU)) {
			parts = append(parts, k+" "+us(e.CPU[k], e.Records))
		}
		perEvent := r.e2eCPUPerEvent()
		row("E2E CPU per event", fmt.Sprintf("%.1f µs", perEvent), verdict(perEvent <= TargetCPUPerEventUs,
			fmt.Sprintf("target ≤ %.0f µs; %s", TargetCPUPerEventUs, strings.Join(parts, ", "))))
	} else {
		skipped("E2E", "E2E / B0 publish", "E2E CPU per event")
	}
	if l := r.Latency; l != nil {
		note := fmt.Sprintf("%d counted events at %.0f ev/s (%s of E2E; achieved %.0f)", len(l.Ms), l.Rate, l.loadName(), l.Achieved)
		if c := l.cpuPerEvent(); !math.IsNaN(c) {
			note += fmt.Sprintf("; CPU %.1f µs per event at this load, all processes", c)
		}
		row("Latency p50", ms(l.quantile(0.5)), note)
		switch c, full := l.cpuPerEvent(), r.e2eCPUPerEvent(); {
		case math.IsNaN(c) || math.IsNaN(full):
			row("Latency CPU per event", "n/a", "no CPU measured")
		case l.halfLoad():
			var parts []string
			for _, k := range slices.Sorted(mapsKeys(l.CPU)) {
				parts = append(parts, k+" "+us(l.CPU[k], l.Records))
			}
			row("Latency CPU per event", fmt.Sprintf("%.1f µs", c), verdict(c <= TargetHalfLoadCPU*full,
				fmt.Sprintf("%.2f× full load (%.1f µs); target ≤ %.1f×; %s", c/full, full, TargetHalfLoadCPU, strings.Join(parts, ", "))))
		default:
			row("Latency CPU per event", fmt.Sprintf("%.1f µs", c), fmt.Sprintf("%.2f× full load (%.1f µs); not judged: the target is set at half load, this run is at %s", c/full, full, l.loadName()))
		}
		p99 := l.quantile(0.99)
		if l.halfLoad() {
			row("Latency p99", ms(p99), verdict(p99 <= TargetP99Ms, fmt.Sprintf("target ≤ %.0f ms", TargetP99Ms)))
		} else {
			row("Latency p99", ms(p99), fmt.Sprintf("not judged: the target (≤ %.0f ms) is set at half load, this run is at %s", TargetP99Ms, l.loadName()))
		}
		row("Latency max", ms(l.max()), "ingest publish → first KV snapshot whose partition partial includes the event")
		row("Latency by hop p50", "", l.hops(0.5))
		row("Latency by hop p99", "", l.hops(0.99))
		if name, p99, share := l.dominant(); name != "" {
			note := fmt.Sprintf("p99 %.1f ms, %.0f%% of the end-to-end p99: the hop to shorten first", p99, 100*share)
			if w, n, ok := l.barrierWait(); ok {
				note += fmt.Sprintf("; validator batches waited %.2f ms each at the publication barrier (mean of %.0f)", w, n)
			}
			row("Latency dominant hop", name, note)
		} else {
			row("Latency dominant hop", "n/a", "no hop measured")
		}
		if steps := describeSteps(l.Hist); steps != "" {
			row("Latency inside hops", "", steps)
		} else {
			row("Latency inside hops", "n/a", "no step histograms read from the services")
		}
	} else {
		skipped("Latency p50", "Latency CPU per event", "Latency p99", "Latency max", "Latency by hop p50", "Latency by hop p99", "Latency dominant hop",
			"Latency inside hops")
	}
	if e := r.E2E; e != nil {
		per := r.ledgerBytesPerID()
		rs := e.Redis
		row("Redis per event id", fmt.Sprintf("%.1f B", per), verdict(per <= TargetLedgerBytes,
			fmt.Sprintf("target ≤ %.0f B; used_memory %s → %s holding %d claims + %d ledger entries, over %d event ids",
				TargetLedgerBytes, mib(e.RedisBefore), mib(rs.used), rs.claimEntries, rs.ledgerEntries, rs.claimEntries)))
		row("Redis claims", fmt.Sprintf("%.1f B", perEntry(rs.claimBytes, rs.claimSubset)),
			fmt.Sprintf("MEMORY USAGE per entry of 1/32 of the claim hashes (validator fingerprint claims, %d entries)", rs.claimEntries))
		row("Redis window ledger", fmt.Sprintf("%.1f B", perEntry(rs.ledgerBytes, rs.ledgerSub)),
			fmt.Sprintf("MEMORY USAGE per entry of partition 0's ledgers (windower dedup ledger, %d entries)", rs.ledgerEntries))
		var cmds []string
		top := "n/a"
		for i, c := range e.Commands[:min(5, len(e.Commands))] {
			perEv := float64(c.Usec) / float64(max(1, e.Records))
			if i == 0 {
				top = fmt.Sprintf("%.1f µs", perEv)
			}
			cmds = append(cmds, fmt.Sprintf("%s %.1f µs/ev (%.2f calls/ev, %.1f µs/call)", c.Name, perEv,
				float64(c.Calls)/float64(e.Records), float64(c.Usec)/float64(max(1, c.Calls))))
		}
		row("Redis CPU by command", top, "INFO commandstats, busiest first; a script's time includes the commands it runs: "+strings.Join(cmds, "; "))
		for _, svc := range []string{"validator", "windower", "publisher"} {
			row("RSS "+svc, rssOf(e.RSS, svc), rssNote(r.Mode))
		}
		row("RSS nats-server+ingest", rssOf(e.RSS, "bench (nats-server + ingest)"), "the bench process (embedded nats-server, ingest, KV watcher)")
		row("RSS redis-server", rssOf(e.RSS, "redis-server"), "")
	} else {
		skipped("Redis per event id", "Redis claims", "Redis window ledger", "Redis CPU by command", "RSS validator", "RSS windower", "RSS publisher", "RSS nats-server+ingest", "RSS redis-server")
	}
	if bt := r.Batch; bt != nil {
		how := "receiptctl reconcile --events F (process wall time)"
		cost := ""
		if bt.InProcess {
			how = "reconcile.Count in the bench process"
		} else {
			cost = fmt.Sprintf("; CPU %.2f µs per event, peak RSS %d MB",
				float64(bt.ReconcileCPU.Nanoseconds())/1000/float64(bt.Records), bt.ReconcileRSS>>20)
		}
		row("Batch reconcile", eps(bt.ReconcileEPS), verdict(bt.ReconcileEPS >= TargetBatchEPS,
			fmt.Sprintf("target ≥ %s; %s, %s%s", eps(TargetBatchEPS), how, dur(bt.Reconcile), cost)))
		row("Batch python", eps(bt.PythonEPS), fmt.Sprintf("seed receipt_hourly_counts incl. json.loads, %s (process %s)", dur(bt.Python), dur(bt.PythonWall)))
		row("Batch ratio", fmt.Sprintf("%.2f×", bt.Ratio), "no target: the reference validates nothing")
	} else {
		skipped("Batch reconcile", "Batch python", "Batch ratio")
	}
	if d := r.Dup; d != nil {
		row("Dedup 0% dups", eps(d.CleanEPS), "the E2E run")
		row("Dedup 10% dups", eps(d.DupEPS), fmt.Sprintf("%d of %d records are retries (records/s, retries included)", d.Duplicates, d.Records))
		row("Dedup cost", pct(d.cost()), verdict(d.cost() <= TargetDupCost, fmt.Sprintf("target ≤ %.0f%%", 100*TargetDupCost)))
	} else {
		skipped("Dedup 0% dups", "Dedup 10% dups", "Dedup cost")
	}
	if s := r.Skew; s != nil {
		note := fmt.Sprintf("store-0 sends 50%%: busiest partition gets %.0f%% of records; ingest done %s, other partitions in KV by %s, hot one by %s",
			100*s.HotPartitionShare, dur(s.Published), dur(s.OthersDone), dur(s.HotDone))
		if s.BaseEPS > 0 {
			note += fmt.Sprintf("; %.2f× the uniform E2E", s.EPS/s.BaseEPS)
		}
		row("Skew 50% one store", eps(s.EPS), note)
	} else {
		skipped("Skew 50% one store")
	}
	if s, base := r.SkewSplit, r.Skew; s != nil && base != nil {
		row("Skew hot key split", eps(s.EPS), fmt.Sprintf("--hot-keys %s: busiest partition gets %.0f%% of records; ingest done %s, hot key's partitions in KV by %s, others by %s; every window count as expected",
			s.Hot, 100*s.HotPartitionShare, dur(s.Published), dur(s.HotDone), dur(s.OthersDone)))
		row("Skew split gain", fmt.Sprintf("%.2f×", s.EPS/base.EPS), "split run / unsplit skew run (events/s)")
	} else {
		skipped("Skew hot key split", "Skew split gain")
	}
	for _, n := range []int{1, 2, 4} {
		label := fmt.Sprintf("Scale %d windower", n)
		if n > 1 {
			label += "s"
		}
		i := slices.IndexFunc(r.Scale, func(s scaleResult) bool { return s.Windowers == n })
		if i < 0 {
			skipped(label)
			continue
		}
		s := r.Scale[i]
		eq := "windows identical to 1 windower (counts, digests, partials)"
		if !s.Equal {
			eq = "WINDOWS DIFFER from the 1-windower run"
		}
		row(label, eps(s.EPS), fmt.Sprintf("%d partitions split %s; %s", r.Partitions, splitOf(r.Partitions, n), eq))
	}
	var costs []string
	var total time.Duration
	for _, s := range r.Scale {
		wt, own := s.windowerCPU()
		if wt == 0 {
			continue
		}
		total = wt
		costs = append(costs, fmt.Sprintf("%d: %s (each per event of its partitions: %s; all processes %s)",
			s.Windowers, us(wt, s.Records), strings.Join(own, ", "), us(s.totalCPU(), s.Records)))
	}
	switch {
	case len(r.Scale) == 0:
		skipped("Scale windower CPU/event")
	case total == 0:
		row("Scale windower CPU/event", "n/a", "needs the services as processes (--mode process)")
	default:
		first, _ := r.Scale[0].windowerCPU()
		row("Scale windower CPU/event", us(first, r.Scale[0].Records),
			"windower CPU summed over instances per record, by instance count: "+strings.Join(costs, "; "))
	}
	for _, sig := range []string{"SIGTERM", "SIGKILL"} {
		label := "Hand-over " + sig
		i := slices.IndexFunc(r.Handover, func(h handoverResult) bool { return h.Signal == sig })
		switch {
		case r.HandoverNA:
			row(label, "n/a", "needs the services as processes (--mode process)")
		case i < 0:
			skipped(label)
		default:
			h := r.Handover[i]
			how := "released after draining"
			if sig == "SIGKILL" {
				how = "expired"
			}
			row(label, dur(h.Resumed), fmt.Sprintf("signal → the survivor's first Redis step on every moved partition; 2 windowers as a lease group, --lease-ttl %s, windower-0 (partitions %s) stopped after %d of %d records: its leases %s %s after the signal, taken %s after it (no owner in the bucket ≤ %s); run %s, every window count as expected",
				h.TTL, intList(h.Moved), h.Records*3/10, h.Records, how, dur(h.Released), dur(h.Taken), dur(h.NoOwner), eps(h.EPS)))
		}
	}
	r.printDoor(row, skipped)
	r.printIdle(row, skipped)
	r.printCluster(row, skipped)
}

// intList writes ps as 0,2,5.
func intList(ps []int) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ",")
}

// msOf is d in milliseconds.
func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func perEntry(bytes, entries int64) float64 {
	if entries == 0 {
		return math.NaN()
	}
	return float64(bytes) / float64(entries)
}

func splitOf(p, n int) string {
	if p%n == 0 {
		return fmt.Sprintf("%d each", p/n)
	}
	return "unevenly"
}

func rssNote(mode string) string {
	if mode == ModeInProcess {
		return "in-process mode: services share the bench process"
	}
	return "peak (VmHWM) of the service process"
}

func rssOf(m map[string]int64, prefix string) string {
	var parts []string
	for _, k := range slices.Sorted(mapsKeys(m)) {
		if k == prefix || strings.HasPrefix(k, prefix+"-") {
			parts = append(parts, mib(m[k]))
		}
	}
	if len(parts) == 0 {
		return "n/a"
	}
	return strings.Join(parts, " ")
}

func verdict(ok bool, s string) string {
	if ok {
		return "MET     " + s
	}
	return "NOT MET " + s
}

func eps(v float64) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	return groupThousands(int64(math.Round(v))) + " ev/s"
}

func ms(v float64) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	return fmt.Sprintf("%.1f ms", v)
}

// us is d per record in microseconds.
func us(d time.Duration, records int) string {
	if records == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f µs", float64(d.Microseconds())/float64(records))
}

func pct(v float64) string { return fmt.Sprintf("%.1f%%", 100*v) }

func mib(v int64) string { return fmt.Sprintf("%.1f MiB", float64(v)/(1<<20)) }

func dur(d time.Duration) string { return d.Round(time.Millisecond).String() }

func groupThousands(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// printDoor writes the front door's rows.
func (r *Results) printDoor(row func(label, value, note string), skipped func(...string)) {
	labels := []string{"Door receiptctl ingest", "Door HTTP 100 per req", "Door NATS 100 per req", "Door HTTP 1 per req", "Door NATS 1 per req", "Door NATS routing", "Door NATS floor", "Door p99 half load", "Door RSS 200 producers"}
	dr := r.Door
	switch {
	case r.DoorNA:
		for _, l := range labels {
			row(l, "n/a", "needs the services as processes (--mode process)")
		}
		return
	case dr == nil:
		skipped(labels...)
		return
	}
	cpu := func(run doorRun) string {
		var parts []string
		for _, k := range slices.Sorted(mapsKeys(run.CPU)) {
			parts = append(parts, k+" "+us(run.CPU[k], run.Records))
		}
		return strings.Join(parts, " + ")
	}
	cli := dr.CLI.cpuPerEvent()
	row("Door receiptctl ingest", eps(dr.CLI.EPS), fmt.Sprintf("the same records from a file, %d in %s; CPU %.1f µs per event (%s)", dr.CLI.Records, dur(dr.CLI.Elapsed), cli, cpu(dr.CLI)))
	ran := map[string]bool{}
	for _, run := range dr.Runs {
		target := TargetDoor100
		if run.PerRequest == 1 {
			target = TargetDoorSingle
		}
		ratio := run.cpuPerEvent() / cli
		label := fmt.Sprintf("Door %s %d per req", strings.ToUpper(run.Door), run.PerRequest)
		ran[label] = true
		row(label, eps(run.EPS), fmt.Sprintf("%d producers, %d records in %s; CPU %.1f µs per event (%s) = %.2f× receiptctl ingest's (%s); request p50 %.1f ms p99 %.1f ms",
			run.Producers, run.Records, dur(run.Elapsed), run.cpuPerEvent(), cpu(run), ratio, verdict(ratio <= target, fmt.Sprintf("target ≤ %.1f×", target)),
			run.Ms[len(run.Ms)/2], run.p99()))
	}
	for _, l := range labels[1:5] {
		if !ran[l] {
			skipped(l)
		}
	}
	if rt := dr.Routing; rt != nil {
		server, responder := us(rt.CPU["nats-server"], rt.Records), us(rt.CPU["responder"], rt.Records)
		row("Door NATS routing", server, fmt.Sprintf("nats-server's CPU per request-reply of one record, %d producers, %d requests, to a plain responder process storing nothing (%s of its own, one thread): the part of a NATS single-record request any NATS service pays (%.2f× receiptctl ingest's CPU per event with the responder's)",
			rt.Producers, rt.Records, responder, rt.cpuPerEvent()/cli))
	} else {
		skipped("Door NATS routing")
	}
	if rt, store := dr.Routing, dr.run("http-1"); rt != nil && store != nil {
		// nats-server's CPU per record of the HTTP single-record run is
		// its storing of the door's chained runs alone (no routing).
		stored := float64(store.CPU["nats-server"].Microseconds()) / float64(store.Records)
		floor := rt.cpuPerEvent() + stored
		row("Door NATS floor", fmt.Sprintf("%.1f µs", floor), fmt.Sprintf("routing and the plain responder (%.1f µs) + nats-server storing the door's records one per request (%.1f µs, the HTTP 1-per-request run) = %.2f× receiptctl ingest's CPU per event: what a NATS single-record request costs before the door parses, checks or acks anything (target of the NATS row ≤ %.1f×)",
			rt.cpuPerEvent(), stored, floor/cli, TargetDoorSingle))
	} else {
		skipped("Door NATS floor")
	}
	if h := dr.Half; h != nil {
		row("Door p99 half load", fmt.Sprintf("%.1f ms", h.p99()), fmt.Sprintf("HTTP ×100 at %.0f ev/s (half of its rate), %d records; %s",
			h.Rate, h.Records, verdict(h.p99() <= TargetDoorP99Ms, fmt.Sprintf("target ≤ %.0f ms", TargetDoorP99Ms))))
	} else {
		skipped("Door p99 half load")
	}
	if m := dr.RSS; m != nil {
		row("Door RSS 200 producers", fmt.Sprintf("%d MB", m.PeakRSS>>20), fmt.Sprintf("peak resident set of the ingest process under %d producers of 100-record requests (%d records, %s; --max-inflight-events bounds it)",
			m.Producers, m.Records, eps(m.EPS)))
	} else {
		skipped("Door RSS 200 producers")
	}
}
