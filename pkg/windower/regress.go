package windower

// Redis state that went back (docs/recovery.md, "Redis lost acknowledged
// writes"): a replica promoted before it had its primary's last writes, a
// restore or a FLUSHALL. A partition's ledger, partials and checkpoint
// change in one script, so what Redis holds is the state of some earlier
// checkpoint; the partition resumes from that checkpoint and applies VALID
// from there again, which brings every window back to where it was.
//
// The loss is found by the next batch (the apply script refuses to apply
// on top of an older checkpoint than the writer last saw: ledger.ErrRegressed)
// or, on a partition with nothing to apply, within checkEvery by comparing
// the checkpoint with the last sequence this instance applied there.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/ledger"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// checkEvery is how often every owned partition's checkpoint in Redis is
// compared with what this instance last applied there.
const checkEvery = time.Second

// partState is what the regression check knows of one running partition.
type partState struct {
	mu      sync.Mutex
	run     int    // which run of the partition (it restarts after a loss)
	applied uint64 // last VALID sequence applied in this run
	cancel  context.CancelCauseFunc
	// tag, once a loss was seen, makes the CHANGES notices of the replay
	// new messages: under their first ids JetStream would drop them as
	// duplicates, and a publisher that read Redis while it was behind
	// would never read it again.
	tag string
}

// lost records that Redis lost this partition's state (nonce: the
// instance's).
func (ps *partState) lost(nonce string) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.tag = nonce + "." + strconv.Itoa(ps.run)
}

// noticeID is the Nats-Msg-Id of the CHANGES notice of a batch ending at
// VALID sequence seq.
func (ps *partState) noticeID(p int, seq uint64) string {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	id := "chg-" + strconv.Itoa(p) + "-" + strconv.FormatUint(seq, 10)
	if ps.tag != "" {
		id += "-" + ps.tag
	}
	return id
}

// start begins a new run of the partition from checkpoint seq.
func (ps *partState) start(seq uint64, cancel context.CancelCauseFunc) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.run++
	ps.applied, ps.cancel = seq, cancel
}

// advance records that the run applied through seq.
func (ps *partState) advance(seq uint64) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.applied = max(ps.applied, seq)
}

func (ps *partState) snapshot() (run int, applied uint64) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.run, ps.applied
}

// stop ends run with cause if it is still the current one.
func (ps *partState) stop(run int, cause error) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.run != run || ps.cancel == nil {
		return false
	}
	ps.cancel(cause)
	return true
}

// runPartition runs partition p until ctx ends or it fails, starting it
// again from Redis's checkpoint each time Redis is found to have lost
// writes.
func (s *Service) runPartition(ctx context.Context, p int, ps *partState) error {
	if err := s.checkAtStart(ctx, p, ps); err != nil {
		return err
	}
	for {
		pctx, cancel := context.WithCancelCause(ctx)
		err := s.runPartitionFrom(pctx, p, ps, cancel)
		cause := context.Cause(pctx)
		cancel(nil)
		if ctx.Err() != nil {
			return nil
		}
		if !errors.Is(err, ledger.ErrRegressed) && !errors.Is(cause, ledger.ErrRegressed) {
			return err
		}
		why := err
		if why == nil {
			why = cause
		}
		s.m.regressions.WithLabelValues("checkpoint").Inc()
		ps.lost(s.nonce)
		s.cfg.Logger.Error("Redis lost acknowledged writes: the partition resumes from the checkpoint Redis holds and applies VALID again from there",
			"partition", p, "err", why)
	}
}

// checkAtStart counts a loss that happened while no run of partition p was
// watching (Redis lost writes while the windower was down): the checkpoint
// is then behind what the partition's consumer acknowledged, which it
// acknowledged only after applying. The run resumes from the checkpoint
// either way.
func (s *Service) checkAtStart(ctx context.Context, p int, ps *partState) error {
	var acked uint64
	c, err := s.js.Consumer(ctx, s.cfg.Names.Stream(wire.Valid), s.durable(p))
	switch {
	case err == nil:
		acked = c.CachedInfo().AckFloor.Stream
	case !errors.Is(err, jetstream.ErrConsumerNotFound):
		return fmt.Errorf("windower: partition %d consumer: %w", p, err)
	}
	ck, err := s.store.Checkpoint(ctx, p)
	if err != nil {
		return err
	}
	if ck.Seq < acked {
		s.m.regressions.WithLabelValues("checkpoint").Inc()
		ps.lost(s.nonce)
		s.cfg.Logger.Error("Redis lost acknowledged writes: the partition resumes from the checkpoint Redis holds and applies VALID again from there",
			"partition", p, "checkpoint", ck.Seq, "acknowledged", acked)
	}
	return nil
}

// watchCheckpoints stops the run of an owned partition whose checkpoint
// in Redis is behind what the run applied (runPartition starts it again).
func (s *Service) watchCheckpoints(ctx context.Context, owned []int, parts map[int]*partState) {
	t := time.NewTicker(checkEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// What the runs applied is read first: a checkpoint is written
		// before it, and only grows while Redis keeps it. All owned
		// checkpoints come in one round trip.
		runs, applied := make([]int, len(owned)), make([]uint64, len(owned))
		for i, p := range owned {
			runs[i], applied[i] = parts[p].snapshot()
		}
		cks, err := s.store.Checkpoints(ctx, owned)
		if err != nil {
			if ctx.Err() == nil {
				s.cfg.Logger.Warn("checkpoint check", "partitions", owned, "err", err)
			}
			continue
		}
		for i, p := range owned {
			if cks[i].Seq < applied[i] {
				parts[p].stop(runs[i], fmt.Errorf("%w: partition %d checkpoint %d is behind %d, the last sequence applied", ledger.ErrRegressed, p, cks[i].Seq, applied[i]))
			}
		}
	}
}
