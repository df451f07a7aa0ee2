package e2e

// Servers started from the exact deployment files: an in-process
// nats-server loading deploy/nats/nats.conf (and so auth.conf) and a real
// redis-server loading deploy/redis/redis.conf with deploy/redis/users.acl.
// Only listen addresses, ports, data paths and the cluster's routes are
// changed, and only in the parsed options or a temporary copy of
// redis.conf; users, passwords and rules are the files' own.

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/testenv"
)

const (
	secNATSConf   = "../deploy/nats/nats.conf"
	secRedisConf  = "../deploy/redis/redis.conf"
	secRedisACL   = "../deploy/redis/users.acl"
	secSecretsDir = "../deploy/secrets/dev"
)

// secPasswordFile is the dev password file of a principal, e.g.
// secPasswordFile("nats", "validator").
func secPasswordFile(system, user string) string {
	return filepath.Join(secSecretsDir, system+"-"+user+".password")
}

func secPassword(t testing.TB, system, user string) string {
	t.Helper()
	b, err := os.ReadFile(secPasswordFile(system, user))
	if err != nil {
		t.Fatalf("dev secret: %v", err)
	}
	return strings.TrimRight(string(b), "\r\n")
}

// secNATSOptions parses deploy/nats/nats.conf as nats-server would and
// moves it to loopback: a free client port, no monitoring port, the store
// in dir, no fsync per write, and no cluster (clusterPort 0) or a cluster
// on clusterPort (-1: a port the kernel picks) with routes to the given
// loopback ports.
func secNATSOptions(t testing.TB, name, dir string, clusterPort int, routePorts []int) *server.Options {
	t.Helper()
	opts, err := server.ProcessConfigFile(secNATSConf)
	if err != nil {
		t.Fatalf("deploy/nats/nats.conf: %v", err)
	}
	opts.ServerName = name
	opts.Host, opts.Port = "127.0.0.1", server.RANDOM_PORT
	opts.HTTPHost, opts.HTTPPort = "", 0
	opts.StoreDir = dir
	opts.NoSigs, opts.NoLog = true, true
	// The file fsyncs every write (sync_interval: always, checked by
	// TestDeployNATSConfig). At ~4 ms an fsync on CI disks that makes a
	// run of a few thousand events take minutes, so the tests use the OS's
	// flush instead; durability is not what these tests are about.
	opts.SyncAlways = false
	if clusterPort == 0 {
		opts.Cluster = server.ClusterOpts{}
		opts.Routes = nil
	} else {
		if opts.Cluster.Name == "" {
			t.Fatalf("deploy/nats/nats.conf has no cluster block")
		}
		opts.Cluster.Host, opts.Cluster.Port = "127.0.0.1", clusterPort
		var urls []string
		for _, p := range routePorts {
			urls = append(urls, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
		}
		opts.Routes = server.RoutesFromStr(strings.Join(urls, ","))
	}
	return opts
}

// secStartNATS starts a server with opts, stopped by t.Cleanup.
func secStartNATS(t testing.TB, opts *server.Options) *server.Server {
	t.Helper()
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("nats-server from deploy/nats/nats.conf: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		t.Fatalf("nats-server %s not ready", opts.ServerName)
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

// secNATS starts one node from deploy/nats/nats.conf and returns it and its
// client URL.
func secNATS(t testing.TB) (*server.Server, string) {
	t.Helper()
	s := secStartNATS(t, secNATSOptions(t, "rf-sec", t.TempDir(), 0, nil))
	return s, s.ClientURL()
}

// secConn is a NATS connection of one principal that records every
// asynchronous error the server sends it (permissions violations).
type secConn struct {
	*connect.Conn
	user string
	mu   sync.Mutex
	errs []error
}

// secConnect connects to url as user with the dev password, through
// connect.NATSSecurity as the services do.
func secConnect(t testing.TB, url, user string) *secConn {
	t.Helper()
	c, err := secTryConnect(t, url, user, connect.NATSSecurity{User: user, PasswordFile: secPasswordFile("nats", user)})
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	return c
}

func secTryConnect(t testing.TB, url, user string, sec connect.NATSSecurity) (*secConn, error) {
	t.Helper()
	sc := &secConn{user: user}
	opts, err := sec.Options()
	if err != nil {
		return nil, err
	}
	opts = append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		sc.mu.Lock()
		sc.errs = append(sc.errs, err)
		sc.mu.Unlock()
	}))
	c, err := connect.ConnectNATS(url, "rf-test-"+user, opts...)
	if err != nil {
		return nil, err
	}
	sc.Conn = c
	t.Cleanup(c.Close)
	return sc, nil
}

// waitErr waits (at most 3 s) for an asynchronous error containing want and
// returns it.
func (c *secConn) waitErr(t testing.TB, want string) error {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		c.mu.Lock()
		for _, e := range c.errs {
			if strings.Contains(e.Error(), want) {
				c.mu.Unlock()
				return e
			}
		}
		seen := fmt.Sprint(c.errs)
		c.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("%s: no error containing %q from the server; got %s", c.user, want, seen)
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// refused runs op (which should fail) with a short deadline and checks that
// the server refused exactly the publish to subject, naming it.
func (c *secConn) refused(t testing.TB, what, subject string, op func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := op(ctx); err == nil {
		t.Fatalf("%s: %s succeeded, want a permissions violation on %q", c.user, what, subject)
	}
	e := c.waitErr(t, fmt.Sprintf("Permissions Violation for Publish to %q", subject))
	t.Logf("refused %-9s %-48s %v", c.user, what+":", e)
}

// refusedSub checks that subscribing to subject is refused.
func (c *secConn) refusedSub(t testing.TB, subject string) {
	t.Helper()
	sub, err := c.NC.SubscribeSync(subject)
	if err == nil {
		c.NC.Flush()
		defer sub.Unsubscribe()
	}
	e := c.waitErr(t, fmt.Sprintf("Permissions Violation for Subscription to %q", subject))
	t.Logf("refused %-9s %-48s %v", c.user, "subscribe "+subject+":", e)
}

// secRedis is a real redis-server started from deploy/redis/redis.conf.
type secRedis struct {
	addr string
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
}

// secRedisServer starts redis-server with a copy of deploy/redis/redis.conf
// whose port, bind, dir and aclfile path point at loopback and a temporary
// directory, and the ACL file copied unchanged. It fails the test without
// redis-server under CI=true and skips loudly otherwise (testenv's rule).
func secRedisServer(t testing.TB) *secRedis {
	t.Helper()
	bin := secLookPath(t, "redis-server")
	dir := t.TempDir()
	acl, err := os.ReadFile(secRedisACL)
	if err != nil {
		t.Fatal(err)
	}
	aclPath := filepath.Join(dir, "users.acl")
	if err := os.WriteFile(aclPath, acl, 0o600); err != nil {
		t.Fatal(err)
	}
	port := secFreePort(t)
	conf := secAdaptRedisConf(t, port, dir, aclPath)
	confPath := filepath.Join(dir, "redis.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	r := &secRedis{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir, done: make(chan struct{})}
	logf, err := os.Create(filepath.Join(dir, "redis.log"))
	if err != nil {
		t.Fatal(err)
	}
	r.cmd = exec.Command(bin, confPath)
	r.cmd.Dir, r.cmd.Stdout, r.cmd.Stderr = dir, logf, logf
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.cmd.Wait(); logf.Close(); close(r.done) }()
	t.Cleanup(func() {
		r.cmd.Process.Kill()
		<-r.done
	})
	// Ready when the probe user (PING only) gets PONG.
	probe := r.client("probe", secPassword(t, "redis", "probe"))
	defer probe.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := probe.Ping(context.Background()).Err()
		if err == nil {
			return r
		}
		select {
		case <-r.done:
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			t.Fatalf("redis-server from deploy/redis/redis.conf exited:\n%s", log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s not answering: %v", r.addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *secRedis) url() string { return "redis://" + r.addr }

// client is a plain go-redis client logged in as user.
func (r *secRedis) client(user, password string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: r.addr, Username: user, Password: password, MaxRetries: -1,
		DisableIdentity: true, Protocol: 2})
}

// secAdaptRedisConf returns deploy/redis/redis.conf with exactly the
// directives bind, port, dir and aclfile replaced; it fails if any of them
// is missing or repeated, so a changed file cannot slip past the test.
func secAdaptRedisConf(t testing.TB, port int, dir, aclPath string) string {
	t.Helper()
	b, err := os.ReadFile(secRedisConf)
	if err != nil {
		t.Fatal(err)
	}
	repl := map[string]string{
		"bind":    "bind 127.0.0.1",
		"port":    "port " + strconv.Itoa(port),
		"dir":     "dir " + strconv.Quote(dir),
		"aclfile": "aclfile " + strconv.Quote(aclPath),
	}
	seen := map[string]int{}
	var out []string
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) > 0 && !strings.HasPrefix(fields[0], "#") {
			if r, ok := repl[strings.ToLower(fields[0])]; ok {
				seen[strings.ToLower(fields[0])]++
				line = r
			}
		}
		out = append(out, line)
	}
	for k := range repl {
		if seen[k] != 1 {
			t.Fatalf("deploy/redis/redis.conf: directive %q appears %d times, want once", k, seen[k])
		}
	}
	return strings.Join(out, "\n") + "\n"
}

// secLookPath finds a server binary or ends the test loudly: a failure
// under CI=true, a skip that says what was not run otherwise.
func secLookPath(t testing.TB, name string) string {
	t.Helper()
	bin, err := exec.LookPath(name)
	if err == nil {
		return bin
	}
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		t.Fatalf("%s not found on PATH with CI=true: this suite cannot run (.ci/run installs redis-server, which brings redis-cli): %v", name, err)
	}
	t.Skipf("!!! %s not found on PATH: this real-Redis suite was NOT run !!! Install it (Debian: apt-get install -y redis-server) and run again.", name)
	return ""
}

func secFreePort(t testing.TB) int {
	t.Helper()
	return testenv.FreePort(t)
}

// secRedisErr checks that err is a Redis permission refusal.
func secRedisErr(t testing.TB, who, what string, err error) {
	t.Helper()
	if err == nil {
		t.Fatalf("redis %s: %s succeeded, want a refusal", who, what)
	}
	msg := err.Error()
	if !regexp.MustCompile(`NOPERM|NOAUTH|WRONGPASS|can't run this command|can't access|no permissions`).MatchString(msg) {
		t.Fatalf("redis %s: %s failed with %q, want a permission refusal", who, what, msg)
	}
	t.Logf("refused redis %-9s %-44s %s", who, what+":", msg)
}
