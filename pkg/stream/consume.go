package stream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// BatchHandler processes one batch of messages in stream order. It owns the
// acknowledgement: returning nil means the batch is durably handled and
// acknowledged. An error stops the loop without acking.
type BatchHandler func(ctx context.Context, batch []jetstream.Msg) error

// BatchOptions tune Consume.
type BatchOptions struct {
	// Max is the largest batch (default 500).
	Max int
	// Linger is how long to wait for more messages once one has arrived
	// (default 1ms). Zero-cost when the backlog is full.
	Linger time.Duration
}

// Consume pulls from c and calls h with batches of up to Max messages in
// stream order until ctx ends (returns nil) or h fails (returns its error).
// It keeps one pull subscription open; the client re-issues pulls after a
// reconnect, so a restarted nats-server resumes delivery by itself.
func Consume(ctx context.Context, c jetstream.Consumer, o BatchOptions, h BatchHandler) error {
	if o.Max <= 0 {
		o.Max = 500
	}
	if o.Linger <= 0 {
		o.Linger = time.Millisecond
	}
	it, err := c.Messages(jetstream.PullMaxMessages(2*o.Max), jetstream.PullHeartbeat(2*time.Second), jetstream.PullExpiry(5*time.Second))
	if err != nil {
		return fmt.Errorf("stream: consume: %w", err)
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	defer it.Stop()
	batch := make([]jetstream.Msg, 0, o.Max)
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("stream: next: %w", err)
		}
		batch = append(batch[:0], m)
		for len(batch) < o.Max {
			m, err := it.Next(jetstream.NextMaxWait(o.Linger))
			if err != nil {
				if errors.Is(err, nats.ErrTimeout) {
					break
				}
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("stream: next: %w", err)
			}
			batch = append(batch, m)
		}
		if err := h(ctx, batch); err != nil {
			return err
		}
	}
}
