package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/receiptflow/receiptflow/pkg/config"
	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/ledger"
	"github.com/receiptflow/receiptflow/pkg/publisher"
	"github.com/receiptflow/receiptflow/pkg/validator"
	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/windower"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// Service modes.
const (
	// ModeProcess runs every service as its own process from the bin
	// directory (the deployed shape; gives per-service RSS).
	ModeProcess = "process"
	// ModeInProcess runs the services as goroutines of the bench process
	// (for pprof profiles of the whole pipeline).
	ModeInProcess = "inprocess"
)

// deployment is one set of running services.
type deployment struct {
	procs []*serviceProc
	// inprocess
	regs   []*prometheus.Registry
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	errs   []error
}

type serviceProc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// deploySpec says what to run.
type deploySpec struct {
	mode       string
	bin        string
	natsURL    string
	redisURL   string
	partitions int
	// hot is the --hot-keys declaration given to every service ("": none).
	hot       string
	windowers int
	logDir    string
	// profileDir, when set, is given to every service process as
	// --profile-dir: each writes its profiles there when stopped.
	profileDir string
}

// deploy starts one validator, spec.windowers windowers splitting the
// partitions and one publisher.
func deploy(ctx context.Context, spec deploySpec) (*deployment, error) {
	type inst struct {
		svc      string
		instance int
		of       int
	}
	insts := []inst{{"validator", 0, 1}}
	for i := 0; i < spec.windowers; i++ {
		insts = append(insts, inst{"windower", i, spec.windowers})
	}
	insts = append(insts, inst{"publisher", 0, 1})
	d := &deployment{}
	if spec.mode == ModeInProcess {
		rctx, cancel := context.WithCancel(context.Background())
		d.cancel = cancel
		v, err := contract.NewValidator(contract.Options{})
		if err != nil {
			return nil, err
		}
		for _, in := range insts {
			owned := config.Split(spec.partitions, in.instance, in.of)
			reg := prometheus.NewRegistry()
			d.regs = append(d.regs, reg)
			d.wg.Add(1)
			go func() {
				defer d.wg.Done()
				if err := runInProcess(rctx, spec, in.svc, owned, v, reg); err != nil && rctx.Err() == nil {
					d.mu.Lock()
					d.errs = append(d.errs, fmt.Errorf("%s %d: %w", in.svc, in.instance, err))
					d.mu.Unlock()
				}
			}()
		}
		return d, nil
	}
	for _, in := range insts {
		name := in.svc
		if in.of > 1 {
			name += "-" + strconv.Itoa(in.instance)
		}
		logf, err := os.Create(filepath.Join(spec.logDir, name+".log"))
		if err != nil {
			d.stop()
			return nil, err
		}
		cmd := exec.Command(filepath.Join(spec.bin, in.svc),
			"--nats-url", spec.natsURL, "--redis-url", spec.redisURL,
			"--partitions", strconv.Itoa(spec.partitions),
			"--instance", strconv.Itoa(in.instance), "--instances", strconv.Itoa(in.of),
			"--http-addr", "127.0.0.1:0", "--hot-keys", spec.hot)
		if spec.profileDir != "" {
			cmd.Args = append(cmd.Args, "--profile-dir", spec.profileDir)
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			logf.Close()
			d.stop()
			return nil, fmt.Errorf("bench: start %s: %w", cmd.Path, err)
		}
		p := &serviceProc{name: name, cmd: cmd, done: make(chan struct{})}
		go func() {
			p.err = cmd.Wait()
			logf.Close()
			close(p.done)
		}()
		d.procs = append(d.procs, p)
	}
	return d, nil
}

// runInProcess runs one service instance with its own connections.
func runInProcess(ctx context.Context, spec deploySpec, svc string, owned []int, v *contract.Validator, reg prometheus.Registerer) error {
	conn, err := connect.ConnectNATS(spec.natsURL, "bench-"+svc)
	if err != nil {
		return err
	}
	defer conn.Close()
	rdb, err := connect.ConnectRedis(spec.redisURL)
	if err != nil {
		return err
	}
	defer rdb.Close()
	names := wire.For("")
	def := config.Defaults() // the services' default parameters
	store := ledger.NewStore(rdb, ledger.Keys{Prefix: names.RedisPrefix()}, def.Lateness, def.Grace, ledger.WithHorizon(def.ReplayHorizon))
	waits := config.WaitsFor(config.DefaultLatencyBudget) // the services' default --latency-budget
	switch svc {
	case "validator":
		return validator.New(conn.JS, store, validator.Config{Names: names, Partitions: spec.partitions, HotKeys: hotKeys(spec.hot, spec.partitions), Owned: owned, Validator: v, Registerer: reg,
			IdleEvery: waits.BarrierIdle, BarrierPoll: waits.BarrierPoll, Linger: waits.ConsumeLinger}).Run(ctx)
	case "windower":
		return windower.New(conn.JS, store, windower.Config{Names: names, Partitions: spec.partitions, Owned: owned, Registerer: reg,
			Linger: waits.ConsumeLinger}).Run(ctx)
	case "publisher":
		return publisher.New(conn.JS, store, publisher.Config{Names: names, Partitions: spec.partitions, Grace: def.Grace, Registerer: reg,
			Linger: waits.PublishLinger}).Run(ctx)
	}
	return fmt.Errorf("bench: unknown service %q", svc)
}

// failed returns an error when a service has died.
func (d *deployment) failed() error {
	for _, p := range d.procs {
		select {
		case <-p.done:
			return fmt.Errorf("bench: service %s exited: %v (see its log)", p.name, p.err)
		default:
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return errors.Join(d.errs...)
}

// histograms returns the services' batch and script histograms.
func (d *deployment) histograms(ctx context.Context, logDir string) map[string]histMean {
	if d.regs != nil {
		return gatherRegistries(d.regs)
	}
	var names []string
	for _, p := range d.procs {
		names = append(names, p.name)
	}
	return scrapeProcesses(ctx, logDir, names)
}

// pids returns each service process's id by instance name (none in
// in-process mode).
func (d *deployment) pids() map[string]int {
	out := map[string]int{}
	for _, p := range d.procs {
		out[p.name] = p.cmd.Process.Pid
	}
	return out
}

// peakRSS returns each service process's peak RSS by instance name.
func (d *deployment) peakRSS() map[string]int64 {
	out := map[string]int64{}
	for _, p := range d.procs {
		if v, err := peakRSS(p.cmd.Process.Pid); err == nil {
			out[p.name] = v
		}
	}
	return out
}

// stop sends SIGTERM to every service (in-process: cancels them) and waits
// at most 10 s before killing.
func (d *deployment) stop() {
	if d == nil {
		return
	}
	if d.cancel != nil {
		d.cancel()
		d.wg.Wait()
	}
	for _, p := range d.procs {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	expired := false
	for _, p := range d.procs {
		if !expired {
			select {
			case <-p.done:
				continue
			case <-timer.C:
				expired = true
			}
		}
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// hotKeys parses a --hot-keys declaration the bench wrote itself.
func hotKeys(decl string, partitions int) window.HotKeys {
	h, err := window.ParseHotKeys(decl, partitions)
	if err != nil {
		panic(err)
	}
	return h
}
