package probe

import (
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestPort: the probes answer from the start; /readyz and unmounted paths
// name what the service waits for; /metrics and the service's handler
// come when given; the port stops cleanly.
func TestPort(t *testing.T) {
	var reason atomic.Pointer[string]
	waiting := "waiting for nats at nats://127.0.0.1:1"
	reason.Store(&waiting)
	p, err := Listen("127.0.0.1:0", func() string { return *reason.Load() })
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + p.Addr()
	check := func(path string, code int, body string) {
		t.Helper()
		if c, b := get(t, base+path); c != code || !strings.Contains(b, body) {
			t.Errorf("GET %s = %d %q, want %d with %q", path, c, b, code, body)
		}
	}
	check("/healthz", 200, "ok\n")
	check("/readyz", 503, "not ready: "+waiting)
	check("/metrics", 503, "not ready: "+waiting)
	check("/api/windows", 503, "not ready: "+waiting)

	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "receiptflow_probe_test_total"}))
	p.Metrics(reg)
	check("/metrics", 200, "receiptflow_probe_test_total 0")
	ready := ""
	reason.Store(&ready)
	check("/readyz", 200, "ready\n")
	check("/api/windows", 404, "")
	p.Detail(func() string { return "owned partitions: 1,3" })
	check("/readyz", 200, "ready\nowned partitions: 1,3\n")
	reason.Store(&waiting)
	check("/readyz", 503, "not ready: "+waiting+"\nowned partitions: 1,3\n")
	reason.Store(&ready)
	p.Mount(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "app "+r.URL.Path) }))
	check("/api/windows", 200, "app /api/windows")
	check("/healthz", 200, "ok\n")

	p.Shutdown(time.Second)
	if err := p.Err(); err != nil {
		t.Errorf("Err after Shutdown = %v", err)
	}
	p.Close()
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Error("the port still answers after Shutdown")
	}
}

// TestListenHintNamesTheFlag: an address in use names the flag to change.
func TestListenHintNamesTheFlag(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	_, err = Listen(held.Addr().String(), func() string { return "" })
	if err == nil {
		t.Fatal("listened on an address in use")
	}
	if msg := ListenHint("--http-addr", held.Addr().String(), err).Error(); !strings.Contains(msg, "pass --http-addr with a free address") {
		t.Errorf("%q: no hint", msg)
	}
	other := errors.New("x")
	if ListenHint("--http-addr", "a", other) != other {
		t.Error("another error changed")
	}
}
