package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/dashboard"
)

// browserPrometheus serves GET /api/v1/alerts as Prometheus does, with
// what set gave it last.
type browserPrometheus struct {
	*httptest.Server
	mu   sync.Mutex
	code int
	body string
}

func newBrowserPrometheus(t *testing.T) *browserPrometheus {
	t.Helper()
	p := &browserPrometheus{code: http.StatusOK, body: `{"status":"success","data":{"alerts":[]}}`}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/alerts" {
			http.NotFound(w, r)
			return
		}
		p.mu.Lock()
		code, body := p.code, p.body
		p.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		fmt.Fprint(w, body)
	}))
	t.Cleanup(p.Close)
	return p
}

func (p *browserPrometheus) set(code int, body string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.code, p.body = code, body
}

// TestBrowserShowsFiringAlerts (issue 14, alert rules): with
// --prometheus-url the health panel lists the firing receiptflow alerts
// (name, severity, summary, since when) and marks the pending ones; an
// alert Prometheus no longer returns disappears, "no alerts firing" takes
// its place, and a Prometheus that fails is said to be unavailable, with
// no alert shown as current.
func TestBrowserShowsFiringAlerts(t *testing.T) {
	chromium := browserChromium(t)
	prom := newBrowserPrometheus(t)
	since := time.Now().UTC().Add(-7 * time.Minute).Truncate(time.Second)
	prom.set(http.StatusOK, fmt.Sprintf(`{"status":"success","data":{"alerts":[
		{"labels":{"alertname":"ReceiptflowSourceStale","severity":"critical","instance":"publisher:9090","job":"receiptflow"},
		 "annotations":{"summary":"The source has sent nothing to RAW for longer than --stale-after","description":"Publisher publisher:9090 has seen nothing","runbook":"docs/alerts.md#receiptflowsourcestale"},
		 "state":"firing","activeAt":%q,"value":"1e+00"},
		{"labels":{"alertname":"ReceiptflowBacklogGrowing","severity":"warning","consumer":"windower-p0"},
		 "annotations":{"summary":"The backlog of windower's consumer windower-p0 keeps growing"},
		 "state":"pending","activeAt":%q,"value":"3.2e+03"},
		{"labels":{"alertname":"Watchdog","severity":"none"},"annotations":{"summary":"always firing"},"state":"firing","activeAt":%q,"value":"1e+00"}
	]}}`, since.Format(time.RFC3339), since.Add(5*time.Minute).Format(time.RFC3339), since.Format(time.RFC3339)))

	rig := browserStartRigWith(t, time.Minute, func(c *dashboard.Config) {
		c.PrometheusURL = prom.URL
		c.AlertsEvery = 200 * time.Millisecond
	})
	rig.send(time.Now().UTC())

	b := browserStart(t, chromium)
	b.navigate(rig.base + "/")
	describe := `document.getElementById('h-alerts').outerHTML`
	firing := `document.querySelector('#h-alerts .alert[data-alert-name="ReceiptflowSourceStale"]')`
	b.waitFor(10*time.Second, "firing alert on the health panel", firing+`?.dataset.state === 'firing'`, describe)
	text := browserMust[string](b, firing+`.textContent`)
	for _, want := range []string{"firing", "critical", "ReceiptflowSourceStale", "The source has sent nothing to RAW", "since " + since.Format("15:04:05") + "Z", "7m ago"} {
		if !strings.Contains(text, want) {
			t.Errorf("the firing alert reads %q; want %q in it", text, want)
		}
	}
	pending := `document.querySelector('#h-alerts .alert[data-alert-name="ReceiptflowBacklogGrowing"]')`
	if state := browserMust[string](b, pending+`?.dataset.state || 'absent'`); state != "pending" {
		t.Errorf("ReceiptflowBacklogGrowing is %s on the page, want pending", state)
	}
	if txt := browserMust[string](b, pending+`.querySelector('.badge').textContent`); txt != "pending" {
		t.Errorf("the pending alert's badge reads %q", txt)
	}
	if n := browserMust[int](b, `document.querySelectorAll('#h-alerts .alert').length`); n != 2 {
		t.Errorf("%d alerts on the page, want 2 (Watchdog is not receiptflow's): %s", n, browserMust[string](b, describe))
	}
	// Firing before pending.
	if first := browserMust[string](b, `document.querySelector('#h-alerts .alert').dataset.alertName`); first != "ReceiptflowSourceStale" {
		t.Errorf("first alert %s, want the firing one", first)
	}
	if shot := b.screenshot("alerts-firing"); shot == "" {
		t.Errorf("no screenshot")
	}

	// Resolved: Prometheus returns it no more.
	prom.set(http.StatusOK, `{"status":"success","data":{"alerts":[]}}`)
	took := b.waitFor(10*time.Second, "alerts gone", `document.querySelectorAll('#h-alerts .alert').length === 0 && document.getElementById('h-alerts').textContent.startsWith('no alerts firing')`, describe)
	t.Logf("resolved alerts left the page %s after Prometheus stopped returning them", took.Round(time.Millisecond))
	if st := browserMust[string](b, `document.getElementById('h-alerts').dataset.status`); st != "ok" {
		t.Errorf("status %s, want ok", st)
	}

	// Prometheus fails while an alert fires: unavailable, the alert not
	// shown, the time of the last good fetch shown.
	prom.set(http.StatusOK, fmt.Sprintf(`{"status":"success","data":{"alerts":[{"labels":{"alertname":"ReceiptflowWatermarkStuck","severity":"critical","partition":"1"},"annotations":{"summary":"stuck"},"state":"firing","activeAt":%q}]}}`, since.Format(time.RFC3339)))
	b.waitFor(10*time.Second, "a new alert", `!!document.querySelector('#h-alerts .alert[data-alert-name="ReceiptflowWatermarkStuck"]')`, describe)
	prom.set(http.StatusServiceUnavailable, `{"status":"error","errorType":"unavailable","error":"TSDB not ready"}`)
	b.waitFor(10*time.Second, "alerts unavailable", `document.getElementById('h-alerts').dataset.status === 'unavailable'`, describe)
	text = browserMust[string](b, `document.getElementById('h-alerts').textContent`)
	if !strings.Contains(text, "alerts unavailable: HTTP 503: unavailable: TSDB not ready") || !strings.Contains(text, "last fetched ") {
		t.Errorf("unavailable alerts read %q", text)
	}
	if n := browserMust[int](b, `document.querySelectorAll('#h-alerts .alert').length`); n != 0 {
		t.Errorf("%d alerts shown while Prometheus is unavailable, want none", n)
	}
	b.screenshot("alerts-unavailable")
	if errs := b.messages("exception", "error"); len(errs) > 0 {
		t.Errorf("console errors: %v", errs)
	}
}

// TestBrowserAlertsNotConfigured: without --prometheus-url the panel says
// so.
func TestBrowserAlertsNotConfigured(t *testing.T) {
	chromium := browserChromium(t)
	rig := browserStartRig(t, time.Minute)
	rig.send(time.Now().UTC())
	b := browserStart(t, chromium)
	b.navigate(rig.base + "/")
	b.waitFor(10*time.Second, "alerts not configured", `document.getElementById('h-alerts').textContent === 'alerts not configured'`,
		`document.getElementById('h-alerts').outerHTML`)
}
