package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/internal/streamtest"
	"github.com/receiptflow/receiptflow/pkg/testenv"
)

// loopRig is a stream "L" (subject l.x) with n messages on a restartable
// in-process server, and a client that reconnects for ever.
type loopRig struct {
	t   *testing.T
	ctx context.Context
	srv *server.Server
	url string
	// proxy is between the loop's client and the server.
	proxy *streamtest.CutProxy
	js    jetstream.JetStream

	mu        sync.Mutex
	processed map[uint64]int // stream sequence -> times handled
}

func newLoopRig(t *testing.T, n int) *loopRig {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	srv, url := testenv.NATS(t)
	proxy := streamtest.NewCutProxy(t, strings.TrimPrefix(url, "nats://"))
	nc, err := nats.Connect(proxy.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "L", Subjects: []string{"l.*"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	r := &loopRig{t: t, ctx: ctx, srv: srv, url: url, proxy: proxy, js: js, processed: map[uint64]int{}}
	r.publish(n)
	return r
}

func (r *loopRig) publish(n int) {
	r.t.Helper()
	for i := 0; i < n; i++ {
		if _, err := r.js.PublishAsync("l.x", []byte(strconv.Itoa(i))); err != nil {
			r.t.Fatal(err)
		}
	}
	select {
	case <-r.js.PublishAsyncComplete():
	case <-r.ctx.Done():
		r.t.Fatal("publish timed out")
	}
}

// record notes that the handler processed batch.
func (r *loopRig) record(batch []jetstream.Msg) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range batch {
		meta, err := m.Metadata()
		if err != nil {
			r.t.Error(err)
			continue
		}
		r.processed[meta.Sequence.Stream]++
	}
}

func (r *loopRig) distinct() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.processed)
}

// checkAcked fails the test if the consumer's ack floor covers a sequence
// the handler never processed, or if a message up to last was never
// processed.
func (r *loopRig) checkAcked(durable string, last uint64) {
	r.t.Helper()
	var info *jetstream.ConsumerInfo
	testenv.CheckFor(r.t, 20*time.Second, 50*time.Millisecond, func() error {
		ictx, cancel := context.WithTimeout(r.ctx, time.Second)
		defer cancel()
		c, err := r.js.Consumer(ictx, "L", durable)
		if err != nil {
			return err
		}
		info = c.CachedInfo()
		return nil
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	for seq := uint64(1); seq <= info.AckFloor.Stream; seq++ {
		if r.processed[seq] == 0 {
			r.t.Fatalf("stream sequence %d is acknowledged (ack floor %d) but was never processed (%d of %d processed)",
				seq, info.AckFloor.Stream, len(r.processed), last)
		}
	}
	for seq := uint64(1); seq <= last; seq++ {
		if r.processed[seq] == 0 {
			r.t.Fatalf("stream sequence %d was never processed", seq)
		}
	}
}

// crash makes the server lose deliveries in flight and restarts it: the
// proxy drops what the server sends from now on, the server is given a
// bounded while to deliver more than the client can hold (it records them
// as delivered), then it is restarted on its store and every client
// connection is cut. Called from a handler, it runs between fetches.
func (r *loopRig) crash(durable string, past uint64) {
	r.proxy.Freeze()
	direct := testenv.JetStream(r.t, r.url)
	for i := 0; i < 100; i++ {
		ictx, cancel := context.WithTimeout(r.ctx, time.Second)
		c, err := direct.Consumer(ictx, "L", durable)
		cancel()
		if err == nil && c.CachedInfo().Delivered.Stream > past {
			break
		}
		time.Sleep(10 * time.Millisecond) // bounded: shaping the fault, not waiting for a result
	}
	r.srv = testenv.RestartNATS(r.t, r.srv)
	r.proxy.Cut()
}

// drained waits until every message was processed or the consumer has
// nothing left to deliver or redeliver (what it acknowledged past without
// processing is then lost for good). "Nothing left" includes having
// delivered the last message. Without it a run under load once ended
// before its third batch (0 restarts, nothing lost): the consumer read
// no pending messages before its first delivery — the likely cause, a
// consumer looked up while the server had not yet counted its pending.
func (r *loopRig) drained(durable string, n int) {
	r.t.Helper()
	direct := testenv.JetStream(r.t, r.url)
	testenv.CheckFor(r.t, 60*time.Second, 20*time.Millisecond, func() error {
		if r.distinct() >= n {
			return nil
		}
		ictx, cancel := context.WithTimeout(r.ctx, time.Second)
		defer cancel()
		c, err := direct.Consumer(ictx, "L", durable)
		if err != nil {
			return err
		}
		if info := c.CachedInfo(); info.NumPending != 0 || info.NumAckPending != 0 || info.Delivered.Stream < uint64(n) {
			return fmt.Errorf("%d of %d processed; consumer pending %d, ack pending %d, delivered up to %d",
				r.distinct(), n, info.NumPending, info.NumAckPending, info.Delivered.Stream)
		}
		return nil
	})
}

// TestConsumeNeverAcksPastAGap: deliveries the loop never receives (here
// taken by another reader of the durable, as deliveries in flight are lost
// when a server dies) are not acknowledged by the next AckAll: the loop
// sees the consumer sequence jump, acknowledges only what it processed,
// and opens the consumer again at its checkpoint, so every message is
// processed. Before the loop checked sequences, the ack floor reached 300
// with 5 messages never processed.
func TestConsumeNeverAcksPastAGap(t *testing.T) {
	const n = 300
	r := newLoopRig(t, n)
	spec := ConsumerSpec{Stream: "L", Durable: "d", AckAll: true}
	if _, err := Open(r.ctx, r.js, spec); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	done := make(chan error, 1)
	first := true
	go func() {
		done <- Consume(ctx, r.js, spec, BatchConfig{Max: 10, RetryInitial: 10 * time.Millisecond}, func(ctx context.Context, b []jetstream.Msg) (Outcome, error) {
			if first {
				first = false
				<-release
			}
			r.record(b)
			return Outcome{}, nil
		})
	}()
	// Another reader takes some deliveries while the loop is busy.
	thief := testenv.JetStream(t, r.url)
	tc, err := thief.Consumer(r.ctx, "L", "d")
	if err != nil {
		t.Fatal(err)
	}
	stolen := 0
	for i := 0; i < 20 && stolen == 0; i++ {
		b, err := tc.Fetch(5, jetstream.FetchMaxWait(500*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		for range b.Messages() {
			stolen++
		}
	}
	if stolen == 0 {
		t.Fatal("no delivery taken")
	}
	close(release)
	r.drained("d", n)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	r.checkAcked("d", n)
}

// TestConsumeAcksOnlyProcessedAcrossServerRestarts restarts the server
// nine times between batches, each time losing the deliveries it had in
// flight (the proxy drops them, as a SIGKILL does) while the loop holds
// unacknowledged messages: the acknowledged sequences stay a subset of the
// processed ones and every message is processed at least once. Before the
// loop checked sequences, 408 of 3000 messages were acknowledged without
// being processed.
func TestConsumeAcksOnlyProcessedAcrossServerRestarts(t *testing.T) {
	const n = 3000
	r := newLoopRig(t, n)
	spec := ConsumerSpec{Stream: "L", Durable: "d", AckAll: true}
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	done := make(chan error, 1)
	batches, crashes := 0, 0
	resets := &resetCounter{}
	go func() {
		done <- Consume(ctx, r.js, spec, BatchConfig{Max: 50, RetryInitial: 10 * time.Millisecond, Logger: resets.logger()}, func(ctx context.Context, b []jetstream.Msg) (Outcome, error) {
			batches++
			r.record(b)
			if batches%7 == 3 && crashes < 9 {
				crashes++
				meta, _ := b[len(b)-1].Metadata()
				r.crash("d", meta.Sequence.Stream+300)
			}
			return Outcome{}, nil
		})
	}()
	r.drained("d", n)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if crashes < 9 {
		t.Fatalf("%d restarts, want 9", crashes)
	}
	if resets.n.Load() == 0 {
		t.Error("no gap seen: the restarts lost no delivery, the test shows nothing")
	}
	r.checkAcked("d", n)
}

// resetCounter counts the loop's "consumer reset" log records.
type resetCounter struct{ n atomic.Int64 }

func (c *resetCounter) logger() *slog.Logger { return slog.New(c) }

func (c *resetCounter) Enabled(context.Context, slog.Level) bool { return true }

func (c *resetCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "consumer reset" {
		c.n.Add(1)
	}
	return nil
}

func (c *resetCounter) WithAttrs([]slog.Attr) slog.Handler { return c }

func (c *resetCounter) WithGroup(string) slog.Handler { return c }

// TestConsumeRecreatesAConsumerTheBrokerLost: a broker that comes back
// without the durable (its directory lost in a crash: nats-server skips a
// consumer whose metafile is missing) sends no "consumer deleted" to the
// pull in flight; the pulls only find no responder and the heartbeats stop.
// The loop must see that the consumer is gone and create it again at its
// checkpoint, so the messages published after the restart are processed.
// Before the loop looked, it waited for ever (a fault test once drained
// every consumer but the lost one for 4 minutes).
func TestConsumeRecreatesAConsumerTheBrokerLost(t *testing.T) {
	const n = 200
	r := newLoopRig(t, n)
	spec := ConsumerSpec{Stream: "L", Durable: "d", AckAll: true}
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	done := make(chan error, 1)
	resets := &resetCounter{}
	go func() {
		done <- Consume(ctx, r.js, spec, BatchConfig{Max: 50, RetryInitial: 10 * time.Millisecond, Logger: resets.logger()}, func(ctx context.Context, b []jetstream.Msg) (Outcome, error) {
			r.record(b)
			return Outcome{}, nil
		})
	}()
	r.drained("d", n)
	store := r.srv.JetStreamConfig().StoreDir
	obs, err := filepath.Glob(filepath.Join(store, "*", "streams", "L", "obs", "d"))
	if err != nil || len(obs) != 1 {
		t.Fatalf("the consumer's directory under %s: %v %v", store, obs, err)
	}
	r.srv.Shutdown()
	r.srv.WaitForShutdown()
	if err := os.RemoveAll(obs[0]); err != nil {
		t.Fatal(err)
	}
	r.srv = testenv.RestartNATS(t, r.srv)
	direct := testenv.JetStream(t, r.url)
	if _, err := direct.Consumer(r.ctx, "L", "d"); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Fatalf("the restarted broker still has the consumer (%v): the test shows nothing", err)
	}
	r.publish(n)
	r.drained("d", 2*n)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	r.checkAcked("d", 2*n)
	if resets.n.Load() == 0 {
		t.Error("the consumer came back without a reset of the loop")
	}
}

// TestSessionRefusesAConsumerPastTheCheckpoint hands a delivery session a
// consumer that would deliver first a message after the loop's
// checkpoint: the broker's durable is not the one the loop opened. The
// session must end with a reset before the handler sees anything; were
// it to hand the deliveries on, the first ack would acknowledge the
// messages between the checkpoint and them, which nothing processed (a
// fault test lost a partition's 680 events this way: a SIGKILL had cut a
// consumer delete short, and the create that followed took up the
// deleted consumer's leftover state, 792 deliveries unacknowledged).
//   - own checkpoint: the loop processed through 40; the consumer starts
//     at 61.
//   - ack floor: a loop that has processed nothing yet resumes after the
//     consumer's ack floor (20), but the consumer delivered through 60
//     and waits for those acks.
func TestSessionRefusesAConsumerPastTheCheckpoint(t *testing.T) {
	for _, tc := range []struct {
		name      string
		processed uint64
		prepare   func(r *loopRig) jetstream.Consumer
	}{
		{"own checkpoint", 40, func(r *loopRig) jetstream.Consumer {
			c, err := r.js.CreateConsumer(r.ctx, "L", jetstream.ConsumerConfig{Durable: "d", FilterSubject: "l.x",
				AckPolicy: jetstream.AckAllPolicy, DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: 61})
			if err != nil {
				r.t.Fatal(err)
			}
			return c
		}},
		{"ack floor", 0, func(r *loopRig) jetstream.Consumer {
			c, err := r.js.CreateConsumer(r.ctx, "L", jetstream.ConsumerConfig{Durable: "d", FilterSubject: "l.x",
				AckPolicy: jetstream.AckAllPolicy})
			if err != nil {
				r.t.Fatal(err)
			}
			b, err := c.Fetch(60, jetstream.FetchMaxWait(5*time.Second))
			if err != nil {
				r.t.Fatal(err)
			}
			n := 0
			for m := range b.Messages() {
				if n++; n == 20 {
					if err := m.DoubleAck(r.ctx); err != nil {
						r.t.Fatal(err)
					}
				}
			}
			info, err := c.Info(r.ctx)
			if err != nil {
				r.t.Fatal(err)
			}
			if info.AckFloor.Stream != 20 || info.Delivered.Stream != 60 {
				r.t.Fatalf("the consumer acked through %d and delivered through %d, want 20 and 60: the test shows nothing",
					info.AckFloor.Stream, info.Delivered.Stream)
			}
			return c
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newLoopRig(t, 100)
			c := tc.prepare(r)
			spec := ConsumerSpec{Stream: "L", Durable: "d", Filter: "l.x", AckAll: true}
			var handled atomic.Int64
			o := BatchConfig{Max: 10}.withDefaults()
			l := &loop{js: r.js, spec: spec, o: o, retry: o.backoff(), processed: tc.processed,
				h: func(_ context.Context, b []jetstream.Msg) (Outcome, error) {
					handled.Add(int64(len(b)))
					return Outcome{}, nil
				}}
			ctx, cancel := context.WithTimeout(r.ctx, 3*time.Second)
			defer cancel()
			err := l.session(ctx, c)
			var reset *errReset
			if !errors.As(err, &reset) {
				t.Fatalf("the session ended with %v and handled %d messages from stream sequence 61 (processed now %d): the messages after the checkpoint up to 60 would be acknowledged unprocessed",
					err, handled.Load(), l.processed)
			}
			if n := handled.Load(); n != 0 || l.processed != tc.processed {
				t.Fatalf("the session reset (%v) but handled %d messages first (processed %d)", err, n, l.processed)
			}
			t.Logf("reset: %v", reset)
		})
	}
}

// TestSessionAcceptsAConsumerPastMessagesTheStreamDropped: a consumer may
// start after the checkpoint when the stream no longer holds the messages
// in between (retention moved its first sequence): nothing is skipped,
// and a reset would only recreate the same consumer for ever.
func TestSessionAcceptsAConsumerPastMessagesTheStreamDropped(t *testing.T) {
	r := newLoopRig(t, 100) // sequences 1..100
	// Lowering the limit drops 1..50 at once. (Deleting the stream and
	// creating it again raced nats-server: deleting a server's only stream
	// removes the emptied streams directory in the background, and a create
	// in between failed with "error creating store for stream", 1 in ~300.)
	if _, err := r.js.UpdateStream(r.ctx, jetstream.StreamConfig{Name: "L", Subjects: []string{"l.*"}, Storage: jetstream.FileStorage, MaxMsgs: 50}); err != nil {
		t.Fatal(err)
	}
	info, err := r.js.Stream(r.ctx, "L")
	if err != nil {
		t.Fatal(err)
	}
	if st := info.CachedInfo().State; st.FirstSeq != 51 || st.LastSeq != 100 {
		t.Fatalf("after lowering MaxMsgs the stream holds %d..%d, want 51..100", st.FirstSeq, st.LastSeq)
	}
	spec := ConsumerSpec{Stream: "L", Durable: "d", Filter: "l.x", AckAll: true}
	c, err := Open(r.ctx, r.js, ConsumerSpec{Stream: "L", Durable: "d", Filter: "l.x", AckAll: true, StartSeq: 11})
	if err != nil {
		t.Fatal(err)
	}
	if d := c.CachedInfo().Delivered.Stream; d != 50 {
		t.Fatalf("the consumer created at 11 reports delivered stream sequence %d, want 50 (the stream's first is 51): the test shows nothing", d)
	}
	var handled atomic.Int64
	o := BatchConfig{Max: 10}.withDefaults()
	l := &loop{js: r.js, spec: spec, o: o, retry: o.backoff(), processed: 10,
		h: func(_ context.Context, b []jetstream.Msg) (Outcome, error) {
			handled.Add(int64(len(b)))
			return Outcome{}, nil
		}}
	ctx, cancel := context.WithTimeout(r.ctx, 2*time.Second)
	defer cancel()
	if err := l.session(ctx, c); err != nil {
		t.Fatalf("the session ended with %v after %d messages", err, handled.Load())
	}
	if n := handled.Load(); n != 50 || l.processed != 100 {
		t.Fatalf("handled %d messages, processed through %d; want 50 through 100", n, l.processed)
	}
}
