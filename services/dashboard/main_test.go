package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/embedded"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func freePort(t *testing.T) int {
	t.Helper()
	return testenv.FreePort(t)
}

func get(url string) (int, string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// TestWaitsForNATS: the dashboard started while nothing listens on the
// NATS port serves /healthz, answers /readyz 503 naming the server it
// waits for, logs each failed attempt, and becomes ready (the bucket
// loaded) once a nats-server starts there; SIGTERM then exits 0. docs/spec.md §4.
func TestWaitsForNATS(t *testing.T) {
	port := freePort(t)
	natsURL := "nats://127.0.0.1:" + strconv.Itoa(port)
	web := "http://127.0.0.1:" + strconv.Itoa(freePort(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var log syncBuf
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--nats-url", natsURL, "--listen", strings.TrimPrefix(web, "http://")}, io.Discard, &log)
	}()
	alive := func() {
		select {
		case code := <-done:
			t.Fatalf("the dashboard exited (%d) instead of waiting:\n%s", code, log.String())
		default:
		}
	}
	testenv.CheckFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		alive()
		if code, _, err := get(web + "/healthz"); err != nil || code != http.StatusOK {
			return fmt.Errorf("/healthz %d %v", code, err)
		}
		code, body, err := get(web + "/readyz")
		if err != nil || code != http.StatusServiceUnavailable || !strings.Contains(body, "waiting for nats at "+natsURL) {
			return fmt.Errorf("/readyz %d %q %v, want 503 naming the NATS server", code, body, err)
		}
		if !strings.Contains(log.String(), `"msg":"waiting for nats"`) {
			return fmt.Errorf("no wait logged yet:\n%s", log.String())
		}
		return nil
	})

	s, err := embedded.StartNATS(embedded.NATSConfig{StoreDir: t.TempDir(), Port: port})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if err := stream.Ensure(ctx, testenv.JetStream(t, natsURL), wire.For(wire.DefaultGeneration), stream.Config{Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	testenv.CheckFor(t, 60*time.Second, 100*time.Millisecond, func() error {
		alive()
		if code, body, err := get(web + "/readyz"); err != nil || code != http.StatusOK {
			return fmt.Errorf("/readyz %d %q %v", code, body, err)
		}
		if code, body, err := get(web + "/api/windows"); err != nil || code != http.StatusOK || !strings.Contains(body, `"loaded": true`) {
			return fmt.Errorf("/api/windows %d %q %v", code, body, err)
		}
		return nil
	})
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d after SIGTERM, want 0:\n%s", code, log.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("not stopped 20s after SIGTERM:\n%s", log.String())
	}
}

// TestStopsCleanlyWhileWaiting: SIGTERM before NATS was ever reached.
func TestStopsCleanlyWhileWaiting(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var log syncBuf
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--nats-url", "nats://127.0.0.1:" + strconv.Itoa(freePort(t)), "--listen", "127.0.0.1:0"}, io.Discard, &log)
	}()
	testenv.CheckFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		if !strings.Contains(log.String(), "waiting for nats") && !strings.Contains(log.String(), "dashboard started") {
			return fmt.Errorf("not waiting yet:\n%s", log.String())
		}
		return nil
	})
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d, want 0:\n%s", code, log.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("not stopped 20s after SIGTERM:\n%s", log.String())
	}
}

// TestRefusesABadPrometheusURL: a --prometheus-url (or PROMETHEUS_URL)
// that is not an http(s) URL with a host ends the process with exit 1 and
// the reason before it listens or connects.
func TestRefusesABadPrometheusURL(t *testing.T) {
	for _, args := range [][]string{
		{"--prometheus-url", "prometheus:9090"},
		{"--prometheus-url", "ftp://prometheus:9090"},
	} {
		var log syncBuf
		args = append(args, "--nats-url", "nats://127.0.0.1:"+strconv.Itoa(freePort(t)), "--listen", "127.0.0.1:0")
		if code := run(context.Background(), args, io.Discard, &log); code != 1 {
			t.Errorf("%v: exit %d, want 1:\n%s", args, code, log.String())
		}
		if !strings.Contains(log.String(), "--prometheus-url") || strings.Contains(log.String(), "waiting for nats") {
			t.Errorf("%v: the log does not name --prometheus-url, or it waited for NATS first:\n%s", args, log.String())
		}
	}
	t.Setenv("PROMETHEUS_URL", "localhost")
	var log syncBuf
	if code := run(context.Background(), []string{"--nats-url", "nats://127.0.0.1:1", "--listen", "127.0.0.1:0"}, io.Discard, &log); code != 1 {
		t.Errorf("PROMETHEUS_URL=localhost: exit %d, want 1:\n%s", code, log.String())
	}
}

// TestVersionAndPortInUse (issue 26): --version prints the build and
// exits 0; a --listen address in use ends the process naming --listen.
// Before, --version was an unknown flag (exit 2) and the error said only
// "address already in use".
func TestVersionAndPortInUse(t *testing.T) {
	var out strings.Builder
	var log syncBuf
	if code := run(context.Background(), []string{"--version"}, &out, &log); code != 0 || !strings.HasPrefix(out.String(), "dashboard ") {
		t.Errorf("--version: exit %d, %q, want 0 and the build\n%s", code, out.String(), log.String())
	}
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	var log2 syncBuf
	if code := run(context.Background(), []string{"--nats-url", "nats://127.0.0.1:1", "--listen", held.Addr().String()}, io.Discard, &log2); code != 1 ||
		!strings.Contains(log2.String(), "pass --listen with a free address") {
		t.Errorf("port in use: exit %d, want 1 and a hint naming --listen:\n%s", code, log2.String())
	}
}

// TestMain runs the dashboard's main when the test binary is started again
// as the command (testenv.StartMain).
func TestMain(m *testing.M) {
	testenv.RunMainIfChild(main)
	os.Exit(m.Run())
}

// TestOneThreadByDefault: the dashboard's own process runs on one thread
// unless --procs says otherwise; a negative --procs is refused.
func TestOneThreadByDefault(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{{nil, `"procs":1`}, {[]string{"--procs", "2"}, `"procs":2`}} {
		p := testenv.StartMain(t, append([]string{"--nats-url", "nats://127.0.0.1:1", "--listen", "127.0.0.1:" + strconv.Itoa(freePort(t))}, c.args...)...)
		testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
			if !regexp.MustCompile(`"msg":"dashboard listening",.*` + c.want + `[,}]`).MatchString(p.Output()) {
				return fmt.Errorf("%v: no listening line with %s:\n%s", c.args, c.want, p.Output())
			}
			return nil
		})
		p.Terminate(t)
		p.Wait(t, 10*time.Second)
	}
	var log syncBuf
	if code := run(context.Background(), []string{"--nats-url", "nats://127.0.0.1:1", "--procs", "-1"}, io.Discard, &log); code != 2 ||
		!strings.Contains(log.String(), "--procs must be 0") {
		t.Errorf("--procs -1: exit %d, want 2 and a reason:\n%s", code, log.String())
	}
}
