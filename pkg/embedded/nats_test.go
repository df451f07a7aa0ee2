package embedded

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestStartNATS(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store") // created by StartNATS
	s, err := StartNATS(NATSConfig{StoreDir: dir, SyncAlways: true})
	if err != nil {
		t.Fatalf("StartNATS: %v", err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })

	url := ClientURL(s)
	if !strings.HasPrefix(url, "nats://127.0.0.1:") {
		t.Fatalf("ClientURL = %q, want nats://127.0.0.1:<port>", url)
	}
	if !s.JetStreamEnabled() {
		t.Fatal("JetStream not enabled")
	}
	cfg := s.JetStreamConfig()
	if cfg == nil || !cfg.SyncAlways {
		t.Fatalf("JetStream config %+v: want SyncAlways", cfg)
	}
	if got := s.StoreDir(); !strings.HasPrefix(got, dir) {
		t.Fatalf("StoreDir = %q, want under %q", got, dir)
	}

	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := js.AccountInfo(ctx); err != nil { // needs JetStream
		t.Fatalf("JetStream account info: %v", err)
	}
}

func TestStartNATSDefaultsToNoSync(t *testing.T) {
	s, err := StartNATS(NATSConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatalf("StartNATS: %v", err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if s.JetStreamConfig().SyncAlways {
		t.Fatal("SyncAlways set without being asked for")
	}
	if got := s.JetStreamConfig().SyncInterval; got != DefaultSyncInterval {
		t.Fatalf("sync interval %s, want %s", got, DefaultSyncInterval)
	}
}

func TestStartNATSNeedsStoreDir(t *testing.T) {
	if s, err := StartNATS(NATSConfig{}); err == nil {
		s.Shutdown()
		t.Fatal("StartNATS without StoreDir: want error")
	}
}

func TestStartNATSPortInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port

	var logs bytes.Buffer
	start := time.Now()
	s, err := StartNATS(NATSConfig{
		StoreDir: t.TempDir(),
		Port:     port,
		Logger:   slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err == nil {
		s.Shutdown()
		t.Fatalf("StartNATS on busy port %d: want error", port)
	}
	t.Logf("error: %v", err)
	if !strings.Contains(err.Error(), "listen") {
		t.Errorf("error %q does not say the port could not be bound", err)
	}
	// The fatal listen error is reported at once, not after the timeout.
	if d := time.Since(start); d >= DefaultNATSReadyTimeout {
		t.Errorf("StartNATS took %s to fail", d)
	}
	if !strings.Contains(logs.String(), "component=nats-server") {
		t.Errorf("logger got no server output: %q", logs.String())
	}
}

func TestClientURLRandomPorts(t *testing.T) {
	a, err := StartNATS(NATSConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Shutdown)
	b, err := StartNATS(NATSConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Shutdown)
	if ClientURL(a) == ClientURL(b) {
		t.Fatalf("two servers on port 0 share URL %s", ClientURL(a))
	}
}
