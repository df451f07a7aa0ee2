package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/config"
	"github.com/receiptflow/receiptflow/pkg/reconcile"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/traffic"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// aheadEvent occurred 3 minutes after its ingested_at: future_timestamp
// under a 1m skew, counted under the default 5m.
const aheadEvent = `{"schema_version":2,"event_id":"evt-ahead","receipt_id":"rcpt-ahead","type":"submitted","occurred_at":"2026-12-02T10:23:00Z","ingested_at":"2026-12-02T10:20:00Z","partition_key":"store-a","producer_version":"pos-2.4.1"}` + "\n"

// eventsWithAhead writes the seed fixture and aheadEvent to a file.
func eventsWithAhead(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(seed)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "events.ndjson")
	if err := os.WriteFile(path, append(b, aheadEvent...), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// futureRejects reads how many records a batch.json rejected future_timestamp.
func futureRejects(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "batch.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		ByReason map[string]int `json:"rejected_by_reason"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return s.ByReason["future_timestamp"]
}

// rejectedAs returns the reasons rejected.ndjson in dir gives event id.
func rejectedAs(t *testing.T, dir, id string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "rejected.ndjson"))
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r struct {
			EventID string `json:"event_id"`
			Reason  string `json:"reason"`
		}
		if json.Unmarshal([]byte(l), &r) == nil && r.EventID == id {
			reasons = append(reasons, r.Reason)
		}
	}
	return reasons
}

// TestReconcileJudgesWithTheDeploymentsSkew (issue 25): a deployment set
// up with RECEIPTS_MAX_FUTURE_SKEW=1m rejects an event that occurred 3
// minutes after its ingested_at, and reconcile given no parameter flags —
// against the deployment (NATS_URL) or against the run's artifacts —
// judges it rejected too. Before, reconcile judged with the default 5m
// and counted it.
func TestReconcileJudgesWithTheDeploymentsSkew(t *testing.T) {
	_, url := testenv.NATS(t)
	redisURL := testenv.RedisServer(t).URL()
	events := eventsWithAhead(t)
	dir := t.TempDir()
	t.Setenv("RECEIPTS_MAX_FUTURE_SKEW", "1m")
	if code, out, e := runCLI(t, "run", "--events", events, "--out", dir, "--nats-url", url, "--redis-url", redisURL); code != 0 {
		t.Fatalf("run: exit %d\n%s\n%s", code, out, e)
	}
	if got := rejectedAs(t, dir, "evt-ahead"); len(got) != 1 || got[0] != "future_timestamp" {
		t.Fatalf("the pipeline rejected evt-ahead as %v, want [future_timestamp]", got)
	}
	b, err := os.ReadFile(filepath.Join(dir, "rejected.ndjson"))
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Count(string(b), `"future_timestamp"`)

	// The operator's shell has no RECEIPTS_MAX_FUTURE_SKEW: the deployment knows.
	t.Setenv("RECEIPTS_MAX_FUTURE_SKEW", "")
	t.Setenv("NATS_URL", url)
	check := t.TempDir()
	if code, out, e := runCLI(t, "reconcile", "--events", events, "--out", check); code != 0 {
		t.Fatalf("reconcile against the deployment: exit %d\n%s\n%s", code, out, e)
	}
	if got := futureRejects(t, check); got != want {
		t.Fatalf("reconcile against the deployment: %d future_timestamp rejections, the pipeline %d", got, want)
	}

	t.Setenv("NATS_URL", "")
	check = t.TempDir()
	code, out, e := runCLI(t, "reconcile", "--events", events, "--windows", filepath.Join(dir, "windows.json"), "--out", check)
	if code != 0 || !strings.Contains(out, "parity holds") {
		t.Fatalf("reconcile of the run's artifacts: exit %d\n%s\n%s", code, out, e)
	}
	if got := futureRejects(t, check); got != want {
		t.Fatalf("reconcile of the run's artifacts: %d future_timestamp rejections, the pipeline %d", got, want)
	}
}

// reconcileOptions parses reconcile's flags (NATS_URL from the
// environment) and returns the batch pass's options and the parameters.
func reconcileOptions(t *testing.T, args ...string) (reconcile.Config, config.Params, error) {
	t.Helper()
	fs := flag.NewFlagSet("reconcile", flag.ContinueOnError)
	var p config.Params
	var f reconcileFlags
	f.register(fs, &p)
	if err := fs.Parse(append([]string{"--events", seed}, args...)); err != nil {
		t.Fatal(err)
	}
	opts, err := f.options(context.Background(), fs, &p)
	return opts, p, err
}

// deployed are parameters other than every default, as a set-up job
// records them.
var deployed = config.Params{Partitions: 4, Lateness: 2 * time.Minute, Grace: 30 * time.Minute, HeartbeatEvery: 7,
	MaxFutureSkew: time.Minute, HotKeys: "store-a=2", ReplayHorizon: 3 * time.Hour, SourceIdle: 5 * time.Minute}

// setUp records p for generation 1 on a fresh deployment as the set-up
// does (stream.Ensure with config.Common.Topology; nil: no record) and
// returns its URL.
func setUp(t *testing.T, p *config.Params) string {
	t.Helper()
	_, url := testenv.NATS(t)
	c := config.Common{Generation: "1"}
	topology := stream.Config{} // as older versions set up: nothing recorded
	if p != nil {
		c.Params = *p
		topology = c.Topology(0)
	}
	if err := stream.Ensure(context.Background(), testenv.JetStream(t, url), wire.For("1"), topology); err != nil {
		t.Fatal(err)
	}
	return url
}

// TestReconcileUsesEveryRecordedParameter (issue 25): reconcile given no
// parameter flag judges with every parameter the deployment recorded, or
// a run recorded beside its windows.json.
func TestReconcileUsesEveryRecordedParameter(t *testing.T) {
	check := func(what string, opts reconcile.Config, p config.Params, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if p != deployed {
			t.Fatalf("%s: parameters %+v, want %+v", what, p, deployed)
		}
		if opts.Partitions != 4 || opts.Lateness != 2*time.Minute || opts.Grace != 30*time.Minute || opts.HeartbeatEvery != 7 ||
			opts.Horizon != 3*time.Hour || opts.HotKeys["store-a"] != 2 || len(opts.HotKeys) != 1 || opts.SourceIdle != 5*time.Minute {
			t.Fatalf("%s: options %+v", what, opts)
		}
	}
	t.Setenv("NATS_URL", setUp(t, &deployed))
	opts, p, err := reconcileOptions(t)
	check("against the deployment", opts, p, err)

	t.Setenv("NATS_URL", "")
	dir := t.TempDir()
	if err := config.WriteParams(dir, "1", deployed); err != nil {
		t.Fatal(err)
	}
	opts, p, err = reconcileOptions(t, "--windows", filepath.Join(dir, "windows.json"))
	check("of a run's artifacts", opts, p, err)
}

// TestReconcileRefusesADisagreeingFlag: a parameter flag given with another
// value than the deployment's record is a usage error (exit 2) naming the
// parameter and both values; the same value is accepted.
func TestReconcileRefusesADisagreeingFlag(t *testing.T) {
	t.Setenv("NATS_URL", setUp(t, &deployed))
	code, _, errOut := runCLI(t, "reconcile", "--events", seed, "--grace", "2h")
	if code != 2 || !strings.Contains(errOut, "--grace 2h0m0s disagrees") || !strings.Contains(errOut, "30m0s") {
		t.Fatalf("--grace 2h against a record of 30m: exit %d, %q; want 2 naming both values", code, errOut)
	}
	if code, out, errOut := runCLI(t, "reconcile", "--events", seed, "--grace", "30m", "--partitions", "4"); code != 0 {
		t.Fatalf("agreeing flags: exit %d\n%s\n%s", code, out, errOut)
	}
}

// TestReconcileWithoutRecordedParameters: a deployment whose RAW records
// no parameters (made by an older version) is judged with the flags and
// the defaults, as before.
func TestReconcileWithoutRecordedParameters(t *testing.T) {
	t.Setenv("NATS_URL", setUp(t, nil))
	_, p, err := reconcileOptions(t)
	if err != nil || p != config.Defaults() {
		t.Fatalf("no flags: %+v, %v; want the defaults", p, err)
	}
	_, p, err = reconcileOptions(t, "--grace", "2h", "--partitions", "4")
	if err != nil || p.Grace != 2*time.Hour || p.Partitions != 4 {
		t.Fatalf("flags: %+v, %v", p, err)
	}
}

// TestRebuildTakesTheDeploymentsParameters: a rebuild into a new
// generation keeps the flags given and takes the active generation's
// record for the others, and records them for the new generation; a
// generation that has a record already must agree with the flags.
func TestRebuildTakesTheDeploymentsParameters(t *testing.T) {
	url := setUp(t, &deployed)
	parse := func(args ...string) (pipelineCfg, error) {
		fs := flag.NewFlagSet("rebuild", flag.ContinueOnError)
		g := registerGenerationFlags(fs)
		if err := fs.Parse(append([]string{"--nats-url", url, "--redis-url", "redis://127.0.0.1:1"}, args...)); err != nil {
			t.Fatal(err)
		}
		pc, err := g.config(context.Background(), fs, io.Discard)
		return pipelineCfg{pc.Partitions, pc.Grace, pc.Contract.MaxFutureSkew, pc.Stream.Record}, err
	}
	got, err := parse("--generation", "2", "--grace", "2h")
	if err != nil || got.partitions != 4 || got.grace != 2*time.Hour || got.skew != time.Minute || got.record["rf.2.grace"] != "2h0m0s" || got.record["rf.2.partitions"] != "4" {
		t.Fatalf("rebuild --generation 2 --grace 2h: %+v, %v", got, err)
	}
	c := config.Common{Params: deployed, Generation: "3"}
	if err := stream.Ensure(context.Background(), testenv.JetStream(t, url), wire.For("3"), c.Topology(0)); err != nil {
		t.Fatal(err)
	}
	_, err = parse("--generation", "3", "--grace", "2h")
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), "--grace 2h0m0s disagrees") || !strings.Contains(err.Error(), "30m0s") {
		t.Fatalf("rebuild into recorded generation 3 with another grace: %v", err)
	}
}

// pipelineCfg is what TestRebuildTakesTheDeploymentsParameters reads of a
// pipeline.Config.
type pipelineCfg struct {
	partitions  int
	grace, skew time.Duration
	record      map[string]string
}

// TestIngestTakesTheDeploymentsParameters: ingest routes records by the
// deployment's recorded partitions and hot keys and beats at its recorded
// heartbeat period when no flag says otherwise, and refuses a flag that
// disagrees (exit 2, naming both values). Before, ingest used its own
// defaults: 8 partitions against a deployment of 4, so half the records
// went to subjects no validator reads.
func TestIngestTakesTheDeploymentsParameters(t *testing.T) {
	url := setUp(t, &deployed)
	o := traffic.DefaultConfig()
	o.Events = 200
	var data bytes.Buffer
	if _, err := traffic.Write(&data, o); err != nil {
		t.Fatal(err)
	}
	events := filepath.Join(t.TempDir(), "events.ndjson")
	if err := os.WriteFile(events, data.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := runCLI(t, "ingest", "--events", events, "--nats-url", url, "--partitions", "8")
	if code != 2 || !strings.Contains(errOut, "--partitions 8 disagrees") || !strings.Contains(errOut, "4") {
		t.Fatalf("--partitions 8 against a record of 4: exit %d, %q; want 2 naming both values", code, errOut)
	}
	if code, out, errOut := runCLI(t, "ingest", "--events", events, "--nats-url", url); code != 0 {
		t.Fatalf("ingest with the recorded parameters: exit %d\n%s\n%s", code, out, errOut)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := testenv.JetStream(t, url).Stream(ctx, wire.For("1").Stream(wire.Raw))
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(">"))
	if err != nil {
		t.Fatal(err)
	}
	used := map[int]bool{}
	for subj := range info.State.Subjects {
		i := strings.LastIndexByte(subj, '.')
		p, err := strconv.Atoi(subj[i+1:])
		if err != nil {
			t.Fatalf("RAW subject %q names no partition", subj)
		}
		used[p] = true
	}
	for p := range used {
		if p >= deployed.Partitions {
			t.Fatalf("RAW subjects %v: partition %d outside the deployment's %d", info.State.Subjects, p, deployed.Partitions)
		}
	}
	if len(used) != deployed.Partitions {
		t.Fatalf("RAW subjects %v: want all %d partitions used", info.State.Subjects, deployed.Partitions)
	}
}
