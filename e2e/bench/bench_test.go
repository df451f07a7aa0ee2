package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/receiptflow/receiptflow/pkg/config"
	"github.com/receiptflow/receiptflow/pkg/window"
)

// TestOptionsRefused: Run refuses bad options before it starts anything.
func TestOptionsRefused(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{Mode: "threads"}, `unknown mode "threads"`},
		{Options{Mode: ModeInProcess, Only: []string{"b0", "nope"}}, `unknown scenario "nope"`},
		{Options{Mode: ModeInProcess, Partitions: 256}, "at most 255 partitions"},
		{Options{Mode: ModeProcess, BinDir: t.TempDir()}, "run make build"},
		{Options{Mode: ModeInProcess, LatencyLoad: 1.5}, "latency load 1.5"},
		{Options{Mode: ModeInProcess, LatencyLoad: -0.1}, "latency load -0.1"},
		{Options{Mode: ModeInProcess, LatencyBudget: -time.Millisecond}, "latency budget -1ms"},
		{Options{Mode: ModeInProcess, LatencyBudget: 2 * time.Minute}, "latency budget 2m0s"},
	} {
		_, err := Run(context.Background(), c.o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Run(%+v) = %v, want an error with %q", c.o, err, c.want)
		}
	}
}

// TestGenerate: a generated dataset has one line per record, routes each
// record to its key's partition, and expects per window exactly the new
// submissions the generator wrote; the dup10 mix has retries, which are
// never expected to count.
func TestGenerate(t *testing.T) {
	dir := t.TempDir()
	const events, partitions = 2000, 4
	ds, err := generate(dir, "base", mix("base", events), partitions, nil)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(ds.path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines int
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var rec struct {
			PartitionKey string `json:"partition_key"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("line %d: %v", lines+1, err)
		}
		if want := uint8(window.Partition(rec.PartitionKey, partitions)); ds.part[lines] != want {
			t.Fatalf("line %d (%s) routed to partition %d, want %d", lines+1, rec.PartitionKey, ds.part[lines], want)
		}
		lines++
	}
	if lines != ds.stats.Records || lines != len(ds.part) || lines != len(ds.win) {
		t.Fatalf("%d lines, stats say %d, %d partitions and %d windows recorded", lines, ds.stats.Records, len(ds.part), len(ds.win))
	}
	if st, _ := os.Stat(ds.path); st.Size() != ds.bytes {
		t.Fatalf("file is %d bytes, dataset says %d", st.Size(), ds.bytes)
	}
	var sum int
	for _, n := range ds.perPartition {
		sum += n
	}
	if sum != lines {
		t.Fatalf("per-partition counts sum to %d, want %d", sum, lines)
	}
	var expected int64
	for _, n := range ds.expected {
		expected += n
	}
	if expected != int64(ds.stats.Submissions) || expected == 0 {
		t.Fatalf("expected counts sum to %d, the generator wrote %d submissions", expected, ds.stats.Submissions)
	}
	if s := ds.hotShare(); s <= 0 || s > 1 {
		t.Fatalf("hotShare = %v", s)
	}

	dup, err := generate(dir, "dup10", mix("dup10", events), partitions, nil)
	if err != nil {
		t.Fatal(err)
	}
	var counted int
	for _, w := range dup.win {
		if w >= 0 {
			counted++
		}
	}
	if dup.stats.Duplicates == 0 || counted+dup.stats.Duplicates > len(dup.win) {
		t.Fatalf("dup10: %d duplicates, %d counted of %d records", dup.stats.Duplicates, counted, len(dup.win))
	}
}

// TestRunB0Tiny: a B0-only run over a few hundred records publishes and
// consumes every one of them (also with sync always, and through
// pkg/ingest), fills only the B0 figures of the results, and prints the B0
// rows.
func TestRunB0Tiny(t *testing.T) {
	var out bytes.Buffer
	const events = 300
	r, err := Run(context.Background(), Options{Events: events, Quick: true, Partitions: 2, Mode: ModeInProcess,
		Work: t.TempDir(), Only: []string{ScenarioB0}, Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	if r.B0 == nil || r.B0.Records != events || r.B0.PublishEPS <= 0 || r.B0.ConsumeEPS <= 0 {
		t.Fatalf("B0 = %+v, want %d records published and consumed", r.B0, events)
	}
	if r.B0Sync == nil || r.B0Sync.Records != events || r.B0Sync.PublishEPS <= 0 {
		t.Fatalf("B0 sync = %+v, want %d records published", r.B0Sync, events)
	}
	if r.Ingest == nil || r.Ingest.Records != events || r.Ingest.PublishEPS <= 0 {
		t.Fatalf("ingest alone = %+v, want %d records published", r.Ingest, events)
	}
	if r.E2E != nil || r.Latency != nil || r.Batch != nil || r.Dup != nil {
		t.Fatal("scenarios other than b0 ran")
	}
	m := r.JSON()
	if m["b0_publish_eps"] == nil || m["b0_consume_eps"] == nil || m["e2e_eps"] != nil {
		t.Fatalf("JSON = %v", m)
	}
	path := filepath.Join(t.TempDir(), "results.json")
	if err := r.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	var back map[string]any
	if err != nil || json.Unmarshal(b, &back) != nil || back["b0_publish_eps"] == nil {
		t.Fatalf("written results %s (%v)", b, err)
	}
	if !strings.Contains(out.String(), "B0") {
		t.Fatalf("table has no B0 row:\n%s", out.String())
	}
}

// TestCountedLine: the batch row reads its totals from receiptctl
// reconcile's summary line (services/receiptctl/cmd_reconcile.go).
func TestCountedLine(t *testing.T) {
	line := "records 1000000, valid 1000000, submissions 750113 (750113 counted in 25 windows, 0 too late), never count 249887, duplicates 0, rejected 0\n"
	m := countedLine.FindStringSubmatch(line)
	if m == nil || m[1] != "1000000" || m[2] != "750113" {
		t.Fatalf("summary line read as %q", m)
	}
}

// TestAddTextCounters: the barrier's wait counter is summed over its
// partitions, a longer name sharing its prefix is not, and the batch
// histogram's count gives the mean wait per batch.
func TestAddTextCounters(t *testing.T) {
	text := `# TYPE receiptflow_validator_barrier_wait_seconds_total counter
receiptflow_validator_barrier_wait_seconds_total{partition="0"} 0.5
receiptflow_validator_barrier_wait_seconds_total{partition="1"} 1.5
receiptflow_validator_barrier_wait_seconds_total_other 9
receiptflow_validator_batch_size_messages_sum 400
receiptflow_validator_batch_size_messages_count 100
`
	out := map[string]histMean{}
	addText(out, strings.NewReader(text))
	l := &latencyResult{Hist: out}
	ms, n, ok := l.barrierWait()
	if !ok || n != 100 || ms != 20 {
		t.Fatalf("barrier wait %v ms over %v batches (%v), want 20 ms over 100", ms, n, ok)
	}
}

// TestMeasurePeakRSSIsTheChilds: a small command started by a process
// holding a few hundred megabytes reports its own peak resident set, not
// its parent's (batch.go's receiptctl row printed the bench process's).
func TestMeasurePeakRSSIsTheChilds(t *testing.T) {
	const held = 384 << 20
	ballast := make([]byte, held)
	for i := range ballast {
		ballast[i] = byte(i) // touched: resident, not only reserved
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	m, err := measure(context.Background(), &out, &out, self, "-test.run=^$")
	if err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if m.MaxRSS <= 0 || m.MaxRSS >= held/4 {
		t.Fatalf("peak RSS of an idle test binary = %d MB while its parent holds %d MB: want its own few MB",
			m.MaxRSS>>20, held>>20)
	}
	if m.Wall <= 0 || m.User+m.System <= 0 {
		t.Fatalf("measured %+v: want its wall and CPU time", m)
	}
	// A failing command is an error, and still measured.
	if m, err := measure(context.Background(), &out, &out, self, "-test.run=^$", "-no-such-flag"); err == nil || m.Exit == 0 {
		t.Fatalf("a failing command: exit %d, err %v", m.Exit, err)
	}
	runtime.KeepAlive(ballast)
}

// TestLatencyVerdictOnlyAtHalfLoad: the p99 target is judged at half load
// only; a run at another --latency-load says its load and no verdict.
func TestLatencyVerdictOnlyAtHalfLoad(t *testing.T) {
	ms := make([]float64, 100)
	for i := range ms {
		ms[i] = float64(i + 1)
	}
	for _, c := range []struct {
		load      float64
		want, not string
	}{
		{0.5, "NOT MET target ≤ 60 ms", "not judged"},
		{0, "NOT MET target ≤ 60 ms", "not judged"}, // results from before the flag
		{0.03, "not judged: the target (≤ 60 ms) is set at half load, this run is at 0.03", "NOT MET"},
	} {
		var out bytes.Buffer
		r := &Results{Latency: &latencyResult{Rate: 100, Load: c.load, Achieved: 100, Records: len(ms), Ms: ms}}
		r.print(&out)
		var p99 string
		for _, line := range strings.Split(out.String(), "\n") {
			if strings.HasPrefix(line, "Latency p99") {
				p99 = line
			}
		}
		if !strings.Contains(p99, c.want) || strings.Contains(p99, c.not) {
			t.Errorf("load %v: p99 row %q, want %q and no %q", c.load, p99, c.want, c.not)
		}
	}
}

// TestStepsRead: the services' per-step histograms are read per step,
// from a scrape (two instances summed) and from an in-process registry
// alike, and the row gives each step's mean per batch.
func TestStepsRead(t *testing.T) {
	text := `# TYPE receiptflow_windower_batch_step_seconds histogram
receiptflow_windower_batch_step_seconds_bucket{step="apply",le="0.001"} 1
receiptflow_windower_batch_step_seconds_sum{step="apply"} 0.003
receiptflow_windower_batch_step_seconds_count{step="apply"} 2
receiptflow_windower_batch_step_seconds_sum{step="mark"} 0.002
receiptflow_windower_batch_step_seconds_count{step="mark"} 2
receiptflow_publisher_batch_step_seconds_sum{step="read"} 0.008
receiptflow_publisher_batch_step_seconds_count{step="read"} 4
`
	out := map[string]histMean{}
	addText(out, strings.NewReader(text))
	addText(out, strings.NewReader(text)) // a second instance
	got := describeSteps(out)
	want := "windower apply 1.5, mark 1.0; publisher read 2.0 (ms, mean per batch)"
	if got != want {
		t.Fatalf("steps from a scrape: %q, want %q", got, want)
	}

	reg := prometheus.NewRegistry()
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: stepsPublisher}, []string{"step"})
	reg.MustRegister(h)
	h.WithLabelValues("wait").Observe(0.010)
	h.WithLabelValues("wait").Observe(0.030)
	h.WithLabelValues("put").Observe(0.004)
	got = describeSteps(gatherRegistries([]*prometheus.Registry{reg}))
	if want := "publisher wait 20.0, put 4.0 (ms, mean per batch)"; got != want {
		t.Fatalf("steps from a registry: %q, want %q", got, want)
	}
	if m := stepMeans(gatherRegistries([]*prometheus.Registry{reg})); m["publisher.wait"] != 20.0 || m["publisher.put"] != 4.0 || len(m) != 2 {
		t.Fatalf("step means %v", m)
	}
}

// TestLatencyBudgetReachesServices: --latency-budget is given to every
// service (the flags a service process gets, which the in-process
// services parse too), and the default leaves the services' own default.
func TestLatencyBudgetReachesServices(t *testing.T) {
	for _, c := range []struct {
		budget, want time.Duration
	}{
		{5 * time.Millisecond, 5 * time.Millisecond},
		{0, config.DefaultLatencyBudget},
	} {
		spec := deploySpec{natsURL: "nats://127.0.0.1:4222", redisURL: "redis://127.0.0.1:6379", partitions: 8, budget: c.budget}
		common, err := spec.common()
		if err != nil {
			t.Fatal(err)
		}
		if common.LatencyBudget != c.want {
			t.Errorf("budget %s: services get --latency-budget %s, want %s (args %q)", c.budget, common.LatencyBudget, c.want, spec.commonArgs())
		}
	}
}

// TestLatencyCPUPerEvent: the latency row gives the run's CPU per event,
// summed over the processes, and the JSON the same figure.
func TestLatencyCPUPerEvent(t *testing.T) {
	ms := []float64{1, 2, 3, 4}
	r := &Results{Budget: 5 * time.Millisecond, Latency: &latencyResult{Rate: 100, Load: 0.5, Achieved: 100, Records: 1000, Ms: ms,
		CPU: map[string]time.Duration{"bench": 30 * time.Millisecond, "validator": 12500 * time.Microsecond}}}
	var out bytes.Buffer
	r.print(&out)
	if !strings.Contains(out.String(), "CPU 42.5 µs per event at this load") {
		t.Errorf("no CPU per event of 42.5 µs in the latency rows:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "latency budget 5ms") {
		t.Errorf("the header does not name the budget:\n%s", out.String())
	}
	d := r.JSON()["details"].(map[string]any)
	if d["latency_cpu_us_per_event"] != 42.5 || d["latency_budget_ms"] != 5.0 {
		t.Errorf("details: CPU %v, budget %v; want 42.5 and 5", d["latency_cpu_us_per_event"], d["latency_budget_ms"])
	}
}

// TestHalfLoadCPUVerdict: the CPU per event of the latency run is judged
// against 1.3× the full-load run's at half load only.
func TestHalfLoadCPUVerdict(t *testing.T) {
	for _, c := range []struct {
		load      float64
		halfCPU   time.Duration
		want, not string
	}{
		{0.5, 120 * time.Second, "MET     1.20× full load", "NOT MET"},
		{0.5, 140 * time.Second, "NOT MET 1.40× full load", "not judged"},
		{0.03, 140 * time.Second, "not judged", "MET"},
	} {
		var out bytes.Buffer
		r := &Results{
			E2E:     &e2eResult{Records: 1_000_000, PartitionDone: []time.Duration{time.Second}, CPU: map[string]time.Duration{"validator": 60 * time.Second, "windower": 40 * time.Second}},
			Latency: &latencyResult{Rate: 100, Load: c.load, Achieved: 100, Records: 1_000_000, Ms: []float64{1}, CPU: map[string]time.Duration{"all": c.halfCPU}},
		}
		r.print(&out)
		var row string
		for _, line := range strings.Split(out.String(), "\n") {
			if strings.HasPrefix(line, "Latency CPU per event") {
				row = line
			}
		}
		if !strings.Contains(row, c.want) || strings.Contains(row, c.not) {
			t.Errorf("load %v, %v: row %q, want %q and no %q", c.load, c.halfCPU, row, c.want, c.not)
		}
	}
}
