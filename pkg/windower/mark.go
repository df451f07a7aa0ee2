package windower

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/receiptflow/receiptflow/pkg/ledger"
)

// markIdle is how long a partition goes without a batch before its
// published mark is written on its own.
const markIdle = 100 * time.Millisecond

// markWriteTimeout bounds the mark written when a partition stops.
const markWriteTimeout = 2 * time.Second

// idleMark keeps partition p's published mark (the last VALID sequence
// whose LATE and CHANGES messages are stored) off the path of the next
// batch: that batch's apply script carries the mark into Redis
// (ledger.Store.Apply's published), so a busy partition pays no round
// trip of its own for it. Only when no batch follows within markIdle, and
// when the partition stops (a drain before a hand-over, a shutdown), is
// the mark written alone, so that a restart publishes again at most the
// batch since the last apply. A mark that is never written (a SIGKILL)
// costs that batch published once more: the crash after the publish of
// docs/sink-transaction-plan.md.
type idleMark struct {
	s *Service
	p int
	t *time.Timer

	mu      sync.Mutex
	due     uint64 // the last batch's mark
	written uint64 // the highest mark known to be in Redis
	ctx     context.Context
}

func (s *Service) newIdleMark(ctx context.Context, p int, written uint64) *idleMark {
	m := &idleMark{s: s, p: p, ctx: ctx, due: written, written: written}
	m.t = time.AfterFunc(time.Hour, func() { m.write(m.ctx) })
	m.t.Stop()
	return m
}

// handled records that the outputs up to seq are published, and that the
// apply script of the batch just handled carried the mark before it.
func (m *idleMark) handled(seq, carried uint64) {
	m.mu.Lock()
	m.due = max(m.due, seq)
	m.written = max(m.written, carried)
	m.mu.Unlock()
	m.t.Reset(markIdle)
}

// write writes the due mark if Redis may not have it. The mark script
// only moves the mark forward, so writes racing with an apply (or with
// each other) leave the highest.
func (m *idleMark) write(ctx context.Context) {
	m.mu.Lock()
	due, written := m.due, m.written
	m.mu.Unlock()
	if due <= written || ctx.Err() != nil {
		return
	}
	began := time.Now()
	if err := m.s.store.MarkPublished(ctx, m.p, due); err != nil {
		if errors.Is(err, ledger.ErrFenced) {
			m.s.fenced(m.p, err) // the next batch stops on the same refusal
			return
		}
		if ctx.Err() == nil {
			m.s.cfg.Logger.Warn("published mark not written; the next batch carries it", "partition", m.p, "mark", due, "err", err)
		}
		return
	}
	m.s.m.step.Since(stepMark, began)
	m.mu.Lock()
	m.written = max(m.written, due)
	m.mu.Unlock()
}

// stop writes the due mark once more (the partition's context may have
// ended: a stop is when it matters most) and ends the timer.
func (m *idleMark) stop() {
	m.t.Stop()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(m.ctx), markWriteTimeout)
	defer cancel()
	m.write(ctx)
}
