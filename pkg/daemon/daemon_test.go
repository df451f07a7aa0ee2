package daemon

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/config"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// testCerts is a CA and, signed by it, a server certificate for 127.0.0.1
// and a client certificate, as PEM files in a directory.
type testCerts struct{ ca, serverCert, serverKey, clientCert, clientKey string }

func makeCerts(t *testing.T) testCerts {
	t.Helper()
	dir := t.TempDir()
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	keyDER := func(k *ecdsa.PrivateKey) []byte {
		b, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	now := time.Now()
	caKey := newKey()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "receiptflow test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey) {
		k := newKey()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, k
	}
	sDER, sKey := leaf(2, "127.0.0.1", x509.ExtKeyUsageServerAuth)
	cDER, cKey := leaf(3, "validator", x509.ExtKeyUsageClientAuth)
	return testCerts{
		ca:         write("ca.pem", "CERTIFICATE", caDER),
		serverCert: write("server.pem", "CERTIFICATE", sDER),
		serverKey:  write("server-key.pem", "PRIVATE KEY", keyDER(sKey)),
		clientCert: write("client.pem", "CERTIFICATE", cDER),
		clientKey:  write("client-key.pem", "PRIVATE KEY", keyDER(cKey)),
	}
}

// syncBuf is a goroutine-safe log sink.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// stub is a service that reports it started and runs until ctx ends.
type stub struct{ started chan struct{} }

func (s stub) Run(ctx context.Context) error { close(s.started); <-ctx.Done(); return nil }

func freePort(t *testing.T) int {
	t.Helper()
	return testenv.FreePort(t)
}

// TestMainConnectsWithCredentialsAndTLS: a service process authenticates
// to NATS (user, password from NATS_PASSWORD) and Redis (ACL user,
// password from a file), both over mutual TLS from the flags; it never logs
// a password; without the CA, or with a wrong password, it stops with an
// error that says why.
func TestMainConnectsWithCredentialsAndTLS(t *testing.T) {
	certs := makeCerts(t)
	natsPW, redisPW := "nats-secret-4f1c", "redis-secret-9b2e"

	tlsCfg, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: certs.serverCert, KeyFile: certs.serverKey, CaFile: certs.ca, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: t.TempDir(),
		NoLog: true, NoSigs: true, TLS: true, TLSVerify: true, TLSConfig: tlsCfg,
		Users: []*server.User{{Username: "validator", Password: natsPW}}})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats not ready")
	}
	t.Cleanup(ns.Shutdown)
	natsURL := "tls://" + ns.Addr().String()

	tlsPort := freePort(t)
	testenv.RedisServer(t, testenv.WithArgs("--tls-port", strconv.Itoa(tlsPort),
		"--tls-cert-file", certs.serverCert, "--tls-key-file", certs.serverKey, "--tls-ca-cert-file", certs.ca, "--tls-auth-clients", "yes",
		"--user", "validator", "on", ">"+redisPW, "~*", "+@all"))
	pwFile := filepath.Join(t.TempDir(), "redis.password")
	if err := os.WriteFile(pwFile, []byte(redisPW+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NATS_PASSWORD", natsPW)

	base := []string{"--nats-url", natsURL, "--nats-user", "validator",
		"--redis-url", "rediss://127.0.0.1:" + strconv.Itoa(tlsPort), "--redis-user", "validator", "--redis-password-file", pwFile,
		"--redis-tls-ca", certs.ca, "--redis-tls-cert", certs.clientCert, "--redis-tls-key", certs.clientKey,
		"--partitions", "2", "--http-addr", "127.0.0.1:0"}
	withNATSTLS := append([]string{"--nats-tls-ca", certs.ca, "--nats-tls-cert", certs.clientCert, "--nats-tls-key", certs.clientKey}, base...)

	t.Run("connects", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var log syncBuf
		s := stub{started: make(chan struct{})}
		done := make(chan int, 1)
		go func() {
			done <- Main(ctx, "validator", withNATSTLS, &log, func(*Deps) (Runner, error) { return s, nil })
		}()
		select {
		case <-s.started:
		case code := <-done:
			t.Fatalf("exited %d before starting:\n%s", code, log.String())
		case <-time.After(20 * time.Second):
			t.Fatalf("not started:\n%s", log.String())
		}
		cancel()
		if code := <-done; code != 0 {
			t.Fatalf("exit %d:\n%s", code, log.String())
		}
		out := log.String()
		for _, want := range []string{`"user":"validator"`, `"tls":true`, `"inbox_prefix":"_INBOX.validator"`, "service stopped cleanly"} {
			if !strings.Contains(out, want) {
				t.Errorf("log lacks %s:\n%s", want, out)
			}
		}
		if strings.Contains(out, natsPW) || strings.Contains(out, redisPW) {
			t.Fatalf("a password reached the log:\n%s", out)
		}
	})

	for name, tc := range map[string]struct {
		args []string
		env  string
		want string
	}{
		"no CA for NATS":      {base, natsPW, "certificate"},
		"wrong NATS password": {withNATSTLS, "not-it", "Authorization Violation"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv("NATS_PASSWORD", tc.env)
			var log syncBuf
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			code := Main(ctx, "validator", tc.args, &log, func(*Deps) (Runner, error) { return stub{started: make(chan struct{})}, nil })
			if code == 0 || !strings.Contains(log.String(), tc.want) {
				t.Fatalf("exit %d, want 1 with %q:\n%s", code, tc.want, log.String())
			}
			if strings.Contains(log.String(), tc.env) || strings.Contains(log.String(), redisPW) {
				t.Fatalf("a password reached the log:\n%s", log.String())
			}
		})
	}

	t.Run("wrong Redis password", func(t *testing.T) {
		bad := filepath.Join(t.TempDir(), "bad")
		os.WriteFile(bad, []byte("nope"), 0o600)
		args := append([]string{}, withNATSTLS...)
		for i := range args {
			if args[i] == pwFile {
				args[i] = bad
			}
		}
		var log syncBuf
		code := Main(context.Background(), "validator", args, &log, func(*Deps) (Runner, error) { return stub{started: make(chan struct{})}, nil })
		if code == 0 || !strings.Contains(log.String(), "WRONGPASS") {
			t.Fatalf("exit %d, want WRONGPASS:\n%s", code, log.String())
		}
	})
}

// TestEnsureOnlyAndWaiting: --ensure-only creates the topology and exits;
// a service started with --ensure-streams=false before it exists waits for
// it instead of failing, and starts once it is there.
func TestEnsureOnlyAndWaiting(t *testing.T) {
	_, natsURL := testenv.NATS(t)
	r := testenv.RedisServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var log syncBuf
	s := stub{started: make(chan struct{})}
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, "windower", []string{"--nats-url", natsURL, "--redis-url", r.URL(), "--ensure-streams=false",
			"--partitions", "2", "--http-addr", "127.0.0.1:0"}, &log, func(*Deps) (Runner, error) { return s, nil })
	}()
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if !strings.Contains(log.String(), "waiting for the streams") {
			return errors.New("not waiting yet")
		}
		return nil
	})
	var setup syncBuf
	if code := Main(ctx, "validator", []string{"--ensure-only", "--nats-url", natsURL, "--partitions", "2"}, &setup, nil); code != 0 {
		t.Fatalf("--ensure-only exited %d:\n%s", code, setup.String())
	}
	select {
	case <-s.started:
	case <-time.After(15 * time.Second):
		t.Fatalf("the waiting service did not start:\n%s", log.String())
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d:\n%s", code, log.String())
	}
}

// TestEnsureRetention: the streams the set-up job creates keep their
// messages for --retention (default 7 days, never forever) with the
// --dedup-window duplicate window; a zero retention is a usage error.
func TestEnsureRetention(t *testing.T) {
	_, natsURL := testenv.NATS(t)
	ctx := context.Background()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// LATE and REJECTED keep their rows for the larger of --retention and
	// --window-retention (30 days by default): explain reads them.
	check := func(wantAge, wantDup time.Duration) {
		t.Helper()
		for _, base := range []string{wire.Raw, wire.Valid, wire.Rejected, wire.Late} {
			s, err := js.Stream(ctx, base)
			if err != nil {
				t.Fatal(err)
			}
			want := wantAge
			if base == wire.Rejected || base == wire.Late {
				want = max(wantAge, config.DefaultWindowRetention)
			}
			if got := s.CachedInfo().Config.MaxAge; got != want {
				t.Errorf("%s kept for %v, want %v", base, got, want)
			}
			if base == wire.Raw || base == wire.Valid {
				if got := s.CachedInfo().Config.Duplicates; got != wantDup {
					t.Errorf("%s duplicate window %v, want %v", base, got, wantDup)
				}
			}
		}
	}
	var out syncBuf
	if code := Main(ctx, "validator", []string{"--ensure-only", "--nats-url", natsURL, "--partitions", "2"}, &out, nil); code != 0 {
		t.Fatalf("--ensure-only exited %d:\n%s", code, out.String())
	}
	check(7*24*time.Hour, 2*time.Minute)
	if code := Main(ctx, "validator", []string{"--ensure-only", "--nats-url", natsURL, "--partitions", "2",
		"--retention", "1000h", "--dedup-window", "10m"}, &out, nil); code != 0 {
		t.Fatalf("--ensure-only --retention 1000h exited %d:\n%s", code, out.String())
	}
	check(1000*time.Hour, 10*time.Minute)
	if code := Main(ctx, "validator", []string{"--ensure-only", "--nats-url", natsURL, "--retention", "0"}, &out, nil); code == 0 {
		t.Fatal("--retention 0 (keep forever) was accepted")
	}
}

// TestVersionFlag (issue 26): --version prints the build and exits 0
// before any flag is checked or any server reached.
func TestVersionFlag(t *testing.T) {
	var out, log bytes.Buffer
	if code := MainTo(context.Background(), "windower", []string{"--version"}, &out, &log, nil); code != 0 || !strings.HasPrefix(out.String(), "windower ") {
		t.Errorf("--version: exit %d, %q\n%s", code, out.String(), log.String())
	}
}
