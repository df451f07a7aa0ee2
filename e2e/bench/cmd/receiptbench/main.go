// Command receiptbench is receiptflow's performance bench (make bench): in
// one run it prints raw JetStream (B0), end-to-end throughput, latency at
// half load, Redis bytes per event id, the services' peak RSS, the batch
// pass against the Python reference, the cost of duplicates, a skewed store,
// windower scaling and the hand-over time of a windower stopped by SIGTERM
// and by SIGKILL in a lease group, and writes bench-results.json.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/receiptflow/receiptflow/e2e/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
	default:
		fmt.Fprintf(os.Stderr, "receiptbench: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("receiptbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o bench.Options
	fs.IntVar(&o.Events, "events", 0, "records per dataset (default 1000000; --quick: 20000)")
	fs.BoolVar(&o.Quick, "quick", false, "small run for a smoke test (20000 records, 2 s latency run)")
	fs.IntVar(&o.Partitions, "partitions", 0, "partitions P (default: the deployment default, 8)")
	fs.StringVar(&o.Mode, "mode", bench.ModeProcess, "services as separate processes from --bin (process) or in the bench process (inprocess, for profiles)")
	fs.StringVar(&o.BinDir, "bin", "bin", "directory holding validator, windower, publisher and receiptctl (make build)")
	fs.StringVar(&o.Work, "work", "", "scratch directory (default a temporary one, removed at the end)")
	fs.StringVar(&o.Python, "python", "python3", "python interpreter of the reference batch pass")
	fs.DurationVar(&o.LatencyFor, "latency-for", 0, "how long the half-load latency run publishes (default 15s; --quick: 2s)")
	fs.Float64Var(&o.LatencyLoad, "latency-load", 0.5, "the latency run's rate as a share of the E2E run's, in (0, 1]; the p99 target is judged at 0.5 only")
	fs.DurationVar(&o.LatencyBudget, "latency-budget", 0, "every service's --latency-budget, and the waits of the bench's ingest from it (default the services' default, 25ms)")
	windowers := fs.String("windowers", "1,2,4", "windower instance counts of the scaling runs")
	only := fs.String("only", "", "comma-separated scenarios to run ("+strings.Join(bench.Scenarios, ",")+"; default all)")
	doorRuns := fs.String("door-runs", "", "comma-separated producer runs of the door scenario ("+strings.Join(bench.DoorRunNames, ",")+"; default all; the half-load and memory runs follow http-100)")
	fs.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile of the --profile scenario here")
	fs.StringVar(&o.MemProfile, "memprofile", "", "write an allocation profile of the --profile scenario here (and <file>.base before it)")
	fs.StringVar(&o.Profile, "profile", bench.ScenarioE2E, "scenario the profiles cover")
	fs.StringVar(&o.ProfileDir, "profile-dir", "", "write CPU and allocation profiles of the --profile scenario here: the bench process's (bench.*.pprof) and each service process's (<run>/<service>.*.pprof)")
	jsonOut := fs.String("json", "bench-results.json", "where to write the results (empty: nowhere)")
	timeout := fs.Duration("timeout", 0, "bound on the whole run (default 45m; --quick: 2m)")
	quiet := fs.Bool("q", false, "no progress lines on stderr")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for _, s := range strings.Split(*windowers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return fmt.Errorf("--windowers: bad count %q", s)
		}
		o.Windowers = append(o.Windowers, n)
	}
	if *doorRuns != "" {
		o.DoorRuns = strings.Split(*doorRuns, ",")
	}
	if *only != "" {
		o.Only = strings.Split(*only, ",")
	}
	if *timeout <= 0 {
		*timeout = 45 * time.Minute
		if o.Quick {
			*timeout = 2 * time.Minute
		}
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	o.Out = stdout
	if !*quiet {
		o.Log = stderr
	}
	res, err := bench.Run(ctx, o)
	if err != nil {
		return err
	}
	if *jsonOut != "" {
		if err := res.WriteJSON(*jsonOut); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "receiptbench: results in %s\n", *jsonOut)
	}
	return nil
}
