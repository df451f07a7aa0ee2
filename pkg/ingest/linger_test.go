package ingest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/testenv"
)

// slowFirst is a JetStream whose first publish reaches the server only
// after a delay (a slow commit), and which notes when each message id was
// handed to it. It shows RAW with three replicas, so that the Ingester
// writes atomic batches (the ones Linger fills) on the one test server.
type slowFirst struct {
	jetstream.JetStream
	delay time.Duration

	mu   sync.Mutex
	sent map[string]time.Time
}

func (s *slowFirst) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	st, err := s.JetStream.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	return threeReplicas{st}, nil
}

// threeReplicas is a Stream whose cached info says three replicas.
type threeReplicas struct{ jetstream.Stream }

func (s threeReplicas) CachedInfo() *jetstream.StreamInfo {
	info := *s.Stream.CachedInfo()
	info.Config.Replicas = 3
	return &info
}

func (s *slowFirst) PublishMsgAsync(m *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	s.mu.Lock()
	first := len(s.sent) == 0
	s.sent[m.Header.Get(jetstream.MsgIDHeader)] = time.Now()
	s.mu.Unlock()
	if first {
		time.Sleep(s.delay)
	}
	return s.JetStream.PublishMsgAsync(m, opts...)
}

// TestLingerCountsFromTheOldestQueuedRecord: Linger bounds how long a
// record waits for its batch to fill, counted from when it was queued. A
// record queued while the batch before it was being stored, and already
// older than Linger when that batch is confirmed, is sent at once, not
// after a further Linger: the sender's wait must not add to the commit's.
func TestLingerCountsFromTheOldestQueuedRecord(t *testing.T) {
	const linger = time.Second
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, url := testenv.NATS(t)
	_, js := dial(t, url, 0)
	ensure(t, ctx, js)
	slow := &slowFirst{JetStream: js, delay: 2 * linger, sent: map[string]time.Time{}}
	acked := make(chan time.Time, 2)
	in := newTestIngester(t, slow, func(o *Config) {
		o.Linger = linger
		o.OnAck = func(string, uint64, bool) { acked <- time.Now() }
	})
	defer in.Close(ctx)
	defer func() {
		if in.chained() {
			t.Error("the Ingester chained its runs: Linger is not used")
		}
	}()
	recs := lines(fixture(t, 50))
	if err := in.Publish(ctx, recs[0]); err != nil {
		t.Fatal(err)
	}
	// The first record lingers, then its publish takes 2×linger; the
	// second is queued in the middle of that publish.
	time.Sleep(linger + linger/2)
	if err := in.Publish(ctx, recs[1]); err != nil {
		t.Fatal(err)
	}
	first := <-acked
	second := <-acked
	// Queued 1.5 linger before the first batch was confirmed, the second
	// record goes at once: its store takes one round trip on loopback.
	// Lingering again would put it a whole linger after the first.
	if gap := second.Sub(first); gap >= linger/2 {
		t.Fatalf("the second record was stored %s after the first: it lingered again after waiting %s in the queue (linger %s)",
			gap.Round(time.Millisecond), (linger + linger/2).Round(time.Millisecond), linger)
	}
}
