package publisher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// The rejected-by-reason tally (wire.Rejections under wire.RejectedKey) is
// counted incrementally: each tick reads the REJECTED messages after the
// tally's Through (headers only, at most rejectedBatch of them) and writes
// the new tally by revision compare-and-set. A restarted publisher, or a
// second one, goes on from the stored Through, so no message is counted
// twice or missed; a lost compare-and-set re-reads the stored tally.

// rejectedBatch bounds how many REJECTED messages one tick counts; the
// rest are counted by the next ticks, so a burst of rejections never holds
// a health report back.
var rejectedBatch uint64 = 10_000 // a variable for the tests

// unknownReason is the tally's key for a REJECTED message without a reason
// header (the validator always writes one).
const unknownReason = "unknown"

// rejectedTally is a publisher's copy of the stored tally.
type rejectedTally struct {
	mu    sync.Mutex
	cur   wire.Rejections
	rev   uint64 // the revision cur was read or written at; 0: the key is absent
	known bool   // cur and rev were read from the bucket
	// counted is when cur last reached REJECTED's last message.
	counted time.Time
}

// countRejected brings the tally under wire.RejectedKey up to the
// generation's REJECTED stream (bounded by rejectedBatch) and returns it.
// Safe to call twice (the second finds nothing new) and from several
// publishers at once (compare-and-set).
func (s *Service) countRejected(ctx context.Context) (*wire.Rejections, error) {
	t := &s.rejected
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.known && s.settled(t.counted) {
		return cloneRejections(t.cur), nil // nothing in flight: REJECTED did not grow
	}
	for attempt := 0; attempt < 3; attempt++ {
		if !t.known {
			if err := t.load(ctx, s.kv); err != nil {
				return nil, err
			}
		}
		next, caughtUp, err := s.advanceRejected(ctx, t.cur)
		if err != nil {
			return nil, err
		}
		if reflect.DeepEqual(next, t.cur) {
			if caughtUp {
				t.counted = time.Now()
			}
			return cloneRejections(t.cur), nil
		}
		body, err := json.Marshal(next)
		if err != nil {
			return nil, err
		}
		rev, err := s.putCAS(ctx, wire.RejectedKey, body, t.rev, t.rev != 0)
		if revisionConflict(err) {
			s.m.conflicts.Inc()
			t.known = false // another publisher counted: go on from its tally
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("publisher: put %s: %w", wire.RejectedKey, err)
		}
		t.cur, t.rev = next, rev
		if caughtUp {
			t.counted = time.Now()
		}
		return cloneRejections(next), nil
	}
	return nil, fmt.Errorf("publisher: %s: lost the compare-and-set 3 times in a row", wire.RejectedKey)
}

// load reads the stored tally (an empty one when the key is absent).
func (t *rejectedTally) load(ctx context.Context, kv jetstream.KeyValue) error {
	t.cur, t.rev = wire.Rejections{ByReason: map[string]uint64{}}, 0
	e, err := kv.Get(ctx, wire.RejectedKey)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
	case err != nil:
		return fmt.Errorf("publisher: get %s: %w", wire.RejectedKey, err)
	default:
		if err := json.Unmarshal(e.Value(), &t.cur); err != nil {
			return fmt.Errorf("publisher: stored %s is not a tally: %w", wire.RejectedKey, err)
		}
		if t.cur.ByReason == nil {
			t.cur.ByReason = map[string]uint64{}
		}
		t.rev = e.Revision()
	}
	t.known = true
	return nil
}

func cloneRejections(r wire.Rejections) *wire.Rejections {
	r.ByReason = maps.Clone(r.ByReason)
	return &r
}

// advanceRejected returns cur with the REJECTED messages after cur.Through
// counted, up to rejectedBatch of them. Messages that left the stream
// before they were counted are Expired; a stream that went back (it was
// deleted and created again) is counted again from its start.
func (s *Service) advanceRejected(ctx context.Context, cur wire.Rejections) (next wire.Rejections, caughtUp bool, err error) {
	name := s.cfg.Names.Stream(wire.Rejected)
	st, err := s.stream(ctx, name)
	if err != nil {
		return cur, false, fmt.Errorf("publisher: stream %s: %w", name, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		s.forget(name)
		return cur, false, fmt.Errorf("publisher: stream %s info: %w", name, err)
	}
	first, last := info.State.FirstSeq, info.State.LastSeq
	next = *cloneRejections(cur)
	if last < next.Through {
		next = wire.Rejections{ByReason: map[string]uint64{}}
	}
	if last == next.Through {
		return next, true, nil
	}
	if from := next.Through + 1; first > from {
		next.Expired += first - from
		next.Through = first - 1
	}
	if next.Through >= last {
		return next, true, nil
	}
	stop := min(last, next.Through+rejectedBatch)
	c, done, err := stream.Ordered(ctx, st, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: next.Through + 1, HeadersOnly: true,
	})
	if err != nil {
		return cur, false, fmt.Errorf("publisher: read %s: %w", name, err)
	}
	defer done()
	for next.Through < stop {
		got, drained, err := fetchRejected(c, int(min(stop-next.Through, 500)), &next)
		if err != nil || got == 0 {
			// What was counted stands; the rest waits for the next tick.
			break
		}
		if drained {
			// Nothing is stored after the last message counted: the
			// ones up to stop were deleted.
			next.Through = max(next.Through, stop)
		}
	}
	return next, next.Through >= last, nil
}

// fetchRejected counts one fetch of at most n messages into r. drained:
// the stream held nothing after the last message counted.
func fetchRejected(c jetstream.Consumer, n int, r *wire.Rejections) (got int, drained bool, err error) {
	// No wait: the messages asked for are stored (unless deleted), and a
	// wait for deleted ones would hold the health report back.
	batch, err := c.FetchNoWait(n)
	if err != nil {
		return 0, false, err
	}
	for m := range batch.Messages() {
		meta, err := m.Metadata()
		if err != nil {
			continue
		}
		if seq := meta.Sequence.Stream; seq > r.Through {
			reason := m.Headers().Get(wire.HdrReason)
			if reason == "" {
				reason = unknownReason
			}
			r.ByReason[reason]++
			r.Total++
			r.Through = seq
			got++
			drained = meta.NumPending == 0
		}
	}
	if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
		return got, drained, err
	}
	return got, drained, nil
}

// lastRejected is the tally as this publisher last knew it (nil: none).
func (s *Service) lastRejected() *wire.Rejections {
	t := &s.rejected
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.known {
		return nil
	}
	return cloneRejections(t.cur)
}
