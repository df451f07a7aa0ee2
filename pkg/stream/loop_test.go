package stream

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

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
	proxy *cutProxy
	js  jetstream.JetStream

	mu        sync.Mutex
	processed map[uint64]int // stream sequence -> times handled
}

func newLoopRig(t *testing.T, n int) *loopRig {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	srv, url := testenv.NATS(t)
	proxy := newCutProxy(t, strings.TrimPrefix(url, "nats://"))
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
// processing is then lost for good).
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
		if info := c.CachedInfo(); info.NumPending != 0 || info.NumAckPending != 0 {
			return fmt.Errorf("%d of %d processed; consumer pending %d, ack pending %d", r.distinct(), n, info.NumPending, info.NumAckPending)
		}
		return nil
	})
}
