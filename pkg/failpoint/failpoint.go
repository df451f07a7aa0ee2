// Package failpoint kills a service on purpose at named points
// (docs/spec.md §7), so that fault tests and `receiptctl run --failpoints` exercise
// real crashes.
//
// Syntax: NAME=ACTION@every:N[,NAME=ACTION@every:N...], e.g.
// "windower.after-write=crash@every:37". The Nth, 2Nth, ... hit of NAME
// fires. ACTION crash kills the process; stop (a process of its own
// only) stops it with SIGSTOP where it is, as a long pause would, until
// something sends it SIGCONT (the fencing test, docs/architecture.md);
// in-process a stop is a crash.
package failpoint

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Env is the environment variable read when no --failpoints flag is given.
const Env = "RECEIPTS_FAILPOINTS"

// The failpoints services check.
const (
	ValidatorAfterPublish = "validator.after-publish"
	WindowerBeforeWrite   = "windower.before-write"
	WindowerAfterWrite    = "windower.after-write"
	PublisherAfterPut     = "publisher.after-put"
)

// Known lists every failpoint name a service checks.
var Known = []string{ValidatorAfterPublish, WindowerBeforeWrite, WindowerAfterWrite, PublisherAfterPut}

// ErrCrash is returned by Hit when an in-process failpoint fires: the
// service must stop at once, without acking or flushing anything.
var ErrCrash = errors.New("failpoint: crash")

// Mode is what a firing failpoint does.
type Mode int

const (
	// InProcess makes Hit return ErrCrash; the supervisor drops the
	// instance's connections and starts a fresh one.
	InProcess Mode = iota
	// Process kills the whole process with SIGKILL: no ack, no flush, no
	// deferred cleanup.
	Process
)

type point struct {
	every int
	hits  int
	stop  bool // stop@: SIGSTOP instead of a crash (Process mode)
}

// Set is a parsed failpoint specification. A nil *Set never fires. Safe for
// concurrent use.
type Set struct {
	mode   Mode
	mu     sync.Mutex
	points map[string]*point
	fired  map[string]int
}

// Parse parses spec; an empty spec gives an empty set.
func Parse(spec string, mode Mode) (*Set, error) {
	s := &Set{mode: mode, points: map[string]*point{}, fired: map[string]int{}}
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, action, ok := strings.Cut(item, "=")
		if !ok {
			return nil, fmt.Errorf("failpoint: %q: want NAME=crash@every:N", item)
		}
		if !known(name) {
			return nil, fmt.Errorf("failpoint: unknown failpoint %q (known: %s)", name, strings.Join(Known, ", "))
		}
		n, ok := strings.CutPrefix(action, "crash@every:")
		stop := false
		if !ok {
			n, stop = strings.CutPrefix(action, "stop@every:")
		}
		if !ok && !stop {
			return nil, fmt.Errorf("failpoint: %q: want crash@every:N or stop@every:N", item)
		}
		every, err := strconv.Atoi(n)
		if err != nil || every < 1 {
			return nil, fmt.Errorf("failpoint: %q: N must be a positive integer", item)
		}
		s.points[name] = &point{every: every, stop: stop}
	}
	return s, nil
}

func known(name string) bool {
	for _, k := range Known {
		if k == name {
			return true
		}
	}
	return false
}

// Hit records one pass through failpoint name. When it fires it kills the
// process (Process mode), stops it until SIGCONT and returns nil (stop,
// Process mode), or returns an error wrapping ErrCrash (InProcess).
func (s *Set) Hit(name string) error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	p := s.points[name]
	fire, stop := false, false
	if p != nil {
		stop = p.stop
		p.hits++
		fire = p.hits%p.every == 0
		if fire {
			s.fired[name]++
		}
	}
	s.mu.Unlock()
	if !fire {
		return nil
	}
	if s.mode == Process && stop {
		fmt.Fprintf(os.Stderr, "failpoint %s fired: stopping process (SIGSTOP)\n", name)
		stopHere()
		return nil // continued (SIGCONT): go on where it stopped
	}
	if s.mode == Process {
		fmt.Fprintf(os.Stderr, "failpoint %s fired: killing process\n", name)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
	return fmt.Errorf("%w at %s", ErrCrash, name)
}

// Fired returns how often each failpoint has fired.
func (s *Set) Fired() map[string]int {
	out := map[string]int{}
	if s == nil {
		return out
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, v := range s.fired {
		out[k] = v
	}
	return out
}

// Empty reports whether the set has no failpoints.
func (s *Set) Empty() bool { return s == nil || len(s.points) == 0 }

// stopHere stops the process (SIGSTOP) before the caller goes on. A
// SIGSTOP sent to the process is taken by one of its threads, not
// necessarily the caller's, which could run on (and write) until the stop
// reached it; sent to the caller's own thread, it stops the process
// before the call returns.
func stopHere() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_ = syscall.Tgkill(os.Getpid(), syscall.Gettid(), syscall.SIGSTOP)
}
