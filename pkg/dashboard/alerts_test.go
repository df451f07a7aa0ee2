package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/receiptflow/receiptflow/pkg/testenv"
)

// promAlerts is a GET /api/v1/alerts body of Prometheus with the given
// alerts (each a JSON object).
func promAlerts(alerts ...string) string {
	return `{"status":"success","data":{"alerts":[` + strings.Join(alerts, ",") + `]}}`
}

func promAlert(name, state, severity, summary, activeAt string, labels ...string) string {
	ls := fmt.Sprintf(`"alertname":%q,"severity":%q`, name, severity)
	for i := 0; i+1 < len(labels); i += 2 {
		ls += fmt.Sprintf(`,%q:%q`, labels[i], labels[i+1])
	}
	return fmt.Sprintf(`{"labels":{%s},"annotations":{"summary":%q,"description":"d of %s","runbook":"docs/alerts.md#%s"},"state":%q,"activeAt":%q,"value":"1e+00"}`,
		ls, summary, name, strings.ToLower(name), state, activeAt)
}

func TestParseAlertsKeepsTheReceiptflowOnes(t *testing.T) {
	t0 := "2026-12-02T10:00:00Z"
	t1 := "2026-12-02T10:05:00.5Z"
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	cases := []struct {
		name string
		body string
		want []Alert
		err  string
	}{
		{"none", promAlerts(), []Alert{}, ""},
		{"firing first, then pending, each by name; others left out",
			promAlerts(
				promAlert("ReceiptflowWatermarkStuck", "pending", "critical", "stuck", t1, "partition", "1"),
				promAlert("NodeDiskFull", "firing", "critical", "not ours", t0),
				promAlert("ReceiptflowSourceStale", "firing", "critical", "stale", t0, "instance", "publisher:9090"),
				promAlert("ReceiptflowBacklogGrowing", "firing", "warning", "backlog", t1),
				promAlert("ReceiptflowRejectRateSpike", "inactive", "warning", "resolved", t0),
			),
			[]Alert{
				{Name: "ReceiptflowBacklogGrowing", State: "firing", Severity: "warning", Summary: "backlog", Description: "d of ReceiptflowBacklogGrowing",
					Runbook: "docs/alerts.md#receiptflowbackloggrowing", ActiveAt: at(t1)},
				{Name: "ReceiptflowSourceStale", State: "firing", Severity: "critical", Summary: "stale", Description: "d of ReceiptflowSourceStale",
					Runbook: "docs/alerts.md#receiptflowsourcestale", ActiveAt: at(t0), Labels: map[string]string{"instance": "publisher:9090"}},
				{Name: "ReceiptflowWatermarkStuck", State: "pending", Severity: "critical", Summary: "stuck", Description: "d of ReceiptflowWatermarkStuck",
					Runbook: "docs/alerts.md#receiptflowwatermarkstuck", ActiveAt: at(t1), Labels: map[string]string{"partition": "1"}},
			}, ""},
		{"an error answer", `{"status":"error","errorType":"unavailable","error":"rule manager not ready"}`, nil, "prometheus: unavailable: rule manager not ready"},
		{"not JSON", `<html>login</html>`, nil, "not a Prometheus alerts answer"},
		{"another status", `{"status":"partial"}`, nil, `status "partial"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := parseAlerts([]byte(c.body))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one with %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("got\n%+v\nwant\n%+v", got, c.want)
			}
		})
	}
}

func TestCheckPrometheusURL(t *testing.T) {
	for raw, ok := range map[string]bool{
		"":                                true,
		"http://prometheus:9090":          true,
		"https://user:pw@prom.example/p/": true,
		"prometheus:9090":                 false,
		"ftp://prometheus":                false,
		"http://":                         false,
		"http://prom:9090/?x=1":           false,
		"http://prom:9090/%zz":            false,
	} {
		err := CheckPrometheusURL(raw)
		if (err == nil) != ok || (err != nil && !errors.Is(err, ErrPrometheusURL)) {
			t.Errorf("CheckPrometheusURL(%q) = %v, want ok %v", raw, err, ok)
		}
		if err != nil && strings.Contains(err.Error(), "pw") {
			t.Errorf("CheckPrometheusURL(%q) shows the password: %v", raw, err)
		}
	}
	if _, err := New(nil, Config{PrometheusURL: "prometheus:9090"}); !errors.Is(err, ErrPrometheusURL) {
		t.Errorf("New with a bad Prometheus URL: %v, want ErrPrometheusURL", err)
	}
}

// fakePrometheus serves GET /api/v1/alerts with what set gave it last:
// a status code and a body.
type fakePrometheus struct {
	*httptest.Server
	mu    sync.Mutex
	code  int
	body  string
	polls int
}

func newFakePrometheus(t *testing.T) *fakePrometheus {
	t.Helper()
	f := &fakePrometheus{code: http.StatusOK, body: promAlerts()}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/prom/api/v1/alerts" {
			http.NotFound(w, r)
			return
		}
		f.mu.Lock()
		code, body := f.code, f.body
		f.polls++
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		fmt.Fprint(w, body)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakePrometheus) set(code int, body string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.code, f.body = code, body
}

func (f *fixture) health() HealthView {
	f.t.Helper()
	var h HealthView
	f.getJSON("/api/health", &h)
	return h
}

// TestAlertsOnTheHealthAPI (issue 14, alert rules): with a Prometheus
// URL the dashboard polls its alerts and serves the receiptflow ones in
// /api/health and in the page's view; when Prometheus stops answering it
// says so and shows none of the alerts it had, only when it last fetched
// them.
func TestAlertsOnTheHealthAPI(t *testing.T) {
	_, url := testenv.NATS(t)
	prom := newFakePrometheus(t)
	reg := prometheus.NewRegistry()
	prom.set(http.StatusOK, promAlerts(
		promAlert("ReceiptflowSourceStale", "firing", "critical", "The source is silent", "2026-12-02T10:00:00Z", "instance", "publisher:9090"),
		promAlert("ReceiptflowBacklogGrowing", "pending", "warning", "Backlog grows", "2026-12-02T10:04:00Z"),
		promAlert("Watchdog", "firing", "none", "always", "2026-12-02T09:00:00Z"),
	))
	f := start(t, url, Config{PrometheusURL: prom.URL + "/prom", AlertsEvery: 50 * time.Millisecond, Registerer: reg})
	f.bucket("1")

	var h HealthView
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		h = f.health()
		if h.Alerts.Status != AlertsOK || len(h.Alerts.Alerts) != 2 {
			return fmt.Errorf("alerts %+v, want 2 of them", h.Alerts)
		}
		return nil
	})
	if a := h.Alerts.Alerts[0]; a.Name != "ReceiptflowSourceStale" || a.State != AlertFiring || a.Severity != "critical" ||
		a.Summary != "The source is silent" || a.Labels["instance"] != "publisher:9090" || a.ActiveAt.IsZero() {
		t.Errorf("first alert %+v, want the firing ReceiptflowSourceStale", a)
	}
	if a := h.Alerts.Alerts[1]; a.Name != "ReceiptflowBacklogGrowing" || a.State != AlertPending {
		t.Errorf("second alert %+v, want the pending ReceiptflowBacklogGrowing", a)
	}
	if h.Alerts.FetchedAt.IsZero() || h.Alerts.Source != prom.URL+"/prom" {
		t.Errorf("fetched at %v from %q", h.Alerts.FetchedAt, h.Alerts.Source)
	}
	if v := f.svc.View(1); v.Alerts.Status != AlertsOK || len(v.Alerts.Alerts) != 2 {
		t.Errorf("the page's view has alerts %+v", v.Alerts)
	}

	// Resolved: none firing.
	prom.set(http.StatusOK, promAlerts())
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		h = f.health()
		if h.Alerts.Status != AlertsOK || len(h.Alerts.Alerts) != 0 {
			return fmt.Errorf("alerts %+v, want none", h.Alerts)
		}
		return nil
	})
	fetched := h.Alerts.FetchedAt

	// Prometheus fails: unavailable, with its reason; no alert shown as
	// current, the last fetch time kept.
	prom.set(http.StatusOK, promAlerts(promAlert("ReceiptflowSourceStale", "firing", "critical", "s", "2026-12-02T10:00:00Z")))
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if h = f.health(); len(h.Alerts.Alerts) != 1 {
			return fmt.Errorf("alerts %+v, want 1", h.Alerts)
		}
		return nil
	})
	prom.set(http.StatusServiceUnavailable, `{"status":"error","errorType":"unavailable","error":"TSDB not ready"}`)
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		h = f.health()
		if h.Alerts.Status != AlertsUnavailable {
			return fmt.Errorf("alerts %+v, want unavailable", h.Alerts)
		}
		return nil
	})
	if len(h.Alerts.Alerts) != 0 || h.Alerts.Error != "HTTP 503: unavailable: TSDB not ready" || !h.Alerts.FetchedAt.After(fetched) ||
		!h.Alerts.CheckedAt.After(h.Alerts.FetchedAt) {
		t.Errorf("unavailable: %+v; want no alerts, the reason, the last fetch before the last check", h.Alerts)
	}
	prom.set(http.StatusOK, `{"status":"success","data":`)
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if h = f.health(); !strings.Contains(h.Alerts.Error, "not a Prometheus alerts answer") {
			return fmt.Errorf("alerts %+v, want a decoding error", h.Alerts)
		}
		return nil
	})
	// Gone.
	prom.Close()
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if h = f.health(); h.Alerts.Status != AlertsUnavailable || !strings.Contains(h.Alerts.Error, "connect") {
			return fmt.Errorf("alerts %+v, want unavailable: connection refused", h.Alerts)
		}
		return nil
	})
	if ok, failed := alertPolls(t, reg, "ok"), alertPolls(t, reg, "error"); ok < 3 || failed < 2 {
		t.Errorf("alert polls: %v ok, %v failed", ok, failed)
	}
}

// alertPolls is the count of polls with that result.
func alertPolls(t *testing.T, reg prometheus.Gatherer, result string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, fam := range families {
		if fam.GetName() != "receiptflow_dashboard_alert_polls_total" {
			continue
		}
		for _, m := range fam.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func TestAlertsNotConfigured(t *testing.T) {
	_, url := testenv.NATS(t)
	f := start(t, url, Config{})
	f.bucket("1")
	if h := f.health(); h.Alerts.Status != AlertsNotConfigured || h.Alerts.Alerts == nil || len(h.Alerts.Alerts) != 0 {
		t.Errorf("alerts %+v, want not configured and an empty list", h.Alerts)
	}
}

// TestAlertPollerIsBoundedAndStops: a Prometheus that never answers
// makes each poll fail after the timeout, and cancelling ends the poller
// at once, also in the middle of a poll.
func TestAlertPollerIsBoundedAndStops(t *testing.T) {
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer hang.Close()
	defer close(release)
	p, err := newAlertPoller(hang.URL, time.Hour, 150*time.Millisecond, time.Now, newMetrics(nil))
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if changed := p.poll(context.Background()); !changed {
		t.Errorf("a failed first poll did not change the view")
	}
	if d := time.Since(began); d > 2*time.Second {
		t.Errorf("a poll of a silent Prometheus took %s, want about the timeout (150ms)", d)
	}
	if v := p.snapshot(); v.Status != AlertsUnavailable || !strings.Contains(v.Error, "deadline exceeded") || !v.FetchedAt.IsZero() {
		t.Errorf("view %+v, want unavailable by the deadline, never fetched", v)
	}

	// Cancelled while its first poll waits: run returns without waiting
	// for the timeout, and keeps the last verdict.
	p, err = newAlertPoller(hang.URL, time.Hour, time.Hour, time.Now, newMetrics(nil))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.run(ctx, func() {})
	}()
	time.AfterFunc(100*time.Millisecond, cancel)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the poller did not stop within 5s of its context's end")
	}
	if v := p.snapshot(); v.Status != AlertsWaiting {
		t.Errorf("view %+v after a cancelled first poll, want waiting", v)
	}
}

// TestAlertPollingEndsWithRun: when Run returns, the poller has stopped:
// no goroutine of it is left.
func TestAlertPollingEndsWithRun(t *testing.T) {
	_, url := testenv.NATS(t)
	prom := newFakePrometheus(t)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	svc, err := New(nc, Config{PrometheusURL: prom.URL + "/prom", AlertsEvery: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		prom.mu.Lock()
		defer prom.mu.Unlock()
		if prom.polls < 3 {
			return fmt.Errorf("%d polls", prom.polls)
		}
		return nil
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of its context's end")
	}
	buf := make([]byte, 1<<20)
	if stacks := string(buf[:runtime.Stack(buf, true)]); strings.Contains(stacks, "(*alertPoller)") {
		t.Errorf("a poller goroutine is left after Run returned:\n%s", stacks)
	}
}
