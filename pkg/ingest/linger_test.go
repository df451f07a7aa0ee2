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

// gatedFirst is a JetStream whose first publish waits until open is
// closed: the sender is held in its first run meanwhile.
type gatedFirst struct {
	jetstream.JetStream
	entered chan struct{} // closed when the first publish came
	open    chan struct{}
	once    sync.Once
}

func (g *gatedFirst) PublishMsgAsync(m *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	g.once.Do(func() {
		close(g.entered)
		<-g.open
	})
	return g.JetStream.PublishMsgAsync(m, opts...)
}

// TestRunWaitJoinsProducersComingBackTogether: a chained run is held (at
// most RunWait from its first record) until as many records are queued as
// the last run carried, so that producers who each wait for their answer
// and come back together share one run; runs shrink again when fewer
// come, and a lone producer's record is not held.
func TestRunWaitJoinsProducersComingBackTogether(t *testing.T) {
	const wait = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, url := testenv.NATS(t)
	_, js := dial(t, url, 0)
	ensure(t, ctx, js)
	g := &gatedFirst{JetStream: js, entered: make(chan struct{}), open: make(chan struct{})}
	in := newTestIngester(t, g, func(o *Config) {
		o.RunWait = wait
		o.HeartbeatEvery = 1 << 20
	})
	defer in.Close(ctx)
	recs := lines(fixture(t, 20))
	next := 0
	submit := func() <-chan time.Time {
		acked := make(chan time.Time, 1)
		if _, _, err := in.Submit(recs[next], func(a Ack) {
			if a.Err != nil {
				t.Errorf("record %d: %v", next, a.Err)
			}
			acked <- time.Now()
		}); err != nil {
			t.Fatal(err)
		}
		next++
		return acked
	}
	commits := func() int64 { return in.Stats().Commits }

	// A run of one record, held at the server while four more queue up:
	// they go as the next run, at once.
	first := []<-chan time.Time{submit()}
	<-g.entered
	for range 4 {
		first = append(first, submit())
	}
	close(g.open)
	for _, c := range first {
		<-c
	}
	if got := commits(); got != 2 {
		t.Fatalf("%d commits for 1 record and then 4 queued behind it, want 2", got)
	}

	// Four producers coming back one after the other within the wait: one
	// run, sent when the fourth came, not at the end of the wait.
	began := time.Now()
	var acks []<-chan time.Time
	for range 4 {
		acks = append(acks, submit())
		time.Sleep(50 * time.Millisecond)
	}
	for _, c := range acks {
		if at := <-c; at.Sub(began) >= wait {
			t.Errorf("a record was answered %s after the first of four came: the run waited out RunWait %s", at.Sub(began), wait)
		}
	}
	if got := commits(); got != 3 {
		t.Fatalf("%d commits after four records came within RunWait of each other, want 3 (one run for the four)", got)
	}

	// One producer alone: its first record waits for the others the last
	// run had (RunWait at most), then runs carry one record and go at once.
	lone := time.Now()
	<-submit()
	if took := time.Since(lone); took < wait/2 {
		t.Errorf("the first lone record was answered after %s: it did not wait for the four the last run carried", took)
	}
	for range 3 {
		at := time.Now()
		<-submit()
		if took := time.Since(at); took >= wait/2 {
			t.Errorf("a lone record was answered after %s: held for others (RunWait %s) after a run of one", took, wait)
		}
	}
	if got := commits(); got != 7 {
		t.Fatalf("%d commits, want 7", got)
	}
}
