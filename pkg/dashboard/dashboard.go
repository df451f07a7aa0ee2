// Package dashboard is the dashboard service: it follows the active
// generation's KV bucket (window snapshots and pipeline health) and serves
// it to people and programs on one HTTP port: an embedded web page with a
// chart and a table of the hourly windows, a Server-Sent Events stream
// that pushes every change to the page, GET /api/windows, GET /api/health,
// GET /api/days (local days in a reader's zone), /healthz, /readyz and
// /metrics. Its data is guarded (guard.go, docs/security.md): readers
// present a token of Config.Readers (a bearer header, or the session
// cookie of POST /api/session for the event stream), or an
// authenticating proxy in front admits them (Config.TrustedProxy), or
// only loopback peers are served. Given a Prometheus (Config.PrometheusURL)
// it polls that server's alerts and shows the pipeline's firing and
// pending ones on the health panel, or says why it cannot. The health
// panel also shows the owner of each partition, read from the generation's
// lease bucket (pkg/lease), or that the deployment has none.
//
// The dashboard never lies about freshness or finality: provisional
// windows (open, in_grace) are marked as such, an hour without events is a
// confirmed zero only once it is final and only from the hour of the first
// event on (hours before it are "no data"), and when the source (or the
// publisher) has been silent for StaleAfter every non-final window is
// marked stale and the page shows a banner.
//
// KV watchers stop when the nats-server restarts, so the service re-watches
// and reloads the bucket whenever its connection reconnects, whenever the
// watcher closes or goes silent while the bucket moves on without it, and
// whenever the active-generation pointer moves.
package dashboard

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/receiptflow/receiptflow/pkg/auth"
	"github.com/receiptflow/receiptflow/pkg/probe"
)

// Config configures a dashboard.
type Config struct {
	// Generation pins the generation to show; empty follows the
	// active-generation pointer (wire.ControlBucket, wire.ActiveKey).
	Generation string
	// StaleAfter: with no source message (or no publisher report) for this
	// long, readers are told the data is stale (default 2m).
	StaleAfter time.Duration
	// Silence: with no KV update for this long while connected, the
	// dashboard checks the bucket and watches and loads it again only if
	// it moved past the watch (default 5s). Repeated re-watches back off
	// up to 16 times that.
	Silence time.Duration
	// Recent is how many of the newest windows the page receives (default
	// 48); GET /api/windows always returns all of them.
	Recent int
	// Listener, if set, is where Run serves HTTP. Without one, mount
	// Handler yourself.
	Listener net.Listener
	// Gatherer, if set, is served as /metrics.
	Gatherer   prometheus.Gatherer
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	// Now is the clock staleness is judged with (default time.Now).
	Now func() time.Time
	// PrometheusURL, if set, is a Prometheus (http(s)://host:port, with a
	// path prefix if it has one) whose GET /api/v1/alerts is polled every
	// AlertsEvery (default 5s), each poll bounded by AlertsTimeout
	// (default 2s, at most AlertsEvery); its receiptflow alerts (names
	// starting with AlertPrefix) are shown on the health panel and in
	// /api/health. Empty: the page says alerts are not configured.
	PrometheusURL string
	AlertsEvery   time.Duration
	AlertsTimeout time.Duration
	// Explain, if set, serves GET /api/explain/{id} and the page's
	// explanation drawer; without it they say what is missing.
	Explain Explainer
	// OwnersEvery is how often the generation's lease bucket is read for
	// the owner of each partition (default 2s).
	OwnersEvery time.Duration
	// Readers, if set, are the readers' tokens (a --tokens-file, pkg/auth):
	// every API call and the event stream need one, as a bearer header or
	// the session cookie of POST /api/session (guard.go, docs/security.md).
	// Without Readers, TrustedProxy says an authenticating proxy in front
	// admits the readers and every peer is served; without either, only
	// loopback peers are, and New refuses a Listener off the loopback
	// (ErrOpenListener).
	Readers      *auth.Tokens
	TrustedProxy bool
}

// Validate reports a Config New refuses: a PrometheusURL that
// CheckPrometheusURL refuses (wrapping ErrPrometheusURL), or a Listener
// off the loopback with neither Readers nor TrustedProxy (wrapping
// ErrOpenListener).
func (c Config) Validate() error {
	if err := CheckPrometheusURL(c.PrometheusURL); err != nil {
		return err
	}
	return c.checkListener()
}

// withDefaults returns c with its zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.StaleAfter <= 0 {
		c.StaleAfter = 2 * time.Minute
	}
	if c.Silence <= 0 {
		c.Silence = 5 * time.Second
	}
	if c.Recent <= 0 {
		c.Recent = 48
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.AlertsEvery <= 0 {
		c.AlertsEvery = 5 * time.Second
	}
	if c.AlertsTimeout <= 0 {
		c.AlertsTimeout = 2 * time.Second
	}
	c.AlertsTimeout = min(c.AlertsTimeout, c.AlertsEvery)
	if c.OwnersEvery <= 0 {
		c.OwnersEvery = 2 * time.Second
	}
	return c
}

// Service is one dashboard instance. Create it with New.
type Service struct {
	nc  *nats.Conn
	js  jetstream.JetStream
	cfg Config
	m   *metrics
	st  *state
	hub *hub
	// alerts is nil without Config.PrometheusURL.
	alerts *alertPoller
	owners *ownersPoller
	// sessions are the pages signed in with a reader's token (Readers).
	sessions *sessions
	// started is when New ran: until StaleAfter after it, no health
	// report yet is "starting", not stale.
	started time.Time

	runMu   sync.Mutex
	running bool
}

// New returns a dashboard reading the buckets through nc. It does no I/O.
// It returns an error wrapping ErrPrometheusURL for a PrometheusURL that
// CheckPrometheusURL refuses.
func New(nc *nats.Conn, cfg Config) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	s := &Service{nc: nc, js: js, cfg: cfg, m: newMetrics(cfg.Registerer), st: newState(), started: cfg.Now(),
		sessions: newSessions(cfg.Now)}
	s.hub = newHub(s.m)
	s.alerts, err = newAlertPoller(cfg.PrometheusURL, cfg.AlertsEvery, cfg.AlertsTimeout, cfg.Now, s.m)
	if err != nil {
		return nil, err
	}
	s.owners = newOwnersPoller(js, cfg.OwnersEvery, cfg.Now, s.st.target)
	return s, nil
}

// ErrRunning is returned by Run when the service is already running.
var ErrRunning = errors.New("dashboard: already running")

// Run follows the bucket, polls Prometheus's alerts (Config.PrometheusURL)
// and, with Config.Listener, serves HTTP until ctx ends; then it stops
// polling, closes every event stream, shuts the HTTP server down
// (bounded by 5s) and returns nil. It returns an error only if the HTTP
// server fails. Run must not be called twice at the same time.
func (s *Service) Run(ctx context.Context) error {
	s.runMu.Lock()
	if s.running {
		s.runMu.Unlock()
		return ErrRunning
	}
	s.running = true
	s.runMu.Unlock()
	defer func() {
		s.runMu.Lock()
		s.running = false
		s.runMu.Unlock()
	}()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var port *probe.Port
	var serveErr error // written before wg.Done, read after wg.Wait
	if s.cfg.Listener != nil {
		port = s.Serve(s.cfg.Listener)
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-port.Done():
				if serveErr = port.Err(); serveErr != nil {
					cancel()
				}
			case <-ctx.Done():
			}
		}()
		s.cfg.Logger.Info("dashboard listening", "addr", s.cfg.Listener.Addr().String())
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.hub.run(ctx, s.pageView)
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.owners.run(ctx, s.hub.notify)
	}()
	if s.alerts != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.alerts.run(ctx, s.hub.notify)
		}()
	}
	s.follow(ctx)

	// Ordered shutdown: end the event streams (their handlers return),
	// then let the HTTP server finish what is in flight.
	s.hub.close()
	if port != nil {
		port.Shutdown(ShutdownTimeout)
	}
	wg.Wait()
	// Only the HTTP server's failure is an error; ctx ending, also by its
	// deadline, is the normal way to stop.
	return serveErr
}

// ShutdownTimeout bounds how long Run (and the dashboard process) waits
// for the HTTP requests in flight when it stops.
const ShutdownTimeout = 5 * time.Second

// Serve serves the dashboard on ln: the probes (/readyz: NotReady) and
// /metrics (Config.Gatherer) as every service's port does (pkg/probe),
// and Handler for the rest. Stop it with the port's Shutdown.
func (s *Service) Serve(ln net.Listener) *probe.Port {
	// Mounted before the first request: one already waiting on ln gets
	// the page, not the port's 503 of a service not mounted yet.
	return probe.ServePrepared(ln, s.NotReady, s.Mount)
}

// Mount hands port the dashboard: /metrics (Config.Gatherer, if set), the
// readiness check and every path but the probes.
func (s *Service) Mount(port *probe.Port) {
	if s.cfg.Gatherer != nil {
		port.Metrics(s.cfg.Gatherer)
	}
	port.Mount(s.Handler())
}

// Handler returns the HTTP handler of the page and the API, guarded as
// Config.Readers and Config.TrustedProxy say (guard.go); the probes and
// /metrics are the port's (Serve, Mount) and open. Safe to call more than
// once.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /{$}", http.HandlerFunc(s.serveIndex))
	mux.Handle("GET /static/", http.StripPrefix("/static/", staticFiles()))
	mux.Handle("GET /favicon.ico", http.RedirectHandler("/static/favicon.svg", http.StatusMovedPermanently))
	mux.HandleFunc("GET /api/windows", s.serveWindows)
	mux.HandleFunc("GET /api/health", s.serveHealth)
	mux.HandleFunc("GET /api/events", s.serveEvents)
	mux.HandleFunc("GET /api/zone", s.serveZone)
	mux.HandleFunc("GET /api/days", s.serveDays)
	mux.HandleFunc("GET /api/explain", s.serveExplainInfo)
	mux.HandleFunc("GET /api/explain/{id}", s.serveExplain)
	mux.HandleFunc("POST "+SessionPath, s.serveSignIn)
	mux.HandleFunc("DELETE "+SessionPath, s.serveSignOut)
	return s.guard(mux)
}
