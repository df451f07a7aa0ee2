package connect

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/testenv"
)

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"nats://127.0.0.1:4222":                         "nats://127.0.0.1:4222",
		"nats://u:secret@a:4222,nats://u:secret@b:4222": "nats://u:xxxxx@a:4222,nats://u:xxxxx@b:4222",
		"redis://windower:secret@redis:6379/0":          "redis://windower:xxxxx@redis:6379/0",
		"redis://:secret@redis:6379":                    "redis://:xxxxx@redis:6379",
		"nats://s3cr3t-token@nats:4222":                 "nats://xxxxx@nats:4222",
		"127.0.0.1:6379":                                "127.0.0.1:6379",
	} {
		got := RedactURL(in)
		if got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
		if strings.Contains(got, "secret") || strings.Contains(got, "s3cr3t") {
			t.Errorf("RedactURL(%q) leaks: %q", in, got)
		}
	}
}

func TestSecurityOptions(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	os.WriteFile(pw, []byte("hunter2\n"), 0o600)
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, nil, 0o600)
	t.Setenv("NATS_PASSWORD", "")
	t.Setenv("REDIS_PASSWORD", "")

	if _, err := (NATSSecurity{User: "validator", PasswordFile: pw}).Options(); err != nil {
		t.Errorf("user with password file: %v", err)
	}
	for name, s := range map[string]NATSSecurity{
		"no password":        {User: "validator"},
		"empty file":         {User: "validator", PasswordFile: empty},
		"missing file":       {User: "validator", PasswordFile: filepath.Join(dir, "nope")},
		"user and creds":     {User: "validator", PasswordFile: pw, CredsFile: pw},
		"cert without key":   {TLSCert: pw},
		"missing creds file": {CredsFile: filepath.Join(dir, "nope")},
	} {
		if _, err := s.Options(); err == nil {
			t.Errorf("NATS %s: no error", name)
		}
	}
	if p := (NATSSecurity{User: "windower"}).inboxPrefix(); p != "_INBOX.windower" {
		t.Errorf("inbox prefix %q", p)
	}
	if p := (NATSSecurity{User: "windower", InboxPrefix: "_X"}).inboxPrefix(); p != "_X" {
		t.Errorf("explicit inbox prefix %q", p)
	}

	c, err := ConnectRedisSecure("redis://127.0.0.1:1", RedisSecurity{Username: "publisher", PasswordFile: pw})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	for name, tc := range map[string]struct {
		url string
		sec RedisSecurity
	}{
		"user without password": {"redis://127.0.0.1:1", RedisSecurity{Username: "publisher"}},
		"two nodes, no cluster": {"127.0.0.1:1,127.0.0.1:2", RedisSecurity{}},
		"cert without key":      {"redis://127.0.0.1:1", RedisSecurity{TLSCert: pw}},
		"bad CA":                {"redis://127.0.0.1:1", RedisSecurity{TLSCA: pw}},
		"no address":            {" , ", RedisSecurity{}},
	} {
		if c, err := ConnectRedisSecure(tc.url, tc.sec); err == nil {
			c.Close()
			t.Errorf("Redis %s: no error", name)
		}
	}
	cc, err := ConnectRedisSecure("127.0.0.1:1,127.0.0.1:2", RedisSecurity{Cluster: true})
	if err != nil {
		t.Fatal(err)
	}
	cc.Close()
}

// TestDialerPublishAckTimeout: an asynchronous publish nobody acks fails
// with ErrAsyncPublishTimeout after the Dialer's timeout; a negative one is
// refused.
func TestDialerPublishAckTimeout(t *testing.T) {
	_, url := testenv.NATS(t)
	d := Dialer{PublishAckTimeout: 200 * time.Millisecond}
	conn, err := d.ConnectNATS(url, "dialer-test")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A plain subscriber takes the publish and never replies.
	sub, err := conn.NC.SubscribeSync("silent.x")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	f, err := conn.JS.PublishAsync("silent.x", []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-f.Err():
		if !errors.Is(err, jetstream.ErrAsyncPublishTimeout) {
			t.Fatalf("publish failed with %v, want ErrAsyncPublishTimeout", err)
		}
	case <-f.Ok():
		t.Fatal("a publish nobody acked was acked")
	case <-time.After(DefaultPublishAckTimeout / 2):
		t.Fatal("the Dialer's publish ack timeout was not applied")
	}
	if _, err := (Dialer{PublishAckTimeout: -time.Second}).ConnectNATS(url, "dialer-test"); err == nil {
		t.Error("a negative publish ack timeout was accepted")
	}
}

// TestTransientClusterAnswers: the answers of a JetStream cluster without a
// leader or quorum (nats-server jetstream_errors_generated.go) are waited
// out, from either client's API; other API errors are not.
func TestTransientClusterAnswers(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"10008 unavailable", &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}, true},
		{"10008 wrapped", fmt.Errorf("publisher: bucket x: %w", &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}), true},
		{"10008 nats.go legacy API", &nats.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}, true},
		{"10009 cannot handle", &jetstream.APIError{Code: 500, ErrorCode: 10009, Description: "JetStream cluster can not handle request"}, true},
		{"10004 incomplete", &jetstream.APIError{Code: 503, ErrorCode: 10004, Description: "incomplete results"}, true},
		{"10005 no suitable peers", &jetstream.APIError{Code: 400, ErrorCode: 10005, Description: "no suitable peers for placement"}, true},
		{"10005 other", &jetstream.APIError{Code: 400, ErrorCode: 10005, Description: "preferred server \"x\" not known"}, false},
		{"10039 not enabled for account", jetstream.ErrJetStreamNotEnabledForAccount, false},
		{"10059 stream not found", jetstream.ErrStreamNotFound, false},
		{"10008 but refused", fmt.Errorf("%w (%w)", nats.ErrPermissionViolation, &jetstream.APIError{ErrorCode: 10008}), false},
	} {
		if got := Transient(c.err); got != c.want {
			t.Errorf("Transient(%s: %v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
	if Refused(&jetstream.APIError{Code: 503, ErrorCode: 10008}) || !Refused(nats.ErrPermissionViolation) || Refused(nil) {
		t.Error("Refused: only a refusal is one")
	}
}

// TestPingSettings: every connection pings often enough to leave a server
// it cannot reach within the documented bound (docs/deployment.md).
func TestPingSettings(t *testing.T) {
	_, url := testenv.NATS(t)
	conn, err := ConnectNATS(url, "ping-test")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if got := conn.NC.Opts.PingInterval; got != PingInterval || PingInterval > 5*time.Second {
		t.Errorf("ping interval %v, want %v (at most 5s)", got, PingInterval)
	}
	if got := conn.NC.Opts.MaxPingsOut; got != MaxPingsOutstanding || MaxPingsOutstanding > 3 {
		t.Errorf("max pings outstanding %d, want %d (at most 3)", got, MaxPingsOutstanding)
	}
}
