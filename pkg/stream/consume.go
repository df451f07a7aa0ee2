package stream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

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
	// Linger is the longest a batch waits for more messages after its
	// first one arrived, when no more are buffered (default 1ms). It bounds
	// the latency batching adds; with a backlog, batches fill without
	// waiting.
	Linger time.Duration
}

// ErrConsumeStopped is returned (wrapped with the last error the client
// reported) when the client stops delivering while ctx is still live: the
// consumer was deleted, the connection closed, and the like.
var ErrConsumeStopped = errors.New("stream: consume stopped")

// Consume pulls from c and calls h with batches of up to Max messages in
// stream order until ctx ends (returns nil) or h fails (returns its error).
// It keeps one pull subscription open (the client's callback API, which
// costs no timer per message); the client re-issues pulls after a
// reconnect, so a restarted nats-server resumes delivery by itself. A batch
// is whatever is buffered when the previous one is done, topped up for at
// most Linger after its first message.
func Consume(ctx context.Context, c jetstream.Consumer, o BatchOptions, h BatchHandler) error {
	if o.Max <= 0 {
		o.Max = 500
	}
	if o.Linger <= 0 {
		o.Linger = time.Millisecond
	}
	msgs := make(chan jetstream.Msg, 2*o.Max)
	stopped := make(chan struct{})
	var mu sync.Mutex
	var lastErr error
	cc, err := c.Consume(func(m jetstream.Msg) {
		select {
		case msgs <- m:
		case <-stopped: // the loop is gone; the message is redelivered
		}
	},
		jetstream.PullMaxMessages(2*o.Max),
		jetstream.PullHeartbeat(2*time.Second),
		jetstream.PullExpiry(5*time.Second),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			mu.Lock()
			lastErr = err
			mu.Unlock()
		}))
	if err != nil {
		return fmt.Errorf("stream: consume: %w", err)
	}
	defer close(stopped)
	defer cc.Stop()
	closedErr := func() error {
		if ctx.Err() != nil {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		if lastErr != nil {
			return fmt.Errorf("%w: %w", ErrConsumeStopped, lastErr)
		}
		return ErrConsumeStopped
	}
	closed := cc.Closed()
	linger := time.NewTimer(o.Linger)
	linger.Stop()
	defer linger.Stop()
	batch := make([]jetstream.Msg, 0, o.Max)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-closed:
			return closedErr()
		case m := <-msgs:
			batch = append(batch[:0], m)
		}
		linger.Reset(o.Linger)
	fill:
		for len(batch) < o.Max {
			select {
			case m := <-msgs:
				batch = append(batch, m)
				continue
			default:
			}
			select {
			case m := <-msgs:
				batch = append(batch, m)
			case <-linger.C:
				break fill
			case <-ctx.Done():
				return nil
			case <-closed:
				return closedErr()
			}
		}
		linger.Stop()
		if err := h(ctx, batch); err != nil {
			return err
		}
	}
}
