package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// ScenarioIdle: a deployed pipeline with no traffic.
const ScenarioIdle = "idle"

// Idle measurement: the pipeline settles, then every process's CPU is
// read over the window.
const (
	idleSettle = 10 * time.Second
	idleWindow = 60 * time.Second
)

// idleResult is what the pipeline's processes cost with no traffic.
type idleResult struct {
	Window time.Duration
	CPU    map[string]time.Duration
	// APIRequests are the JetStream API requests nats-server answered over
	// the window: what the services ask of it while nothing happens, a
	// count that does not move with the host's noise as CPU does.
	APIRequests uint64
	// Switches are each process's context switches over the window: how
	// often it woke up, steadier than its CPU on a noisy host.
	Switches map[string]uint64
}

// share is CPU as a share of one core over the window, in percent.
func (r *idleResult) share(cpu time.Duration) float64 {
	return 100 * cpu.Seconds() / r.Window.Seconds()
}

func (r *idleResult) total() time.Duration {
	var t time.Duration
	for _, v := range r.CPU {
		t += v
	}
	return t
}

// runIdle deploys the whole pipeline as processes, a nats-server process
// and the bench's redis-server included (validator, windower, publisher,
// the ingest service and the dashboard), lets it settle for idleSettle,
// and reads every process's CPU over idleWindow with no traffic.
func (b *bencher) runIdle(ctx context.Context) (*idleResult, error) {
	window, settle := idleWindow, idleSettle
	if b.o.Quick {
		window, settle = 10*time.Second, 3*time.Second
	}
	ns, err := startNATSProcess(ctx, b.work)
	if err != nil {
		return nil, err
	}
	b.logf("nats-server process at %s (pprof at %s)", ns.url, ns.profiles)
	defer ns.stop()
	admin, err := connect.ConnectNATS(ns.url, "bench-idle")
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	names := wire.For("")
	if err := stream.Ensure(ctx, admin.JS, names, stream.Config{Partitions: b.o.Partitions}); err != nil {
		return nil, err
	}
	if err := b.rdb.FlushAll(ctx).Err(); err != nil {
		return nil, err
	}
	logDir := filepath.Join(b.work, "logs", "idle")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, err
	}
	var profileDir string // --profile idle: each service's profiles, written when stopped
	if b.profiling && b.o.ProfileDir != "" {
		profileDir = filepath.Join(b.o.ProfileDir, ScenarioIdle)
	}
	dep, err := deploy(ctx, deploySpec{mode: ModeProcess, bin: b.o.BinDir, natsURL: ns.url, redisURL: b.redis.URL(),
		partitions: b.o.Partitions, windowers: 1, logDir: logDir, budget: b.o.LatencyBudget, profileDir: profileDir})
	if err != nil {
		return nil, err
	}
	defer dep.stop()
	if err := waitConsumers(ctx, admin.JS, names, b.o.Partitions, dep); err != nil {
		return nil, err
	}
	door, err := startDoor(ctx, b.o.BinDir, b.work, ns.url, b.o.Partitions)
	if err != nil {
		return nil, err
	}
	defer door.stop()
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dash := exec.Command(filepath.Join(b.o.BinDir, "dashboard"), "--nats-url", ns.url, "--redis-url", b.redis.URL(),
		"--listen", "127.0.0.1:"+strconv.Itoa(port))
	dash.Stdout, dash.Stderr = io.Discard, io.Discard
	dash.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := dash.Start(); err != nil {
		return nil, fmt.Errorf("bench: start the dashboard: %w", err)
	}
	defer func() {
		_ = dash.Process.Signal(os.Interrupt)
		_ = dash.Wait()
	}()
	if err := pause(ctx, settle); err != nil {
		return nil, err
	}
	pids := dep.pids()
	pids["nats-server"], pids["redis-server"] = ns.pid(), b.redis.pid()
	pids["ingest"], pids["dashboard"] = door.cmd.Process.Pid, dash.Process.Pid
	meter := cpuMeter(pids)
	api0, err := ns.jsAPIRequests(ctx)
	if err != nil {
		return nil, err
	}
	cpu0, sw0 := meter.read(), switchesOf(pids)
	began := time.Now()
	if err := pause(ctx, window); err != nil {
		return nil, err
	}
	res := &idleResult{Window: time.Since(began), CPU: meter.since(cpu0), Switches: switchesOf(pids)}
	for k, v := range sw0 {
		res.Switches[k] -= min(v, res.Switches[k])
	}
	api1, err := ns.jsAPIRequests(ctx)
	if err != nil {
		return nil, err
	}
	res.APIRequests = api1 - api0
	if err := dep.failed(); err != nil {
		return nil, err
	}
	return res, nil
}

// switchesOf reads each process's context switches, voluntary and not,
// summed over its threads (/proc/<pid>/task/*/status); a process it
// cannot read is left out. A thread that ends takes its count along.
func switchesOf(pids map[string]int) map[string]uint64 {
	out := map[string]uint64{}
	for name, pid := range pids {
		tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
		if err != nil || len(tasks) == 0 {
			continue
		}
		var n uint64
		for _, t := range tasks {
			b, err := os.ReadFile(t)
			if err != nil {
				continue
			}
			for _, line := range strings.Split(string(b), "\n") {
				if k, v, ok := strings.Cut(line, ":"); ok && strings.HasSuffix(k, "ctxt_switches") {
					c, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
					n += c
				}
			}
		}
		out[name] = n
	}
	return out
}

// pause waits d or until ctx ends.
func pause(ctx context.Context, d time.Duration) error {
	return stream.Pause(ctx, d)
}

// printIdle writes the idle row.
func (r *Results) printIdle(row func(label, value, note string), skipped func(...string)) {
	const label = "Idle cost"
	switch {
	case r.IdleNA:
		row(label, "n/a", "needs the services as processes (--mode process)")
		return
	case r.Idle == nil:
		skipped(label)
		return
	}
	id := r.Idle
	var parts []string
	for _, k := range slices.Sorted(mapsKeys(id.CPU)) {
		parts = append(parts, fmt.Sprintf("%s %.2f%%", k, id.share(id.CPU[k])))
	}
	var wakes []string
	for _, k := range slices.Sorted(mapsKeys(id.Switches)) {
		wakes = append(wakes, fmt.Sprintf("%s %.0f", k, float64(id.Switches[k])/id.Window.Seconds()))
	}
	total := id.share(id.total())
	row(label, fmt.Sprintf("%.2f%%", total), fmt.Sprintf("of one core over %s of a deployed pipeline with no traffic (%s); %.1f JetStream API requests/s; context switches/s: %s; %s",
		dur(id.Window), strings.Join(parts, ", "), float64(id.APIRequests)/id.Window.Seconds(), strings.Join(wakes, ", "),
		verdict(total <= TargetIdlePercent, fmt.Sprintf("target ≤ %.0f%%", TargetIdlePercent))))
}
