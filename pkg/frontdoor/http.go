package frontdoor

import (
	"cmp"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/receiptflow/receiptflow/pkg/auth"
)

// Path is the HTTP door's path.
const Path = "/v1/events"

// HTTP time-outs and limits of the door's server: a body must arrive
// within ReadTimeout of the request's start (a body trickled in is cut
// off, the connection closed), an idle keep-alive connection is closed
// after IdleTimeout, and MaxConnections bounds the open connections
// (more wait in the listen backlog).
const (
	ReadHeaderTimeout     = 5 * time.Second
	ReadTimeout           = 30 * time.Second
	WriteTimeout          = 60 * time.Second
	IdleTimeout           = 60 * time.Second
	DefaultMaxConnections = 1024
)

// Handler serves POST /v1/events. With tokens every request must present
// `Authorization: Bearer <token>` of the tokens file (401 without, 403
// with an unknown one); without, only loopback peers are served (403).
func (d *Door) Handler(tokens *auth.Tokens) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		began := time.Now()
		refuse := func(code int, reason, msg string) {
			d.m.refused.WithLabelValues("http", reason).Inc()
			a := &Answer{Code: code, Results: []Result{}, Error: msg}
			d.m.observe("http", a, time.Since(began))
			writeAnswer(w, a)
		}
		if r.URL.Path != Path {
			refuse(http.StatusNotFound, "path", "no such path: producers POST to "+Path)
			return
		}
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			refuse(http.StatusMethodNotAllowed, "method", r.Method+" "+Path+": POST records here")
			return
		}
		if tokens == nil {
			if !auth.LoopbackPeer(r.RemoteAddr) {
				refuse(http.StatusForbidden, "not_loopback", "this door serves loopback only: give the ingest service a --tokens-file to admit other hosts")
				return
			}
		} else {
			auth := r.Header.Get("Authorization")
			token, ok := strings.CutPrefix(auth, "Bearer ")
			if !ok || token == "" {
				w.Header().Set("WWW-Authenticate", `Bearer realm="receiptflow ingest"`)
				refuse(http.StatusUnauthorized, "unauthorized", "no credentials: send Authorization: Bearer <token>")
				return
			}
			if _, ok := tokens.Check(token); !ok {
				refuse(http.StatusForbidden, "forbidden", "the token is not admitted (unknown or revoked)")
				return
			}
		}
		ct := r.Header.Get("Content-Type")
		if ct == "" {
			refuse(http.StatusUnsupportedMediaType, "content_type", "no Content-Type: send "+TypeNDJSON+" or "+TypeJSON)
			return
		}
		if _, err := mediaType(ct, nil); err != nil {
			refuse(http.StatusUnsupportedMediaType, "content_type", err.Error()+"; nothing stored")
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, d.cfg.MaxRequestBytes))
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			refuse(http.StatusRequestEntityTooLarge, "too_large", "the body is over "+strconv.FormatInt(d.cfg.MaxRequestBytes, 10)+" bytes (--max-request-bytes); nothing stored")
			return
		case err != nil:
			// The body did not arrive (a time-out, a lost connection):
			// nothing is stored, and there may be nobody to answer.
			refuse(http.StatusBadRequest, "body", "the body could not be read: "+err.Error()+"; nothing stored")
			return
		}
		writeAnswer(w, d.Submit(r.Context(), "http", ct, body))
	})
}

// writeAnswer writes a as JSON with its status code (and Retry-After).
func writeAnswer(w http.ResponseWriter, a *Answer) {
	w.Header().Set("Content-Type", "application/json")
	if a.RetryAfter > 0 {
		w.Header().Set("Retry-After", a.retryAfterSeconds())
	}
	w.WriteHeader(a.Code)
	_, _ = w.Write(append(a.AppendJSON(make([]byte, 0, 256)), '\n'))
}

// NewServer returns the door's HTTP server around h, with its time-outs
// (ReadHeaderTimeout and the others when zero).
func NewServer(h http.Handler, t Timeouts) *http.Server {
	t = t.withDefaults()
	return &http.Server{Handler: h, ReadHeaderTimeout: t.ReadHeader, ReadTimeout: t.Read,
		WriteTimeout: t.Write, IdleTimeout: t.Idle, MaxHeaderBytes: 16 << 10}
}

// Timeouts are the HTTP door's time-outs; zero fields take the defaults.
type Timeouts struct {
	ReadHeader, Read, Write, Idle time.Duration
}

func (t Timeouts) withDefaults() Timeouts {
	t.ReadHeader = cmp.Or(t.ReadHeader, ReadHeaderTimeout)
	t.Read = cmp.Or(t.Read, ReadTimeout)
	t.Write = cmp.Or(t.Write, WriteTimeout)
	t.Idle = cmp.Or(t.Idle, IdleTimeout)
	return t
}

// LimitListener bounds ln to n open connections: Accept waits while n are
// open, so any number of idle clients holds at most n of the server's
// descriptors and goroutines.
func LimitListener(ln net.Listener, n int) net.Listener {
	return &limitListener{Listener: ln, slots: make(chan struct{}, n)}
}

type limitListener struct {
	net.Listener
	slots chan struct{}
}

func (l *limitListener) Accept() (net.Conn, error) {
	l.slots <- struct{}{}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitConn{Conn: c, slots: l.slots}, nil
}

type limitConn struct {
	net.Conn
	slots chan struct{}
	once  sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { <-c.slots })
	return err
}
