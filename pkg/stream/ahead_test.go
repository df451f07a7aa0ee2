package stream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/testenv"
)

// TestConsumeAheadRunsBeforeTheHandlerInOrder: with Ahead, every batch is
// handed to Ahead before the handler gets it, the handler gets every
// message once and in order, Ahead reaches the next batch while the
// handler still holds the one before, and all is acknowledged in the end.
func TestConsumeAheadRunsBeforeTheHandlerInOrder(t *testing.T) {
	const n = 3000
	js, c := consumeEnv(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var (
		mu       sync.Mutex
		aheadOf  = map[string]bool{} // first value of each batch Ahead saw
		overlaps int
		handling bool
	)
	key := func(b []jetstream.Msg) string { return string(b[0].Data()) + "-" + strconv.Itoa(len(b)) }
	next := 0
	err := Consume(ctx, js, c, BatchConfig{Max: 100,
		Ahead: func(_ context.Context, b []jetstream.Msg) {
			mu.Lock()
			defer mu.Unlock()
			aheadOf[key(b)] = true
			if handling {
				overlaps++
			}
		}}, func(ctx context.Context, b []jetstream.Msg) (Outcome, error) {
		mu.Lock()
		seen := aheadOf[key(b)]
		handling = true
		mu.Unlock()
		if !seen {
			t.Errorf("batch starting at %s reached the handler before Ahead", b[0].Data())
		}
		time.Sleep(2 * time.Millisecond) // let Ahead get ahead
		for _, m := range b {
			if v, _ := strconv.Atoi(string(m.Data())); v != next {
				t.Fatalf("handler got %d, want %d", v, next)
			}
			next++
		}
		mu.Lock()
		handling = false
		mu.Unlock()
		if next == n {
			cancel()
		}
		return Outcome{}, nil
	})
	if err != nil {
		t.Fatalf("Consume = %v", err)
	}
	if next != n {
		t.Fatalf("handled %d of %d", next, n)
	}
	if overlaps == 0 {
		t.Errorf("Ahead never ran while the handler held a batch")
	}
	// Acks are sent without waiting for the server: look until it has them.
	testenv.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		cons, err := js.Consumer(context.Background(), c.Stream, c.Durable)
		if err != nil {
			return err
		}
		if ci := cons.CachedInfo(); ci.AckFloor.Stream != n || ci.NumAckPending != 0 {
			return fmt.Errorf("ack floor %d, ack pending %d; want %d, 0", ci.AckFloor.Stream, ci.NumAckPending, n)
		}
		return nil
	})
}

// TestConsumeAheadHandlerFailureStopsEverything: a handler failure ends
// Consume with it; nothing after the failed batch is acknowledged, even
// what Ahead already saw.
func TestConsumeAheadHandlerFailureStopsEverything(t *testing.T) {
	js, c := consumeEnv(t, 1000)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	boom := errors.New("boom")
	handled := 0
	err := Consume(ctx, js, c, BatchConfig{Max: 100, Ahead: func(context.Context, []jetstream.Msg) {}},
		func(ctx context.Context, b []jetstream.Msg) (Outcome, error) {
			handled += len(b)
			if handled > 300 {
				return Outcome{}, boom
			}
			return Outcome{}, nil
		})
	if !errors.Is(err, boom) {
		t.Fatalf("Consume = %v, want the handler's error", err)
	}
	cons, err := js.Consumer(context.Background(), c.Stream, c.Durable)
	if err != nil {
		t.Fatal(err)
	}
	if f := cons.CachedInfo().AckFloor.Stream; f > 300 || f == 0 {
		t.Fatalf("ack floor %d after a failure past message 300", f)
	}
}

// TestConsumeAheadNeedsAckAll: Ahead on an explicit-ack consumer is refused.
func TestConsumeAheadNeedsAckAll(t *testing.T) {
	js, c := consumeEnv(t, 1)
	c.AckAll = false
	err := Consume(context.Background(), js, c, BatchConfig{Ahead: func(context.Context, []jetstream.Msg) {}},
		func(context.Context, []jetstream.Msg) (Outcome, error) { return Outcome{}, nil })
	if err == nil {
		t.Fatal("Ahead with an explicit-ack consumer was accepted")
	}
}
