package faults

// Shared pieces of the broker chaos tests (broker_test.go) and the chaos
// soak (chaos_test.go, build tag chaos): a smaller input, a logged seed,
// receiptctl ingest as a process that is restarted until it exits 0, and
// progress probes that place each kill while work is in flight.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/pipeline"
	"github.com/receiptflow/receiptflow/pkg/traffic"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// brokerEvents is the size of the broker tests' input: large enough for
// nine restarts during delivery, small enough for three tests in about
// four minutes on two cores.
const brokerEvents = 24_000

// brokerSet is the broker tests' input: retries, disorder, late and
// invalid events like the 100k input, over fewer stores and hours.
var brokerSet = &dataset{name: "broker", opts: traffic.Config{
	Seed: 91, Events: brokerEvents, Start: time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC), Hours: 12, Stores: 40,
	DupRate: 0.05, DisorderRate: 0.2, LateRate: 0.02, InvalidRate: 0.02, V1Share: 0.3, OtherTypeShare: 0.1,
}}

// seedEnv names the variable that replays a run's kill schedule.
const seedEnv = "RECEIPTFLOW_FAULTS_SEED"

// chaosRand returns the random source of one test's kill schedule, seeded
// from RECEIPTFLOW_FAULTS_SEED when set and at random otherwise; the seed
// is logged so that a failing schedule can be run again.
func chaosRand(t testing.TB) *rand.Rand {
	t.Helper()
	seed := chaosSeed(t)
	return rand.New(rand.NewPCG(seed, seed^0x5eed))
}

// chaosSeed returns and logs the seed chaosRand uses.
func chaosSeed(t testing.TB) uint64 {
	t.Helper()
	seed := rand.Uint64()
	if s := os.Getenv(seedEnv); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", seedEnv, s, err)
		}
		seed = v
	}
	t.Logf("chaos seed %d (run again with %s=%d)", seed, seedEnv, seed)
	return seed
}

// ingestProc runs `receiptctl ingest` against the deployment until it exits
// 0, starting it again after every failure or kill: ingest is at least
// once, and a record it sends twice is dropped by its Nats-Msg-Id. With
// several runs (chunks of the input) it does the same for each in turn,
// pausing gap between them, as a producer delivering files over time.
type ingestProc struct {
	t    *testing.T
	runs [][]string // argv of each ingest, in order
	gap  time.Duration
	log  string

	mu       sync.Mutex
	cmd      *exec.Cmd
	attempts int
	kills    int
	running  bool
	done     chan struct{}
	err      error
}

// maxIngestAttempts bounds the restarts of one ingest.
const maxIngestAttempts = 200

// startIngest starts ingesting path into the deployment's NATS in the
// background; wait returns when it has succeeded or given up.
func (d *deployment) startIngest(ctx context.Context, path string) *ingestProc {
	t := d.t
	t.Helper()
	return d.startIngestRuns(ctx, 0, []string{"--events", path, "--end-of-stream"})
}

// startIngestRuns starts one ingest per argument list (each after
// "receiptctl ingest --nats-url … --partitions 8"), one after the other
// with gap between them, in the background.
func (d *deployment) startIngestRuns(ctx context.Context, gap time.Duration, runs ...[]string) *ingestProc {
	t := d.t
	t.Helper()
	ip := &ingestProc{t: t, gap: gap, log: filepath.Join(logDir(t), "receiptctl-ingest.log"), done: make(chan struct{})}
	for _, args := range runs {
		ip.runs = append(ip.runs, append([]string{filepath.Join(binaries(t), "receiptctl"), "ingest",
			"--nats-url", d.natsURL, "--partitions", "8"}, args...))
	}
	go ip.loop(ctx)
	return ip
}

// startChunkedIngest ingests path as n files of consecutive lines, one
// receiptctl ingest each, gap apart, the last with --end-of-stream.
func (d *deployment) startChunkedIngest(ctx context.Context, path string, n int, gap time.Duration) *ingestProc {
	paths, _ := splitFixture(d.t, path, n)
	runs := make([][]string, len(paths))
	for i := range paths {
		runs[i] = chunkArgs(paths, i)
	}
	return d.startIngestRuns(ctx, gap, runs...)
}

// chunkArgs are the ingest arguments of chunk i of paths: the last one
// closes the input with --end-of-stream.
func chunkArgs(paths []string, i int) []string {
	if i == len(paths)-1 {
		return []string{"--events", paths[i], "--end-of-stream"}
	}
	return []string{"--events", paths[i]}
}

func (ip *ingestProc) loop(ctx context.Context) {
	defer close(ip.done)
	logf, err := os.Create(ip.log)
	if err != nil {
		ip.err = err
		return
	}
	defer logf.Close()
	for i, args := range ip.runs {
		if i > 0 && ip.gap > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(ip.gap):
			}
		}
		if !ip.run(ctx, logf, args) {
			return
		}
	}
}

// run runs one ingest until it exits 0 (true) or ip gives up (false, with
// ip.err set).
func (ip *ingestProc) run(ctx context.Context, logf *os.File, args []string) bool {
	for attempt := 1; ; attempt++ {
		if ctx.Err() != nil {
			ip.err = fmt.Errorf("ingest %v: %w after %d attempts", args[2:], ctx.Err(), attempt-1)
			return false
		}
		if attempt > maxIngestAttempts {
			ip.err = fmt.Errorf("ingest %v: still failing after %d attempts", args[2:], maxIngestAttempts)
			return false
		}
		fmt.Fprintf(logf, "--- %v attempt %d at %s\n", args[2:], attempt, time.Now().Format(time.RFC3339Nano))
		cmd := exec.CommandContext(ctx, args[0], args[1:]...)
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		ip.mu.Lock()
		ip.attempts++
		err := cmd.Start()
		if err == nil {
			ip.cmd, ip.running = cmd, true
		}
		ip.mu.Unlock()
		if err != nil {
			ip.err = fmt.Errorf("ingest: %w", err)
			return false
		}
		err = cmd.Wait()
		ip.mu.Lock()
		ip.running = false
		ip.mu.Unlock()
		if err == nil {
			return true
		}
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			ip.err = fmt.Errorf("ingest: %w", err)
			return false
		}
		fmt.Fprintf(logf, "--- attempt %d: %v\n", attempt, err)
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond): // a supervisor's restart delay
		}
	}
}

// kill SIGKILLs the running ingest, if one is running, and reports whether
// it did.
func (ip *ingestProc) kill() bool {
	ip.mu.Lock()
	defer ip.mu.Unlock()
	if !ip.running || ip.cmd == nil || ip.cmd.Process == nil {
		return false
	}
	if ip.cmd.Process.Signal(syscall.SIGKILL) != nil {
		return false
	}
	ip.kills++
	return true
}

// stallNext stops the running ingest (SIGSTOP) for d and continues it,
// waiting up to wait for a run to start as killNext does; it reports
// whether it stalled one.
func (ip *ingestProc) stallNext(ctx context.Context, wait, d time.Duration) bool {
	deadline := time.Now().Add(wait)
	for {
		ip.mu.Lock()
		var proc *os.Process
		if ip.running && ip.cmd != nil {
			proc = ip.cmd.Process
		}
		ip.mu.Unlock()
		if proc != nil && proc.Signal(syscall.SIGSTOP) == nil {
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
			proc.Signal(syscall.SIGCONT)
			return true
		}
		if ip.finished() || ctx.Err() != nil || time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// killNext kills the running ingest, waiting up to wait for the next run to
// start if none is running; it reports whether it killed one.
func (ip *ingestProc) killNext(ctx context.Context, wait time.Duration) bool {
	deadline := time.Now().Add(wait)
	for {
		if ip.kill() {
			return true
		}
		if ip.finished() || ctx.Err() != nil || time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// failures returns how many ingest runs failed (exited non-zero or were
// killed) before one succeeded.
func (ip *ingestProc) failures() int {
	ip.mu.Lock()
	defer ip.mu.Unlock()
	return ip.attempts - len(ip.runs)
}

// finished reports whether the ingest is over (successfully or not).
func (ip *ingestProc) finished() bool {
	select {
	case <-ip.done:
		return true
	default:
		return false
	}
}

// wait waits for the ingest to end and fails the test, with the tail of
// its log, if it did not succeed.
func (ip *ingestProc) wait() {
	ip.t.Helper()
	<-ip.done
	ip.mu.Lock()
	attempts := ip.attempts
	ip.mu.Unlock()
	if ip.err != nil {
		b, _ := os.ReadFile(ip.log)
		if len(b) > 4000 {
			b = b[len(b)-4000:]
		}
		ip.t.Fatalf("%v\n--- ingest log (tail):\n%s", ip.err, b)
	}
	if attempts > len(ip.runs) {
		ip.t.Logf("ingest succeeded: %d runs in %d attempts", len(ip.runs), attempts)
	}
}

// rawStored returns the number of messages RAW holds, asking once with a
// short deadline (the server may be down or restarting).
func rawStored(ctx context.Context, admin *connect.Conn) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	st, err := admin.JS.Stream(ctx, wire.For("").Stream(wire.Raw))
	if err != nil {
		return 0, err
	}
	return st.CachedInfo().State.Msgs, nil
}

// pending returns the messages the services still have to process, with
// ok false while it cannot be told (server down, consumers not created).
func pending(ctx context.Context, admin *connect.Conn) (n uint64, ok bool) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	b, complete, err := pipeline.Backlog(ctx, admin.JS, wire.For(""), []string{pipeline.Validator, pipeline.Windower, pipeline.Publisher}, 8)
	if err != nil || !complete {
		return 0, false
	}
	for _, v := range b {
		n += v
	}
	return n, true
}

// probeEvery is how often the chaos loops look at the pipeline's progress.
const probeEvery = 10 * time.Millisecond

// untilRAW waits until RAW holds at least n messages or ingest has
// finished; it reports whether the threshold was reached.
func untilRAW(ctx context.Context, admin *connect.Conn, ip *ingestProc, n uint64) bool {
	for ctx.Err() == nil {
		if got, err := rawStored(ctx, admin); err == nil && got >= n {
			return !ip.finished()
		}
		if ip.finished() {
			return false
		}
		time.Sleep(probeEvery)
	}
	return false
}

// untilProgress waits until the services have processed at least step
// messages of their backlog since it was last measured as from, and
// returns the new backlog; ok is false when the backlog is empty (nothing
// left to interrupt) or ctx ended.
func untilProgress(ctx context.Context, admin *connect.Conn, from, step uint64) (now uint64, ok bool) {
	for ctx.Err() == nil {
		if n, known := pending(ctx, admin); known {
			if n == 0 {
				return 0, false
			}
			if from == 0 || n+step <= from {
				return n, true
			}
		}
		time.Sleep(probeEvery)
	}
	return 0, false
}

// killNATS SIGKILLs the nats-server process, leaves it down for a random
// moment and starts it again on the same port and store.
func (d *deployment) killNATS(t *testing.T, r *rand.Rand) {
	t.Helper()
	d.nats.Kill()
	time.Sleep(time.Duration(r.IntN(200)) * time.Millisecond) // down time, part of the schedule
	d.nats.Restart(t)
}

// killRedis SIGKILLs redis-server (AOF appendfsync always) and starts it
// again on the same port and data directory.
func (d *deployment) killRedis(t *testing.T) {
	t.Helper()
	d.redis.Kill()
	d.redis.Restart(t)
}
