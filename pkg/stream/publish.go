package stream

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// PublishWindow bounds the asynchronous publishes PublishAll keeps in
// flight.
const PublishWindow = 1024

// PublishAll publishes msgs asynchronously, at most PublishWindow in flight,
// and waits until JetStream has stored every one. Each message should carry
// a Nats-Msg-Id header, so that publishing the same messages again (after a
// crash) stores nothing twice inside the duplicate window. It returns how
// many acks JetStream flagged as duplicates.
func PublishAll(ctx context.Context, js jetstream.JetStream, msgs []*nats.Msg) (dups int, err error) {
	futures := make([]jetstream.PubAckFuture, 0, min(len(msgs), PublishWindow))
	wait := func() error {
		for _, f := range futures {
			select {
			case ack := <-f.Ok():
				if ack.Duplicate {
					dups++
				}
			case err := <-f.Err():
				return fmt.Errorf("stream: publish %s: %w", f.Msg().Subject, err)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		futures = futures[:0]
		return nil
	}
	for _, m := range msgs {
		f, err := js.PublishMsgAsync(m)
		if err != nil {
			return dups, fmt.Errorf("stream: publish %s: %w", m.Subject, err)
		}
		futures = append(futures, f)
		if len(futures) == PublishWindow {
			if err := wait(); err != nil {
				return dups, err
			}
		}
	}
	return dups, wait()
}

// NewMsg builds a message for subject with a Nats-Msg-Id.
func NewMsg(subject, msgID string, data []byte) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Data = data
	m.Header.Set(jetstream.MsgIDHeader, msgID)
	return m
}
