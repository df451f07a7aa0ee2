package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"
)

// AlertPrefix: of the alerts Prometheus reports, the dashboard shows those
// whose alertname starts with it (deploy/prometheus/alerts.yml).
const AlertPrefix = "Receiptflow"

// Alerts statuses (AlertsView.Status).
const (
	// AlertsNotConfigured: no Config.PrometheusURL.
	AlertsNotConfigured = "not_configured"
	// AlertsWaiting: configured, the first poll has not answered yet.
	AlertsWaiting = "waiting"
	// AlertsOK: the last poll answered; Alerts is what it returned.
	AlertsOK = "ok"
	// AlertsUnavailable: the last poll failed (Error says why); Alerts
	// is empty, since what an older poll returned may no longer hold.
	AlertsUnavailable = "unavailable"
)

// Alert states, as Prometheus names them.
const (
	AlertFiring  = "firing"
	AlertPending = "pending"
)

// maxAlertsBody bounds what a poll reads of Prometheus's answer.
const maxAlertsBody = 4 << 20

// Alert is one receiptflow alert Prometheus reports.
type Alert struct {
	Name string `json:"name"`
	// State is AlertFiring, or AlertPending (the condition holds, but
	// not yet for the rule's for:).
	State       string    `json:"state"`
	Severity    string    `json:"severity,omitempty"`
	Summary     string    `json:"summary,omitempty"`
	Description string    `json:"description,omitempty"`
	Runbook     string    `json:"runbook,omitempty"`
	ActiveAt    time.Time `json:"active_at,omitzero"`
	// Labels are the alert's labels but alertname and severity.
	Labels map[string]string `json:"labels,omitempty"`
}

// AlertsView is what the dashboard knows of the pipeline's alerts.
type AlertsView struct {
	Status string `json:"status"`
	// Source is the Prometheus polled (credentials redacted).
	Source string `json:"source,omitempty"`
	// Error is why the last poll failed (Status AlertsUnavailable).
	Error string `json:"error,omitempty"`
	// CheckedAt is when the last poll ended; FetchedAt when a poll last
	// succeeded (zero: never).
	CheckedAt time.Time `json:"checked_at,omitzero"`
	FetchedAt time.Time `json:"fetched_at,omitzero"`
	// Alerts are firing ones first, then pending, each by name; never nil.
	Alerts []Alert `json:"alerts"`
}

// ErrPrometheusURL is returned for a --prometheus-url that is not an
// http(s) URL with a host.
var ErrPrometheusURL = errors.New("dashboard: the Prometheus URL must be http:// or https:// with a host")

// CheckPrometheusURL returns nil for an empty raw (alerts not configured)
// or an http(s) URL with a host, else an error wrapping ErrPrometheusURL.
func CheckPrometheusURL(raw string) error {
	if raw == "" {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // without the URL, which may hold a password
		}
		return fmt.Errorf("%w: %v", ErrPrometheusURL, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("%w: %s", ErrPrometheusURL, u.Redacted())
	}
	return nil
}

// apiAlerts is the body of Prometheus's GET /api/v1/alerts.
type apiAlerts struct {
	Status    string `json:"status"`
	ErrorType string `json:"errorType"`
	Error     string `json:"error"`
	Data      struct {
		Alerts []struct {
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
			State       string            `json:"state"`
			ActiveAt    time.Time         `json:"activeAt"`
		} `json:"alerts"`
	} `json:"data"`
}

// parseAlerts decodes a GET /api/v1/alerts body and returns the
// receiptflow alerts in it, sorted (see AlertsView.Alerts). Alerts of
// other rules, and states other than firing and pending, are left out.
func parseAlerts(body []byte) ([]Alert, error) {
	var r apiAlerts
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("not a Prometheus alerts answer: %w", err)
	}
	if r.Status != "success" {
		if r.Error != "" {
			return nil, fmt.Errorf("prometheus: %s: %s", r.ErrorType, r.Error)
		}
		return nil, fmt.Errorf("prometheus answered status %q", r.Status)
	}
	out := []Alert{}
	for _, a := range r.Data.Alerts {
		name := a.Labels["alertname"]
		if !strings.HasPrefix(name, AlertPrefix) || (a.State != AlertFiring && a.State != AlertPending) {
			continue
		}
		al := Alert{Name: name, State: a.State, Severity: a.Labels["severity"], ActiveAt: a.ActiveAt,
			Summary: a.Annotations["summary"], Description: a.Annotations["description"], Runbook: a.Annotations["runbook"]}
		for k, v := range a.Labels {
			if k == "alertname" || k == "severity" {
				continue
			}
			if al.Labels == nil {
				al.Labels = map[string]string{}
			}
			al.Labels[k] = v
		}
		out = append(out, al)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if (out[i].State == AlertFiring) != (out[j].State == AlertFiring) {
			return out[i].State == AlertFiring
		}
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].ActiveAt.Before(out[j].ActiveAt)
	})
	return out, nil
}

// alertPoller polls Prometheus for the pipeline's alerts. Safe for
// concurrent use.
type alertPoller struct {
	endpoint string // <base>/api/v1/alerts
	source   string // the base, redacted
	client   *http.Client
	every    time.Duration
	timeout  time.Duration
	now      func() time.Time
	m        *metrics

	mu   sync.Mutex
	view AlertsView
}

// newAlertPoller returns nil when base is empty (not configured).
func newAlertPoller(base string, every, timeout time.Duration, now func() time.Time, m *metrics) (*alertPoller, error) {
	if base == "" {
		return nil, nil
	}
	if err := CheckPrometheusURL(base); err != nil {
		return nil, err
	}
	u, _ := url.Parse(base) // checked above
	u = u.JoinPath("api", "v1", "alerts")
	src, _ := url.Parse(base)
	return &alertPoller{
		endpoint: u.String(), source: src.Redacted(),
		// Its own transport, so that run can close its idle connections
		// when it returns and leave no goroutine behind.
		client: &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone(), Timeout: timeout},
		every:  every, timeout: timeout, now: now, m: m,
		view: AlertsView{Status: AlertsWaiting, Source: src.Redacted(), Alerts: []Alert{}},
	}, nil
}

// snapshot returns the current view; a nil poller's is "not configured".
func (p *alertPoller) snapshot() AlertsView {
	if p == nil {
		return AlertsView{Status: AlertsNotConfigured, Alerts: []Alert{}}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	v := p.view
	v.Alerts = append([]Alert{}, p.view.Alerts...)
	return v
}

// run polls at once and then every p.every until ctx ends, calling
// changed after each poll whose result differs from the one before. Each
// poll is bounded by p.timeout. It returns when ctx ends, with no request
// in flight and the idle connections closed.
func (p *alertPoller) run(ctx context.Context, changed func()) {
	defer p.client.CloseIdleConnections()
	repeatPoll(ctx, p.every, p.poll, changed)
}

// repeatPoll calls poll at once and then every period until ctx ends,
// and changed after each poll that reports a change (the pollers of
// alerts and owners).
func repeatPoll(ctx context.Context, every time.Duration, poll func(context.Context) bool, changed func()) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if poll(ctx) {
			changed()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// poll asks Prometheus once and records the answer; it reports whether
// the view changed (the times of the poll aside).
func (p *alertPoller) poll(ctx context.Context) bool {
	alerts, err := p.fetch(ctx)
	if ctx.Err() != nil {
		return false // shutting down: keep the last verdict
	}
	now := p.now().UTC()
	p.mu.Lock()
	defer p.mu.Unlock()
	before := p.view
	p.view.CheckedAt = now
	if err != nil {
		p.m.alertPolls.WithLabelValues("error").Inc()
		p.view.Status, p.view.Error, p.view.Alerts = AlertsUnavailable, err.Error(), []Alert{}
	} else {
		p.m.alertPolls.WithLabelValues("ok").Inc()
		p.view.Status, p.view.Error, p.view.Alerts, p.view.FetchedAt = AlertsOK, "", alerts, now
	}
	return before.Status != p.view.Status || before.Error != p.view.Error || !sameAlerts(before.Alerts, p.view.Alerts)
}

func (p *alertPoller) fetch(ctx context.Context) ([]Alert, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.endpoint, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := p.client.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // the URL is shown apart (AlertsView.Source)
		}
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAlertsBody+1))
	if err != nil {
		return nil, fmt.Errorf("read the answer: %w", err)
	}
	if len(body) > maxAlertsBody {
		return nil, fmt.Errorf("answer larger than %d bytes", maxAlertsBody)
	}
	if resp.StatusCode != http.StatusOK {
		// Prometheus's errors are JSON with a message; say it if there is one.
		if _, perr := parseAlerts(body); perr != nil && strings.HasPrefix(perr.Error(), "prometheus: ") {
			return nil, fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimPrefix(perr.Error(), "prometheus: "))
		}
		return nil, fmt.Errorf("HTTP %s", resp.Status)
	}
	return parseAlerts(body)
}

func sameAlerts(a, b []Alert) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Name != y.Name || x.State != y.State || x.Severity != y.Severity || x.Summary != y.Summary ||
			x.Description != y.Description || !x.ActiveAt.Equal(y.ActiveAt) || len(x.Labels) != len(y.Labels) {
			return false
		}
		for k, v := range x.Labels {
			if y.Labels[k] != v {
				return false
			}
		}
	}
	return true
}
