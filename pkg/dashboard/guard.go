package dashboard

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/receiptflow/receiptflow/pkg/auth"
)

// Who reads the dashboard (docs/security.md, "Dashboard readers"). The
// page shows per-store amounts, so its data is guarded in one of three
// ways, by Config:
//
//   - Readers (a --tokens-file): every API call presents a reader's token,
//     as `Authorization: Bearer <token>` or as the session cookie that
//     POST /api/session hands out for one (the event stream cannot send a
//     header); no token is 401, an unknown or revoked one 403.
//   - TrustedProxy, without Readers: an authenticating proxy in front has
//     admitted whoever it sends; every peer is served.
//   - neither: loopback peers only; any other gets 403.
//
// The page's shell (GET /, /static/, /favicon.ico) holds no data and is
// served to whoever the mode serves, so that it can ask for the token;
// /healthz, /readyz and /metrics are the port's (pkg/probe) and open:
// /metrics carries no per-store figure.

// SessionCookie is the name of the cookie POST /api/session sets: a random
// session id (never the token), HttpOnly, SameSite=Strict, for /api/ only.
const SessionCookie = "rf_dashboard_session"

// SessionPath is where the page signs in (POST, the token as a bearer
// header) and out (DELETE).
const SessionPath = "/api/session"

// Sessions end after SessionIdle without a request (an open event stream
// keeps its session in use), and at most MaxSessions are held: a new one
// beyond that ends the least recently used.
const (
	SessionIdle = 12 * time.Hour
	MaxSessions = 4096
)

// ErrOpenListener is returned by New for a Config whose Listener is not
// on the loopback while neither Readers nor TrustedProxy says who may read.
var ErrOpenListener = errors.New("dashboard: the listener is not on the loopback, and without readers' tokens (bin/dashboard --tokens-file) or an authenticating proxy in front (--trusted-proxy) the dashboard serves loopback peers only")

type session struct {
	name string
	sum  [sha256.Size]byte // the token's SHA-256 (auth.Sum)
	used time.Time
}

// sessions are the signed-in pages: session id → the hash of the token it
// was opened with, checked against the tokens file on every use, so a
// token removed from the file is refused through its sessions too (403,
// as the token itself). Safe for concurrent use.
type sessions struct {
	now func() time.Time
	mu  sync.Mutex
	m   map[string]*session
}

func newSessions(now func() time.Time) *sessions {
	return &sessions{now: now, m: map[string]*session{}}
}

// open returns the id of a new session for the token whose hash is sum.
func (ss *sessions) open(name string, sum [sha256.Size]byte) string {
	id := rand.Text()
	now := ss.now()
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for k, s := range ss.m {
		if now.Sub(s.used) > SessionIdle {
			delete(ss.m, k)
		}
	}
	if len(ss.m) >= MaxSessions {
		oldest := ""
		for k, s := range ss.m {
			if oldest == "" || s.used.Before(ss.m[oldest].used) {
				oldest = k
			}
		}
		delete(ss.m, oldest)
	}
	ss.m[id] = &session{name: name, sum: sum, used: now}
	return id
}

// get returns the session id's token hash and marks it used; false for
// an unknown or expired session (which is then forgotten).
func (ss *sessions) get(id string) ([sha256.Size]byte, bool) {
	now := ss.now()
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s, ok := ss.m[id]
	if !ok {
		return [sha256.Size]byte{}, false
	}
	if now.Sub(s.used) > SessionIdle {
		delete(ss.m, id)
		return [sha256.Size]byte{}, false
	}
	s.used = now
	return s.sum, true
}

func (ss *sessions) end(id string) {
	ss.mu.Lock()
	delete(ss.m, id)
	ss.mu.Unlock()
}

func (ss *sessions) len() int {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return len(ss.m)
}

// admittedKey carries, in a request's context, the check that the
// request's credentials still hold (the event stream asks it before every
// push, so a revoked token ends its streams).
type admittedKey struct{}

// stillAdmitted returns the request's credential check; always true when
// the dashboard takes no tokens.
func stillAdmitted(ctx context.Context) func() bool {
	if f, ok := ctx.Value(admittedKey{}).(func() bool); ok {
		return f
	}
	return func() bool { return true }
}

// refusal is why a request is not served: its code (401, 403) and what
// the reader is told.
type refusal struct {
	code int
	msg  string
}

func refuse(w http.ResponseWriter, r *http.Request, f refusal) {
	if f.code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="receiptflow dashboard"`)
	}
	if strings.HasPrefix(r.URL.Path, "/api/") {
		writeJSON(w, f.code, map[string]string{"error": f.msg})
		return
	}
	securityHeaders(w.Header())
	w.Header().Set("Cache-Control", "no-store")
	http.Error(w, f.msg, f.code)
}

var (
	refuseNoCredentials = refusal{http.StatusUnauthorized, "no credentials: send Authorization: Bearer <token> (a reader's token of the dashboard's --tokens-file), or sign in on the page"}
	refuseBadHeader     = refusal{http.StatusUnauthorized, "the Authorization header is not Bearer <token>"}
	refuseNoSession     = refusal{http.StatusUnauthorized, "the session is unknown or has expired: sign in again with the token"}
	refuseToken         = refusal{http.StatusForbidden, "the token is not admitted (unknown or revoked)"}
	refuseNotLoopback   = refusal{http.StatusForbidden, "this dashboard serves loopback peers only: start it with --tokens-file to admit readers with a token, or with --trusted-proxy behind an authenticating proxy (docs/security.md)"}
)

// bearer returns the request's bearer token: "" and ok without an
// Authorization header, a refusal for one that is not a bearer token.
func bearer(r *http.Request) (string, *refusal) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", nil
	}
	token, ok := strings.CutPrefix(h, "Bearer ")
	if token = strings.TrimSpace(token); !ok || token == "" {
		return "", &refuseBadHeader
	}
	return token, nil
}

// authenticate checks r's credentials against the readers' tokens: the
// bearer header, else the session cookie. It returns the check that they
// still hold, or why r is refused.
func (s *Service) authenticate(r *http.Request) (func() bool, *refusal) {
	token, bad := bearer(r)
	if bad != nil {
		return nil, bad
	}
	if token != "" {
		sum := auth.Sum(token)
		if _, ok := s.cfg.Readers.CheckSum(sum); !ok {
			return nil, &refuseToken
		}
		return func() bool { _, ok := s.cfg.Readers.CheckSum(sum); return ok }, nil
	}
	c, err := r.Cookie(SessionCookie)
	if err != nil || c.Value == "" {
		return nil, &refuseNoCredentials
	}
	id := c.Value
	sum, ok := s.sessions.get(id)
	if !ok {
		return nil, &refuseNoSession
	}
	if _, ok := s.cfg.Readers.CheckSum(sum); !ok {
		return nil, &refuseToken
	}
	return func() bool {
		sum, ok := s.sessions.get(id)
		if ok {
			_, ok = s.cfg.Readers.CheckSum(sum)
		}
		return ok
	}, nil
}

// openPath reports whether path is the page's shell, which holds no data.
func openPath(path string) bool {
	return path == "/" || path == "/favicon.ico" || strings.HasPrefix(path, "/static/")
}

// guard admits requests to next by the mode of the Config (see above).
func (s *Service) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case s.cfg.Readers != nil:
			if openPath(r.URL.Path) || r.URL.Path == SessionPath {
				break // the session handler checks the token itself
			}
			still, no := s.authenticate(r)
			if no != nil {
				refuse(w, r, *no)
				return
			}
			r = r.WithContext(context.WithValue(r.Context(), admittedKey{}, still))
		case s.cfg.TrustedProxy:
		default:
			if !auth.LoopbackPeer(r.RemoteAddr) {
				refuse(w, r, refuseNotLoopback)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// SessionView is the answer of POST /api/session.
type SessionView struct {
	// TokenRequired says whether this dashboard asks for readers' tokens
	// (--tokens-file); without, the page needs none and no cookie is set.
	TokenRequired bool `json:"token_required"`
	// Reader is the name of the token's line in the tokens file.
	Reader string `json:"reader,omitempty"`
}

// serveSignIn is POST /api/session: the page presents the reader's token
// once, as `Authorization: Bearer <token>`, and gets the session cookie
// its event stream (and every other request) is admitted with. A
// session cookie the request brings is ended: one page, one session.
func (s *Service) serveSignIn(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Readers == nil {
		writeJSON(w, http.StatusOK, SessionView{})
		return
	}
	token, bad := bearer(r)
	if bad == nil && token == "" {
		bad = &refuseNoCredentials
	}
	if bad != nil {
		refuse(w, r, *bad)
		return
	}
	sum := auth.Sum(token)
	name, ok := s.cfg.Readers.CheckSum(sum)
	if !ok {
		refuse(w, r, refuseToken)
		return
	}
	if c, err := r.Cookie(SessionCookie); err == nil {
		s.sessions.end(c.Value)
	}
	http.SetCookie(w, &http.Cookie{
		Name: SessionCookie, Value: s.sessions.open(name, sum), Path: "/api/",
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: secureRequest(r),
	})
	writeJSON(w, http.StatusOK, SessionView{TokenRequired: true, Reader: name})
}

// serveSignOut is DELETE /api/session: the session ends and its cookie is
// cleared. It needs no credentials (it can only end the caller's own).
func (s *Service) serveSignOut(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(SessionCookie); err == nil {
		s.sessions.end(c.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: "", Path: "/api/", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: secureRequest(r)})
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
}

// secureRequest reports whether the page was reached over HTTPS (here, or
// at a proxy in front that says so): the cookie is then Secure.
func secureRequest(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

// checkListener is Validate's check of the Listener against the mode.
func (c Config) checkListener() error {
	if c.Listener == nil || c.Readers != nil || c.TrustedProxy {
		return nil
	}
	if addr := c.Listener.Addr().String(); !auth.LoopbackListen(addr) {
		return fmt.Errorf("%w (listener %s)", ErrOpenListener, addr)
	}
	return nil
}
