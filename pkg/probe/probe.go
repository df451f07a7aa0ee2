package probe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Port is one service's HTTP port. Its methods are safe for concurrent use.
type Port struct {
	srv     *http.Server
	ln      net.Listener
	ready   func() string
	detail  atomic.Pointer[func() string]
	metrics atomic.Pointer[http.Handler]
	app     atomic.Pointer[http.Handler]
	done    chan struct{}
	err     error // the server's failure; read after done is closed
}

// ListenHint returns err, an error of listening on addr that flag sets,
// saying which flag to change when the address is in use; other errors
// are returned as they are.
func ListenHint(flag, addr string, err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("%w: another process holds %s; stop it, or pass %s with a free address (%s 127.0.0.1:0 picks one)", err, addr, flag, flag)
	}
	return err
}

// Listen opens addr and serves it (Serve). ready returns why the service
// is not ready, "" when it is.
func Listen(addr string, ready func() string) (*Port, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	return Serve(ln, ready), nil
}

// Serve serves ln in the background until Shutdown or Close.
func Serve(ln net.Listener, ready func() string) *Port {
	return ServePrepared(ln, ready, nil)
}

// ServePrepared is Serve with prepare called on the port before its first
// request is served: what it mounts (Mount, Metrics) answers even a
// request that was waiting on ln, where Mount after Serve leaves a moment
// in which such a request gets the 503 of a service not ready.
func ServePrepared(ln net.Listener, ready func() string, prepare func(*Port)) *Port {
	p := &Port{ln: ln, ready: ready, done: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		more := ""
		if d := p.detail.Load(); d != nil {
			more = "\n" + (*d)()
		}
		if reason := p.ready(); reason != "" {
			http.Error(w, "not ready: "+reason+more, http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ready\n")
		if more != "" {
			io.WriteString(w, more[1:]+"\n")
		}
	})
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		if h := p.metrics.Load(); h != nil {
			(*h).ServeHTTP(w, r)
			return
		}
		p.serveApp(w, r)
	})
	mux.HandleFunc("/", p.serveApp)
	p.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute}
	if prepare != nil {
		prepare(p)
	}
	go func() {
		defer close(p.done)
		if err := p.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			p.err = err
		}
	}()
	return p
}

// serveApp hands r to the mounted handler; before one is, it answers 503
// naming why the service is not ready (404 when it is).
func (p *Port) serveApp(w http.ResponseWriter, r *http.Request) {
	if h := p.app.Load(); h != nil {
		(*h).ServeHTTP(w, r)
		return
	}
	if reason := p.ready(); reason != "" {
		http.Error(w, "not ready: "+reason, http.StatusServiceUnavailable)
		return
	}
	http.NotFound(w, r)
}

// Addr is the address the port listens on.
func (p *Port) Addr() string { return p.ln.Addr().String() }

// Metrics serves g as /metrics from now on.
func (p *Port) Metrics(g prometheus.Gatherer) {
	var h http.Handler = promhttp.HandlerFor(g, promhttp.HandlerOpts{})
	p.metrics.Store(&h)
}

// Detail adds the line f returns to every answer of /readyz, after the
// first (ready, or not ready and why).
func (p *Port) Detail(f func() string) { p.detail.Store(&f) }

// Mount hands every path but the probes (and /metrics, once given) to h.
func (p *Port) Mount(h http.Handler) { p.app.Store(&h) }

// Done is closed when the server has stopped; Err then says why.
func (p *Port) Done() <-chan struct{} { return p.done }

// Err is the server's failure once Done is closed (nil after Shutdown or
// Close).
func (p *Port) Err() error {
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

// Shutdown stops accepting connections and waits up to timeout for the
// requests in flight, then closes the rest. Safe to call twice.
func (p *Port) Shutdown(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := p.srv.Shutdown(ctx); err != nil {
		p.srv.Close()
	}
	<-p.done
}

// Close closes the port at once. Safe to call twice and after Shutdown.
func (p *Port) Close() {
	p.srv.Close()
	<-p.done
}
