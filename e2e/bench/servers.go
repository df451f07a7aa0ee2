package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/redis/go-redis/v9"

	"github.com/receiptflow/receiptflow/pkg/embedded"
)

// redisServer is a redis-server child process on loopback with nothing
// persisted: the bench measures the state's memory, not its durability.
type redisServer struct {
	cmd  *exec.Cmd
	done chan struct{}
	addr string
	log  string
}

// startRedis starts bin (redis-server) on a free loopback port with its
// files in dir and waits until it answers PING.
func startRedis(ctx context.Context, bin, dir string) (*redisServer, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		r := &redisServer{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), log: filepath.Join(dir, "redis.log")}
		conf := filepath.Join(dir, "redis.conf")
		body := fmt.Sprintf("bind 127.0.0.1\nport %d\ndir %q\ndaemonize no\nprotected-mode yes\nsave \"\"\nappendonly no\nlogfile %q\n",
			port, dir, r.log)
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			return nil, err
		}
		r.cmd = exec.Command(bin, conf)
		r.cmd.Dir = dir
		r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := r.cmd.Start(); err != nil {
			return nil, fmt.Errorf("bench: start %s: %w", bin, err)
		}
		r.done = make(chan struct{})
		go func() { _ = r.cmd.Wait(); close(r.done) }()
		if lastErr = r.waitReady(ctx, 10*time.Second); lastErr == nil {
			return r, nil
		}
		r.stop()
	}
	return nil, fmt.Errorf("bench: redis-server did not start: %w", lastErr)
}

func (r *redisServer) waitReady(ctx context.Context, total time.Duration) error {
	c := redis.NewClient(&redis.Options{Addr: r.addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(total)
	for {
		select {
		case <-r.done:
			return errors.New("redis-server exited during start-up; see " + r.log)
		default:
		}
		err := c.Ping(ctx).Err()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("no PONG from %s: %w", r.addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// URL is the server's redis:// URL.
func (r *redisServer) URL() string { return "redis://" + r.addr }

// pid is the server's process id.
func (r *redisServer) pid() int { return r.cmd.Process.Pid }

// stop kills the server and waits for it.
func (r *redisServer) stop() {
	if r == nil || r.cmd == nil || r.cmd.Process == nil {
		return
	}
	select {
	case <-r.done:
		return
	default:
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(5 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.done
	}
}

// usedMemory is INFO memory's used_memory in bytes.
func usedMemory(ctx context.Context, c *redis.Client) (int64, error) {
	info, err := c.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, errors.New("bench: INFO memory has no used_memory")
}

// startNATS starts a fresh embedded nats-server with its file store in dir
// on a free loopback port.
func startNATS(dir string) (*server.Server, string, error) {
	if err := os.RemoveAll(dir); err != nil {
		return nil, "", err
	}
	ns, err := embedded.StartNATS(embedded.NATSOptions{StoreDir: dir})
	if err != nil {
		return nil, "", err
	}
	return ns, embedded.ClientURL(ns), nil
}

// stopNATS shuts ns down and removes its store.
func stopNATS(ns *server.Server, dir string) {
	if ns == nil {
		return
	}
	ns.Shutdown()
	ns.WaitForShutdown()
	_ = os.RemoveAll(dir)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// peakRSS returns VmHWM (the peak resident set) of process pid in bytes,
// from /proc (Linux).
func peakRSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("bench: no VmHWM in /proc status")
}

// loadAvg is the 1-minute load average, to show how busy the machine was.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}
