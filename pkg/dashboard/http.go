package dashboard

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"strconv"
	"time"

	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

//go:embed web
var webFiles embed.FS

// securityHeaders keeps the page self-contained: nothing is loaded from
// anywhere but this server.
func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
}

func staticFiles() http.Handler {
	sub, err := fs.Sub(webFiles, "web")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		securityHeaders(w.Header())
		w.Header().Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}

func (s *Service) serveIndex(w http.ResponseWriter, r *http.Request) {
	b, err := webFiles.ReadFile("web/index.html")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	// The page asks /api/windows on load for as many windows as the
	// stream will send it.
	b = bytes.Replace(b, []byte("<body "), fmt.Appendf(nil, `<body data-recent="%d" `, s.cfg.Recent), 1)
	securityHeaders(w.Header())
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.Write(b)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// serveWindows is GET /api/windows: every window, newest first, with its
// partitions, and the chart's hours. ?recent=N keeps the newest N.
// ?before=ID pages back in time (docs/history.md): the windows older than
// window ID, newest first, ?limit=N of them (default the page's size),
// with the chart's hours ending at the newest of them; "older" says
// whether there are more.
func (s *Service) serveWindows(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	recent := 0
	for _, name := range []string{"recent", "limit"} {
		if v := q.Get(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				http.Error(w, name+" must be a non-negative integer", http.StatusBadRequest)
				return
			}
			recent = n
		}
	}
	before := q.Get("before")
	if before != "" {
		if ms, err := window.ParseID(before); err != nil || window.ID(ms) != before {
			http.Error(w, "before must be a window id like 2026-12-02T10", http.StatusBadRequest)
			return
		}
		if q.Get("limit") == "" && q.Get("recent") == "" {
			recent = s.cfg.Recent
		}
	}
	writeJSON(w, http.StatusOK, s.buildPage(before, recent, true))
}

// HealthView is the body of GET /api/health.
type HealthView struct {
	Generation  string    `json:"generation"`
	Now         time.Time `json:"now"`
	Connected   bool      `json:"connected"`
	Loaded      bool      `json:"loaded"`
	Stale       bool      `json:"stale"`
	StaleReason string    `json:"stale_reason,omitempty"`
	Starting    bool      `json:"starting,omitempty"`
	StaleAfter  string    `json:"stale_after"`
	Watch       WatchInfo `json:"watch"`
	// Health is the publisher's report (meta.health), nil before the first.
	Health *wire.Health `json:"health"`
	// Alerts are the pipeline's alerts from Prometheus (--prometheus-url).
	Alerts AlertsView `json:"alerts"`
	// Owners is who owns each partition (the lease bucket).
	Owners OwnersView `json:"owners"`
}

func (s *Service) serveHealth(w http.ResponseWriter, r *http.Request) {
	v := s.buildView(1, false)
	writeJSON(w, http.StatusOK, HealthView{
		Generation: v.Generation, Now: v.Now, Connected: v.Connected, Loaded: v.Loaded,
		Stale: v.Stale, StaleReason: v.StaleReason, Starting: v.Starting, StaleAfter: v.StaleAfter, Watch: v.Watch, Health: v.Health,
		Alerts: v.Alerts, Owners: v.Owners,
	})
}

// NotReady is the readiness check of the dashboard's port (probe.Port's
// /readyz): "" once connected and the bucket is loaded, else which of the
// two it waits for. Safe for concurrent use.
func (s *Service) NotReady() string {
	s.st.mu.Lock()
	connected, loaded := s.st.connected, s.st.loaded
	s.st.mu.Unlock()
	switch {
	case !connected:
		return "waiting for nats (disconnected, reconnecting)"
	case !loaded:
		return "waiting for the window bucket to be created and loaded"
	}
	return ""
}

// serveEvents is GET /api/events, a Server-Sent Events stream of "view"
// events (the page's View as JSON): the current view at once, then one
// after every change and at least every second.
func (s *Service) serveEvents(w http.ResponseWriter, r *http.Request) {
	ch, ok := s.hub.subscribe()
	if !ok {
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return
	}
	defer s.hub.unsubscribe(ch)
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	send := func(b []byte) bool {
		rc.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := w.Write([]byte("event: view\ndata: ")); err != nil {
			return false
		}
		if _, err := w.Write(b); err != nil {
			return false
		}
		if _, err := w.Write([]byte("\n\n")); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if _, err := w.Write([]byte("retry: 1000\n\n")); err != nil {
		return
	}
	// A token revoked while its stream is open ends the stream at the next
	// push (at least every second); the page's reconnection is refused.
	admitted := stillAdmitted(r.Context())
	first, err := json.Marshal(s.pageView())
	if err != nil || !send(first) {
		return
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case <-s.hub.done:
			return
		case b := <-ch:
			if !admitted() || !send(b) {
				return
			}
		}
	}
}
