// Package replay re-drives a range of RAW or VALID through the downstream
// services (receiptctl replay). Everything downstream is idempotent, so a
// replay changes no count and no version; it exists to recover outputs a
// downstream bug dropped, and to prove that promise.
package replay

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/ledger"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/validator"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// Range is an inclusive range of stream sequences; To 0 means the stream's
// last sequence when the replay starts.
type Range struct {
	From, To uint64
}

// Stats counts what a replay re-drove.
type Stats struct {
	Read      int    `json:"read"`
	Published int    `json:"published"`
	To        uint64 `json:"to"`
}

// Tag makes replayed messages' Nats-Msg-Id unique, so JetStream's
// duplicate window does not swallow them and the downstream dedup (the
// windower's ledger) is what keeps the counts right.
func Tag() string { return "replay-" + strconv.FormatInt(time.Now().UnixNano(), 36) }

// taggedJS is a JetStream whose message publishes (synchronous and
// asynchronous) get tag appended to their Nats-Msg-Id.
type taggedJS struct {
	jetstream.JetStream
	tag string
}

func (t taggedJS) PublishMsgAsync(m *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	return t.JetStream.PublishMsgAsync(t.tagged(m), opts...)
}

func (t taggedJS) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	return t.JetStream.PublishMsg(ctx, t.tagged(m), opts...)
}

// tagged returns a copy of m whose Nats-Msg-Id has the tag appended; m and
// its header are left as they are, so a caller that publishes m again (a
// retry) sends "id|tag" again, a duplicate JetStream drops, never
// "id|tag|tag". A message without a Nats-Msg-Id is returned unchanged.
func (t taggedJS) tagged(m *nats.Msg) *nats.Msg {
	id := m.Header.Get(jetstream.MsgIDHeader)
	if id == "" {
		return m
	}
	c := &nats.Msg{Subject: m.Subject, Reply: m.Reply, Data: m.Data, Header: make(nats.Header, len(m.Header))}
	for k, v := range m.Header {
		c.Header[k] = append([]string(nil), v...)
	}
	c.Header.Set(jetstream.MsgIDHeader, id+"|"+t.tag)
	return c
}

// read calls fn with batches of the messages of stream name in r, in order.
func read(ctx context.Context, js jetstream.JetStream, name string, r Range, fn func([]jetstream.Msg) error) (uint64, error) {
	st, err := js.Stream(ctx, name)
	if err != nil {
		return 0, fmt.Errorf("replay: stream %s: %w", name, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, err
	}
	to := r.To
	if to == 0 || to > info.State.LastSeq {
		to = info.State.LastSeq
	}
	if r.From < 1 {
		r.From = 1
	}
	if r.From > to {
		return to, fmt.Errorf("replay: --from-seq %d is past the last sequence %d of %s", r.From, to, name)
	}
	if r.From < info.State.FirstSeq {
		return to, fmt.Errorf("replay: %s starts at sequence %d; %d..%d is no longer stored", name, info.State.FirstSeq, r.From, info.State.FirstSeq-1)
	}
	c, done, err := stream.Ordered(ctx, st, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: r.From})
	if err != nil {
		return to, err
	}
	defer done() // a replay leaves no consumer behind
	for {
		b, err := c.Fetch(500, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return to, err
		}
		var batch []jetstream.Msg
		done := false
		for m := range b.Messages() {
			meta, err := m.Metadata()
			if err != nil {
				return to, err
			}
			if meta.Sequence.Stream > to {
				done = true
				break
			}
			batch = append(batch, m)
			if meta.Sequence.Stream == to {
				done = true
			}
		}
		if err := b.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !done {
			return to, err
		}
		if len(batch) > 0 {
			if err := fn(batch); err != nil {
				return to, err
			}
		}
		if done {
			return to, nil
		}
		if len(batch) == 0 {
			return to, fmt.Errorf("replay: %s: no message arrived before sequence %d", name, to)
		}
	}
}

// partitionOf returns the partition number at the end of a subject.
func partitionOf(subject string) (int, bool) {
	i := strings.LastIndexByte(subject, '.')
	p, err := strconv.Atoi(subject[i+1:])
	return p, err == nil
}

// Raw re-drives RAW messages in r through the validator logic (claims in
// store, outputs to VALID and REJECTED with tagged message ids), as the
// live validator would. cfg is the validator configuration of the
// generation to re-drive.
func Raw(ctx context.Context, js jetstream.JetStream, store *ledger.Store, cfg validator.Config, r Range) (Stats, error) {
	var st Stats
	tag := Tag()
	v := validator.New(taggedJS{js, tag}, store, cfg)
	to, err := read(ctx, js, wire.Raw, r, func(batch []jetstream.Msg) error {
		st.Read += len(batch)
		// Group by partition, keeping stream order inside each.
		byP := map[int][]jetstream.Msg{}
		var order []int
		for _, m := range batch {
			p, ok := partitionOf(m.Subject())
			if !ok {
				continue
			}
			if _, seen := byP[p]; !seen {
				order = append(order, p)
			}
			byP[p] = append(byP[p], m)
		}
		for _, p := range order {
			if err := v.Process(ctx, p, byP[p]); err != nil {
				return err
			}
			st.Published += len(byP[p])
		}
		return nil
	})
	st.To = to
	return st, err
}

// Valid re-drives VALID messages in r: they are published again to their
// subjects with their headers and tagged message ids, and the live
// windower applies them (its ledger finds every one a duplicate).
func Valid(ctx context.Context, js jetstream.JetStream, names wire.Names, r Range) (Stats, error) {
	var st Stats
	tag := Tag()
	to, err := read(ctx, js, names.Stream(wire.Valid), r, func(batch []jetstream.Msg) error {
		st.Read += len(batch)
		out := make([]*nats.Msg, 0, len(batch))
		for _, m := range batch {
			msg := nats.NewMsg(m.Subject())
			msg.Data = m.Data()
			for k, v := range m.Headers() {
				msg.Header[k] = append([]string(nil), v...)
			}
			msg.Header.Set(jetstream.MsgIDHeader, m.Headers().Get(jetstream.MsgIDHeader)+"|"+tag)
			out = append(out, msg)
		}
		if _, err := stream.PublishAll(ctx, js, out); err != nil {
			return err
		}
		st.Published += len(out)
		return nil
	})
	st.To = to
	return st, err
}
