package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/dashboard"
	"github.com/receiptflow/receiptflow/pkg/ingest"
	"github.com/receiptflow/receiptflow/pkg/pipeline"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// browserArtifacts is where the browser tests save screenshots (gitignored).
const browserArtifacts = "artifacts"

// browserChromium returns the path of Debian's chromium (or $CHROMIUM).
// Without one the test fails under CI=true and is skipped loudly
// otherwise: the suite never skips silently.
func browserChromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "chromium not found in PATH (install it with `apt-get install -y chromium`, or set CHROMIUM); the browser tests of the dashboard cannot run"
	if os.Getenv("CI") == "true" {
		t.Fatalf("FAIL under CI=true: %s", msg)
	}
	// Also on stderr, so that it shows without -v.
	fmt.Fprintf(os.Stderr, "!!! %s: SKIPPING THE BROWSER TESTS: %s !!!\n", t.Name(), msg)
	t.Skipf("!!! the browser suite was NOT run: %s !!!", msg)
	return ""
}

// browser is one headless chromium tab.
type browser struct {
	t   *testing.T
	ctx context.Context

	mu      sync.Mutex
	console []string // console messages and uncaught exceptions
}

// browserStart starts headless chromium with a fresh profile and opens a
// tab; both are closed by t.Cleanup.
func browserStart(t *testing.T, path string) *browser {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-client-side-phishing-detection", true),
		chromedp.Flag("disable-domain-reliability", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("metrics-recording-only", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.Flag("force-color-profile", "srgb"),
		chromedp.WindowSize(1360, 1500),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
	})
	b := &browser{t: t, ctx: ctx}
	started := time.Now()
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[int]("1")); err != nil {
		t.Fatalf("start chromium %s: %v", path, err)
	}
	t.Logf("chromium %s started in %s", path, time.Since(started).Round(time.Millisecond))
	go func() {
		for m, err := range chromedp.Console(ctx) {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.console = append(b.console, m.String())
			b.mu.Unlock()
		}
	}()
	return b
}

// messages returns the console messages so far whose type starts with
// one of kinds ("exception", "error", ...).
func (b *browser) messages(kinds ...string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, m := range b.console {
		for _, k := range kinds {
			if strings.HasPrefix(m, k+":") {
				out = append(out, m)
			}
		}
	}
	return out
}

func (b *browser) navigate(url string) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, chromedp.Navigate(url)); err != nil {
		b.t.Fatalf("navigate %s: %v", url, err)
	}
}

// browserEval evaluates a JavaScript expression in the page.
func browserEval[T any](b *browser, expr string) (T, error) {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[T](expr))
}

// must evaluates expr and fails the test on a script error.
func browserMust[T any](b *browser, expr string) T {
	b.t.Helper()
	v, err := browserEval[T](b, expr)
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// waitFor polls the JavaScript expression cond (a boolean) until it holds,
// for at most total. On timeout it saves a screenshot, logs describe (an
// expression giving the relevant DOM as a string) and fails.
func (b *browser) waitFor(total time.Duration, what, cond, describe string) time.Duration {
	b.t.Helper()
	began := time.Now()
	deadline := began.Add(total)
	for {
		ok, err := browserEval[bool](b, cond)
		if err == nil && ok {
			return time.Since(began)
		}
		if time.Now().After(deadline) {
			state, _ := browserEval[string](b, describe)
			b.screenshot("failed-" + strings.NewReplacer(" ", "-", "/", "-").Replace(what))
			b.t.Fatalf("%s: not seen within %s (last error %v)\nDOM: %s", what, total, err, state)
		}
		time.Sleep(40 * time.Millisecond)
	}
}

// screenshot saves a full-page PNG as artifacts/browser-<name>.png and
// returns its path.
func (b *browser) screenshot(name string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return ""
	}
	if err := os.MkdirAll(browserArtifacts, 0o755); err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return ""
	}
	path := filepath.Join(browserArtifacts, "browser-"+name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return ""
	}
	b.t.Logf("screenshot: e2e/%s", path)
	return path
}

// browserFetch is a JavaScript expression giving the body of a GET of
// path (synchronous, same origin), for failure reports.
func browserFetch(path string) string {
	return fmt.Sprintf(`(() => { const x = new XMLHttpRequest(); x.open('GET', %q, false); x.send(); return x.responseText; })()`, path)
}

// browserRig is a pipeline on a restartable nats-server (miniredis for
// Redis) with the dashboard in front of it.
type browserRig struct {
	t   *testing.T
	ctx context.Context
	// restart restarts the nats-server on its port and store.
	restart func()
	p       *pipeline.Pipeline
	base    string // the dashboard, http://127.0.0.1:port
	n       int    // events sent
}

// browserStartRig starts the rig; each option adjusts the pipeline's
// configuration before it starts.
func browserStartRig(t *testing.T, staleAfter time.Duration, options ...func(*pipeline.Config)) *browserRig {
	t.Helper()
	return browserStartRigWith(t, staleAfter, nil, options...)
}

// browserStartRigWith is browserStartRig with dash, if not nil, adjusting
// the dashboard's configuration before it starts.
func browserStartRigWith(t *testing.T, staleAfter time.Duration, dash func(*dashboard.Config), options ...func(*pipeline.Config)) *browserRig {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ns, url := testenv.NATS(t)
	cfg := pipeline.Config{
		NATSURL: url, Partitions: 2, Lateness: 5 * time.Minute, Grace: time.Hour,
		StaleAfter: staleAfter, PublisherTick: 250 * time.Millisecond,
	}
	for _, o := range options {
		o(&cfg)
	}
	p, err := pipeline.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	dcfg := dashboard.Config{StaleAfter: staleAfter}
	if dash != nil {
		dash(&dcfg)
	}
	_, base := startDashboard(t, ctx, url, dcfg)
	restart := func() { ns = testenv.RestartNATS(t, ns) }
	return &browserRig{t: t, ctx: ctx, restart: restart, p: p, base: base}
}

// startDashboard runs a dashboard with cfg on the NATS server at url, on
// a free loopback port, until the test ends (its Run must then return
// nil), and returns it with its base URL, http://127.0.0.1:port.
func startDashboard(t *testing.T, ctx context.Context, url string, cfg dashboard.Config) (*dashboard.Service, string) {
	t.Helper()
	conn, err := connect.ConnectNATS(url, "receiptflow-dashboard")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Listener = ln
	svc, err := dashboard.New(conn.NC, cfg)
	if err != nil {
		t.Fatal(err)
	}
	dctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Run(dctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("dashboard: %v", err)
		}
	})
	return svc, "http://" + ln.Addr().String()
}

// send publishes one submission at event time at and waits for its ack.
// Every record is followed by a progress heartbeat to every partition, so
// every partition's watermark follows the newest event time.
func (r *browserRig) send(at time.Time) string {
	r.t.Helper()
	return r.sendStore(at, fmt.Sprintf("store-%d", (r.n+1)%3), nil)
}

// sendStore is send for a submission of store with payload (none if nil).
func (r *browserRig) sendStore(at time.Time, store string, payload map[string]any) string {
	r.t.Helper()
	r.n++
	id := fmt.Sprintf("browser-%d", r.n)
	ev := map[string]any{
		"schema_version": 2, "event_id": id, "receipt_id": "rcpt-" + id, "type": "submitted",
		"occurred_at": at.UTC().Format(time.RFC3339), "partition_key": store,
		"producer_version": "e2e/browser",
	}
	if payload != nil {
		ev["payload"] = payload
	}
	line, _ := json.Marshal(ev)
	// After a server restart a publish can fail until JetStream is back;
	// the same event id makes a retry harmless.
	testenv.CheckFor(r.t, 20*time.Second, 100*time.Millisecond, func() error {
		in := ingest.New(r.p.Admin.JS, ingest.Config{Partitions: 2, Validator: r.p.Validator, HeartbeatEvery: 1})
		ctx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
		defer cancel()
		if err := in.Publish(ctx, line); err != nil {
			in.Close(ctx)
			return err
		}
		return in.Close(ctx)
	})
	return id
}

// restartNATS restarts the nats-server on its port and store and waits
// until JetStream answers again.
func (r *browserRig) restartNATS() {
	r.t.Helper()
	r.restart()
	testenv.CheckFor(r.t, 20*time.Second, 100*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(r.ctx, time.Second)
		defer cancel()
		_, err := r.p.Admin.JS.Stream(ctx, wire.Raw)
		return err
	})
}
