// Package natsproc runs nats-server as a real child process for tests: built
// once from the nats-server module in the build list, started from a config
// file on a loopback port with its JetStream file store in a directory of
// its own, SIGKILLed and restarted on the same port and store, alone or as
// N routed nodes of one cluster. The in-process server of pkg/testenv shares
// the test's address space and shuts down in order; this one crashes like a
// deployed server does.
package natsproc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/testenv"
)

// Module is the package Binary builds: the nats-server main package of the
// module already in the test module's build list, so no network is needed
// when the module cache holds it.
const Module = "github.com/nats-io/nats-server/v2"

// readyTimeout bounds the wait for a started server to report healthy
// (JetStream recovered from its store; in a cluster, a meta leader known).
const readyTimeout = 60 * time.Second

// Binary builds nats-server into Dir once and hands out its path. The zero
// value is not usable: set Dir (a directory that outlives the tests, e.g.
// one TestMain removes). Safe for concurrent use.
type Binary struct {
	Dir string

	once sync.Once
	path string
	err  error
}

// Path returns the path of the nats-server executable, building it on the
// first call with `go build` run from the current directory (a test's
// package directory, inside the module whose build list holds Module). It
// fails the test if the build fails; later calls fail the same way.
func (b *Binary) Path(t testing.TB) string {
	t.Helper()
	b.once.Do(func() {
		if b.Dir == "" {
			b.err = errors.New("natsproc: Binary.Dir is not set")
			return
		}
		out := filepath.Join(b.Dir, "nats-server")
		cmd := exec.Command("go", "build", "-o", out, Module)
		if msg, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("natsproc: go build %s: %w\n%s", Module, err, msg)
			return
		}
		b.path = out
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// Options configure one server.
type Options struct {
	// Name is the server_name (default "rf-n1"); nodes of a cluster need
	// distinct names.
	Name string
	// Host is the loopback address the client, route and monitoring ports
	// listen on (default 127.0.0.1; all of 127.0.0.0/8 is loopback).
	Host string
	// Credential, if set, runs the process as that user and group (the
	// test must be root); Dir and the config file are given to it. Dir's
	// parents and the binary must be reachable by it.
	Credential *syscall.Credential
	// Dir holds the config file, the log and the store (Dir/store);
	// default t.TempDir().
	Dir string
	// Port is the client port; 0 picks a free one on the first start.
	Port int
	// Cluster, if set, makes the server a node of a routed cluster.
	Cluster *Cluster
	// SyncInterval is the file store's sync_interval (default "always":
	// every acknowledged write is on disk before the ack).
	SyncInterval string
	// MaxFileStore is the JetStream max_file_store in bytes (0: the
	// server's default, a share of the disk). SetMaxFileStore raises it.
	MaxFileStore int64
	// Extra is appended to the generated config file verbatim.
	Extra string
}

// Cluster describes the routes of one node.
type Cluster struct {
	Name   string // cluster name (default "rf")
	Port   int    // this node's route port
	Routes []int  // route ports of every node (this node's own is fine)
	// Hosts are the addresses of Routes, index by index (default
	// 127.0.0.1 each).
	Hosts []string
}

// Server is one nats-server child process. Its methods are safe to call
// concurrently, except that Restart must not overlap another Restart or
// Kill of the same server.
type Server struct {
	bin     string
	opts    Options
	conf    string
	logPath string
	mport   int

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	log  *os.File
}

// Start starts one nats-server (see Options) and waits until it is healthy.
// The process is killed by t.Cleanup. It fails the test if the server does
// not come up; the error carries the tail of its log.
func Start(t testing.TB, bin string, opts Options) *Server {
	t.Helper()
	s := newServer(t, bin, opts)
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if err = s.spawn(); err == nil {
			if err = s.waitReady(); err == nil {
				return s
			}
		}
		s.Kill()
		if opts.Port != 0 {
			break // a fixed port is not ours to change
		}
		if s.opts.Port, s.mport, err = freePort2(); err != nil {
			break
		}
		if err = s.writeConf(); err != nil {
			break
		}
	}
	t.Fatalf("natsproc: start %s: %v", s.opts.Name, err)
	return nil
}

// StartCluster starts n routed nodes on loopback, named rf-n1 … rf-nN, each
// with its own store, and waits until every node is healthy (which needs a
// JetStream meta leader). It returns the servers and the comma-separated
// client URL list. The processes are killed by t.Cleanup. extra, if given,
// is appended to every node's config file (e.g. lame-duck settings).
func StartCluster(t testing.TB, bin string, n int, extra ...string) ([]*Server, string) {
	t.Helper()
	return StartClusterWith(t, bin, n, nil, extra...)
}

// StartClusterWith is StartCluster with node, if not nil, called with each
// node's index and options before its first start: it may set Host,
// Credential or Dir (not the ports, Name or Cluster).
func StartClusterWith(t testing.TB, bin string, n int, node func(i int, o *Options), extra ...string) ([]*Server, string) {
	t.Helper()
	// Every port of the cluster (n client, n monitoring, n route ports) is
	// distinct: the kernel may hand the same free port out twice in a row.
	ports, err := distinctPorts(3 * n)
	if err != nil {
		t.Fatalf("natsproc: %v", err)
	}
	routes := ports[2*n:]
	opts := make([]Options, n)
	hosts := make([]string, n)
	for i := range opts {
		opts[i] = Options{Name: fmt.Sprintf("rf-n%d", i+1), Extra: strings.Join(extra, "\n")}
		if node != nil {
			node(i, &opts[i])
		}
		hosts[i] = opts[i].Host
	}
	servers := make([]*Server, n)
	urls := make([]string, n)
	for i := range servers {
		o := opts[i]
		o.Port = ports[i]
		o.Cluster = &Cluster{Port: routes[i], Routes: routes, Hosts: hosts}
		servers[i] = newServerOn(t, bin, o, ports[n+i])
		if err := servers[i].spawn(); err != nil {
			t.Fatalf("natsproc: start %s: %v", servers[i].opts.Name, err)
		}
		urls[i] = servers[i].URL()
	}
	for _, s := range servers {
		if err := s.waitReady(); err != nil {
			t.Fatalf("natsproc: start %s: %v", s.opts.Name, err)
		}
	}
	return servers, strings.Join(urls, ",")
}

// distinctPorts returns n distinct ports that were free a moment ago.
func distinctPorts(n int) ([]int, error) {
	seen := map[int]bool{}
	var out []int
	for tries := 0; len(out) < n; tries++ {
		if tries > 10*n {
			return nil, fmt.Errorf("natsproc: no %d distinct free ports", n)
		}
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out, nil
}

func newServer(t testing.TB, bin string, opts Options) *Server {
	t.Helper()
	return newServerOn(t, bin, opts, 0)
}

// newServerOn is newServer with the monitoring port mport (0: a free one).
func newServerOn(t testing.TB, bin string, opts Options, mport int) *Server {
	t.Helper()
	if opts.Name == "" {
		opts.Name = "rf-n1"
	}
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	if opts.SyncInterval == "" {
		opts.SyncInterval = "always"
	}
	if opts.Cluster != nil && opts.Cluster.Name == "" {
		opts.Cluster.Name = "rf"
	}
	s := &Server{bin: bin, opts: opts, conf: filepath.Join(opts.Dir, "nats.conf"), logPath: filepath.Join(opts.Dir, "nats.log")}
	t.Cleanup(s.stop)
	var err error
	switch {
	case mport != 0:
		s.mport = mport
	case s.opts.Port == 0:
		s.opts.Port, s.mport, err = freePort2()
	default:
		s.mport, err = freePort()
	}
	if err == nil {
		err = s.writeConf()
	}
	if c := opts.Credential; err == nil && c != nil {
		for _, p := range []string{opts.Dir, s.conf} {
			if err = os.Chown(p, int(c.Uid), int(c.Gid)); err != nil {
				break
			}
		}
	}
	if err != nil {
		t.Fatalf("natsproc: %v", err)
	}
	return s
}

// writeConf writes the server's config file.
func (s *Server) writeConf() error {
	var b strings.Builder
	fmt.Fprintf(&b, "server_name: %q\nlisten: %q\nhttp: %q\n", s.opts.Name,
		net.JoinHostPort(s.opts.Host, strconv.Itoa(s.opts.Port)), net.JoinHostPort(s.opts.Host, strconv.Itoa(s.mport)))
	fmt.Fprintf(&b, "jetstream {\n  store_dir: %q\n  sync_interval: %s\n", filepath.Join(s.opts.Dir, "store"), s.opts.SyncInterval)
	if s.opts.MaxFileStore > 0 {
		fmt.Fprintf(&b, "  max_file_store: %d\n", s.opts.MaxFileStore)
	}
	b.WriteString("}\n")
	if c := s.opts.Cluster; c != nil {
		fmt.Fprintf(&b, "cluster {\n  name: %q\n  listen: %q\n  routes: [\n", c.Name, net.JoinHostPort(s.opts.Host, strconv.Itoa(c.Port)))
		for i, p := range c.Routes {
			host := "127.0.0.1"
			if i < len(c.Hosts) && c.Hosts[i] != "" {
				host = c.Hosts[i]
			}
			fmt.Fprintf(&b, "    \"nats-route://%s\"\n", net.JoinHostPort(host, strconv.Itoa(p)))
		}
		b.WriteString("  ]\n}\n")
	}
	b.WriteString(s.opts.Extra)
	return os.WriteFile(s.conf, []byte(b.String()), 0o600)
}

// URL returns the client URL, e.g. "nats://127.0.0.1:40123"; it stays the
// same across Restart.
func (s *Server) URL() string {
	return "nats://" + net.JoinHostPort(s.opts.Host, strconv.Itoa(s.opts.Port))
}

// Port returns the client port.
func (s *Server) Port() int { return s.opts.Port }

// RoutePort returns the route port of a cluster node, 0 for a lone server.
func (s *Server) RoutePort() int {
	if s.opts.Cluster == nil {
		return 0
	}
	return s.opts.Cluster.Port
}

// Name returns the server_name.
func (s *Server) Name() string { return s.opts.Name }

// StoreDir returns the JetStream store directory.
func (s *Server) StoreDir() string { return filepath.Join(s.opts.Dir, "store") }

// LogPath returns the file the server's output goes to (every run appends).
func (s *Server) LogPath() string { return s.logPath }

// Running reports whether the process is alive.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// Kill sends SIGKILL to the server, as a crash would, and waits until the
// process has exited. What the file store had not synced is lost (with the
// default sync_interval always, every acknowledged write survives). It does
// nothing if the process is not running; it is safe to call twice.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGKILL) // a paused process dies too
	<-done
}

// Signal sends sig to the running server: SIGTERM (or SIGINT) shuts it
// down in order, SIGUSR2 puts it in lame-duck mode (it leaves after
// lame_duck_duration, at least 30 s; set it with Options.Extra). It
// returns an error if the server is not running. Exited tells when it is
// gone; Restart starts it again.
func (s *Server) Signal(sig syscall.Signal) error {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return errors.New("natsproc: server never started")
	}
	select {
	case <-done:
		return fmt.Errorf("natsproc: %s is not running", s.opts.Name)
	default:
	}
	return cmd.Process.Signal(sig)
}

// PID returns the process id of the running server, 0 if none runs.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	select {
	case <-s.done:
		return 0
	default:
		return s.cmd.Process.Pid
	}
}

// SetMaxFileStore rewrites the config with max_file_store n and reloads
// the running server (SIGHUP), then waits until /jsz reports the new
// limit. nats-server reloads a raised limit only: a lower one, or one set
// where none was, is refused (the server logs why) and this times out.
// It must not overlap Restart.
func (s *Server) SetMaxFileStore(n int64) error {
	s.opts.MaxFileStore = n
	if err := s.writeConf(); err != nil {
		return err
	}
	if err := s.Signal(syscall.SIGHUP); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	for {
		js, err := s.JetStreamUsage(ctx)
		if err == nil && js.MaxStore == n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("natsproc: max_file_store %d not in effect on %s (%v)\n--- %s (tail):\n%s", n, s.opts.Name, err, s.logPath, tail(s.logPath, 20))
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// Usage is what the server's JetStream stores hold and may hold.
type Usage struct {
	Store    int64 `json:"storage"`
	MaxStore int64 `json:"max_storage"`
}

// JetStreamUsage reads the file store's use and limit from /jsz.
func (s *Server) JetStreamUsage(ctx context.Context) (Usage, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/jsz", s.mport), nil)
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Do(req)
	if err != nil {
		return Usage{}, err
	}
	defer resp.Body.Close()
	var jsz struct {
		Storage int64 `json:"storage"`
		Config  struct {
			MaxStore int64 `json:"max_storage"`
		} `json:"config"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&jsz); err != nil {
		return Usage{}, fmt.Errorf("natsproc: /jsz: %w", err)
	}
	return Usage{Store: jsz.Storage, MaxStore: jsz.Config.MaxStore}, nil
}

// Pause stops the server's process (SIGSTOP) without killing it: a
// stalled node. Resume continues it.
func (s *Server) Pause() error { return s.Signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() error { return s.Signal(syscall.SIGCONT) }

// Exited returns a channel closed when the current process has exited; a
// closed channel if none was started.
func (s *Server) Exited() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return s.done
}

// Restart kills the server if it is still running, starts it again on the
// same ports with the same store, and waits until it is healthy. It fails
// the test if the server does not come back.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if err := s.RestartErr(); err != nil {
		t.Fatalf("natsproc: %v", err)
	}
}

// RestartErr is Restart for a goroutine that is not the test's own: it
// returns the error instead of failing the test.
func (s *Server) RestartErr() error {
	s.Kill()
	var err error
	// The ports were ours a moment ago; a retry covers a slow release.
	for attempt := 0; attempt < 3; attempt++ {
		if err = s.spawn(); err == nil {
			if err = s.waitReady(); err == nil {
				return nil
			}
		}
		s.Kill()
	}
	return fmt.Errorf("restart %s on %s: %w", s.opts.Name, s.URL(), err)
}

// spawn starts the process once, without waiting for it to be ready.
func (s *Server) spawn() error {
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "--- natsproc: starting %s at %s\n", s.opts.Name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(s.bin, "-c", s.conf)
	cmd.Dir = s.opts.Dir
	cmd.Stdout, cmd.Stderr = logf, logf
	// The kernel kills the server if the test binary dies without its
	// cleanups (a panic, -timeout).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Credential: s.opts.Credential}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	s.mu.Lock()
	if s.log != nil {
		s.log.Close() // the previous run's; that process has exited
	}
	s.cmd, s.done, s.log = cmd, done, logf
	s.mu.Unlock()
	return nil
}

// waitReady polls /healthz until it answers 200, the process exits or
// readyTimeout has passed.
func (s *Server) waitReady() error {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	url := "http://" + net.JoinHostPort(s.opts.Host, strconv.Itoa(s.mport)) + "/healthz"
	client := &http.Client{Timeout: 2 * time.Second}
	var last error
	for {
		select {
		case <-done:
			return fmt.Errorf("nats-server exited during start-up\n--- %s (tail):\n%s", s.logPath, tail(s.logPath, 20))
		default:
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("healthz answered %s", resp.Status)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("not healthy within %s: %w\n--- %s (tail):\n%s", readyTimeout, last, s.logPath, tail(s.logPath, 20))
		case <-done:
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// stop kills the process and closes its log; registered with t.Cleanup.
func (s *Server) stop() {
	s.Kill()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.log != nil {
		s.log.Close()
		s.log = nil
	}
}

// freePort returns a TCP port on 127.0.0.1 that is free and reserved for
// this process (testenv.Port): a node killed and started again on its
// ports finds them still free.
func freePort() (int, error) {
	p, err := testenv.Port()
	if err != nil {
		return 0, fmt.Errorf("natsproc: free port: %w", err)
	}
	return p, nil
}

// freePort2 returns two distinct free ports (client, monitoring).
func freePort2() (int, int, error) {
	a, err := freePort()
	if err != nil {
		return 0, 0, err
	}
	for i := 0; i < 10; i++ {
		b, err := freePort()
		if err != nil {
			return 0, 0, err
		}
		if b != a {
			return a, b, nil
		}
	}
	return 0, 0, errors.New("natsproc: no second free port")
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
