// Package faults holds the process-level fault tests: the services run as
// separate processes built from services/, against a real redis-server and
// an in-process nats-server, and are killed, crashed by failpoints and cut
// off from restarted servers while a generated stream flows. Every test
// ends with windows equal to the clean run's and parity holding.
package faults

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/gen"
	"github.com/receiptflow/receiptflow/pkg/ingest"
	"github.com/receiptflow/receiptflow/pkg/pipeline"
	"github.com/receiptflow/receiptflow/pkg/reconcile"
	"github.com/receiptflow/receiptflow/pkg/snapshot"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/testenv"
)

// events is the size of the generated stream of every fault test.
const events = 100_000

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error

	fixtureOnce sync.Once
	fixturePath string
	fixtureErr  error
	cleanOnce   sync.Once
	cleanRun    *pipeline.RunResult
	cleanErr    error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "receiptflow-faults-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = filepath.Join(dir, "bin")
	fixturePath = filepath.Join(dir, "events.ndjson")
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// binaries builds the three service binaries once.
func binaries(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		cmd := exec.Command("go", "build", "-o", binDir+"/",
			"github.com/receiptflow/receiptflow/services/validator",
			"github.com/receiptflow/receiptflow/services/windower",
			"github.com/receiptflow/receiptflow/services/publisher")
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

var troubled = gen.Options{
	Seed: 77, Events: events, Start: time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC), Hours: 24, Stores: 60,
	DupRate: 0.05, DisorderRate: 0.2, LateRate: 0.02, InvalidRate: 0.02, V1Share: 0.3, OtherTypeShare: 0.1,
}

func fixture(t *testing.T) string {
	t.Helper()
	fixtureOnce.Do(func() {
		var buf bytes.Buffer
		if _, fixtureErr = gen.Write(&buf, troubled); fixtureErr == nil {
			fixtureErr = os.WriteFile(fixturePath, buf.Bytes(), 0o644)
		}
	})
	if fixtureErr != nil {
		t.Fatal(fixtureErr)
	}
	return fixturePath
}

// ingestNow is the ingest time of every run, so that the runs are judged
// alike.
var ingestNow = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

// clean is the in-process run without faults every test compares with.
func clean(t *testing.T) *pipeline.RunResult {
	t.Helper()
	path := fixture(t)
	cleanOnce.Do(func() {
		dir, _ := os.MkdirTemp("", "receiptflow-clean-")
		defer os.RemoveAll(dir)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cleanRun, cleanErr = pipeline.Run(ctx, pipeline.RunConfig{Config: pipeline.Config{DataDir: dir}, Events: path, Now: ingestNow})
		if cleanErr == nil && !cleanRun.Report.Holds {
			cleanErr = fmt.Errorf("clean run: parity does not hold")
		}
	})
	if cleanErr != nil {
		t.Fatal(cleanErr)
	}
	return cleanRun
}

// proc is one service process, restarted whenever it dies until stopped.
type proc struct {
	t        *testing.T
	name     string
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
	f, err := os.Create(filepath.Join(t.TempDir(), name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{t: t, name: name, args: args, env: env, log: f, done: make(chan struct{})}
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
	t       *testing.T
	ns      *server.Server
	natsURL string
	redis   *testenv.RedisProc
	procs   []*proc
}

func deploy(t *testing.T, failpoints string, aof bool) *deployment {
	t.Helper()
	bin := binaries(t)
	d := &deployment{t: t}
	d.ns, d.natsURL = testenv.NATS(t)
	if aof {
		d.redis = testenv.RedisServer(t, testenv.WithAOF())
	} else {
		d.redis = testenv.RedisServer(t)
	}
	env := []string{"NATS_URL=" + d.natsURL, "REDIS_URL=" + d.redis.URL(), "RECEIPTS_FAILPOINTS=" + failpoints}
	d.procs = []*proc{
		startProc(t, bin, "validator", env),
		startProc(t, bin, "windower", env, "--instance", "0", "--instances", "2"),
		startProc(t, bin, "windower", env, "--instance", "1", "--instances", "2"),
		startProc(t, bin, "publisher", env),
	}
	return d
}

// run ingests the fixture while chaos runs, waits for the pipeline to
// drain and checks the outcome against the clean run.
func (d *deployment) run(chaos func(ctx context.Context, ingested <-chan struct{})) {
	t := d.t
	want := clean(t)
	path := fixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	admin, err := pipeline.ConnectNATS(d.natsURL, "faults-admin")
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	names := stream.For("")
	if err := stream.Ensure(ctx, admin.JS, names, stream.Config{Partitions: 8}); err != nil {
		t.Fatal(err)
	}
	v, err := contract.NewValidator(contract.Options{})
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
	in := ingest.New(admin.JS, ingest.Options{Partitions: 8, Validator: v, EndOfStream: true, Now: func() time.Time { return ingestNow }})
	if _, err := ingest.File(ctx, in, f, nil); err != nil {
		t.Fatalf("ingest: %v", err)
	}
	close(ingested)
	// Let the chaos go on for a while after ingest, while the backlog
	// drains, then wait for a quiet pipeline.
	time.Sleep(2 * time.Second)
	stopChaos()
	<-chaosDone
	services := []string{pipeline.Validator, pipeline.Windower, pipeline.Publisher}
	if err := pipeline.WaitDrained(ctx, admin.JS, names, services, 8); err != nil {
		t.Fatalf("pipeline did not drain: %v", err)
	}
	windows, err := pipeline.ReadWindows(ctx, admin.JS, names)
	if err != nil {
		t.Fatal(err)
	}
	late, err := pipeline.ReadLate(ctx, admin.JS, names)
	if err != nil {
		t.Fatal(err)
	}
	var restarts []string
	for _, p := range d.procs {
		restarts = append(restarts, fmt.Sprintf("%s:%d", p.name, p.Restarts()))
	}
	t.Logf("restarts %v", restarts)
	if got, want := project(windows), project(want.Windows); !reflect.DeepEqual(got, want) {
		for i := range max(len(got), len(want)) {
			var g, w comparable
			if i < len(got) {
				g = got[i]
			}
			if i < len(want) {
				w = want[i]
			}
			if g != w {
				t.Errorf("window %d:\n got %+v\nwant %+v", i, g, w)
			}
		}
		t.FailNow()
	}
	if got, want := lateIDs(late), lateIDs(want.Late); !reflect.DeepEqual(got, want) {
		t.Fatalf("late events differ from the clean run: %d vs %d", len(got), len(want))
	}
	f.Seek(0, 0)
	batch, err := reconcile.Count(f, reconcile.Options{Validator: v, DefaultIngestedAt: ingestNow, Partitions: 8})
	if err != nil {
		t.Fatal(err)
	}
	rep := reconcile.Compare(batch, windows, late)
	if !rep.Holds || rep.Summary.Final != len(windows) {
		t.Fatalf("parity: holds %v, %d final of %d windows, unexplained %v", rep.Holds, rep.Summary.Final, len(windows), rep.Unexplained)
	}
	// Zero events counted twice or lost, by event id: the digests of every
	// window equal the batch pass's ids minus the late ones (Compare), and
	// the totals add up.
	var counted, dropped int64
	for _, w := range windows {
		counted += w.Count
		dropped += w.LateDropped
	}
	if counted+dropped != int64(batch.Counted) {
		t.Fatalf("counted %d + late %d != batch %d", counted, dropped, batch.Counted)
	}
}

type comparable struct {
	ID                                string
	Count, Version, Corrections, Late int64
	Status, Digest                    string
}

func project(ws []snapshot.Window) []comparable {
	out := make([]comparable, len(ws))
	for i, w := range ws {
		out[i] = comparable{w.WindowID, w.Count, w.Version, w.Corrections, w.LateDropped, string(w.Status), w.Digest}
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
	admin, err := pipeline.ConnectNATS(d.natsURL, "faults-backlog")
	if err != nil {
		return 0
	}
	defer admin.Close()
	b, _, err := pipeline.Backlog(ctx, admin.JS, stream.For(""), []string{pipeline.Validator, pipeline.Windower, pipeline.Publisher}, 8)
	if err != nil {
		return 0
	}
	var n uint64
	for _, v := range b {
		n += v
	}
	return n
}
