package testenv

import (
	"net"
	"sync"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/embedded"
)

// natsRuns remembers how each server from NATS or RestartNATS was started, so
// RestartNATS can start its successor on the same port and store.
var natsRuns sync.Map // *server.Server -> embedded.NATSConfig

// NATS starts an in-process nats-server with JetStream on 127.0.0.1 and a
// free port, with its file store in t.TempDir(). It returns the server and its
// client URL; the server is shut down by t.Cleanup. It fails the test if the
// server does not start. Safe to call from parallel tests. The store syncs
// as the embedded default does (embedded.DefaultSyncInterval): an
// acknowledged publish survives the server's death, which is what tests
// can produce; fsync per write (SyncAlways) would cost every test that
// publishes 15–22× in publish rate for a power loss no test simulates.
func NATS(t testing.TB) (*server.Server, string) {
	t.Helper()
	s := startNATS(t, embedded.NATSConfig{StoreDir: t.TempDir(), Port: FreePort(t)})
	return s, embedded.ClientURL(s)
}

// RestartNATS shuts s down (if it is still running), waits until its store is closed, and starts a new
// server on the same port with the same store directory, so streams, consumers
// and KV buckets survive and connected clients reconnect by themselves (if
// their reconnect options allow it). s must come from NATS or RestartNATS. The
// new server is shut down by t.Cleanup. It fails the test if the new server
// does not start. Calls for the same server must not overlap.
func RestartNATS(t testing.TB, s *server.Server) *server.Server {
	t.Helper()
	v, ok := natsRuns.Load(s)
	if !ok {
		t.Fatalf("testenv: RestartNATS: server %s was not started by testenv.NATS", s)
		return nil
	}
	opts := v.(embedded.NATSConfig)
	s.Shutdown() // no-op if the test already shut it down
	s.WaitForShutdown()
	natsRuns.Delete(s)
	return startNATS(t, opts)
}

func startNATS(t testing.TB, opts embedded.NATSConfig) *server.Server {
	t.Helper()
	s, err := embedded.StartNATS(opts)
	if err != nil {
		t.Fatalf("testenv: %v", err)
		return nil
	}
	if a, ok := s.Addr().(*net.TCPAddr); ok {
		opts.Port = a.Port // a restart reuses the port actually bound
	}
	natsRuns.Store(s, opts)
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
		natsRuns.Delete(s)
	})
	return s
}

// JetStream connects a client to url and returns its JetStream context;
// the connection is closed by t.Cleanup. It fails the test if either step
// fails.
func JetStream(t testing.TB, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("testenv: connect %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("testenv: jetstream: %v", err)
	}
	return js
}

// Requests counts the messages published on some subjects (JetStream API
// requests, say) that a plain subscriber on the connection nc sees.
type Requests struct {
	nc   *nats.Conn
	subs []*nats.Subscription
}

// CountRequests subscribes on nc to subjects; the subscriptions end with
// the test.
func CountRequests(t testing.TB, nc *nats.Conn, subjects ...string) *Requests {
	t.Helper()
	r := &Requests{nc: nc}
	for _, s := range subjects {
		sub, err := nc.SubscribeSync(s)
		if err != nil {
			t.Fatalf("testenv: subscribe %s: %v", s, err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
		r.subs = append(r.subs, sub)
	}
	return r
}

// Take returns how many messages arrived on each subject (in CountRequests'
// order) since the last Take. It flushes nc first: the server hands the
// copy of a request sent on nc to the subscriber before it answers the
// flush, so every request nc sent before Take is counted.
func (r *Requests) Take(t testing.TB) []int {
	t.Helper()
	if err := r.nc.Flush(); err != nil {
		t.Fatalf("testenv: flush: %v", err)
	}
	out := make([]int, len(r.subs))
	for i, sub := range r.subs {
		for {
			if _, err := sub.NextMsg(0); err != nil {
				break
			}
			out[i]++
		}
	}
	return out
}
