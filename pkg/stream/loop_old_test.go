package stream

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/testenv"
)

// TestOldConsumeAcksPastAGap: deliveries the loop never receives (here
// fetched by another subscriber, as deliveries in flight are lost when a
// server dies) must not be acknowledged by the next AckAll.
func TestOldConsumeAcksPastAGap(t *testing.T) {
	const n = 300
	r := newLoopRig(t, n)
	c, err := Open(r.ctx, r.js, ConsumerSpec{Stream: "L", Durable: "d", AckAll: true})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	done := make(chan error, 1)
	first := true
	go func() {
		done <- Consume(ctx, c, BatchOptions{Max: 10}, func(ctx context.Context, b []jetstream.Msg) error {
			if first {
				first = false
				<-release
			}
			r.record(b)
			return b[len(b)-1].Ack()
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
	testenv.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		info, err := c.Info(r.ctx)
		if err != nil {
			return err
		}
		if info.NumPending != 0 || info.NumAckPending != 0 {
			return errPending
		}
		return nil
	})
	cancel()
	<-done
	r.checkAcked("d", n)
}

var errPending = errorString("still pending")

type errorString string

func (e errorString) Error() string { return string(e) }

// TestOldConsumeAcrossRestarts restarts the server between batches.
func TestOldConsumeAcrossRestarts(t *testing.T) {
	const n = 3000
	r := newLoopRig(t, n)
	c, err := Open(r.ctx, r.js, ConsumerSpec{Stream: "L", Durable: "d", AckAll: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	done := make(chan error, 1)
	batches := 0
	go func() {
		done <- Consume(ctx, c, BatchOptions{Max: 50}, func(ctx context.Context, b []jetstream.Msg) error {
			batches++
			r.record(b)
			if batches%7 == 3 && batches < 60 {
				meta, _ := b[len(b)-1].Metadata()
				r.crash("d", meta.Sequence.Stream+300)
			}
			return b[len(b)-1].Ack()
		})
	}()
	r.drained("d", n)
	cancel()
	<-done
	r.checkAcked("d", n)
}
