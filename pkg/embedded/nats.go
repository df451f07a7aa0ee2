package embedded

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// DefaultNATSHost is the interface StartNATS listens on when
// NATSConfig.Host is empty.
const DefaultNATSHost = "127.0.0.1"

// DefaultNATSReadyTimeout is how long StartNATS waits for the server to accept
// clients when NATSConfig.ReadyTimeout is zero.
const DefaultNATSReadyTimeout = 10 * time.Second

// DefaultSyncInterval is how often the embedded server fsyncs its file store
// when NATSConfig.SyncAlways is false: nats-server's own default, set
// explicitly (what it guarantees: see the package doc).
const DefaultSyncInterval = 2 * time.Minute

// NATSConfig configures StartNATS.
type NATSConfig struct {
	// StoreDir is the JetStream file store directory. Required; it is
	// created if missing. A server started again on the same StoreDir finds
	// its streams, consumers and KV buckets again.
	StoreDir string
	// Host is the interface to listen on; empty means DefaultNATSHost.
	Host string
	// Port is the client port; 0 (or server.RANDOM_PORT) picks a free port.
	// Read the chosen one back with ClientURL.
	Port int
	// SyncAlways makes JetStream fsync every write before acknowledging it,
	// like `jetstream { sync_interval: always }` in a server config file
	// (the shipped deploy/nats/nats.conf). Slower, but no acknowledged
	// message is lost even if the machine dies. Without it the store is
	// synced every DefaultSyncInterval, and an acknowledged message still
	// survives a SIGKILL of the server (see DefaultSyncInterval).
	SyncAlways bool
	// Logger receives the server's notices, warnings and errors. Nil means
	// no logging. Fatal server errors are logged at error level and never
	// exit the process.
	Logger *slog.Logger
	// ReadyTimeout bounds the wait for the server to accept clients; zero
	// means DefaultNATSReadyTimeout.
	ReadyTimeout time.Duration
}

// Validate reports a NATSConfig StartNATS cannot use (no StoreDir).
func (c NATSConfig) Validate() error {
	if c.StoreDir == "" {
		return errors.New("embedded: start nats: StoreDir is required")
	}
	return nil
}

// withDefaults returns c with an empty Host and a zero ReadyTimeout set to
// DefaultNATSHost and DefaultNATSReadyTimeout.
func (c NATSConfig) withDefaults() NATSConfig {
	if c.Host == "" {
		c.Host = DefaultNATSHost
	}
	if c.ReadyTimeout <= 0 {
		c.ReadyTimeout = DefaultNATSReadyTimeout
	}
	return c
}

// StartNATS starts a nats-server with JetStream on opts.StoreDir and waits
// until it accepts clients (stop it with Shutdown, WaitForShutdown). Errors
// release what it started and carry the server's message; see the package doc.
func StartNATS(opts NATSConfig) (*server.Server, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	if err := os.MkdirAll(opts.StoreDir, 0o750); err != nil {
		return nil, fmt.Errorf("embedded: start nats: create store dir: %w", err)
	}
	host, wait := opts.Host, opts.ReadyTimeout
	port := opts.Port
	if port == 0 {
		// Port 0 means 4222 to nats-server; here it means "any free port".
		port = server.RANDOM_PORT
	}

	sopts := &server.Options{
		ServerName: "receiptflow-embedded",
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   opts.StoreDir,
		SyncAlways: opts.SyncAlways,
		NoLog:      true, // logging goes only through the adapter below
		NoSigs:     true, // signals belong to the host process
	}
	if !opts.SyncAlways {
		sopts.SyncInterval = DefaultSyncInterval
	}
	s, err := server.NewServer(sopts)
	if err != nil {
		return nil, fmt.Errorf("embedded: start nats: %w", err)
	}
	logs := &natsLogger{log: opts.Logger}
	s.SetLoggerV2(logs, false, false, false)

	where := net.JoinHostPort(host, strconv.Itoa(opts.Port))
	s.Start()
	if err := waitReady(s, logs, wait); err != nil {
		s.Shutdown()
		s.WaitForShutdown()
		return nil, fmt.Errorf("embedded: start nats on %s (store %s): %w", where, opts.StoreDir, err)
	}
	if !s.JetStreamEnabled() {
		s.Shutdown()
		s.WaitForShutdown()
		msg := logs.lastFailure()
		if msg == "" {
			msg = "no reason given"
		}
		return nil, fmt.Errorf("embedded: start nats on %s (store %s): JetStream is not enabled: %s", where, opts.StoreDir, msg)
	}
	return s, nil
}

// waitReady polls the server in short slices so that a fatal start-up error
// (which leaves the server never ready) is reported at once instead of after
// the whole timeout.
func waitReady(s *server.Server, logs *natsLogger, total time.Duration) error {
	const slice = 50 * time.Millisecond
	deadline := time.Now().Add(total)
	for {
		if s.ReadyForConnections(slice) {
			return nil
		}
		if msg := logs.fatal(); msg != "" {
			return errors.New(msg)
		}
		if time.Now().After(deadline) {
			break
		}
	}
	if msg := logs.lastFailure(); msg != "" {
		return fmt.Errorf("not ready for connections after %s: %s", total, msg)
	}
	return fmt.Errorf("not ready for connections after %s", total)
}

// ClientURL returns the nats:// URL of s with the port it listens on, a
// wildcard address (0.0.0.0, ::) replaced by loopback; for a server not
// listening, the URL from its options. Safe to call concurrently.
func ClientURL(s *server.Server) string {
	addr, ok := s.Addr().(*net.TCPAddr)
	if !ok || addr == nil {
		return s.ClientURL()
	}
	ip := addr.IP
	switch {
	case ip == nil || ip.IsUnspecified() && ip.To4() != nil:
		ip = net.IPv4(127, 0, 0, 1)
	case ip.IsUnspecified():
		ip = net.IPv6loopback
	}
	return "nats://" + net.JoinHostPort(ip.String(), strconv.Itoa(addr.Port))
}
