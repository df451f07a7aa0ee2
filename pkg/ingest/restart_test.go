package ingest

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/receiptflow/receiptflow/pkg/testenv"
)

// TestOrderAcrossRestarts restarts nats-server three times while a file of
// 30,000 records is ingested and asserts that RAW then holds, per
// partition subject, exactly the message ids of a clean ingest, records
// and heartbeats, in the same order (docs/spec.md §4), once with the
// client's reconnect buffer off (as receiptctl connects) and once with the
// nats.go default buffer.
func TestOrderAcrossRestarts(t *testing.T) {
	data := fixture(t, 30000)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	_, cleanURL := testenv.NATS(t)
	_, cleanJS := dial(t, cleanURL, 0)
	ensure(t, ctx, cleanJS)
	if _, err := File(ctx, newTestIngester(t, cleanJS, nil), bytes.NewReader(data), nil); err != nil {
		t.Fatalf("clean ingest: %v", err)
	}
	want, _ := rawOrder(t, ctx, cleanJS)

	for _, tc := range []struct {
		name    string
		bufSize int
	}{{"no-reconnect-buffer", 0}, {"reconnect-buffer", nats.DefaultReconnectBufSize}} {
		t.Run(tc.name, func(t *testing.T) {
			s, url := testenv.NATS(t)
			_, js := dial(t, url, tc.bufSize)
			ensure(t, ctx, js)
			const restarts = 3
			step := int64(30000 / (restarts + 1))
			var acks atomic.Int64
			kick := make(chan struct{}, 1)
			in := newTestIngester(t, js, func(o *Config) {
				o.OnAck = func(string, uint64, bool) {
					if acks.Add(1)%step == 0 {
						select {
						case kick <- struct{}{}:
						default:
						}
					}
				}
			})
			done := make(chan error, 1)
			go func() {
				_, err := File(ctx, in, bytes.NewReader(data), nil)
				done <- err
			}()
			restarted := 0
			for waiting := true; waiting; {
				select {
				case <-kick:
					if restarted < restarts {
						s = testenv.RestartNATS(t, s)
						restarted++
					}
				case err := <-done:
					if err != nil {
						t.Fatalf("ingest with %d restarts: %v", restarted, err)
					}
					waiting = false
				}
			}
			if restarted < restarts {
				t.Fatalf("ingest ended after %d of %d restarts", restarted, restarts)
			}
			got, _ := rawOrder(t, ctx, js)
			if d := diffOrder(want, got); d != "" {
				t.Fatalf("RAW after %d restarts differs from a clean ingest: %s", restarted, d)
			}
		})
	}
}
