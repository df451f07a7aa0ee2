package config

import (
	"errors"
	"flag"
	"os"
	"runtime"
)

// procsUsage is the help of a service's --procs flag.
const procsUsage = "how many threads run the service's Go code at once (GOMAXPROCS); 0: as Go decides (the CPUs, or the container's CPU limit). One costs less per event and per wake-up than several; more instances, not more threads, take more load (docs/deployment.md). A GOMAXPROCS variable is kept when this flag is not given"

// Procs is a service's --procs flag (default 1).
type Procs struct {
	n  int
	fs *flag.FlagSet
}

// Register adds --procs to fs.
func (p *Procs) Register(fs *flag.FlagSet) {
	p.fs = fs
	fs.IntVar(&p.n, "procs", 1, procsUsage)
}

// Validate refuses a negative --procs.
func (p *Procs) Validate() error {
	if p.n < 0 {
		return errors.New("--procs must be 0 (as Go decides) or more")
	}
	return nil
}

// Apply sets the process's GOMAXPROCS (ProcsFor); call it only in the
// service's own process, after the flags are parsed.
func (p *Procs) Apply() {
	if n := ProcsFor(Explicit(p.fs)("procs"), p.n, os.Getenv("GOMAXPROCS")); n > 0 {
		runtime.GOMAXPROCS(n)
	}
}

// ProcsFor is the GOMAXPROCS a service sets (0: it leaves Go's): the
// --procs flag when given, else a GOMAXPROCS variable's value (kept as Go
// read it), else --procs's default.
func ProcsFor(flagGiven bool, flagValue int, env string) int {
	if !flagGiven && env != "" {
		return 0
	}
	return flagValue
}
