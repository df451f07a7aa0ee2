package validator

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// countingJS counts the stream and consumer look-ups (STREAM.INFO,
// CONSUMER.INFO) made through it.
type countingJS struct {
	jetstream.JetStream
	lookups atomic.Int64
}

func (c *countingJS) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	c.lookups.Add(1)
	return c.JetStream.Stream(ctx, name)
}

func (c *countingJS) Consumer(ctx context.Context, st, name string) (jetstream.Consumer, error) {
	c.lookups.Add(1)
	return c.JetStream.Consumer(ctx, st, name)
}

// TestQuietPartitionsLookSeldom: with nothing coming, a validator's idle
// progress slows down to idleSlow: over 2 s of quiet its four partitions
// ask the broker a few times, not every IdleEvery (5 ms: hundreds). The
// first records after the quiet are still judged, one of them in a
// partition that waits for two quiet partitions of its instance.
func TestQuietPartitionsLookSeldom(t *testing.T) {
	conflictBackendsOn(t, []string{"miniredis"}, 0, func(t *testing.T, e *conflictEnv) {
		e.idleEvery = 5 * time.Millisecond
		counter := &countingJS{}
		e.wrap = func(js jetstream.JetStream) jetstream.JetStream {
			counter.JetStream = js
			return counter
		}
		e.start()
		time.Sleep(idleFastFor + time.Second)
		before := counter.lookups.Load()
		time.Sleep(2 * time.Second)
		quiet := counter.lookups.Load() - before
		// Four partitions looking every idleSlow (500 ms) for 2 s: 16 at
		// most; every IdleEvery it would be hundreds.
		if quiet > 40 {
			t.Fatalf("%d broker look-ups in 2 s of quiet", quiet)
		}
		t.Logf("%d broker look-ups in 2 s of quiet", quiet)
		msgs := []*nats.Msg{
			stream.NewMsg(e.names.Subject(wire.Raw, 0), "a-1", event(t, "a-1", 0, 1)),
			stream.NewMsg(e.names.Subject(wire.Raw, 2), "b-1", event(t, "b-1", 2, 1)),
		}
		e.commitRaw(msgs, 10, false)
		got := e.outcomes(2)
		wantOutcome(t, got, 1, "valid")
		wantOutcome(t, got, 2, "valid")
	})
}
