// Package faults holds the process-level fault tests: the services run as
// separate processes built from services/, against a real redis-server and
// an in-process nats-server, and are killed, crashed by failpoints and cut
// off from restarted servers while a generated stream flows. Every test
// ends with windows equal to the clean run's and parity holding.
package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/e2e/faults/natsproc"
	"github.com/receiptflow/receiptflow/pkg/boundedrun"
	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/ingest"
	"github.com/receiptflow/receiptflow/pkg/pipeline"
	"github.com/receiptflow/receiptflow/pkg/reconcile"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/traffic"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// events is the size of the generated stream of every fault test.
const events = 100_000

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error

	// dataDir holds the generated fixtures; TestMain removes it.
	dataDir string
	// natsBin builds the real nats-server of the broker tests once.
	natsBin natsproc.Binary
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "receiptflow-faults-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = filepath.Join(dir, "bin")
	dataDir = dir
	natsBin.Dir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// binariesEnv names a directory of prebuilt validator, windower, publisher
// and receiptctl binaries to test instead of this tree's (e.g. built from
// an older commit, to show a fault test failing on the code before a fix).
const binariesEnv = "RECEIPTFLOW_FAULTS_BIN"

// keepLogsEnv names a folder where the services' and ingest's logs of
// every fault test are kept (a folder per test run, named after the test
// and the time), to read after a failure; unset, they go to the test's
// temporary folder and are removed with it.
const keepLogsEnv = "RECEIPTFLOW_FAULTS_KEEP_LOGS"

var (
	logDirsMu sync.Mutex
	logDirs   = map[*testing.T]string{}
)

// logDir is the folder of t's process logs: under $RECEIPTFLOW_FAULTS_KEEP_LOGS
// when set (kept, and named in the test's log), else t.TempDir().
func logDir(t *testing.T) string {
	t.Helper()
	root := os.Getenv(keepLogsEnv)
	if root == "" {
		return t.TempDir()
	}
	logDirsMu.Lock()
	defer logDirsMu.Unlock()
	if d, ok := logDirs[t]; ok {
		return d
	}
	d := filepath.Join(root, fmt.Sprintf("%s-%d", strings.ReplaceAll(t.Name(), "/", "_"), time.Now().UnixNano()))
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("process logs kept in %s", d)
	logDirs[t] = d
	t.Cleanup(func() {
		logDirsMu.Lock()
		delete(logDirs, t)
		logDirsMu.Unlock()
	})
	return d
}

// binaries builds the service binaries and receiptctl once (or returns
// $RECEIPTFLOW_FAULTS_BIN).
func binaries(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv(binariesEnv); dir != "" {
		return dir
	}
	buildOnce.Do(func() {
		cmd := exec.Command("go", "build", "-o", binDir+"/",
			"github.com/receiptflow/receiptflow/services/ingest",
			"github.com/receiptflow/receiptflow/services/validator",
			"github.com/receiptflow/receiptflow/services/windower",
			"github.com/receiptflow/receiptflow/services/publisher",
			"github.com/receiptflow/receiptflow/services/receiptctl")
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

var troubled = traffic.Config{
	Seed: 77, Events: events, Start: time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC), Hours: 24, Stores: 60,
	DupRate: 0.05, DisorderRate: 0.2, LateRate: 0.02, InvalidRate: 0.02, V1Share: 0.3, OtherTypeShare: 0.1,
}

// dataset is one generated input and its clean run, each made once per
// test binary.
type dataset struct {
	name string
	opts traffic.Config

	fixtureOnce sync.Once
	path        string
	fixtureErr  error
	cleanOnce   sync.Once
	clean       *boundedrun.Result
	cleanErr    error
}

// troubledSet is the 100k-event input of the service fault tests.
var troubledSet = &dataset{name: "troubled", opts: troubled}

// fixture writes the dataset's NDJSON file once and returns its path.
func (ds *dataset) fixture(t *testing.T) string {
	t.Helper()
	ds.fixtureOnce.Do(func() {
		var buf bytes.Buffer
		ds.path = filepath.Join(dataDir, ds.name+".ndjson")
		if _, ds.fixtureErr = traffic.Write(&buf, ds.opts); ds.fixtureErr == nil {
			ds.fixtureErr = os.WriteFile(ds.path, buf.Bytes(), 0o644)
		}
	})
	if ds.fixtureErr != nil {
		t.Fatal(ds.fixtureErr)
	}
	return ds.path
}

// cleanRun is the in-process run of the dataset without faults that the
// faulty runs are compared with.
func (ds *dataset) cleanRun(t *testing.T) *boundedrun.Result {
	t.Helper()
	path := ds.fixture(t)
	ds.cleanOnce.Do(func() {
		dir, _ := os.MkdirTemp("", "receiptflow-clean-")
		defer os.RemoveAll(dir)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		ds.clean, ds.cleanErr = boundedrun.Run(ctx, boundedrun.Config{Config: pipeline.Config{DataDir: dir}, Events: path, Now: ingestNow})
		if ds.cleanErr == nil && !ds.clean.Report.Holds {
			ds.cleanErr = fmt.Errorf("clean run: parity does not hold")
		}
	})
	if ds.cleanErr != nil {
		t.Fatal(ds.cleanErr)
	}
	return ds.clean
}

func fixture(t *testing.T) string { t.Helper(); return troubledSet.fixture(t) }

// ingestNow is the ingest time of every run, so that the runs are judged
// alike.
var ingestNow = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

// proc is one service process, restarted whenever it dies until stopped.
type proc struct {
	t    *testing.T
	name string
	// http is the address of its /readyz and /metrics (--http-addr), or
	// "" when it was started without one.
	http     string
	args     []string
	env      []string
	log      *os.File
	mu       sync.Mutex
	cmd      *exec.Cmd
	stopping bool
	restarts int
	done     chan struct{}
}

func startProc(t *testing.T, bin, name string, env []string, args ...string) *proc {
	t.Helper()
	path := filepath.Join(logDir(t), name+".log")
	for i := 2; ; i++ { // two windowers: windower.log, windower-2.log
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			break
		}
		path = filepath.Join(filepath.Dir(path), fmt.Sprintf("%s-%d.log", name, i))
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{t: t, name: name, args: args, env: env, log: f, done: make(chan struct{})}
	for i, a := range args {
		if a == "--http-addr" && i+1 < len(args) {
			p.http = args[i+1]
		}
	}
	p.args = append([]string{filepath.Join(bin, name)}, args...)
	if err := p.spawn(); err != nil {
		t.Fatal(err)
	}
	go p.supervise()
	t.Cleanup(p.stop)
	return p
}

func (p *proc) spawn() error {
	cmd := exec.Command(p.args[0], p.args[1:]...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = p.log, p.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	p.mu.Lock()
	p.cmd = cmd
	p.mu.Unlock()
	return nil
}

func (p *proc) supervise() {
	defer close(p.done)
	for {
		p.mu.Lock()
		cmd := p.cmd
		p.mu.Unlock()
		cmd.Wait()
		p.mu.Lock()
		if p.stopping {
			p.mu.Unlock()
			return
		}
		p.restarts++
		p.mu.Unlock()
		time.Sleep(30 * time.Millisecond) // a supervisor's restart delay
		if err := p.spawn(); err != nil {
			p.t.Errorf("restart %s: %v", p.name, err)
			return
		}
	}
}

// kill sends SIGKILL to the current process (the supervisor restarts it).
func (p *proc) kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && p.cmd.Process != nil {
		p.cmd.Process.Signal(syscall.SIGKILL)
	}
}

// signal sends sig to the current process (SIGSTOP/SIGCONT for a stall).
func (p *proc) signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && p.cmd.Process != nil {
		p.cmd.Process.Signal(sig)
	}
}

func (p *proc) stop() {
	p.mu.Lock()
	p.stopping = true
	cmd := p.cmd
	p.mu.Unlock()
	if cmd != nil && cmd.Process != nil {
		cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.kill()
		<-p.done
	}
	p.log.Close()
}

func (p *proc) Restarts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.restarts
}

// deployment is one faulty run's servers and service processes.
type deployment struct {
	t *testing.T
	// ns is the in-process nats-server, nats the real nats-server process
	// of a broker deployment; exactly one is set.
	ns      *server.Server
	nats    *natsproc.Server
	natsURL string
	redis   *testenv.RedisProc
	env     []string
	args    []string // setup.args
	procs   []*proc
}

// setup says how deployWith builds a deployment.
type setup struct {
	failpoints string
	// aof runs redis-server with appendfsync always.
	aof bool
	// broker runs nats-server as a real process on a file store with
	// sync_interval always (natsproc) instead of in-process.
	broker bool
	// later leaves the services to startServices.
	later bool
	// maxFileStore is the broker's max_file_store in bytes (0: the
	// server's default); with broker only.
	maxFileStore int64
	// redisArgs are extra redis-server arguments (testenv.WithArgs);
	// env extra service environment.
	redisArgs, env []string
	// args are extra arguments of every service process (such as
	// --source-idle 5s: a parameter the services' set-up records on RAW).
	args []string
}

func deploy(t *testing.T, failpoints string, aof bool) *deployment {
	t.Helper()
	return deployWith(t, setup{failpoints: failpoints, aof: aof})
}

func deployWith(t *testing.T, s setup) *deployment {
	t.Helper()
	binaries(t)
	d := &deployment{t: t, args: s.args}
	if s.broker {
		d.nats = natsproc.Start(t, natsBin.Path(t), natsproc.Options{MaxFileStore: s.maxFileStore})
		d.natsURL = d.nats.URL()
	} else {
		d.ns, d.natsURL = testenv.NATS(t)
	}
	ropts := []testenv.RedisOption{testenv.WithArgs(s.redisArgs...)}
	if s.aof {
		ropts = append(ropts, testenv.WithAOF())
	}
	d.redis = testenv.RedisServer(t, ropts...)
	d.env = append([]string{"NATS_URL=" + d.natsURL, "REDIS_URL=" + d.redis.URL(), "RECEIPTS_FAILPOINTS=" + s.failpoints}, s.env...)
	if !s.later {
		d.startServices()
	}
	return d
}

// startServices starts the validator, two windowers splitting the
// partitions and the publisher, each restarted whenever it dies, each
// serving /readyz and /metrics on a free loopback port (proc.http).
func (d *deployment) startServices() {
	t := d.t
	t.Helper()
	bin := binaries(t)
	start := func(name string, args ...string) *proc {
		addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
		return startProc(t, bin, name, d.env, append(append(args, d.args...), "--http-addr", addr)...)
	}
	d.procs = []*proc{
		// Static indices: these tests predate groups (docs/spec.md §9);
		// a restarted group member would wait for its predecessor's leases.
		start("validator", "--instance", "0", "--instances", "1"),
		start("windower", "--instance", "0", "--instances", "2"),
		start("windower", "--instance", "1", "--instances", "2"),
		start("publisher"),
	}
}

// signalServices sends sig to every service process (SIGSTOP to hold the
// pipeline still, SIGCONT to let it go on).
func (d *deployment) signalServices(sig syscall.Signal) {
	for _, p := range d.procs {
		p.signal(sig)
	}
}

// admin connects the test's own client (reconnecting forever) and makes
// sure the streams exist.
func (d *deployment) admin(ctx context.Context) *connect.Conn {
	t := d.t
	t.Helper()
	admin, err := connect.ConnectNATS(d.natsURL, "faults-admin")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	if err := stream.Ensure(ctx, admin.JS, wire.For(""), stream.Config{Partitions: 8}); err != nil {
		t.Fatal(err)
	}
	return admin
}

// run ingests the fixture while chaos runs, waits for the pipeline to
// drain and checks the outcome against the clean run.
func (d *deployment) run(chaos func(ctx context.Context, ingested <-chan struct{})) {
	t := d.t
	path := fixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	admin := d.admin(ctx)
	v, err := contract.NewValidator(contract.Config{})
	if err != nil {
		t.Fatal(err)
	}
	chaosCtx, stopChaos := context.WithCancel(ctx)
	chaosDone := make(chan struct{})
	ingested := make(chan struct{})
	go func() {
		defer close(chaosDone)
		if chaos != nil {
			chaos(chaosCtx, ingested)
		}
	}()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	in := ingest.New(admin.JS, ingest.Config{Partitions: 8, Validator: v, EndOfStream: true, Now: func() time.Time { return ingestNow }})
	if _, err := ingest.File(ctx, in, f, nil); err != nil {
		t.Fatalf("ingest: %v", err)
	}
	close(ingested)
	// Let the chaos go on for a while after ingest, while the backlog
	// drains, then wait for a quiet pipeline.
	time.Sleep(2 * time.Second)
	stopChaos()
	<-chaosDone
	d.logRestarts()
	o := d.outcome(ctx, admin, troubledSet)
	o.require(t)
}

// logRestarts logs how often each service process was restarted.
func (d *deployment) logRestarts() {
	var restarts []string
	for _, p := range d.procs {
		restarts = append(restarts, fmt.Sprintf("%s:%d", p.name, p.Restarts()))
	}
	d.t.Logf("restarts %v", restarts)
	for _, p := range d.procs {
		if p.Restarts() > 0 {
			if last := p.lastErrors(3); last != "" {
				d.t.Logf("%s's last errors:\n%s", p.name, last)
			}
		}
	}
}

// lastErrors returns the last n ERROR lines of the process's log (all its
// runs), for saying why a service exited that nobody killed.
func (p *proc) lastErrors(n int) string {
	b, err := os.ReadFile(p.log.Name())
	if err != nil {
		return ""
	}
	var errs []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "level=ERROR") || strings.Contains(l, `"level":"ERROR"`) {
			errs = append(errs, l)
		}
	}
	return strings.Join(errs[max(len(errs)-n, 0):], "\n")
}

// outcome waits for the pipeline to drain and compares what it published
// with the dataset's clean run and with the batch pass over its fixture.
// It fails the test only for errors that leave nothing to compare.
func (d *deployment) outcome(ctx context.Context, admin *connect.Conn, ds *dataset) *outcome {
	t := d.t
	t.Helper()
	want := ds.cleanRun(t)
	names := wire.For("")
	services := []string{pipeline.Validator, pipeline.Windower, pipeline.Publisher}
	waitFrom := time.Now()
	left := "no deadline"
	if dl, ok := ctx.Deadline(); ok {
		left = time.Until(dl).Round(100*time.Millisecond).String() + " left"
	}
	if err := pipeline.WaitDrained(ctx, admin.JS, names, services, 8); err != nil {
		b, _, berr := pipeline.Backlog(context.Background(), admin.JS, names, services, 8)
		t.Fatalf("pipeline did not drain in %s (%s when the wait began): %v (backlog %v %v)",
			time.Since(waitFrom).Round(100*time.Millisecond), left, err, b, berr)
	}
	// Right after a fault the first reads may find no responder yet (a
	// cluster still settling): those are read again; anything else fails.
	var windows []wire.Window
	var late []reconcile.LateRow
	readAgain(t, "KV windows", func() (err error) { windows, err = pipeline.ReadWindows(ctx, admin.JS, names); return err })
	readAgain(t, "LATE", func() (err error) { late, err = pipeline.ReadLate(ctx, admin.JS, names); return err })
	v, err := contract.NewValidator(contract.Config{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(ds.fixture(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	batch, err := reconcile.Count(f, reconcile.Config{Validator: v, DefaultIngestedAt: ingestNow, Partitions: 8,
		Horizon: 24 * time.Hour, EndOfStream: true}) // the services' replay horizon; ingest closes with end-of-stream
	if err != nil {
		t.Fatal(err)
	}
	o := compareRuns(project(windows), project(want.Windows))
	o.lateGot, o.lateWant = lateIDs(late), lateIDs(want.Late)
	o.report = reconcile.Compare(batch, windows, late)
	for _, w := range windows {
		o.counted += w.Count
		o.dropped += w.LateDropped
	}
	o.batchCounted = int64(batch.Counted)
	o.missingRaw = d.missingFrom(ctx, admin, wire.Raw, batch, o)
	o.missing = d.missingFrom(ctx, admin, wire.Valid, batch, o)
	return o
}

// readAgain calls read until it succeeds, for up to a minute while its
// error is transient (connect.Transient); it fails t otherwise.
func readAgain(t *testing.T, what string, read func() error) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		err := read()
		if err == nil {
			return
		}
		if !connect.Transient(err) || time.Now().After(deadline) {
			t.Fatalf("reading %s: %v", what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// outcome is what a faulty run ended with, measured against the clean run.
type outcome struct {
	windows, equal int      // windows of the clean run, and how many are equal
	lost, double   int64    // counts short of / beyond the clean run, summed over windows
	diffs          []string // one line per differing window
	lateGot        []string
	lateWant       []string
	report         *reconcile.Report
	counted        int64
	dropped        int64
	batchCounted   int64
	// missing and missingRaw are event ids the batch pass counted that
	// VALID, or RAW, does not hold at all (set only when windows differ).
	missing, missingRaw []string
}

// compareRuns compares the projected windows of a faulty run with the
// clean run's, window by window.
func compareRuns(got, want []comparable) *outcome {
	o := &outcome{windows: len(want)}
	g := map[string]comparable{}
	for _, w := range got {
		g[w.ID] = w
	}
	seen := map[string]bool{}
	for _, w := range want {
		seen[w.ID] = true
		x, ok := g[w.ID]
		switch {
		case !ok:
			o.lost += w.Count
			o.diffs = append(o.diffs, fmt.Sprintf("window %s missing; want %+v", w.ID, w))
		case x == w:
			o.equal++
		default:
			if x.Count < w.Count {
				o.lost += w.Count - x.Count
			} else {
				o.double += x.Count - w.Count
			}
			o.diffs = append(o.diffs, fmt.Sprintf("window %s (count %+d)\n  got  %+v\n  want %+v", w.ID, x.Count-w.Count, x, w))
		}
	}
	for _, x := range got {
		if !seen[x.ID] {
			o.double += x.Count
			o.diffs = append(o.diffs, fmt.Sprintf("window %s not in the clean run: %+v", x.ID, x))
		}
	}
	return o
}

// ok reports whether the run equals the clean run in every respect.
func (o *outcome) ok() bool {
	return len(o.diffs) == 0 && reflect.DeepEqual(o.lateGot, o.lateWant) && o.report.Holds &&
		o.report.Summary.Final == o.windows && o.counted+o.dropped == o.batchCounted
}

// require fails the test with everything that differs.
func (o *outcome) require(t *testing.T) {
	t.Helper()
	if o.ok() {
		return
	}
	if len(o.diffs) > 0 {
		t.Errorf("%d of %d windows differ from the clean run: %d events short, %d beyond", len(o.diffs), o.windows, o.lost, o.double)
		for _, d := range o.diffs {
			t.Errorf("%s", d)
		}
	}
	if len(o.diffs) > 0 && len(o.missing) == 0 {
		t.Errorf("every id the batch pass counted is in VALID: the events were lost or counted twice after VALID")
	}
	if len(o.missingRaw) > 0 {
		t.Errorf("%d counted ids are not in RAW at all (lost by ingest or by the broker after its ack), e.g. %v", len(o.missingRaw), o.missingRaw[:min(len(o.missingRaw), 10)])
	}
	if len(o.missing) > 0 {
		t.Errorf("%d counted ids are not in VALID at all (lost between RAW and VALID), e.g. %v", len(o.missing), o.missing[:min(len(o.missing), 10)])
	}
	if !reflect.DeepEqual(o.lateGot, o.lateWant) {
		t.Errorf("late events differ from the clean run: %d vs %d", len(o.lateGot), len(o.lateWant))
	}
	if !o.report.Holds || o.report.Summary.Final != o.windows {
		t.Errorf("parity: holds %v, %d final of %d windows, %d unexplained", o.report.Holds, o.report.Summary.Final, o.windows, len(o.report.Unexplained))
		for i, u := range o.report.Unexplained {
			if i == 10 {
				t.Errorf("  … %d more", len(o.report.Unexplained)-10)
				break
			}
			t.Errorf("  %s %s %s: %s", u.WindowID, u.Kind, u.EventID, u.Detail)
		}
	}
	if o.counted+o.dropped != o.batchCounted {
		t.Errorf("counted %d + late %d != batch %d", o.counted, o.dropped, o.batchCounted)
	}
	t.FailNow()
}

// missingFrom lists the ids the batch pass counted that the stream base
// (wire.Raw, wire.Valid) does not hold: missing from VALID, an event
// was lost by the validator (acknowledged in RAW, never published to
// VALID); missing from RAW, by the broker or ingest. It returns nil when
// every window is equal or the stream cannot be read.
func (d *deployment) missingFrom(ctx context.Context, admin *connect.Conn, base string, batch *reconcile.Batch, o *outcome) []string {
	if len(o.diffs) == 0 {
		return nil
	}
	held := map[string]bool{}
	name := wire.For("").Stream(base)
	var err error
	if base == wire.Valid {
		err = stream.ReadValid(ctx, admin.JS, name, func(v stream.ValidRecord) error {
			held[v.EventID] = true
			return nil
		})
	} else {
		err = stream.ReadAll(ctx, admin.JS, name, func(m jetstream.Msg) error {
			var ev struct {
				EventID string `json:"event_id"`
			}
			if json.Unmarshal(m.Data(), &ev) == nil && ev.EventID != "" {
				held[ev.EventID] = true
			}
			return nil
		})
	}
	if err != nil {
		d.t.Logf("reading %s for missing ids: %v", base, err)
		return nil
	}
	var out []string
	for _, id := range batch.WindowIDs() {
		for _, ev := range batch.Windows[id].IDs {
			if !held[ev] {
				out = append(out, ev)
			}
		}
	}
	sort.Strings(out)
	return out
}

type comparable struct {
	ID                                string
	Count, Version, Corrections, Late int64
	Status, Digest                    string
	// Breakdown is the window's breakdown by store, as text.
	Breakdown string
}

func project(ws []wire.Window) []comparable {
	out := make([]comparable, len(ws))
	for i, w := range ws {
		out[i] = comparable{w.WindowID, w.Count, w.Version, w.Corrections, w.LateDropped, string(w.Status), w.Digest,
			fmt.Sprintf("%+v", w.Breakdown)}
	}
	return out
}

func lateIDs(rows []reconcile.LateRow) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.EventID + "@" + r.WindowID
	}
	sort.Strings(out)
	return out
}

// every calls f every interval (with jitter) until ctx ends.
func every(ctx context.Context, min, max time.Duration, f func(r *rand.Rand)) {
	r := rand.New(rand.NewPCG(1, 2))
	for {
		d := min + time.Duration(r.Int64N(int64(max-min)))
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
			f(r)
		}
	}
}

// backlog is the number of messages the services still have to process.
func (d *deployment) backlog(ctx context.Context) uint64 {
	admin, err := connect.ConnectNATS(d.natsURL, "faults-backlog")
	if err != nil {
		return 0
	}
	defer admin.Close()
	b, _, err := pipeline.Backlog(ctx, admin.JS, wire.For(""), []string{pipeline.Validator, pipeline.Windower, pipeline.Publisher}, 8)
	if err != nil {
		return 0
	}
	var n uint64
	for _, v := range b {
		n += v
	}
	return n
}
