package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/wire"
)

// Ordered creates an ordered consumer on st. done deletes the server-side
// consumer it holds at that moment, so that a finished read leaves nothing
// behind (in the health's backlog, in `nats consumer ls`); without it the
// server removes an idle ordered consumer only after its inactive
// threshold (5 minutes). The consumers an ordered consumer replaced on a
// reset are deleted by nats.go itself.
func Ordered(ctx context.Context, st jetstream.Stream, cfg jetstream.OrderedConsumerConfig) (c jetstream.Consumer, done func(), err error) {
	c, err = st.OrderedConsumer(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	return c, func() {
		ci := c.CachedInfo()
		if ci == nil {
			return // nothing fetched, so nothing created
		}
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = st.DeleteConsumer(dctx, ci.Name) // best effort: the threshold removes it otherwise
	}, nil
}

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
	c, done, err := Ordered(ctx, st, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return fmt.Errorf("stream: %s ordered consumer: %w", name, err)
	}
	defer done()
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

// ReadLate calls fn with each event of generation n's LATE stream, once per
// event id (the first row: a replay routes an id to LATE again).
func ReadLate(ctx context.Context, js jetstream.JetStream, n wire.Names, fn func(wire.LateEvent) error) error {
	seen := map[string]bool{}
	return ReadAll(ctx, js, n.Stream(wire.Late), func(m jetstream.Msg) error {
		var le wire.LateEvent
		if err := json.Unmarshal(m.Data(), &le); err != nil {
			return fmt.Errorf("stream: LATE message: %w", err)
		}
		if seen[le.EventID] {
			return nil
		}
		seen[le.EventID] = true
		return fn(le)
	})
}
