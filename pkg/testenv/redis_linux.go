package testenv

import (
	"os/exec"
	"syscall"
)

// setChildAttrs makes the kernel kill redis-server if the test binary dies
// without running its cleanups (a panic, a -timeout). Pdeathsig fires when
// the forking OS thread exits; the Go runtime only retires threads whose
// goroutine locked them, which RedisServer's callers do not do.
func setChildAttrs(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
