package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// TestFlagsRefused: values that cannot work are usage errors (exit 2),
// each named.
func TestFlagsRefused(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{}, "--nats-url"},
		{[]string{"--nats-url", "nats://127.0.0.1:1", "--listen", "0.0.0.0:8090"}, "--tokens-file"},
		{[]string{"--nats-url", "nats://127.0.0.1:1", "--tls-cert", "c.pem"}, "--tls-key"},
		{[]string{"--nats-url", "nats://127.0.0.1:1", "--max-inflight-events", "10"}, "--max-request-events"},
		{[]string{"--nats-url", "nats://127.0.0.1:1", "--retry-for", "0s"}, "must be positive"},
		{[]string{"--nats-url", "nats://127.0.0.1:1", "--procs", "-1"}, "--procs"},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), c.args, &out, &errb); code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: exit %d, %q; want 2 naming %s", c.args, code, errb.String(), c.want)
		}
	}
}

// TestServeAndDrain (docs/spec.md §10): the service serves both doors, and
// on SIGTERM (its context ends) answers the requests in flight, leaves as
// a source and exits 0.
func TestServeAndDrain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, url := testenv.NATS(t)
	js := testenv.JetStream(t, url)
	if err := stream.Ensure(ctx, js, wire.For(""), stream.Config{}); err != nil {
		t.Fatal(err)
	}
	listen := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	sctx, term := context.WithCancel(ctx)
	var errb bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(sctx, []string{"--nats-url", url, "--listen", listen, "--source-id", "door-1", "--procs", "0"}, &bytes.Buffer{}, &errb)
	}()
	post := func(id string) (int, error) {
		body := fmt.Sprintf(`{"schema_version":2,"event_id":%q,"receipt_id":"r","type":"submitted","occurred_at":"2026-12-02T10:00:00Z","partition_key":"s","producer_version":"p"}`, id)
		resp, err := http.Post("http://"+listen+"/v1/events", "application/x-ndjson", strings.NewReader(body))
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		var a struct{ Stored int }
		json.NewDecoder(resp.Body).Decode(&a)
		if resp.StatusCode == 200 && a.Stored != 1 {
			return 0, fmt.Errorf("200 storing %d", a.Stored)
		}
		return resp.StatusCode, nil
	}
	testenv.CheckFor(t, 20*time.Second, 50*time.Millisecond, func() error {
		code, err := post("first")
		if err != nil || code != 200 {
			return fmt.Errorf("first request: %d %v", code, err)
		}
		return nil
	})
	// Requests keep coming while the service is told to stop: each is
	// answered 200 (stored) or 503 (stopping), none is left unanswered.
	var wg sync.WaitGroup
	var mu sync.Mutex
	answered := map[int]int{}
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 10 {
				code, err := post(fmt.Sprintf("r-%d-%d", i, j))
				mu.Lock()
				if err == nil {
					answered[code]++
				} else {
					answered[-1]++ // refused: the listener is closed
				}
				mu.Unlock()
			}
		}()
	}
	time.Sleep(50 * time.Millisecond)
	term()
	wg.Wait()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d after SIGTERM\n%s", code, errb.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no exit within 30 s of SIGTERM")
	}
	for code := range answered {
		if code != 200 && code != 503 && code != -1 {
			t.Errorf("answers during the drain: %v", answered)
		}
	}
	// Every 200 is in RAW, and the source left every partition.
	stored, left := 0, 0
	err := stream.ReadAll(ctx, js, wire.Raw, func(m jetstream.Msg) error {
		h := m.Headers()
		switch {
		case h.Get(wire.HdrSource) != "door-1":
			t.Errorf("a RAW message of source %q", h.Get(wire.HdrSource))
		case h.Get(wire.HdrLeave) == "1":
			left++
		case h.Get(wire.HdrHeartbeat) == "":
			stored++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if stored != 1+answered[200] || left != 8 {
		t.Fatalf("RAW holds %d records for %d answered stored (and the first), %d leaving heartbeats of 8; answers %v", stored, answered[200], left, answered)
	}
	t.Logf("answers during the drain: %v", answered)
}

// TestNotReadyWhileRAWIsAway (docs/spec.md §10): /readyz says not ready
// while RAW does not answer, though NATS does, and ready once it is back.
func TestNotReadyWhileRAWIsAway(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, url := testenv.NATS(t)
	js := testenv.JetStream(t, url)
	n := wire.For("")
	if err := stream.Ensure(ctx, js, n, stream.Config{}); err != nil {
		t.Fatal(err)
	}
	probes := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	sctx, term := context.WithCancel(ctx)
	done := make(chan int, 1)
	go func() {
		done <- run(sctx, []string{"--nats-url", url, "--listen", fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)), "--http-addr", probes, "--procs", "0"}, &bytes.Buffer{}, &bytes.Buffer{})
	}()
	defer func() { term(); <-done }()
	readyz := func(want int, word string) func() error {
		return func() error {
			resp, err := http.Get("http://" + probes + "/readyz")
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != want || !strings.Contains(string(b), word) {
				return fmt.Errorf("/readyz %d %q, want %d with %q", resp.StatusCode, b, want, word)
			}
			return nil
		}
	}
	testenv.CheckFor(t, 20*time.Second, 100*time.Millisecond, readyz(200, "ready"))
	if err := js.DeleteStream(ctx, wire.Raw); err != nil {
		t.Fatal(err)
	}
	testenv.CheckFor(t, 20*time.Second, 100*time.Millisecond, readyz(503, "RAW does not answer"))
	if err := stream.Ensure(ctx, js, n, stream.Config{}); err != nil {
		t.Fatal(err)
	}
	testenv.CheckFor(t, 20*time.Second, 100*time.Millisecond, readyz(200, "ready"))
}
