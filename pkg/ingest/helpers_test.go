package ingest

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/embedded"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/traffic"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// testNow stamps ingested_at in every test, so that the message ids (which
// carry a fingerprint of the content) are the same in every run.
var testNow = time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)

// testPartitions is P in the tests.
const testPartitions = 8

// fixture returns n generated NDJSON records (with retries, disorder, late
// and invalid records).
func fixture(t testing.TB, n int) []byte {
	t.Helper()
	o := traffic.DefaultConfig()
	o.Events = n
	o.Seed = 11
	var buf bytes.Buffer
	if _, err := traffic.Write(&buf, o); err != nil {
		t.Fatalf("gen: %v", err)
	}
	return buf.Bytes()
}

// dial connects to url as receiptctl does (no reconnect buffer, endless
// quick reconnects) unless bufSize is non-zero, which sets the client's
// reconnect buffer (nats.ReconnectBufSize).
func dial(t testing.TB, url string, bufSize int) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	if bufSize == 0 {
		bufSize = -1
	}
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond),
		nats.ReconnectBufSize(bufSize))
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return nc, js
}

// ensure creates the deployment's streams.
func ensure(t testing.TB, ctx context.Context, js jetstream.JetStream) {
	t.Helper()
	if err := stream.Ensure(ctx, js, wire.For(""), stream.Config{Partitions: testPartitions}); err != nil {
		t.Fatalf("ensure: %v", err)
	}
}

// newTestIngester returns an Ingester over js with the test settings.
func newTestIngester(t testing.TB, js jetstream.JetStream, mod func(*Config)) *Ingester {
	t.Helper()
	v, err := contract.NewValidator(contract.Config{})
	if err != nil {
		t.Fatal(err)
	}
	o := Config{Partitions: testPartitions, Validator: v, HeartbeatEvery: 500, EndOfStream: true,
		Now: func() time.Time { return testNow }}
	if mod != nil {
		mod(&o)
	}
	return New(js, o)
}

// rawOrder reads RAW and returns each subject's message ids in stream
// order, and every message's sequence by id.
func rawOrder(t testing.TB, ctx context.Context, js jetstream.JetStream) (map[string][]string, map[string]uint64) {
	t.Helper()
	var order map[string][]string
	var seqs map[string]uint64
	testenv.CheckFor(t, 60*time.Second, 100*time.Millisecond, func() error {
		order, seqs = map[string][]string{}, map[string]uint64{}
		// Each attempt has its own deadline: after a node loss a request
		// sent before the client noticed may never be answered.
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return stream.ReadAll(actx, js, wire.Raw, func(m jetstream.Msg) error {
			meta, err := m.Metadata()
			if err != nil {
				return err
			}
			id := m.Headers().Get(jetstream.MsgIDHeader)
			order[m.Subject()] = append(order[m.Subject()], id)
			seqs[id] = meta.Sequence.Stream
			return nil
		})
	})
	return order, seqs
}

// diffOrder describes the first difference between two per-subject
// orders, or returns "" when they are equal.
func diffOrder(want, got map[string][]string) string {
	subjects := map[string]bool{}
	for s := range want {
		subjects[s] = true
	}
	for s := range got {
		subjects[s] = true
	}
	var names []string
	for s := range subjects {
		names = append(names, s)
	}
	sort.Strings(names)
	for _, s := range names {
		w, g := want[s], got[s]
		for i := 0; i < len(w) || i < len(g); i++ {
			if i >= len(w) || i >= len(g) || w[i] != g[i] {
				at := func(l []string) string {
					if i < len(l) {
						return l[i]
					}
					return "(none)"
				}
				return fmt.Sprintf("%s: %d messages, want %d; first difference at position %d: got %s, want %s",
					s, len(g), len(w), i, at(g), at(w))
			}
		}
	}
	return ""
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// embeddedURL is the client URL of s.
func embeddedURL(s *server.Server) string { return embedded.ClientURL(s) }
