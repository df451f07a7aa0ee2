package daemon

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/embedded"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// echo is a service that needs both servers for every message: for each
// request on echoSubject it increments a Redis counter and replies with the
// new value. Like a consume loop that meets a dead Redis, its Run returns
// the Redis error.
type echo struct {
	d *Deps
}

const echoSubject = "test.echo"

func (e echo) Run(ctx context.Context) error {
	failed := make(chan error, 1)
	sub, err := e.d.NATS.NC.Subscribe(echoSubject, func(m *nats.Msg) {
		n, err := e.d.Redis.Incr(ctx, "echo").Result()
		if err != nil {
			select {
			case failed <- fmt.Errorf("echo: redis: %w", err):
			default:
			}
			return
		}
		m.Respond([]byte(strconv.FormatInt(n, 10)))
	})
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	select {
	case <-ctx.Done():
		return nil
	case err := <-failed:
		return err
	}
}

// proc is one service started through Main in the background.
type proc struct {
	t    *testing.T
	log  *syncBuf
	http string
	done chan int
	stop context.CancelFunc
}

func startProc(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := &proc{t: t, log: &syncBuf{}, http: "127.0.0.1:" + strconv.Itoa(freePort(t)), done: make(chan int, 1), stop: cancel}
	args = append(args, "--http-addr", p.http, "--partitions", "1", "--stats-interval", "200ms")
	go func() {
		p.done <- Main(ctx, name, args, p.log, func(d *Deps) (Runner, error) { return echo{d}, nil })
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			t.Errorf("the service did not stop within 20s of its context:\n%s", p.log.String())
		}
	})
	return p
}

// readyz returns the status and body of /readyz, or an error if the
// service's HTTP port does not answer.
func (p *proc) readyz() (int, string, error) {
	resp, err := http.Get("http://" + p.http + "/readyz")
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// alive fails the test if the service has exited.
func (p *proc) alive() error {
	select {
	case code := <-p.done:
		p.done <- code
		p.t.Fatalf("the service exited (code %d) instead of waiting:\n%s", code, p.log.String())
	default:
	}
	return nil
}

// waitNotReady waits until /readyz answers 503 with a body containing
// every one of want, and /healthz answers 200.
func (p *proc) waitNotReady(want ...string) {
	p.t.Helper()
	testenv.CheckFor(p.t, 30*time.Second, 50*time.Millisecond, func() error {
		p.alive()
		code, body, err := p.readyz()
		if err != nil {
			return err
		}
		if code != http.StatusServiceUnavailable {
			return fmt.Errorf("/readyz %d %q, want 503", code, body)
		}
		for _, w := range want {
			if !strings.Contains(body, w) {
				return fmt.Errorf("/readyz says %q, want it to name %q", body, w)
			}
		}
		return nil
	})
	resp, err := http.Get("http://" + p.http + "/healthz")
	if err != nil {
		p.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		p.t.Fatalf("/healthz %d while waiting, want 200 (alive)", resp.StatusCode)
	}
}

// waitLog waits until one log line holds every one of want.
func (p *proc) waitLog(want ...string) {
	p.t.Helper()
	testenv.CheckFor(p.t, 30*time.Second, 50*time.Millisecond, func() error {
	lines:
		for _, line := range strings.Split(p.log.String(), "\n") {
			for _, w := range want {
				if !strings.Contains(line, w) {
					continue lines
				}
			}
			return nil
		}
		return fmt.Errorf("no log line holds all of %q", want)
	})
}

// waitServing waits until /readyz answers 200 and a request through the
// service is answered (it went through NATS and Redis).
func (p *proc) waitServing(natsURL string) {
	p.t.Helper()
	nc, err := nats.Connect(natsURL, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		p.t.Fatal(err)
	}
	defer nc.Close()
	testenv.CheckFor(p.t, 60*time.Second, 100*time.Millisecond, func() error {
		p.alive()
		if code, body, err := p.readyz(); err != nil || code != http.StatusOK {
			return fmt.Errorf("/readyz %d %q %v", code, body, err)
		}
		if _, err := nc.Request(echoSubject, nil, time.Second); err != nil {
			return fmt.Errorf("request through the service: %w", err)
		}
		return nil
	})
}

// redisOn runs redis-server on port with its data in dir (no PING wait:
// it may be loading). It is killed by t.Cleanup and by the returned func.
func redisOn(t *testing.T, port int, dir string, args ...string) func() {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("redis-server not on PATH with CI=true: %v", err)
		}
		t.Skipf("!!! redis-server not on PATH: the wait-for-Redis tests were NOT run !!! (%v)", err)
	}
	args = append([]string{"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", dir, "--save", "", "--appendonly", "no"}, args...)
	cmd := exec.Command(bin, args...)
	logf, err := os.Create(filepath.Join(dir, "redis.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(exited) }()
	kill := func() {
		cmd.Process.Kill()
		<-exited
	}
	t.Cleanup(kill)
	return kill
}

// TestWaitsForNATS: started while nothing listens on the NATS port, a
// service stays up, says on /readyz that it waits for NATS, and serves once
// a nats-server starts on that port. docs/spec.md §4.
func TestWaitsForNATS(t *testing.T) {
	r := testenv.RedisServer(t)
	port := freePort(t)
	natsURL := "nats://127.0.0.1:" + strconv.Itoa(port)
	p := startProc(t, "validator", "--nats-url", natsURL, "--redis-url", r.URL())
	p.waitNotReady("waiting for nats", "127.0.0.1:"+strconv.Itoa(port))
	p.waitLog(`"msg":"waiting for nats"`, "no servers available")
	s, err := embedded.StartNATS(embedded.NATSConfig{StoreDir: t.TempDir(), Port: port})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	p.waitServing(natsURL)
}

// TestWaitsForRedis: the same for Redis, which then goes away mid-run
// (SIGKILL) and comes back: the service stays up and serves again.
func TestWaitsForRedis(t *testing.T) {
	_, natsURL := testenv.NATS(t)
	port := freePort(t)
	p := startProc(t, "validator", "--nats-url", natsURL, "--redis-url", "redis://127.0.0.1:"+strconv.Itoa(port))
	p.waitNotReady("waiting for redis", "127.0.0.1:"+strconv.Itoa(port))
	p.waitLog(`"msg":"waiting for redis"`, "connection refused")
	dir := t.TempDir()
	kill := redisOn(t, port, dir)
	p.waitServing(natsURL)

	// Redis dies mid-run; the next message meets it dead and the service's
	// Run fails with the Redis error, as a consume loop's would.
	kill()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.Request(echoSubject, nil, 2*time.Second); err == nil {
		t.Fatal("a request was answered while Redis was dead")
	}
	p.waitNotReady("waiting for redis", "127.0.0.1:"+strconv.Itoa(port))
	redisOn(t, port, dir)
	p.waitServing(natsURL)
	if !strings.Contains(p.log.String(), "starting it again") {
		t.Errorf("the restart was not logged:\n%s", p.log.String())
	}
}

// TestWaitsForRedisLoading: a real redis-server loading a large RDB
// answers -LOADING; the service waits, names it on /readyz, and serves
// once the data set is loaded. key-load-delay (a redis-server setting
// made for exactly this) slows the load down so it lasts seconds.
func TestWaitsForRedisLoading(t *testing.T) {
	_, natsURL := testenv.NATS(t)
	seed := testenv.RedisServer(t, testenv.WithArgs("--enable-debug-command", "yes"))
	rc := redis.NewClient(&redis.Options{Addr: seed.Addr()})
	ctx := context.Background()
	if err := rc.Do(ctx, "DEBUG", "POPULATE", 40000).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rc.Save(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	rc.Close()
	seed.Kill()
	dir := t.TempDir()
	rdb, err := os.ReadFile(filepath.Join(seed.Dir(), "dump.rdb"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "dump.rdb"), rdb, 0o600); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	redisOn(t, port, dir, "--key-load-delay", "50", "--loading-process-events-interval-bytes", "1024")
	// The server answers, but with -LOADING, before the service starts.
	probe := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port), MaxRetries: -1})
	defer probe.Close()
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		err := probe.Ping(ctx).Err()
		if err == nil || !strings.HasPrefix(err.Error(), "LOADING") {
			return fmt.Errorf("PING answered %v, want -LOADING", err)
		}
		return nil
	})
	p := startProc(t, "validator", "--nats-url", natsURL, "--redis-url", "redis://127.0.0.1:"+strconv.Itoa(port))
	p.waitNotReady("waiting for redis", "LOADING")
	p.waitServing(natsURL)
}

// TestStopsCleanlyWhileWaiting: SIGTERM (the context) during the wait
// ends the process with exit code 0.
func TestStopsCleanlyWhileWaiting(t *testing.T) {
	p := startProc(t, "windower", "--nats-url", "nats://127.0.0.1:"+strconv.Itoa(freePort(t)),
		"--redis-url", "redis://127.0.0.1:"+strconv.Itoa(freePort(t)))
	p.waitNotReady("waiting for nats")
	p.stop()
	select {
	case code := <-p.done:
		p.done <- code
		if code != 0 {
			t.Fatalf("exit %d, want 0:\n%s", code, p.log.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("not stopped 20s after SIGTERM:\n%s", p.log.String())
	}
}

// TestTransient: what a service waits out and what ends it. The Redis
// replies are real (miniredis refusing a login; the -LOADING reply of a
// real redis-server is covered by TestWaitsForRedisLoading).
func TestTransient(t *testing.T) {
	m := testenv.Miniredis(t)
	m.RequireAuth("secret")
	rc := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	defer rc.Close()
	noauth := rc.Ping(context.Background()).Err()
	wrong := redis.NewClient(&redis.Options{Addr: m.Addr(), Password: "nope", MaxRetries: -1})
	defer wrong.Close()
	wrongpass := wrong.Ping(context.Background()).Err()
	refused := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(freePort(t)), MaxRetries: -1})
	defer refused.Close()
	dial := refused.Ping(context.Background()).Err()
	// A replica not promoted yet refuses writes with -READONLY (a Sentinel
	// failover in progress): a real redis-server replica of nobody.
	replica := testenv.RedisServer(t, testenv.WithArgs("--replicaof", "127.0.0.1", strconv.Itoa(freePort(t))))
	ro := redis.NewClient(&redis.Options{Addr: replica.Addr(), MaxRetries: -1})
	defer ro.Close()
	readonly := ro.Set(context.Background(), "k", "v", 0).Err()
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"nats: no servers", fmt.Errorf("pipeline: connect: %w", nats.ErrNoServers), true},
		{"nats: request timed out", nats.ErrTimeout, true},
		{"nats: no responders (JetStream restarting)", nats.ErrNoResponders, true},
		// A KV put published asynchronously whose ack never came: the
		// stream's leader was stalled or lost (seen in the cluster fault
		// tests: the publisher exited on it).
		{"jetstream: async publish ack timed out", fmt.Errorf("publisher: put window.x: %w", jetstream.ErrAsyncPublishTimeout), true},
		// A publish answered by no stream leader (an election): seen
		// too, the publisher exited on it.
		{"jetstream: no response from stream", fmt.Errorf("publisher: put window.x: %w", jetstream.ErrNoStreamResponse), true},
		// A cluster electing leaders or without quorum (issue 23: the
		// publisher and the windower exited on it).
		{"jetstream: system temporarily unavailable", fmt.Errorf("stream: ensure RAW: %w", &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}), true},
		{"redis: connection refused", dial, true},
		{"redis: " + fmt.Sprint(readonly), readonly, true},
		{"not there yet", fmt.Errorf("%w: stream not found", connect.ErrNotYet), true},
		{"deadline", context.DeadlineExceeded, true},
		{"nats: authorization violation", fmt.Errorf("connect: %w", nats.ErrAuthorization), false},
		{"nats: permissions violation", nats.ErrPermissionViolation, false},
		{"nats: refused, also timed out", fmt.Errorf("%w (%w)", nats.ErrPermissionViolation, context.DeadlineExceeded), false},
		{"redis: " + fmt.Sprint(noauth), noauth, false},
		{"redis: " + fmt.Sprint(wrongpass), wrongpass, false},
		{"tls: unknown authority", &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}, false},
		{"unknown", errors.New("windower: stream behind checkpoint"), false},
	} {
		if c.err == nil {
			t.Fatalf("%s: no error produced", c.name)
		}
		if got := connect.Transient(c.err); got != c.want {
			t.Errorf("Transient(%s: %v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}

// refusedRunner fails its first fails runs as the publisher's first pass
// does on a full broker store, then runs until ctx ends.
type refusedRunner struct {
	runs    *atomic.Int32
	fails   int32
	started chan struct{}
}

func (r refusedRunner) Run(ctx context.Context) error {
	if r.runs.Add(1) <= r.fails {
		return fmt.Errorf("publisher: put window.x: %w", &jetstream.APIError{Code: 503, ErrorCode: stream.ErrCodeInsufficientResources, Description: "insufficient resources"})
	}
	close(r.started)
	<-ctx.Done()
	return nil
}

// TestWaitsForRoomInTheBrokerStore: a service whose Run fails because the
// broker's store is full (outside the consume loop, which waits by
// itself) does not exit: it is started again after a pause, counted in
// receiptflow_<svc>_broker_store_refusals_total.
func TestWaitsForRoomInTheBrokerStore(t *testing.T) {
	_, natsURL := testenv.NATS(t)
	r := testenv.RedisServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var log syncBuf
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	var runs atomic.Int32
	svc := refusedRunner{runs: &runs, fails: 3, started: make(chan struct{})}
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, "publisher", []string{"--nats-url", natsURL, "--redis-url", r.URL(), "--partitions", "2", "--http-addr", addr},
			&log, func(*Deps) (Runner, error) { return svc, nil })
	}()
	select {
	case <-svc.started:
	case code := <-done:
		t.Fatalf("exited %d on a full broker store:\n%s", code, log.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("not started again:\n%s", log.String())
	}
	if !strings.Contains(log.String(), "the broker's store is full: waiting for room") {
		t.Errorf("the log does not say the broker's store is full:\n%s", log.String())
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "receiptflow_publisher_broker_store_refusals_total 3\n") ||
		!strings.Contains(string(body), "receiptflow_publisher_broker_store_full 0\n") {
		t.Errorf("metrics after three refusals and a start:\n%s", body)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d:\n%s", code, log.String())
	}
}

// TestEnsureFailedHint: a failed stream set-up blames a least-privilege
// user only when the server refused it.
func TestEnsureFailedHint(t *testing.T) {
	refused := ensureFailed(fmt.Errorf("%w (%w)", nats.ErrPermissionViolation, context.DeadlineExceeded))
	if !strings.Contains(refused.Error(), "least-privilege") {
		t.Errorf("refusal: %v, want the least-privilege hint", refused)
	}
	for _, err := range []error{
		&jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"},
		&jetstream.APIError{Code: 400, ErrorCode: 10058, Description: "stream name already in use with a different configuration"},
	} {
		if got := ensureFailed(err); strings.Contains(got.Error(), "least-privilege") || !errors.Is(got, err) {
			t.Errorf("ensureFailed(%v) = %v, want it wrapped without the least-privilege hint", err, got)
		}
	}
}

// TestReadyzSaysStalled: a service whose consumer has messages pending and
// does not move its ack floor for --stall-after is not ready, and says
// why; once the messages are acknowledged it is ready again (issue 23: a
// windower stalled 35 s with /readyz answering 200).
func TestReadyzSaysStalled(t *testing.T) {
	_, natsURL := testenv.NATS(t)
	r := testenv.RedisServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := &proc{t: t, log: &syncBuf{}, http: "127.0.0.1:" + strconv.Itoa(freePort(t)), done: make(chan int, 1), stop: cancel}
	s := stub{started: make(chan struct{})}
	go func() {
		p.done <- Main(ctx, "publisher", []string{"--nats-url", natsURL, "--redis-url", r.URL(), "--partitions", "1",
			"--http-addr", p.http, "--stats-interval", "100ms", "--stall-after", "1s"}, p.log, func(*Deps) (Runner, error) { return s, nil })
	}()
	<-s.started
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	n := wire.For("")
	cons, err := js.CreateOrUpdateConsumer(ctx, n.Stream(wire.Changes), jetstream.ConsumerConfig{
		Durable: wire.Durable("publisher", -1), AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, n.Subject(wire.Changes, 0), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	p.waitNotReady("made no progress")
	msgs, err := cons.Fetch(1)
	if err != nil {
		t.Fatal(err)
	}
	for m := range msgs.Messages() {
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
	}
	testenv.CheckFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		p.alive()
		if code, body, err := p.readyz(); err != nil || code != http.StatusOK {
			return fmt.Errorf("/readyz %d %q %v", code, body, err)
		}
		return nil
	})
	cancel()
	if code := <-p.done; code != 0 {
		t.Fatalf("exit %d:\n%s", code, p.log.String())
	}
}
