package testenv

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// RedisServerBinary is the executable RedisServer looks up on PATH.
const RedisServerBinary = "redis-server"

// redisReadyTimeout bounds the wait for a started redis-server to answer PING.
const redisReadyTimeout = 10 * time.Second

// RedisProc is a redis-server child process started by RedisServer. Its
// methods are safe to call concurrently, except that Restart must not overlap
// another Restart.
type RedisProc struct {
	bin  string
	dir  string
	conf string
	port int
	args []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	log  *os.File
}

// RedisServer starts a real redis-server on 127.0.0.1 and a free port, with
// its data directory in t.TempDir(), and waits (at most 10 s) until it answers
// PING. By default nothing is persisted (`save ""`, `appendonly no`); see
// WithAOF and WithArgs. The process is killed by t.Cleanup.
//
// If redis-server is not on PATH, RedisServer fails the test when the
// environment has CI=true and otherwise skips it with a message that says the
// real-Redis suite was not run and how to install redis-server. It fails the
// test if the server does not start; the error includes the server's log.
func RedisServer(t testing.TB, opts ...RedisOption) *RedisProc {
	t.Helper()
	bin := lookRedisServer(t)
	var cfg redisConfig
	for _, o := range opts {
		o(&cfg)
	}
	dir := t.TempDir()
	p := &RedisProc{bin: bin, dir: dir, conf: filepath.Join(dir, "redis.conf"), args: cfg.args}
	t.Cleanup(p.stop)

	// A free port found by binding and closing can be taken by someone else
	// before redis-server binds it; pick another one a few times.
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if p.port, err = Port(); err != nil {
			break
		}
		if err = writeRedisConf(p.conf, dir, p.port, cfg.aof); err != nil {
			break
		}
		if err = p.start(); err == nil {
			return p
		}
	}
	t.Fatalf("testenv: start redis-server: %v", err)
	return nil
}

// lookRedisServer finds the redis-server binary or ends the test loudly.
func lookRedisServer(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath(RedisServerBinary)
	if err == nil {
		return bin
	}
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		t.Fatalf("testenv: %s not found on PATH with CI=true: the real-Redis suite cannot run. "+
			"CI must install it (.ci/run does: apt-get install -y redis-server). Lookup error: %v", RedisServerBinary, err)
		return ""
	}
	t.Skipf("testenv: !!! %s not found on PATH: the real-Redis suite was NOT run !!! "+
		"Install it (Debian/Ubuntu: apt-get install -y redis-server) and run the tests again.", RedisServerBinary)
	return ""
}

// Addr returns the server's host:port, e.g. "127.0.0.1:40123"; it stays the
// same across Restart.
func (p *RedisProc) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port))
}

// URL returns the server's URL, e.g. "redis://127.0.0.1:40123", as accepted by
// go-redis ParseURL and --redis-url.
func (p *RedisProc) URL() string {
	return "redis://" + p.Addr()
}

// Dir returns the server's data directory (config, log, AOF files).
func (p *RedisProc) Dir() string {
	return p.dir
}

// Running reports whether the redis-server process is alive.
func (p *RedisProc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Signal sends sig to the running server (e.g. SIGSTOP and SIGCONT for a
// stalled server); it returns an error if none is running.
func (p *RedisProc) Signal(sig os.Signal) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil || cmd.Process == nil || done == nil {
		return errors.New("testenv: redis-server is not running")
	}
	select {
	case <-done:
		return errors.New("testenv: redis-server is not running")
	default:
	}
	return cmd.Process.Signal(sig)
}

// Kill sends SIGKILL to the server, as a crash would, and waits until the
// process has exited. Writes not yet on disk are lost (with WithAOF, every
// acknowledged write is on disk). It does nothing if the process is not
// running; it is safe to call twice.
func (p *RedisProc) Kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	_ = cmd.Process.Kill() // SIGKILL
	<-done
}

// Restart kills the server if it is still running and starts it again on the
// same port with the same data directory and configuration, waiting until it
// answers PING. Clients reconnect to the same Addr. It fails the test if the
// server does not come back.
func (p *RedisProc) Restart(t testing.TB) {
	t.Helper()
	p.Kill()
	// The port was ours a moment ago; a short retry covers a slow release.
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if err = p.start(); err == nil {
			return
		}
	}
	t.Fatalf("testenv: restart redis-server on %s: %v", p.Addr(), err)
}

// start runs redis-server once and waits until it answers PING. On failure
// the process is gone and the error carries the tail of its log.
func (p *RedisProc) start() error {
	logPath := filepath.Join(p.dir, "redis.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "--- testenv: starting %s on port %d at %s\n", p.bin, p.port, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.bin, append([]string{p.conf}, p.args...)...)
	cmd.Dir = p.dir
	cmd.Stdout = logf
	cmd.Stderr = logf
	setChildAttrs(cmd)
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	p.mu.Lock()
	if p.log != nil {
		p.log.Close() // the previous run's; that process has exited
	}
	p.cmd, p.done, p.log = cmd, done, logf
	p.mu.Unlock()

	if err := waitPing(p.Addr(), done, redisReadyTimeout); err != nil {
		p.Kill()
		return fmt.Errorf("%w\n--- %s (tail):\n%s", err, logPath, tail(logPath, 20))
	}
	return nil
}

// stop kills the process and closes its log; registered with t.Cleanup.
func (p *RedisProc) stop() {
	p.Kill()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.log != nil {
		p.log.Close()
		p.log = nil
	}
}

// waitPing polls addr with PING until it answers +PONG, the process exits, or
// total has passed.
func waitPing(addr string, exited <-chan struct{}, total time.Duration) error {
	deadline := time.Now().Add(total)
	var last error
	for {
		select {
		case <-exited:
			return errors.New("redis-server exited during start-up")
		default:
		}
		if last = ping(addr); last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s did not answer PING within %s: %w", addr, total, last)
		}
		select {
		case <-exited:
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// ping sends one RESP PING; a reply other than +PONG (e.g. -LOADING) is an
// error.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line = strings.TrimSpace(line); line != "+PONG" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// writeRedisConf writes the base configuration of a test redis-server.
func writeRedisConf(path, dir string, port int, aof bool) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "bind 127.0.0.1\nport %d\ndir %q\n", port, dir)
	b.WriteString("daemonize no\nprotected-mode yes\nlogfile \"\"\nsave \"\"\n")
	if aof {
		b.WriteString("appendonly yes\nappendfsync always\n")
	} else {
		b.WriteString("appendonly no\n")
	}
	return os.WriteFile(path, b.Bytes(), 0o600)
}

// tail returns the last n lines of the file at path, or why it cannot.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
