package dashboard

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/receiptflow/receiptflow/pkg/auth"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/window"
)

// readersFile writes a tokens file admitting each name:token pair and
// returns its path.
func readersFile(t *testing.T, path string, pairs ...string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("# the dashboard's readers\n\n")
	for _, p := range pairs {
		name, token, _ := strings.Cut(p, ":")
		fmt.Fprintf(&b, "%s:%s\n", name, auth.HashToken(token))
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// call is one request to the dashboard: its method, path, bearer token
// ("" for none) and cookie (nil for none).
func call(t *testing.T, method, url, token string, cookie *http.Cookie) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if cookie != nil {
		req.AddCookie(cookie)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return resp
}

// TestReadersPresentATokens (the front door, point 4): with Readers (a
// --tokens-file) every API path refuses a request without credentials
// (401, with WWW-Authenticate), with an unknown token (403) and with a
// revoked one (403, its line removed from the file); a reader's token is
// admitted as a bearer header, and POST /api/session turns it into an
// HttpOnly, SameSite=Strict session cookie (a random id, not the token)
// that admits the event stream; revoking the token ends the open stream
// and refuses the cookie; the probes, /metrics and the page's shell stay
// open.
func TestReadersPresentATokens(t *testing.T) {
	_, url := testenv.NATS(t)
	path := readersFile(t, filepath.Join(t.TempDir(), "readers"), "alice:alice-token-1", "bob:bob-token-2")
	readers, err := auth.LoadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	f := start(t, url, Config{Generation: "1", Readers: readers, Gatherer: prometheus.NewRegistry()})
	kv := f.bucket("1")
	now := time.Now().UTC()
	f.putHealth(kv, now)
	f.putWindow(kv, snap(window.ID(window.Ms(now)), 4, 1, window.StatusOpen))

	// Open without a token: the probes, /metrics, the page's shell.
	for _, p := range []string{"/healthz", "/metrics", "/", "/static/app.js", "/static/auth.js", "/static/style.css"} {
		if resp := call(t, "GET", f.base+p, "", nil); resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s without a token: %s, want 200", p, resp.Status)
		}
	}
	if resp := call(t, "GET", f.base+"/readyz", "", nil); resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
		t.Errorf("GET /readyz without a token: %s", resp.Status)
	}
	api := []string{"/api/windows", "/api/health", "/api/events", "/api/zone?tz=UTC", "/api/days?tz=UTC", "/api/explain", "/api/explain/2026-12-02T10"}
	for _, p := range api {
		resp := call(t, "GET", f.base+p, "", nil)
		if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer ") {
			t.Errorf("GET %s without a token: %s (WWW-Authenticate %q), want 401 asking for a bearer token", p, resp.Status, resp.Header.Get("WWW-Authenticate"))
		}
		if resp := call(t, "GET", f.base+p, "not-a-token", nil); resp.StatusCode != http.StatusForbidden {
			t.Errorf("GET %s with an unknown token: %s, want 403", p, resp.Status)
		}
	}
	req, _ := http.NewRequest("GET", f.base+"/api/windows", nil)
	req.Header.Set("Authorization", "Basic YWxpY2U6eA==")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("Basic credentials: %v %v, want 401", resp.Status, err)
	} else {
		resp.Body.Close()
	}
	if resp := call(t, "GET", f.base+"/api/windows", "", &http.Cookie{Name: SessionCookie, Value: "made-up"}); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a made-up session: %s, want 401", resp.Status)
	}

	// A reader's token, as a bearer header.
	var v View
	testenv.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		resp := call(t, "GET", f.base+"/api/windows", "alice-token-1", nil)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /api/windows with alice's token: %s", resp.Status)
		}
		v = f.windows2("alice-token-1")
		if len(v.Windows) != 1 {
			return fmt.Errorf("%d windows", len(v.Windows))
		}
		return nil
	})

	// Signing in: no token 401, a wrong one 403, a right one a cookie.
	if resp := call(t, "POST", f.base+SessionPath, "", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST %s without a token: %s, want 401", SessionPath, resp.Status)
	}
	if resp := call(t, "POST", f.base+SessionPath, "alice-token-2", nil); resp.StatusCode != http.StatusForbidden || len(resp.Cookies()) != 0 {
		t.Errorf("POST %s with a wrong token: %s, cookies %v; want 403 and none", SessionPath, resp.Status, resp.Cookies())
	}
	resp := call(t, "POST", f.base+SessionPath, "alice-token-1", nil)
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == SessionCookie {
			cookie = c
		}
	}
	if resp.StatusCode != http.StatusOK || cookie == nil {
		t.Fatalf("POST %s with alice's token: %s, cookies %v", SessionPath, resp.Status, resp.Cookies())
	}
	if !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode || cookie.Path != "/api/" || cookie.MaxAge != 0 ||
		strings.Contains(cookie.Value, "alice-token-1") || strings.Contains(cookie.Value, auth.HashToken("alice-token-1")) || len(cookie.Value) < 20 {
		t.Errorf("session cookie %+v: want HttpOnly, SameSite=Strict, Path=/api/, for the browser's session, a random id that is not the token", cookie)
	}
	if resp := call(t, "GET", f.base+"/api/windows", "", cookie); resp.StatusCode != http.StatusOK {
		t.Errorf("GET /api/windows with the session cookie: %s, want 200", resp.Status)
	}
	// A second sign-in with the cookie ends the first session.
	resp2 := call(t, "POST", f.base+SessionPath, "alice-token-1", cookie)
	var cookie2 *http.Cookie
	for _, c := range resp2.Cookies() {
		if c.Name == SessionCookie {
			cookie2 = c
		}
	}
	if cookie2 == nil || cookie2.Value == cookie.Value {
		t.Fatalf("second sign-in: cookie %v", cookie2)
	}
	if resp := call(t, "GET", f.base+"/api/windows", "", cookie); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the replaced session: %s, want 401", resp.Status)
	}
	cookie = cookie2

	// The event stream, with the cookie only (as an EventSource sends it).
	stream := call(t, "GET", f.base+"/api/events", "", cookie)
	if stream.StatusCode != http.StatusOK || stream.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET /api/events with the session cookie: %s %s", stream.Status, stream.Header.Get("Content-Type"))
	}
	defer stream.Body.Close()
	views := make(chan View, 256)
	go func() {
		defer close(views)
		sc := bufio.NewScanner(stream.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<22)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var v View
				if json.Unmarshal([]byte(data), &v) == nil {
					views <- v
				}
			}
		}
	}()
	select {
	case v, ok := <-views:
		if !ok || len(v.Windows) != 1 {
			t.Fatalf("first view on the stream: %v %+v", ok, v)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no view on the stream")
	}

	// Alice's line removed: her token, her session and her open stream
	// are refused within seconds; bob's token still reads.
	readersFile(t, path, "bob:bob-token-2")
	ended := time.After(10 * time.Second)
	for open := true; open; {
		select {
		case _, open = <-views:
		case <-ended:
			t.Fatal("the event stream of a revoked token is still open 10 s later")
		}
	}
	if resp := call(t, "GET", f.base+"/api/windows", "alice-token-1", nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("GET /api/windows with a revoked token: %s, want 403", resp.Status)
	}
	if resp := call(t, "GET", f.base+"/api/events", "", cookie); resp.StatusCode != http.StatusForbidden {
		t.Errorf("GET /api/events with the session of a revoked token: %s, want 403", resp.Status)
	}
	if resp := call(t, "GET", f.base+"/api/windows", "", cookie); resp.StatusCode != http.StatusForbidden {
		t.Errorf("GET /api/windows with the session of a revoked token: %s, want 403", resp.Status)
	}
	if resp := call(t, "POST", f.base+SessionPath, "alice-token-1", nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("signing in with a revoked token: %s, want 403", resp.Status)
	}
	if resp := call(t, "GET", f.base+"/api/health", "bob-token-2", nil); resp.StatusCode != http.StatusOK {
		t.Errorf("bob's token after alice's was revoked: %s, want 200", resp.Status)
	}

	// Signing out ends the session and clears the cookie.
	resp = call(t, "POST", f.base+SessionPath, "bob-token-2", nil)
	bobs := resp.Cookies()[0]
	out := call(t, "DELETE", f.base+SessionPath, "", bobs)
	if out.StatusCode != http.StatusNoContent || len(out.Cookies()) != 1 || out.Cookies()[0].MaxAge >= 0 {
		t.Errorf("DELETE %s: %s, cookies %v; want 204 clearing the cookie", SessionPath, out.Status, out.Cookies())
	}
	if resp := call(t, "GET", f.base+"/api/windows", "", bobs); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a session signed out: %s, want 401", resp.Status)
	}
}

// windows2 is windows with a bearer token.
func (f *fixture) windows2(token string) View {
	f.t.Helper()
	req, _ := http.NewRequest("GET", f.base+"/api/windows", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	var v View
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		f.t.Fatal(err)
	}
	return v
}

// guardService is a dashboard (not running) for handler-level tests.
func guardService(t *testing.T, cfg Config) *Service {
	t.Helper()
	_, url := testenv.NATS(t)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	svc, err := New(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

func serveFrom(h http.Handler, method, path, remote, token string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, nil)
	req.RemoteAddr = remote
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

// TestLoopbackOnlyWithoutReaders: without Readers and TrustedProxy the
// dashboard serves loopback peers only: any other peer gets 403 naming
// --tokens-file and --trusted-proxy, for the page and the API alike; a
// loopback peer needs no token (POST /api/session says so, with no
// cookie). With TrustedProxy every peer is served; with Readers the peer
// does not matter, the token does.
func TestLoopbackOnlyWithoutReaders(t *testing.T) {
	h := guardService(t, Config{Generation: "1"}).Handler()
	for _, path := range []string{"/", "/static/app.js", "/api/windows", "/api/health", "/api/zone?tz=UTC"} {
		for _, remote := range []string{"192.0.2.1:1234", "10.0.0.7:40000", "[2001:db8::1]:443"} {
			w := serveFrom(h, "GET", path, remote, "")
			if w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "loopback peers only") || !strings.Contains(w.Body.String(), "--tokens-file") {
				t.Errorf("GET %s from %s: %d %q, want 403 naming --tokens-file", path, remote, w.Code, w.Body.String())
			}
		}
		for _, remote := range []string{"127.0.0.1:5555", "[::1]:5555"} {
			if w := serveFrom(h, "GET", path, remote, ""); w.Code != http.StatusOK {
				t.Errorf("GET %s from %s: %d, want 200", path, remote, w.Code)
			}
		}
	}
	w := serveFrom(h, "POST", SessionPath, "192.0.2.1:1234", "")
	if w.Code != http.StatusForbidden {
		t.Errorf("POST %s from a non-loopback peer: %d, want 403", SessionPath, w.Code)
	}
	w = serveFrom(h, "POST", SessionPath, "127.0.0.1:5555", "")
	if w.Code != http.StatusOK || strings.Contains(w.Body.String(), `"token_required": true`) || w.Header().Get("Set-Cookie") != "" {
		t.Errorf("POST %s from loopback: %d %q (Set-Cookie %q), want 200, no token required, no cookie", SessionPath, w.Code, w.Body.String(), w.Header().Get("Set-Cookie"))
	}

	proxied := guardService(t, Config{Generation: "1", TrustedProxy: true}).Handler()
	for _, path := range []string{"/", "/api/windows"} {
		if w := serveFrom(proxied, "GET", path, "192.0.2.1:1234", ""); w.Code != http.StatusOK {
			t.Errorf("TrustedProxy: GET %s from 192.0.2.1: %d, want 200", path, w.Code)
		}
	}

	readers, err := auth.LoadTokens(readersFile(t, filepath.Join(t.TempDir(), "readers"), "alice:a-token"))
	if err != nil {
		t.Fatal(err)
	}
	guarded := guardService(t, Config{Generation: "1", Readers: readers}).Handler()
	for remote, code := range map[string]int{"192.0.2.1:1234": http.StatusOK, "127.0.0.1:5555": http.StatusOK} {
		if w := serveFrom(guarded, "GET", "/api/windows", remote, "a-token"); w.Code != code {
			t.Errorf("Readers: GET /api/windows from %s with a token: %d, want %d", remote, w.Code, code)
		}
		if w := serveFrom(guarded, "GET", "/api/windows", remote, ""); w.Code != http.StatusUnauthorized {
			t.Errorf("Readers: GET /api/windows from %s without a token: %d, want 401 (loopback is no credential)", remote, w.Code)
		}
	}
	if w := serveFrom(guarded, "GET", "/", "192.0.2.1:1234", ""); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `id="auth-form"`) {
		t.Errorf("Readers: the page's shell: %d, want 200 with the token form", w.Code)
	}
}

// TestNewRefusesAnOpenListener: New refuses a Listener off the loopback
// without Readers or TrustedProxy, and takes one with either.
func TestNewRefusesAnOpenListener(t *testing.T) {
	_, url := testenv.NATS(t)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Skipf("no wildcard listener here: %v", err)
	}
	defer ln.Close()
	if _, err := New(nc, Config{Listener: ln}); !errors.Is(err, ErrOpenListener) {
		t.Errorf("New with %s and no readers: %v, want ErrOpenListener", ln.Addr(), err)
	}
	if _, err := New(nc, Config{Listener: ln, TrustedProxy: true}); err != nil {
		t.Errorf("New with TrustedProxy: %v", err)
	}
	readers, err := auth.LoadTokens(readersFile(t, filepath.Join(t.TempDir(), "readers"), "alice:a-token"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(nc, Config{Listener: ln, Readers: readers}); err != nil {
		t.Errorf("New with Readers: %v", err)
	}
}

// TestSessionsExpireAndAreBounded: a session unused for SessionIdle is
// gone, and beyond MaxSessions the least recently used one ends.
func TestSessionsExpireAndAreBounded(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	ss := newSessions(func() time.Time { return now })
	sum := auth.Sum("x")
	first := ss.open("a", sum)
	now = now.Add(time.Minute)
	second := ss.open("a", sum)
	if _, ok := ss.get(first); !ok {
		t.Fatal("a fresh session is unknown")
	}
	now = now.Add(SessionIdle + time.Second)
	if _, ok := ss.get(second); ok {
		t.Error("a session idle for longer than SessionIdle is still known")
	}
	ss = newSessions(func() time.Time { return now })
	ids := make([]string, 0, MaxSessions)
	for range MaxSessions {
		now = now.Add(time.Millisecond)
		ids = append(ids, ss.open("a", sum))
	}
	now = now.Add(time.Millisecond)
	ss.get(ids[0]) // in use: not the least recently used any more
	now = now.Add(time.Millisecond)
	ss.open("a", sum)
	if ss.len() != MaxSessions {
		t.Errorf("%d sessions, want at most %d", ss.len(), MaxSessions)
	}
	if _, ok := ss.get(ids[0]); !ok {
		t.Error("the session in use was ended")
	}
	if _, ok := ss.get(ids[1]); ok {
		t.Error("the least recently used session was kept beyond MaxSessions")
	}
}
