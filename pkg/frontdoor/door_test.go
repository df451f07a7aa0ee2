package frontdoor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/auth"
	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/ingest"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// rig is a front door on an in-process nats-server: its Door, the HTTP
// door's base URL (served with timeouts t), and the connection.
type rig struct {
	t    *testing.T
	ctx  context.Context
	nc   *nats.Conn
	js   jetstream.JetStream
	door *Door
	url  string
}

func newRig(t *testing.T, cfg Config, tokens *auth.Tokens, to Timeouts, maxConns int) *rig {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	_, url := testenv.NATS(t)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Ensure(ctx, js, wire.For(""), stream.Config{Partitions: 8}); err != nil {
		t.Fatal(err)
	}
	v, err := contract.NewValidator(contract.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Connected = func() bool { return nc.Status() == nats.CONNECTED }
	door := New(cfg, func() *ingest.Ingester {
		return ingest.New(js, ingest.Config{Partitions: 8, Validator: v, SourceID: "door-test", RetryFor: 2 * time.Second,
			MaxInFlight: cfg.MaxInflight, HeartbeatInterval: 100 * time.Millisecond})
	}, nil)
	t.Cleanup(func() { door.Close(context.Background()) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if maxConns > 0 {
		ln = LimitListener(ln, maxConns)
	}
	srv := NewServer(door.Handler(tokens), to)
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	svc, err := door.ServeNATS(nc, ServiceVersion)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Stop() })
	return &rig{t: t, ctx: ctx, nc: nc, js: js, door: door, url: "http://" + ln.Addr().String() + Path}
}

// post sends body with content type ct (and a bearer token, if given)
// and decodes the answer.
func (r *rig) post(ct string, body []byte, token string) (int, *Answer, http.Header) {
	r.t.Helper()
	req, err := http.NewRequestWithContext(r.ctx, http.MethodPost, r.url, bytes.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	var a Answer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		r.t.Fatalf("answer of %d: %v", resp.StatusCode, err)
	}
	return resp.StatusCode, &a, resp.Header
}

// rawCount is how many records (not heartbeats) RAW holds.
func (r *rig) rawCount() int {
	r.t.Helper()
	n := 0
	err := stream.ReadAll(r.ctx, r.js, wire.Raw, func(m jetstream.Msg) error {
		if m.Headers().Get(wire.HdrHeartbeat) == "" {
			n++
		}
		return nil
	})
	if err != nil {
		r.t.Fatal(err)
	}
	return n
}

// event is a valid v2 submission of id.
func event(id string) string {
	return fmt.Sprintf(`{"schema_version":2,"event_id":%q,"receipt_id":"r-%s","type":"submitted","occurred_at":"2026-12-02T10:%02d:00Z","partition_key":"store-%d","producer_version":"t/1"}`,
		id, id, len(id)%60, len(id)%5)
}

func ndjson(ids ...string) []byte {
	var b strings.Builder
	for _, id := range ids {
		b.WriteString(event(id))
		b.WriteByte('\n')
	}
	return []byte(b.String())
}

func statuses(a *Answer) []string {
	var out []string
	for _, r := range a.Results {
		s := r.Status
		if r.Reason != "" {
			s += ":" + r.Reason
		}
		out = append(out, s)
	}
	return out
}

// TestDoorsAnswerPerRecord (docs/spec.md §10): both doors store a request
// and answer one result per record in order, with its RAW sequence; the
// same records again are duplicates with the original sequences.
func TestDoorsAnswerPerRecord(t *testing.T) {
	r := newRig(t, Config{}, nil, Timeouts{}, 0)
	code, a, _ := r.post(TypeNDJSON, ndjson("a1", "a2", "a3"), "")
	if code != 200 || a.Stored != 3 || strings.Join(statuses(a), ",") != "stored,stored,stored" || a.Results[0].EventID != "a1" {
		t.Fatalf("NDJSON: %d %+v", code, a)
	}
	seqs := []uint64{a.Results[0].Seq, a.Results[1].Seq, a.Results[2].Seq}
	if !(seqs[0] > 0 && seqs[0] < seqs[1] && seqs[1] < seqs[2]) {
		t.Fatalf("sequences %v are not RAW's order", seqs)
	}
	code, a, _ = r.post(TypeJSON, []byte("["+event("a1")+","+event("a4")+"]"), "")
	if code != 200 || a.Duplicates != 1 || a.Stored != 1 || a.Results[0].Seq != seqs[0] {
		t.Fatalf("JSON array with a duplicate: %d %+v", code, a)
	}
	code, a, _ = r.post(TypeJSON+"; charset=utf-8", []byte(event("a5")), "")
	if code != 200 || a.Stored != 1 {
		t.Fatalf("one JSON object: %d %+v", code, a)
	}
	// The NATS door: the same bodies, the code in Rf-Status.
	msg, err := r.nc.Request(Subject, ndjson("n1", "a2"), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var na Answer
	if err := json.Unmarshal(msg.Data, &na); err != nil {
		t.Fatal(err)
	}
	if msg.Header.Get(HdrStatus) != "200" || strings.Join(statuses(&na), ",") != "stored,duplicate" || na.Results[1].Seq != seqs[1] {
		t.Fatalf("NATS door: %s %s", msg.Header.Get(HdrStatus), msg.Data)
	}
	if n := r.rawCount(); n != 6 {
		t.Fatalf("RAW holds %d records, want the 6 distinct ones", n)
	}
}

// TestBadInput (docs/spec.md §10): each bad request gets its clear answer,
// and nothing is stored half unnoticed.
func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	tokPath := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokPath, []byte("# producers\npos:"+auth.HashToken("good")+"\nold:"+auth.HashToken("revoked")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens, err := auth.LoadTokens(tokPath)
	if err != nil {
		t.Fatal(err)
	}
	r := newRig(t, Config{MaxRequestBytes: 100_000, MaxRequestEvents: 5}, tokens, Timeouts{}, 0)
	// A record of 64 KiB + 1 byte: one byte over the contract's limit.
	base := `{"schema_version":2,"event_id":"big","receipt_id":"r","type":"submitted","occurred_at":"2026-12-02T10:00:00Z","partition_key":"s","producer_version":"p","payload":{"pad":""}}`
	big := strings.Replace(base, `"pad":""`, `"pad":"`+strings.Repeat("x", 64<<10+1-len(base))+`"`, 1)
	if len(big) != 64<<10+1 {
		t.Fatalf("the big record has %d bytes", len(big))
	}
	for _, c := range []struct {
		name, ct, token string
		body            []byte
		code            int
		statuses        string // the answer's statuses, for 200
		errWord         string // a word of its error, otherwise
	}{
		{"over the byte limit", TypeNDJSON, "good", bytes.Repeat(ndjson("x"), 1000), 413, "", "max-request-bytes"},
		{"over the event limit", TypeNDJSON, "good", ndjson("e1", "e2", "e3", "e4", "e5", "e6"), 413, "", "max-request-events"},
		{"a malformed line in the middle", TypeNDJSON, "good", []byte(event("m1") + "\n{\"event_id\": oops\n" + event("m2") + "\n"), 200, "stored,invalid:malformed_json,stored", ""},
		{"an array with a non-object element", TypeJSON, "good", []byte("[" + event("j1") + `,42,` + event("j2") + "]"), 200, "stored,invalid:malformed_json,stored", ""},
		{"empty body", TypeNDJSON, "good", nil, 400, "", "empty body"},
		{"JSON that does not parse", TypeJSON, "good", []byte(`{"a":`), 400, "", "not valid JSON"},
		{"wrong content type", "text/plain", "good", ndjson("w1"), 415, "", "content type"},
		{"no content type", "", "good", ndjson("w2"), 415, "", "Content-Type"},
		{"invalid UTF-8", TypeNDJSON, "good", []byte(strings.Replace(event("u1"), "t/1", "t/\xff\xfe", 1) + "\n"), 200, "invalid:malformed_json", ""},
		{"a 64 KiB + 1 record", TypeNDJSON, "good", []byte(big + "\n"), 200, "invalid:too_large", ""},
		{"no token", TypeNDJSON, "", ndjson("t1"), 401, "", "no credentials"},
		{"a wrong token", TypeNDJSON, "bad", ndjson("t2"), 403, "", "not admitted"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := r.rawCount()
			code, a, _ := r.post(c.ct, c.body, c.token)
			got := strings.Join(statuses(a), ",")
			if code != c.code || got != c.statuses || !strings.Contains(a.Error, c.errWord) {
				t.Fatalf("%d %q (%s), want %d %q (%s)", code, got, a.Error, c.code, c.statuses, c.errWord)
			}
			// Every record answered is in RAW (an invalid one too: it
			// reaches REJECTED), and nothing else.
			if stored := r.rawCount() - before; stored != a.Stored+a.Invalid {
				t.Fatalf("RAW took %d records; the answer names %d stored and %d invalid", stored, a.Stored, a.Invalid)
			}
		})
	}
	// Revoking: the line goes, and the token is refused from then on.
	if code, _, _ := r.post(TypeNDJSON, ndjson("v1"), "revoked"); code != 200 {
		t.Fatalf("the token before it is revoked: %d", code)
	}
	if err := os.WriteFile(tokPath, []byte("pos:"+auth.HashToken("good")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	testenv.CheckFor(t, 5*time.Second, 100*time.Millisecond, func() error {
		if code, a, _ := r.post(TypeNDJSON, ndjson("v2"), "revoked"); code != 403 {
			return fmt.Errorf("a revoked token: %d %s", code, a.Error)
		}
		return nil
	})
}

// TestSlowAndIdleConnections (docs/spec.md §10): a body trickled in one
// byte a second is cut off at the read time-out and its connection
// closed, nothing stored; idle connections beyond the limit wait in the
// backlog and are closed after the header time-out, while requests on the
// connections the limit leaves are served.
func TestSlowAndIdleConnections(t *testing.T) {
	r := newRig(t, Config{}, nil, Timeouts{ReadHeader: time.Second, Read: 2 * time.Second}, 1000)
	c, err := net.Dial("tcp", strings.TrimPrefix(strings.TrimSuffix(r.url, Path), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := ndjson("slow")
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n", Path, TypeNDJSON, len(body))
	began := time.Now()
	closed := false
	for i := 0; i < len(body) && time.Since(began) < 10*time.Second; i++ {
		if _, err := c.Write(body[i : i+1]); err != nil {
			closed = true
			break
		}
		time.Sleep(time.Second)
	}
	if !closed {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		rest, _ := io.ReadAll(c)
		closed = !strings.Contains(string(rest), "200 OK")
	}
	if !closed || r.rawCount() != 0 {
		t.Fatalf("a body of one byte a second: connection closed %v, RAW holds %d records", closed, r.rawCount())
	}
	// 990 idle connections of 1000 allowed: a request is still served.
	var idle []net.Conn
	for range 990 {
		ic, err := net.Dial("tcp", strings.TrimPrefix(strings.TrimSuffix(r.url, Path), "http://"))
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, ic)
	}
	defer func() {
		for _, ic := range idle {
			ic.Close()
		}
	}()
	if code, a, _ := r.post(TypeNDJSON, ndjson("beside-idle"), ""); code != 200 || a.Stored != 1 {
		t.Fatalf("a request beside 990 idle connections: %d %+v", code, a)
	}
	// The idle ones are closed by the server after the header time-out.
	idle[0].SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := idle[0].Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("an idle connection after the header time-out: %v, want closed (EOF)", err)
	}
}

// TestNATSRequestWithoutReply: a request no one can be answered stores
// nothing, and neither does one whose reply subject is not an inbox (the
// answer would be published there with the service's rights: into RAW).
func TestNATSRequestWithoutReply(t *testing.T) {
	r := newRig(t, Config{}, nil, Timeouts{}, 0)
	if err := r.nc.Publish(Subject, ndjson("noreply")); err != nil {
		t.Fatal(err)
	}
	if err := r.nc.PublishRequest(Subject, "rf.raw.0", ndjson("into-raw")); err != nil {
		t.Fatal(err)
	}
	// A request after it is answered: the one before it was handled.
	if _, err := r.nc.Request(Subject, ndjson("after"), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if n := r.rawCount(); n != 1 {
		t.Fatalf("RAW holds %d messages, want only the answered request's record", n)
	}
}

// TestUnavailableThenRetried (docs/spec.md §10): while RAW cannot take
// records (its store refuses them) the door answers 503 with Retry-After;
// the producer's retry, once RAW takes records again, stores each record
// once.
func TestUnavailableThenRetried(t *testing.T) {
	r := newRig(t, Config{}, nil, Timeouts{}, 0)
	st, err := r.js.Stream(r.ctx, wire.Raw)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	full := cfg
	full.MaxMsgs, full.Discard = 1, jetstream.DiscardNew
	if code, a, _ := r.post(TypeNDJSON, ndjson("f0"), ""); code != 200 || a.Stored != 1 {
		t.Fatalf("first record: %d %+v", code, a)
	}
	if _, err := r.js.UpdateStream(r.ctx, full); err != nil {
		t.Fatal(err)
	}
	body := ndjson("f1", "f2", "f3")
	code, a, h := r.post(TypeNDJSON, body, "")
	if code != 503 || h.Get("Retry-After") == "" || a.Stored != 0 {
		t.Fatalf("RAW full: %d %+v (Retry-After %q)", code, a, h.Get("Retry-After"))
	}
	if _, err := r.js.UpdateStream(r.ctx, cfg); err != nil {
		t.Fatal(err)
	}
	testenv.CheckFor(t, 30*time.Second, 200*time.Millisecond, func() error {
		code, a, _ := r.post(TypeNDJSON, body, "")
		if code != 200 {
			return fmt.Errorf("retry: %d %s", code, a.Error)
		}
		return nil
	})
	if n := r.rawCount(); n != 4 {
		t.Fatalf("RAW holds %d records, want 4: each once", n)
	}
}
