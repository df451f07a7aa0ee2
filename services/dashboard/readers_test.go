package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/auth"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// TestRefusesAnOpenListenWithoutReaders (the front door, point 4): a
// --listen off the loopback without --tokens-file or --trusted-proxy is
// refused at start, exit 2, naming both flags, before NATS is tried; so
// is a --tokens-file that cannot be read or parsed.
func TestRefusesAnOpenListenWithoutReaders(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("alice\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--listen", "0.0.0.0:0"}, []string{"--listen 0.0.0.0:0 is not a loopback address", "--tokens-file", "--trusted-proxy"}},
		{[]string{"--listen", ":8080"}, []string{"--listen :8080 is not a loopback address"}},
		{[]string{"--listen", "192.0.2.1:8080"}, []string{"is not a loopback address"}},
		{[]string{"--listen", "127.0.0.1:0", "--tokens-file", filepath.Join(dir, "none")}, []string{"--tokens-file", "no such file"}},
		{[]string{"--listen", "0.0.0.0:0", "--tokens-file", bad}, []string{"--tokens-file", "line 1 is not name:sha256-hex"}},
	} {
		var log syncBuf
		args := append([]string{"--nats-url", "nats://127.0.0.1:" + strconv.Itoa(freePort(t))}, c.args...)
		began := time.Now()
		code := run(context.Background(), args, io.Discard, &log)
		if code != 2 {
			t.Errorf("%v: exit %d, want 2:\n%s", c.args, code, log.String())
		}
		for _, w := range c.want {
			if !strings.Contains(log.String(), w) {
				t.Errorf("%v: the message does not say %q:\n%s", c.args, w, log.String())
			}
		}
		if strings.Contains(log.String(), "waiting for nats") || time.Since(began) > 5*time.Second {
			t.Errorf("%v: refused only after trying NATS:\n%s", c.args, log.String())
		}
	}
}

// TestTrustedProxyListensOpen: with --trusted-proxy a --listen off the
// loopback starts (it serves whoever the proxy sends).
func TestTrustedProxyListensOpen(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	port := freePort(t)
	var log syncBuf
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--nats-url", "nats://127.0.0.1:" + strconv.Itoa(freePort(t)), "--listen", "0.0.0.0:" + strconv.Itoa(port), "--trusted-proxy"}, io.Discard, &log)
	}()
	testenv.CheckFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		select {
		case code := <-done:
			t.Fatalf("exit %d:\n%s", code, log.String())
		default:
		}
		if code, _, err := get("http://127.0.0.1:" + strconv.Itoa(port) + "/healthz"); err != nil || code != http.StatusOK {
			return fmt.Errorf("/healthz %d %v", code, err)
		}
		return nil
	})
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d, want 0:\n%s", code, log.String())
	}
}

// TestTokensFile: the dashboard started with --tokens-file (on a --listen
// off the loopback) serves /healthz and /readyz to anyone, refuses the API
// without a token (401) and with an unknown one (403), and serves it to a
// reader's token; the start-up log names the guard.
func TestTokensFile(t *testing.T) {
	_, natsURL := testenv.NATS(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := stream.Ensure(ctx, testenv.JetStream(t, natsURL), wire.For(wire.DefaultGeneration), stream.Config{Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(t.TempDir(), "readers")
	if err := os.WriteFile(tokens, []byte("# readers\nalice:"+auth.HashToken("alice-secret")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	web := "http://127.0.0.1:" + strconv.Itoa(port)
	var log syncBuf
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--nats-url", natsURL, "--listen", "0.0.0.0:" + strconv.Itoa(port), "--tokens-file", tokens}, io.Discard, &log)
	}()
	with := func(token string) int {
		req, _ := http.NewRequest("GET", web+"/api/windows", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	testenv.CheckFor(t, 60*time.Second, 100*time.Millisecond, func() error {
		select {
		case code := <-done:
			t.Fatalf("exit %d:\n%s", code, log.String())
		default:
		}
		if code, body, err := get(web + "/readyz"); err != nil || code != http.StatusOK {
			return fmt.Errorf("/readyz %d %q %v", code, body, err)
		}
		if code := with("alice-secret"); code != http.StatusOK {
			return fmt.Errorf("/api/windows with alice's token: %d", code)
		}
		return nil
	})
	if code, _, _ := get(web + "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz without a token: %d, want 200", code)
	}
	if code := with(""); code != http.StatusUnauthorized {
		t.Errorf("/api/windows without a token: %d, want 401", code)
	}
	if code := with("alice-secreT"); code != http.StatusForbidden {
		t.Errorf("/api/windows with a wrong token: %d, want 403", code)
	}
	if !strings.Contains(log.String(), `"readers":"readers' tokens (--tokens-file)"`) {
		t.Errorf("the start-up log does not name the guard:\n%s", log.String())
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d, want 0:\n%s", code, log.String())
	}
}
