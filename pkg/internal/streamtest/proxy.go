// Package streamtest helps tests of JetStream consumers fake the faults a
// real deployment meets.
package streamtest

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// CutProxy forwards TCP connections on 127.0.0.1 to a NATS server. Frozen,
// it drops what the server sends (the bytes are gone, as they are when a
// server is killed with deliveries in flight); Cut closes every connection
// and thaws, so clients reconnect through it. Its methods are safe to call
// concurrently.
type CutProxy struct {
	ln     net.Listener
	target string
	frozen atomic.Bool

	mu    sync.Mutex
	conns []net.Conn
}

// NewCutProxy listens on a free loopback port and forwards to target
// (host:port); it is closed by t.Cleanup.
func NewCutProxy(t testing.TB, target string) *CutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &CutProxy{ln: ln, target: target}
	t.Cleanup(func() {
		ln.Close()
		p.Cut()
	})
	go p.accept()
	return p
}

// URL is the client URL of the proxy.
func (p *CutProxy) URL() string { return "nats://" + p.ln.Addr().String() }

func (p *CutProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		go func() {
			_, _ = io.Copy(s, c)
			s.Close()
		}()
		go func() {
			buf := make([]byte, 32<<10)
			for {
				n, err := s.Read(buf)
				if n > 0 && !p.frozen.Load() {
					if _, werr := c.Write(buf[:n]); werr != nil {
						break
					}
				}
				if err != nil {
					break
				}
			}
			c.Close()
		}()
	}
}

// Freeze starts dropping everything servers send to clients.
func (p *CutProxy) Freeze() { p.frozen.Store(true) }

// Cut closes every proxied connection and stops dropping.
func (p *CutProxy) Cut() {
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	p.frozen.Store(false)
}
