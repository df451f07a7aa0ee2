package replay

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/testenv"
)

// TestTaggedPublishRetryKeepsOneTag publishes the same message twice
// through taggedJS, as a caller retrying a failed publish does, on both the
// synchronous and the asynchronous path. Each publish must carry "id|tag"
// (so the retry is a JetStream duplicate of the first), and the caller's
// header must still carry "id".
func TestTaggedPublishRetryKeepsOneTag(t *testing.T) {
	_, url := testenv.NATS(t)
	js := testenv.JetStream(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}})
	if err != nil {
		t.Fatal(err)
	}
	tj := taggedJS{js, "tag"}

	for _, path := range []struct {
		name    string
		publish func(*nats.Msg) (*jetstream.PubAck, error)
	}{
		{"sync", func(m *nats.Msg) (*jetstream.PubAck, error) { return tj.PublishMsg(ctx, m) }},
		{"async", func(m *nats.Msg) (*jetstream.PubAck, error) {
			f, err := tj.PublishMsgAsync(m)
			if err != nil {
				return nil, err
			}
			select {
			case a := <-f.Ok():
				return a, nil
			case err := <-f.Err():
				return nil, err
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}},
	} {
		t.Run(path.name, func(t *testing.T) {
			m := nats.NewMsg("t." + path.name)
			m.Data = []byte("x")
			m.Header.Set(jetstream.MsgIDHeader, path.name)
			var acks []*jetstream.PubAck
			for range 2 {
				a, err := path.publish(m)
				if err != nil {
					t.Fatal(err)
				}
				acks = append(acks, a)
			}
			if got := m.Header.Get(jetstream.MsgIDHeader); got != path.name {
				t.Errorf("caller's %s after two publishes = %q, want %q", jetstream.MsgIDHeader, got, path.name)
			}
			if !acks[1].Duplicate || acks[1].Sequence != acks[0].Sequence {
				t.Errorf("retried publish stored a second message (seq %d after %d, duplicate %v): its %s was not %q",
					acks[1].Sequence, acks[0].Sequence, acks[1].Duplicate, jetstream.MsgIDHeader, path.name+"|tag")
				if sm, err := st.GetMsg(ctx, acks[1].Sequence); err == nil {
					t.Errorf("retried publish carried %s %q", jetstream.MsgIDHeader, sm.Header.Get(jetstream.MsgIDHeader))
				}
			}
			sm, err := st.GetMsg(ctx, acks[0].Sequence)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := sm.Header.Get(jetstream.MsgIDHeader), path.name+"|tag"; got != want {
				t.Errorf("stored %s = %q, want %q", jetstream.MsgIDHeader, got, want)
			}
		})
	}
}
