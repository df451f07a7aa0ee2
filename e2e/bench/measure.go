package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"
)

// A child's peak resident set cannot be read from the rusage that
// os/exec hands back. Go starts a child with vfork (CLONE_VM), so until
// its exec the child runs in the parent's address space, and Linux keeps
// the high-water mark of the address space an exec leaves in the child's
// ru_maxrss: every child of a 400 MB bench process "peaks" at 400 MB,
// however little it uses itself. So the bench starts a measured command
// through a small copy of its own binary (measureEnv set): that copy
// starts the command, waits for it and writes its wall time and rusage
// on fd 3. The command's ru_maxrss then carries at most the small copy's
// own few megabytes.

// measureEnv, set to "1", makes the binary a measuring parent.
const measureEnv = "RECEIPTBENCH_MEASURE"

func init() {
	if os.Getenv(measureEnv) == "1" {
		os.Exit(measureParent(os.Args[1:]))
	}
}

// measured is what a measuring parent reports of its child.
type measured struct {
	Wall   time.Duration `json:"wall_ns"`
	User   time.Duration `json:"user_ns"`
	System time.Duration `json:"system_ns"`
	MaxRSS int64         `json:"max_rss_bytes"`
	Exit   int           `json:"exit"`
}

// measureParent runs args, with this process's standard files, and
// writes what it measured as JSON on fd 3; it returns the exit code.
func measureParent(args []string) int {
	report := os.NewFile(3, "measure-report")
	if len(args) == 0 || report == nil {
		fmt.Fprintln(os.Stderr, "bench: measuring parent started without a command or its report pipe")
		return 2
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = withoutEnv(os.Environ(), measureEnv)
	began := time.Now()
	err := cmd.Run()
	m := measured{Wall: time.Since(began)}
	if cmd.ProcessState == nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		return 2
	}
	m.Exit = cmd.ProcessState.ExitCode()
	m.User, m.System = cmd.ProcessState.UserTime(), cmd.ProcessState.SystemTime()
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		m.MaxRSS = ru.Maxrss << 10 // KiB on Linux
	}
	if err := json.NewEncoder(report).Encode(&m); err != nil {
		fmt.Fprintf(os.Stderr, "bench: measure report: %v\n", err)
		return 2
	}
	return m.Exit
}

// measure runs name with args through a measuring copy of this binary,
// with the given standard output and error, and returns the child's wall
// time, CPU and peak resident set. A non-zero exit is an error (the
// measurement is still returned).
func measure(ctx context.Context, stdout, stderr io.Writer, name string, args ...string) (measured, error) {
	self, err := os.Executable()
	if err != nil {
		return measured{}, fmt.Errorf("bench: measure: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return measured{}, err
	}
	defer r.Close()
	cmd := exec.CommandContext(ctx, self, append([]string{name}, args...)...)
	cmd.Env = append(withoutEnv(os.Environ(), measureEnv), measureEnv+"=1")
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.ExtraFiles = []*os.File{w}
	if err := cmd.Start(); err != nil {
		w.Close()
		return measured{}, fmt.Errorf("bench: measure %s: %w", name, err)
	}
	w.Close()
	var m measured
	decodeErr := json.NewDecoder(r).Decode(&m)
	runErr := cmd.Wait()
	switch {
	case decodeErr != nil:
		return measured{}, fmt.Errorf("bench: measure %s: no report (%v, %v)", name, decodeErr, runErr)
	case m.Exit != 0 || runErr != nil:
		return m, fmt.Errorf("bench: %s exited %d: %v", name, m.Exit, runErr)
	}
	return m, nil
}

// withoutEnv is a copy of env without the variable named key.
func withoutEnv(env []string, key string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool { return strings.HasPrefix(kv, key+"=") })
}
