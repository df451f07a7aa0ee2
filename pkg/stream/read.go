package stream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ReadAll calls fn with every message stored in stream name at the time of
// the call, in order, through an ordered (ephemeral) consumer.
func ReadAll(ctx context.Context, js jetstream.JetStream, name string, fn func(jetstream.Msg) error) error {
	st, err := js.Stream(ctx, name)
	if err != nil {
		return fmt.Errorf("stream: %s: %w", name, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return fmt.Errorf("stream: %s info: %w", name, err)
	}
	last := info.State.LastSeq
	if info.State.Msgs == 0 {
		return nil
	}
	c, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return fmt.Errorf("stream: %s ordered consumer: %w", name, err)
	}
	for {
		batch, err := c.Fetch(1000, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return fmt.Errorf("stream: %s fetch: %w", name, err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			meta, err := m.Metadata()
			if err != nil {
				return err
			}
			if err := fn(m); err != nil {
				return err
			}
			if meta.Sequence.Stream >= last {
				return nil
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return fmt.Errorf("stream: %s fetch: %w", name, err)
		}
		if got == 0 {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("stream: %s: no message after waiting, last sequence %d not reached", name, last)
		}
	}
}
