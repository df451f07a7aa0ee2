package e2e

// The front door's NATS principals (docs/spec.md §10, docs/security.md),
// against the servers of security_servers_test.go (deploy/nats/nats.conf
// with auth.conf, the dev passwords):
//
//   - TestSecurityFrontDoorPrincipals: the ingest user serves rf.submit as
//     a micro service in queue group ingest and publishes to RAW; a
//     producer's request reaches it and gets its answer; the operator
//     (admin) discovers the service; the ingest user may not take the
//     requests outside its queue group nor answer into another user's
//     inbox. The refusals of each principal are in
//     TestSecurityNATSRefusesOutsideRights ("producer", "ingest").
//   - TestSecurityIngestServiceAsIngestUser: the built bin/ingest, logged
//     in as ingest, takes a producer's NATS request and an HTTP request with
//     a token of its --tokens-file, stores the records in RAW, is refused
//     nothing, and leaves cleanly on SIGTERM.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/receiptflow/receiptflow/pkg/auth"
	"github.com/receiptflow/receiptflow/pkg/frontdoor"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// secNoRefusals fails if the server refused c anything.
func secNoRefusals(t testing.TB, c *secConn) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.errs) > 0 {
		t.Fatalf("%s was refused on the allowed path: %v", c.user, c.errs)
	}
}

func TestSecurityFrontDoorPrincipals(t *testing.T) {
	_, url := secNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	secSetup(t, ctx, url, 1)
	admin := secConnect(t, url, "admin")

	// The ingest user serves the door as the service does: a micro
	// service "ingest", endpoint rf.submit in queue group ingest.
	in := secConnect(t, url, "ingest")
	svc, err := micro.AddService(in.NC, micro.Config{Name: frontdoor.ServiceName, Version: frontdoor.ServiceVersion, QueueGroup: frontdoor.QueueGroup,
		Endpoint: &micro.EndpointConfig{Subject: frontdoor.Subject, Handler: micro.HandlerFunc(func(req micro.Request) {
			_ = req.Respond([]byte("answered: " + string(req.Data())))
		})}})
	if err != nil {
		t.Fatalf("the ingest user adds the micro service: %v", err)
	}
	defer svc.Stop()
	// ... and publishes to RAW.
	ack, err := in.JS.Publish(ctx, "rf.raw.3", []byte(`{"schema_version":2}`))
	if err != nil || ack.Stream != wire.Raw {
		t.Fatalf("the ingest user publishes to RAW: %v %+v", err, ack)
	}
	in.NC.Flush()

	// A producer's request is answered (its inbox: _INBOX.producer.>).
	prod := secConnect(t, url, "producer")
	for i := 0; i < 3; i++ {
		m, err := prod.NC.Request(frontdoor.Subject, []byte(fmt.Sprint(i)), 5*time.Second)
		if err != nil {
			t.Fatalf("producer requests %s: %v", frontdoor.Subject, err)
		}
		if string(m.Data) != fmt.Sprintf("answered: %d", i) {
			t.Fatalf("producer requests %s: answered %q", frontdoor.Subject, m.Data)
		}
		if !strings.HasPrefix(m.Subject, "_INBOX.producer.") {
			t.Fatalf("the answer came to %s, not the producer's inbox", m.Subject)
		}
	}

	// The operator discovers it (`nats micro info ingest`).
	m, err := admin.NC.Request("$SRV.INFO."+frontdoor.ServiceName, nil, 5*time.Second)
	var info micro.Info
	if err != nil || json.Unmarshal(m.Data, &info) != nil || info.Name != frontdoor.ServiceName || len(info.Endpoints) != 1 ||
		info.Endpoints[0].Subject != frontdoor.Subject || info.Endpoints[0].QueueGroup != frontdoor.QueueGroup {
		t.Fatalf("admin asks $SRV.INFO.%s: %v %+v", frontdoor.ServiceName, err, info)
	}
	if _, err := admin.NC.Request("$SRV.PING", nil, 5*time.Second); err != nil {
		t.Fatalf("admin pings the micro services: %v", err)
	}
	secNoRefusals(t, in)
	secNoRefusals(t, prod)

	// Outside its rights: the requests outside its queue group (a copy of
	// every producer's request), the producers' answers, discovery of
	// other services.
	for _, q := range []string{"", "other"} {
		sub, err := in.NC.QueueSubscribeSync(frontdoor.Subject, q)
		if err == nil {
			in.NC.Flush()
			defer sub.Unsubscribe()
		}
		want := fmt.Sprintf("Permissions Violation for Subscription to %q", frontdoor.Subject)
		if q != "" {
			want += fmt.Sprintf(" using queue %q", q)
		}
		e := in.waitErr(t, want)
		t.Logf("refused ingest subscribe %s queue %q: %v", frontdoor.Subject, q, e)
	}
	for _, s := range []string{"_INBOX.producer.>", "$SRV.INFO.other", "$SRV.>"} {
		in.refusedSub(t, s)
	}

	// A producer cannot serve the door: its requests would reach it.
	prod2 := secConnect(t, url, "producer")
	sub, err := prod2.NC.QueueSubscribeSync(frontdoor.Subject, frontdoor.QueueGroup)
	if err == nil {
		prod2.NC.Flush()
		defer sub.Unsubscribe()
	}
	prod2.waitErr(t, fmt.Sprintf("Permissions Violation for Subscription to %q using queue %q", frontdoor.Subject, frontdoor.QueueGroup))

	// RAW holds the one message the ingest user published, nothing else.
	if got := secStreamMsgs(t, admin.JS)[wire.Raw]; got != 1 {
		t.Fatalf("RAW holds %d messages, want the ingest user's 1", got)
	}
}

// secIngestBinary builds services/ingest into a directory of t's and
// returns the binary's path (as secCLIBinary builds receiptctl).
func secIngestBinary(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("go", "build", "-o", dir+"/", "github.com/receiptflow/receiptflow/services/ingest").CombinedOutput()
	if err != nil {
		t.Fatalf("go build ingest: %v\n%s", err, out)
	}
	return filepath.Join(dir, "ingest")
}

// secFrontDoorEvents returns n valid v2 submissions as NDJSON, their ids
// prefixed with prefix.
func secFrontDoorEvents(prefix string, n int) ([]byte, []string) {
	var buf bytes.Buffer
	var ids []string
	start := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("%s-%04d", prefix, i)
		ids = append(ids, id)
		fmt.Fprintf(&buf, `{"schema_version":2,"event_id":%q,"receipt_id":"r-%s","type":"submitted","occurred_at":%q,"partition_key":"store-%d","producer_version":"door-test"}`+"\n",
			id, id, start.Add(time.Duration(i)*time.Minute).Format(time.RFC3339), i%13)
	}
	return buf.Bytes(), ids
}

func TestSecurityIngestServiceAsIngestUser(t *testing.T) {
	bin := secIngestBinary(t)
	_, url := secNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	secSetup(t, ctx, url, 1)
	admin := secConnect(t, url, "admin")

	// A tokens file as deploy/secrets/dev's: name:sha256-hex.
	const token = "door-test-token"
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("# test\ntester:"+auth.HashToken(token)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	listen := fmt.Sprintf("127.0.0.1:%d", secFreePort(t))
	probes := fmt.Sprintf("127.0.0.1:%d", secFreePort(t))
	cmd := exec.Command(bin, "--nats-url", url, "--nats-user", "ingest", "--nats-password-file", secPasswordFile("nats", "ingest"),
		"--listen", listen, "--http-addr", probes, "--tokens-file", tokens, "--drain-timeout", "10s")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NATS_") && !strings.HasPrefix(kv, "REDIS_") && !strings.HasPrefix(kv, "RECEIPTS_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var stderr secLog
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	defer func() {
		if !stopped {
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("ingest log:\n%s", stderr.String())
		}
	}()
	client := &http.Client{Timeout: 10 * time.Second}
	secCheckFor(t, 30*time.Second, func() error {
		resp, err := client.Get("http://" + probes + "/readyz")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz %d %s", resp.StatusCode, b)
		}
		return nil
	})

	// The NATS door, as the producer principal.
	prod := secConnect(t, url, "producer")
	body, natsIDs := secFrontDoorEvents("door-nats", 20)
	req := nats.NewMsg(frontdoor.Subject)
	req.Header.Set("Content-Type", frontdoor.TypeNDJSON)
	req.Data = body
	m, err := prod.NC.RequestMsg(req, 30*time.Second)
	if err != nil {
		t.Fatalf("producer requests %s: %v", frontdoor.Subject, err)
	}
	var a frontdoor.Answer
	if err := json.Unmarshal(m.Data, &a); err != nil || m.Header.Get(frontdoor.HdrStatus) != "200" || a.Stored != len(natsIDs) {
		t.Fatalf("the NATS door answers %s %s (%v), want 200 and %d stored", m.Header.Get(frontdoor.HdrStatus), m.Data, err, len(natsIDs))
	}
	secNoRefusals(t, prod)

	// The HTTP door: without a token 401, with a wrong one 403, with the
	// tokens file's 200.
	body, httpIDs := secFrontDoorEvents("door-http", 15)
	post := func(auth string) (int, frontdoor.Answer) {
		t.Helper()
		r, err := http.NewRequest(http.MethodPost, "http://"+listen+frontdoor.Path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set("Content-Type", frontdoor.TypeNDJSON)
		if auth != "" {
			r.Header.Set("Authorization", "Bearer "+auth)
		}
		resp, err := client.Do(r)
		if err != nil {
			t.Fatalf("POST %s: %v", frontdoor.Path, err)
		}
		defer resp.Body.Close()
		var a frontdoor.Answer
		b, _ := io.ReadAll(resp.Body)
		if err := json.Unmarshal(b, &a); err != nil {
			t.Fatalf("POST %s: %d %s", frontdoor.Path, resp.StatusCode, b)
		}
		return resp.StatusCode, a
	}
	if code, _ := post(""); code != http.StatusUnauthorized {
		t.Fatalf("POST without a token: %d, want 401", code)
	}
	if code, _ := post("not-the-token"); code != http.StatusForbidden {
		t.Fatalf("POST with a wrong token: %d, want 403", code)
	}
	if code, a := post(token); code != http.StatusOK || a.Stored != len(httpIDs) {
		t.Fatalf("POST with the token: %d %+v, want 200 and %d stored", code, a, len(httpIDs))
	}

	// SIGTERM: it answers what is in flight, leaves as a source, exits 0.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		stopped = true
		if err != nil {
			t.Fatalf("ingest after SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("ingest did not exit within 30s of SIGTERM")
	}
	log := stderr.String()
	if !strings.Contains(log, "ingest stopped cleanly") {
		t.Fatalf("no clean stop logged")
	}
	if strings.Contains(log, "Permissions Violation") || strings.Contains(log, "refused") {
		t.Fatalf("the ingest user was refused something on the allowed path:\n%s", log)
	}

	// RAW holds every record of both doors (read as admin), and the
	// instance's heartbeats, its leaving ones included.
	ids, beats := secRawRecords(t, admin.JS)
	want := append(append([]string{}, natsIDs...), httpIDs...)
	got := map[string]bool{}
	for _, id := range ids {
		got[id] = true
	}
	for _, id := range want {
		if !got[id] {
			t.Fatalf("RAW lacks %s; it holds %d records", id, len(ids))
		}
	}
	if len(ids) != len(want) {
		t.Fatalf("RAW holds %d records, want %d", len(ids), len(want))
	}
	leaves := 0
	if err := stream.ReadAll(ctx, admin.JS, wire.Raw, func(m jetstream.Msg) error {
		if m.Headers().Get(wire.HdrLeave) == "1" {
			leaves++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if leaves != 8 {
		t.Fatalf("RAW holds %d leaving heartbeats, want one per partition (8)", leaves)
	}
	t.Logf("RAW: %d records from both doors, %d heartbeats, %d of them leaving", len(ids), beats, leaves)
}
