package testenv

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// mainEnv marks a test binary started again to run the command's main.
const mainEnv = "RECEIPTFLOW_TEST_RUN_MAIN"

// RunMainIfChild runs main and never returns when the test binary was
// started by StartMain; otherwise it returns at once. A main package's
// TestMain calls it first:
//
//	func TestMain(m *testing.M) { testenv.RunMainIfChild(main); os.Exit(m.Run()) }
func RunMainIfChild(main func()) {
	if os.Getenv(mainEnv) != "1" {
		return
	}
	main()
	os.Exit(0) // main returned without exiting: success
}

// MainProc is the command under test running as its own process: the test
// binary started again with the command's arguments.
type MainProc struct {
	cmd    *exec.Cmd
	stderr *lockedBuffer
	done   chan struct{}
	code   int
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *lockedBuffer) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// StartMain starts the test binary again as the command (see
// RunMainIfChild) with args, an environment holding only PATH and HOME (so
// no NATS_URL or REDIS_URL of the caller leaks in), and stderr captured.
// The process is killed by t.Cleanup if it is still running.
func StartMain(t testing.TB, args ...string) *MainProc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := &MainProc{cmd: exec.Command(exe, args...), stderr: &lockedBuffer{}, done: make(chan struct{})}
	p.cmd.Env = []string{mainEnv + "=1", "PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	p.cmd.Stderr = p.stderr
	p.cmd.Stdout = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := p.cmd.Wait()
		var ee *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &ee):
			p.code = ee.ExitCode()
		default:
			p.code = -1
		}
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// RunMain runs the command with args to its end and returns its exit code
// and what it wrote.
func RunMain(t testing.TB, args ...string) (int, string) {
	t.Helper()
	p := StartMain(t, args...)
	return p.Wait(t, time.Minute), p.Output()
}

// Output is what the process has written so far (stdout and stderr).
func (p *MainProc) Output() string { return p.stderr.String() }

// Terminate sends SIGTERM.
func (p *MainProc) Terminate(t testing.TB) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
}

// Wait waits at most limit for the process to exit and returns its exit
// code (-1 if it was killed by a signal); past limit it fails the test.
func (p *MainProc) Wait(t testing.TB, limit time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(limit):
		t.Fatalf("the process did not exit within %s; output:\n%s", limit, p.Output())
		return -1
	}
}

// Signal sends sig to the process (SIGSTOP and SIGCONT in fencing tests).
func (p *MainProc) Signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("%v: %v", sig, err)
	}
}

// State is the process's state letter in /proc/<pid>/stat (ProcState).
func (p *MainProc) State() (byte, error) { return ProcState(p.cmd.Process.Pid) }

// ProcState is process pid's state letter in /proc/<pid>/stat (R running,
// S sleeping, T stopped, Z zombie, ...), or an error once it is gone.
func ProcState(pid int) (byte, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0, fmt.Errorf("testenv: unreadable /proc/%d/stat", pid)
	}
	return b[i+2], nil
}
