package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/redis/go-redis/v9"

	"github.com/receiptflow/receiptflow/pkg/embedded"
	"github.com/receiptflow/receiptflow/pkg/testenv"
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
// on a free loopback port; syncAlways is embedded.NATSConfig.SyncAlways
// (fsync every write before its ack, sync_interval: always).
func startNATS(dir string, syncAlways bool) (*server.Server, string, error) {
	if err := os.RemoveAll(dir); err != nil {
		return nil, "", err
	}
	ns, err := embedded.StartNATS(embedded.NATSConfig{StoreDir: dir, SyncAlways: syncAlways})
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

func freePort() (int, error) { return testenv.Port() }

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

// cpuTime returns the user plus system CPU time process pid (all its
// threads) has used, from /proc (Linux; clock-tick resolution).
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name may hold spaces: fields start after its ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("bench: bad /proc stat")
	}
	f := strings.Fields(string(b[i+1:]))
	// After ')': state(3) ... utime is field 14, stime 15 of the full line.
	if len(f) < 13 {
		return 0, errors.New("bench: short /proc stat")
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, errors.New("bench: bad /proc stat times")
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// clockTicks is USER_HZ, 100 on every Linux the bench runs on.
const clockTicks = 100

// cpuMeter reads the CPU time of a set of named processes.
type cpuMeter map[string]int

func (m cpuMeter) read() map[string]time.Duration {
	out := make(map[string]time.Duration, len(m))
	for name, pid := range m {
		if d, err := cpuTime(pid); err == nil {
			out[name] = d
		}
	}
	return out
}

// cpuSince returns, per name, the CPU time used since before.
func (m cpuMeter) since(before map[string]time.Duration) map[string]time.Duration {
	now := m.read()
	for k, v := range now {
		now[k] = v - before[k]
	}
	return now
}

// cmdStat is one line of INFO commandstats.
type cmdStat struct {
	Name  string
	Calls int64
	Usec  int64
}

// commandStats reads INFO commandstats, busiest first.
func commandStats(ctx context.Context, c *redis.Client) ([]cmdStat, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	var out []cmdStat
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		st := cmdStat{Name: strings.TrimPrefix(name, "cmdstat_")}
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				st.Calls = n
			case "usec":
				st.Usec = n
			}
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b cmdStat) int { return int(b.Usec - a.Usec) })
	return out, nil
}
