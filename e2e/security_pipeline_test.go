package e2e

// The pipeline as deployed: each service runs through daemon.Main (the
// code of the service binaries, in-process) with its own NATS and Redis
// user from the deploy files, restarted when it exits the way a container
// would be. Helpers to ingest, wait for the drain, read the windows and
// compare them with a clean embedded run.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/boundedrun"
	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/daemon"
	"github.com/receiptflow/receiptflow/pkg/ingest"
	"github.com/receiptflow/receiptflow/pkg/pipeline"
	"github.com/receiptflow/receiptflow/pkg/publisher"
	"github.com/receiptflow/receiptflow/pkg/traffic"
	"github.com/receiptflow/receiptflow/pkg/validator"
	"github.com/receiptflow/receiptflow/pkg/windower"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// secNow is the ingest time of every run here, so that two runs of one
// file stamp the same ingested_at.
var secNow = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

// secHorizon is the replay horizon of every run here (the flag default),
// so the windower's retirement path runs with its real permissions.
const secHorizon = 24 * time.Hour

// secBuild mirrors services/<name>/main.go.
func secBuild(name string) func(d *daemon.Deps) (daemon.Runner, error) {
	return func(d *daemon.Deps) (daemon.Runner, error) {
		switch name {
		case "validator":
			return validator.New(d.NATS.JS, d.Store, validator.Config{
				Names: d.Names, Partitions: d.Common.Partitions, Owned: d.Owned, Validator: d.Validator,
				Logger: d.Logger, Registerer: d.Registerer, Failpoints: d.Failpoints,
			}), nil
		case "windower":
			return windower.New(d.NATS.JS, d.Store, windower.Config{
				Names: d.Names, Partitions: d.Common.Partitions, Owned: d.Owned,
				Logger: d.Logger, Registerer: d.Registerer, Failpoints: d.Failpoints,
			}), nil
		case "publisher":
			return publisher.New(d.NATS.JS, d.Store, publisher.Config{
				Names: d.Names, Partitions: d.Common.Partitions, Grace: d.Common.Grace, StaleAfter: d.Common.StaleAfter,
				Logger: d.Logger, Registerer: d.Registerer, Failpoints: d.Failpoints,
				WindowRetention: d.Common.WindowRetention, DayRetention: d.Common.DayRetention,
			}), nil
		}
		return nil, fmt.Errorf("no service %q", name)
	}
}

// secLog is a goroutine-safe log sink.
type secLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *secLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *secLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// lines returns the JSON log records.
func (l *secLog) records() []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(l.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// secProc is one service instance run through daemon.Main, restarted (with
// the same arguments) each time it exits while its context is live.
type secProc struct {
	name     string
	log      *secLog
	runs     atomic.Int32
	exitErrs atomic.Int32
	done     chan struct{}
}

// secServiceContext is the context services run under: like a process's
// signal context it has no deadline, so that nats.go applies its own
// per-request timeouts (it keeps a caller's deadline instead, and a test
// deadline of minutes would let a request lost in a failover hang).
func secServiceContext() (context.Context, context.CancelFunc) {
	return context.WithCancel(context.Background())
}

// secStartService runs daemon.Main(name, args) until ctx ends.
func secStartService(t testing.TB, ctx context.Context, label, name string, args []string) *secProc {
	t.Helper()
	p := &secProc{name: label, log: &secLog{}, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for ctx.Err() == nil {
			p.runs.Add(1)
			if code := daemon.Main(ctx, name, args, p.log, secBuild(name)); code != 0 && ctx.Err() == nil {
				p.exitErrs.Add(1)
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			t.Errorf("%s did not stop within 20s of its context", label)
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", label, p.log.String())
		}
	})
	return p
}

// exitErrors returns the errors the runs stopped with.
func (p *secProc) exitErrors() []string {
	var out []string
	for _, r := range p.log.records() {
		if r["msg"] == "service stopped" && r["level"] == "ERROR" {
			out = append(out, fmt.Sprint(r["err"]))
		}
	}
	return out
}

// httpAddr is the address of the latest run's /metrics, /healthz, /readyz.
func (p *secProc) httpAddr() string {
	addr := ""
	for _, r := range p.log.records() {
		if r["msg"] == "http listening" {
			addr, _ = r["addr"].(string)
		}
	}
	return addr
}

// get fetches path from the latest run's HTTP port.
func (p *secProc) get(path string) (int, string, error) {
	addr := p.httpAddr()
	if addr == "" {
		return 0, "", fmt.Errorf("%s: no http address logged yet", p.name)
	}
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// secServiceArgs are the flags of a service logged in as its own NATS and
// Redis user with the dev passwords, not allowed to create streams.
func secServiceArgs(user, natsURL, redisURL string, extra ...string) []string {
	return append([]string{
		"--nats-url", natsURL, "--redis-url", redisURL,
		"--nats-user", user, "--nats-password-file", secPasswordFile("nats", user),
		"--redis-user", user, "--redis-password-file", secPasswordFile("redis", user),
		"--ensure-streams=false", "--partitions", "8", "--replay-horizon", secHorizon.String(),
		"--http-addr", "127.0.0.1:0", "--stats-interval", "200ms",
	}, extra...)
}

// secGenerate writes a generated stream with every kind of trouble (the
// shape of run_test.go's, smaller) and returns its path.
func secGenerate(t testing.TB, events int, seed uint64) string {
	t.Helper()
	var buf bytes.Buffer
	if _, err := traffic.Write(&buf, traffic.Config{
		Seed: seed, Events: events, Start: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC), Hours: 8, Stores: 40,
		DupRate: 0.08, DisorderRate: 0.2, LateRate: 0.03, InvalidRate: 0.03, V1Share: 0.3, OtherTypeShare: 0.1,
	}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "events.ndjson")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// secIngest publishes the file at path as the ingest user, with the end of
// stream, and returns the stats. A publish that fails (a node going away)
// starts the file again: every record's message id makes that a no-op for
// what was stored.
func secIngest(t testing.TB, ctx context.Context, js jetstream.JetStream, path string) ingest.Stats {
	t.Helper()
	v, err := contract.NewValidator(contract.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for attempt := 1; ; attempt++ {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		in := ingest.New(js, ingest.Config{Partitions: 8, Validator: v, EndOfStream: true, Now: func() time.Time { return secNow }})
		st, err := ingest.File(ctx, in, f, nil)
		f.Close()
		if err == nil {
			return st
		}
		if attempt == 3 || ctx.Err() != nil {
			t.Fatalf("ingest: %v", err)
		}
		t.Logf("ingest attempt %d: %v; publishing the file again", attempt, err)
	}
}

// secWaitDrained waits until the durable consumers of RAW, VALID and
// CHANGES number want and have nothing pending or unacknowledged, three
// looks in a row.
func secWaitDrained(t testing.TB, ctx context.Context, js jetstream.JetStream, want int, total time.Duration) {
	t.Helper()
	if err := secDrained(ctx, js, want, total); err != nil {
		t.Fatal(err)
	}
}

func secDrained(ctx context.Context, js jetstream.JetStream, want int, total time.Duration) error {
	deadline := time.Now().Add(total)
	quiet := 0
	last := ""
	for time.Now().Before(deadline) {
		backlog, err := secBacklog(ctx, js)
		var sum uint64
		for _, v := range backlog {
			sum += v
		}
		switch {
		case err != nil:
			quiet, last = 0, err.Error()
		case len(backlog) >= want && sum == 0:
			quiet++
			if quiet == 3 {
				return nil
			}
		default:
			quiet = 0
			var busy []string
			for k, v := range backlog {
				if v > 0 {
					busy = append(busy, fmt.Sprintf("%s=%d", k, v))
				}
			}
			last = fmt.Sprintf("%d consumers, backlog %d: %v", len(backlog), sum, busy)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("pipeline not drained after %s: %s", total, last)
}

// secBacklog returns the pending plus unacknowledged messages of every
// durable consumer of RAW, VALID and CHANGES, by stream/consumer.
func secBacklog(ctx context.Context, js jetstream.JetStream) (map[string]uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out := map[string]uint64{}
	for _, name := range []string{wire.Raw, wire.Valid, wire.Changes} {
		st, err := js.Stream(ctx, name)
		if err != nil {
			return nil, err
		}
		l := st.ListConsumers(ctx)
		for ci := range l.Info() {
			if ci.Config.Durable == "" {
				continue
			}
			out[name+"/"+ci.Name] = ci.NumPending + uint64(ci.NumAckPending)
		}
		if err := l.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// secCleanRun runs path through the embedded pipeline (no users, one
// process) and returns its windows: the reference for the deployed runs.
func secCleanRun(t testing.TB, path string) []wire.Window {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := boundedrun.Run(ctx, boundedrun.Config{
		Config: pipeline.Config{DataDir: t.TempDir(), Partitions: 8, ReplayHorizon: secHorizon},
		Events: path, Now: secNow,
	})
	if err != nil {
		t.Fatalf("clean run: %v", err)
	}
	if !res.Report.Holds {
		t.Fatalf("clean run: parity does not hold")
	}
	return res.Windows
}

// secWindow is what two runs of one file must agree on: everything but
// wall-clock fields (updated_at, the watermark at write time, stale,
// first_output_version).
type secWindow struct {
	ID                                string
	Count, Version, Corrections, Late int64
	Status, Digest                    string
	Partials                          string
}

func secProject(ws []wire.Window) []secWindow {
	out := make([]secWindow, len(ws))
	for i, w := range ws {
		var parts []string
		for _, p := range w.Partitions {
			parts = append(parts, fmt.Sprintf("%d:%d/%d/%d/%d", p.Partition, p.Count, p.Corrections, p.LateDropped, p.Version))
		}
		out[i] = secWindow{w.WindowID, w.Count, w.Version, w.Corrections, w.LateDropped, string(w.Status), w.Digest, strings.Join(parts, " ")}
	}
	return out
}

// secSameWindows fails the test unless got and want agree window by window.
func secSameWindows(t testing.TB, got, want []wire.Window) {
	t.Helper()
	g, w := secProject(got), secProject(want)
	if reflect.DeepEqual(g, w) {
		return
	}
	if len(g) != len(w) {
		t.Fatalf("%d windows, the clean run has %d", len(g), len(w))
	}
	for i := range g {
		if g[i] != w[i] {
			t.Errorf("window %d:\n got %+v\nwant %+v", i, g[i], w[i])
		}
	}
	t.FailNow()
}

// secNoSecretsLogged fails if any dev password appears in logs.
func secNoSecretsLogged(t testing.TB, logs ...*secLog) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(secSecretsDir, "*.password"))
	for _, f := range files {
		b, _ := os.ReadFile(f)
		pw := strings.TrimSpace(string(b))
		for _, l := range logs {
			if pw != "" && strings.Contains(l.String(), pw) {
				t.Errorf("the password of %s appears in a service log", filepath.Base(f))
			}
		}
	}
}
