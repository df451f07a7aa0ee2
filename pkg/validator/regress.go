package validator

// Claims that Redis lost (docs/recovery.md, "Redis lost acknowledged
// writes"). A replica promoted before it had its primary's last writes, a
// restore from an older snapshot or a FLUSHALL takes claims away that
// acknowledged RAW records made; RAW is never delivered again, so a later
// copy of such an id with other content would pass as the event.
//
// Each partition's claim progress is written after its claims, on the same
// server, so a Redis that lost claims lost that progress too: a partition
// finds its progress below what it last saw written (its own marks, or its
// consumer's ack floor: everything acknowledged was claimed first). It
// then finds that on its next mark (progress.lua refuses to mark on top of
// the loss) or, idle, within checkEvery; it claims its RAW records of the
// lost range again (claims are order-free: the lowest sequence holds an id
// whatever order the copies are claimed in), marks the range, and only then
// judges its batch. Other partitions wait at the barrier meanwhile: their
// verdicts need its progress, read from Redis, not from memory.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/ledger"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// checkEvery is how often an idle partition compares its claim progress
// in Redis with what it last saw written.
const checkEvery = time.Second

// checkClaims claims partition p's lost range again if Redis holds less
// progress for it than it last saw written or (withFloor) than its
// consumer acknowledged (read first: acks follow the marks). The progress
// read may be shared with the instance's other partitions, up to maxAge
// old (0: read now).
func (s *Service) checkClaims(ctx context.Context, p int, spec stream.ConsumerSpec, withFloor bool, maxAge time.Duration) error {
	if withFloor {
		if c, err := s.js.Consumer(ctx, spec.Stream, spec.Durable); err == nil {
			s.bar.setFloor(p, c.CachedInfo().AckFloor.Stream)
		} else if !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return err
		}
	}
	pr, err := s.sharedProgress(ctx, maxAge)
	if err != nil {
		return err
	}
	if pr[p] >= s.bar.floorOf(p) {
		return nil
	}
	return s.reclaim(ctx, p)
}

// sharedProgress is every partition's claim progress, read at most once
// per maxAge for all the instance's partitions (0: read now).
func (s *Service) sharedProgress(ctx context.Context, maxAge time.Duration) (ledger.Claimed, error) {
	return s.bar.prog.get(maxAge, func() (ledger.Claimed, error) { return s.store.ClaimProgress(ctx) },
		func(_, pr ledger.Claimed) ledger.Claimed { return pr })
}

// reclaim claims partition p's RAW records again from the progress Redis
// holds up to the floor it last saw written, then marks the floor. One
// at a time per partition; a second caller finds the work done.
func (s *Service) reclaim(ctx context.Context, p int) error {
	s.bar.mu.Lock()
	mu := s.bar.reclaim[p]
	s.bar.mu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	pr, err := s.store.ClaimProgress(ctx)
	if err != nil {
		return err
	}
	// Nothing seen before now can be trusted at the barrier.
	s.bar.reset(pr)
	have, floor := pr[p], s.bar.floorOf(p)
	if have >= floor {
		return nil
	}
	s.m.regressions.WithLabelValues("claims").Inc()
	s.cfg.Logger.Error("claim progress went back: Redis lost acknowledged writes; claiming RAW again before judging anything",
		"partition", p, "found", have, "want", floor)
	began := time.Now()
	n, err := s.claimRange(ctx, p, have+1, floor)
	if err != nil {
		return fmt.Errorf("validator: claiming partition %d's RAW %d..%d again: %w", p, have+1, floor, err)
	}
	pr, err = s.store.MarkClaimed(ctx, p, floor, 0)
	if err != nil {
		return s.fenced(p, err)
	}
	s.bar.observe(pr)
	s.bar.raise(p, floor)
	s.cfg.Logger.Warn("claims rebuilt from RAW", "partition", p, "from", have+1, "through", floor, "records", n,
		"took", time.Since(began).Round(time.Millisecond).String())
	return nil
}

// claimRange claims partition p's valid RAW records with sequences from
// from through to, as handle does, and returns how many it claimed.
func (s *Service) claimRange(ctx context.Context, p int, from, to uint64) (int, error) {
	st, err := s.js.Stream(ctx, s.cfg.Names.Stream(wire.Raw))
	if err != nil {
		return 0, err
	}
	if first := st.CachedInfo().State.FirstSeq; from < first {
		s.cfg.Logger.Error("RAW no longer holds part of the range Redis lost: those claims cannot be rebuilt (RAW's retention must cover a failover; docs/recovery.md)",
			"partition", p, "from", from, "first_stored", first)
		from = first
	}
	if from > to {
		return 0, nil
	}
	c, done, err := stream.Ordered(ctx, st, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{s.cfg.Names.Subject(wire.Raw, p)},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    from,
	})
	if err != nil {
		return 0, err
	}
	defer done()
	var claims []ledger.Claim
	flush := func() error {
		if len(claims) == 0 {
			return nil
		}
		_, err := s.store.Claims(ctx, claims)
		claims = claims[:0]
		return err
	}
	n := 0
	for {
		b, err := c.Fetch(s.cfg.Batch, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return n, err
		}
		got, end := 0, false
		for m := range b.Messages() {
			got++
			meta, err := m.Metadata()
			if err != nil {
				return n, err
			}
			if meta.Sequence.Stream > to {
				end = true
				break
			}
			if meta.NumPending == 0 || meta.Sequence.Stream == to {
				end = true
			}
			if m.Headers().Get(wire.HdrHeartbeat) != "" {
				continue
			}
			if it, rej := s.validateOne(m.Data(), m.Headers(), meta.Timestamp); rej == nil {
				claims = append(claims, ledger.Claim{EventID: it.rec.EventID, Fingerprint: it.rec.Fingerprint, Seq: meta.Sequence.Stream, Day: ingestDay(meta.Timestamp)})
				n++
			}
		}
		if err := b.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) {
			return n, err
		}
		if err := flush(); err != nil {
			return n, err
		}
		if end || got == 0 {
			return n, nil
		}
	}
}
