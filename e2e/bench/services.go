package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/receiptflow/receiptflow/pkg/config"
	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/service"
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
	// expectExit: the bench stopped it on purpose (a hand-over run);
	// its exit is no failure.
	expectExit atomic.Bool
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
	// group runs the windowers without indices, as a group of leases of
	// leaseTTL (pkg/lease); process mode only.
	group    bool
	leaseTTL time.Duration
	logDir   string
	// budget is every service's --latency-budget (0: the flag's default).
	budget time.Duration
	// profileDir, when set, is given to every service process as
	// --profile-dir: each writes its profiles there when stopped.
	profileDir string
	// replicas > 1 is every service process's --replicas (a cluster).
	replicas int
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
		c, err := spec.common()
		if err != nil {
			return nil, err
		}
		v, err := contract.NewValidator(c.Contract())
		if err != nil {
			return nil, err
		}
		rctx, cancel := context.WithCancel(context.Background())
		d.cancel = cancel
		for _, in := range insts {
			owned := config.Split(spec.partitions, in.instance, in.of)
			reg := prometheus.NewRegistry()
			d.regs = append(d.regs, reg)
			d.wg.Add(1)
			go func() {
				defer d.wg.Done()
				if err := runInProcess(rctx, spec, &c, in.svc, owned, v, reg); err != nil && rctx.Err() == nil {
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
		args := append(spec.commonArgs(), "--http-addr", "127.0.0.1:0")
		if spec.group && in.svc == "windower" {
			args = append(args, "--lease-ttl", spec.leaseTTL.String())
		} else {
			args = append(args, "--instance", strconv.Itoa(in.instance), "--instances", strconv.Itoa(in.of))
		}
		cmd := exec.Command(filepath.Join(spec.bin, in.svc), args...)
		if spec.profileDir != "" {
			cmd.Args = append(cmd.Args, "--profile-dir", spec.profileDir)
		}
		if spec.replicas > 1 {
			cmd.Args = append(cmd.Args, "--replicas", strconv.Itoa(spec.replicas))
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

// commonArgs are the flags of the shared configuration every service of
// the deployment is given.
func (spec deploySpec) commonArgs() []string {
	args := []string{"--nats-url", spec.natsURL, "--redis-url", spec.redisURL,
		"--partitions", strconv.Itoa(spec.partitions), "--hot-keys", spec.hot}
	if spec.budget > 0 {
		args = append(args, "--latency-budget", spec.budget.String())
	}
	return args
}

// common is the shared configuration commonArgs give a service process
// (the flags' defaults otherwise), for the services run in process.
func (spec deploySpec) common() (config.Common, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	var c config.Common
	c.Register(fs)
	if err := fs.Parse(spec.commonArgs()); err != nil {
		return c, fmt.Errorf("bench: %w", err)
	}
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("bench: %w", err)
	}
	return c, nil
}

// runInProcess runs one service instance with its own connections, wired
// as the service process is (service.Build).
func runInProcess(ctx context.Context, spec deploySpec, c *config.Common, svc string, owned []int, v *contract.Validator, reg prometheus.Registerer) error {
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
	run, err := service.Build(svc, service.Deps{Params: service.ParamsOf(c), Names: wire.For(c.Generation), Owned: owned,
		JS: conn.JS, Redis: rdb, Validator: v, Registerer: reg})
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return run.Run(ctx)
}

// failed returns an error when a service has died.
func (d *deployment) failed() error {
	for _, p := range d.procs {
		if p.expectExit.Load() {
			continue
		}
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
