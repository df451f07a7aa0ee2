package streamtest

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/receiptflow/receiptflow/pkg/testenv"
)

// TestCutProxyForwardsFreezesAndCuts: through the proxy a client talks to
// the server; frozen, nothing the server sends reaches it (a flush never
// gets its PONG); Cut drops the connection, the client reconnects through
// the proxy, and traffic flows again.
func TestCutProxyForwardsFreezesAndCuts(t *testing.T) {
	_, serverURL := testenv.NATS(t)
	u, err := url.Parse(serverURL)
	if err != nil {
		t.Fatal(err)
	}
	p := NewCutProxy(t, u.Host)
	if !strings.HasPrefix(p.URL(), "nats://127.0.0.1:") || p.URL() == serverURL {
		t.Fatalf("proxy URL %s", p.URL())
	}

	reconnected := make(chan struct{}, 1)
	client, err := nats.Connect(p.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(10*time.Millisecond),
		nats.ReconnectHandler(func(*nats.Conn) { reconnected <- struct{}{} }))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	direct, err := nats.Connect(serverURL)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()

	sub, err := client.SubscribeSync("probe")
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Flush(); err != nil {
		t.Fatal(err)
	}
	roundTrip := func(want string) {
		t.Helper()
		if err := direct.Publish("probe", []byte(want)); err != nil {
			t.Fatal(err)
		}
		m, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("no message %q through the proxy: %v", want, err)
		}
		if string(m.Data) != want {
			t.Fatalf("got %q, want %q", m.Data, want)
		}
	}
	roundTrip("before")

	p.Freeze()
	if err := client.FlushTimeout(300 * time.Millisecond); !errors.Is(err, nats.ErrTimeout) {
		t.Fatalf("flush through a frozen proxy = %v, want a timeout (the PONG is dropped)", err)
	}

	p.Cut()
	select {
	case <-reconnected:
	case <-time.After(10 * time.Second):
		t.Fatal("the client did not reconnect through the proxy after Cut")
	}
	if err := client.Flush(); err != nil {
		t.Fatalf("flush after Cut (the proxy should have thawed): %v", err)
	}
	roundTrip("after")
	if got := client.ConnectedUrl(); got != p.URL() {
		t.Fatalf("client reconnected to %s, not through the proxy %s", got, p.URL())
	}
}
