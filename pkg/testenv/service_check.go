package testenv

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// CheckServiceFlags runs a service binary's main (see RunMainIfChild) and
// checks that -h prints the flags and exits 0, and that an unknown flag, or
// no NATS URL, exits 1 saying why.
func CheckServiceFlags(t *testing.T, svc string) {
	t.Helper()
	code, out := RunMain(t, "-h")
	if code != 0 || !strings.Contains(out, "-nats-url") || !strings.Contains(out, "-redis-url") {
		t.Fatalf("-h: exit %d, output:\n%s", code, out)
	}
	code, out = RunMain(t, "--no-such-flag")
	if code != 1 || !strings.Contains(out, "flag provided but not defined: -no-such-flag") {
		t.Fatalf("unknown flag: exit %d, output:\n%s", code, out)
	}
	code, out = RunMain(t, "--nats-url", "nats://127.0.0.1:1", "--redis-url", "redis://127.0.0.1:1", "--procs", "-1")
	if code != 1 || !strings.Contains(out, "--procs must be 0") {
		t.Fatalf("--procs -1: exit %d, output:\n%s", code, out)
	}
	code, out = RunMain(t, "--redis-url", "redis://127.0.0.1:1")
	if code != 1 || !strings.Contains(out, "--nats-url (or NATS_URL) is required") || !strings.Contains(out, `"service":"`+svc+`"`) {
		t.Fatalf("no NATS URL: exit %d, output:\n%s", code, out)
	}
}

var serviceListening = regexp.MustCompile(`"msg":"http listening",.*"addr":"([0-9.:]+)"`)

// CheckServiceLifecycle runs a service binary's main against real servers
// and checks that it creates its streams, becomes ready on /readyz, exports
// its own metrics (receiptflow_<svc>_*), and on SIGTERM stops cleanly with
// exit 0.
func CheckServiceLifecycle(t *testing.T, svc string) {
	t.Helper()
	_, natsURL := NATS(t)
	r := RedisServer(t)
	p := StartMain(t, "--nats-url", natsURL, "--redis-url", r.URL(), "--partitions", "2",
		"--http-addr", "127.0.0.1:0", "--stats-interval", "50ms")
	var addr string
	CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		m := serviceListening.FindStringSubmatch(p.Output())
		if m == nil {
			return fmt.Errorf("no http address logged yet:\n%s", p.Output())
		}
		addr = m[1]
		return nil
	})
	get := func(path string) (int, string, error) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), err
	}
	CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		code, body, err := get("/readyz")
		if err != nil || code != http.StatusOK || !strings.HasPrefix(body, "ready\n") {
			return fmt.Errorf("/readyz: %d %q %v", code, body, err)
		}
		return nil
	})
	if code, body, err := get("/metrics"); err != nil || code != http.StatusOK || !strings.Contains(body, "receiptflow_"+svc+"_") {
		t.Fatalf("/metrics: %d, %v, no receiptflow_%s_ metric:\n%.2000s", code, err, svc, body)
	}
	// Its own process runs on one thread unless --procs or GOMAXPROCS
	// says otherwise (StartMain passes no GOMAXPROCS).
	if !regexp.MustCompile(`"msg":"http listening",.*"procs":1[,}]`).MatchString(p.Output()) {
		t.Fatalf("the process does not say it runs on one thread (--procs' default):\n%s", p.Output())
	}
	if !strings.Contains(p.Output(), `"msg":"service started"`) {
		t.Fatalf("ready without a 'service started' line:\n%s", p.Output())
	}
	p.Terminate(t)
	if code := p.Wait(t, 20*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM:\n%s", code, p.Output())
	}
	if out := p.Output(); !strings.Contains(out, `"msg":"service stopped cleanly"`) || strings.Contains(out, `"level":"ERROR"`) {
		t.Fatalf("no clean stop, or an error logged:\n%s", out)
	}
}
