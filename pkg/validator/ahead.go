package validator

// Claiming ahead of publication. A partition's batch may publish once
// every other partition has claimed what it holds below the batch
// (barrier.go). A partition's progress moves when it claims a batch; if
// it claimed a batch only once the one before it was published and
// acknowledged, every partition would wait about a whole cycle of the
// others (claim, wait, publish, acknowledge, fetch), in lockstep. So the
// consume loop hands each batch to claimAhead as soon as it is formed
// (stream.BatchConfig.Ahead), while the handler still works on the one
// before: the batch is validated and claimed there, its progress marked,
// and handle later starts from those claims at the barrier. Claims do not
// depend on order, and the progress says only what was claimed, so this
// changes no verdict; what is published and acknowledged still goes in
// order, through handle. A batch claimed ahead that never reaches handle
// (a gap ends the session) is delivered, and claimed, again.

import (
	"context"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// aheadKeep bounds the batches of a partition held between claimAhead and
// handle (the consume loop queues one, so two at most are in use).
const aheadKeep = 4

// aheadBatch is a batch claimed ahead.
type aheadBatch struct {
	first, last uint64 // its first and last RAW sequences
	n           int
	pre         *prepared
	round       *claimRound
}

// aheadStore holds the batches claimed ahead, by partition.
type aheadStore struct {
	mu sync.Mutex
	by map[int][]aheadBatch
}

// seqs are a batch's first and last RAW sequences.
func seqs(batch []jetstream.Msg) (first, last uint64, ok bool) {
	m0, err0 := batch[0].Metadata()
	m1, err1 := batch[len(batch)-1].Metadata()
	if err0 != nil || err1 != nil {
		return 0, 0, false
	}
	return m0.Sequence.Stream, m1.Sequence.Stream, true
}

// claimAhead validates and claims a batch of partition p before handle
// gets it. Best effort: on any failure handle does it all again.
func (s *Service) claimAhead(ctx context.Context, p int, batch []jetstream.Msg) {
	first, last, ok := seqs(batch)
	if !ok || !s.bar.live.Load() {
		return
	}
	pre, err := s.prepare(p, batch)
	if err != nil {
		return
	}
	r, err := s.claimOnce(ctx, p, batch, pre.claims)
	if err != nil {
		return
	}
	s.ahead.mu.Lock()
	defer s.ahead.mu.Unlock()
	if s.ahead.by == nil {
		s.ahead.by = map[int][]aheadBatch{}
	}
	held := append(s.ahead.by[p], aheadBatch{first: first, last: last, n: len(batch), pre: pre, round: r})
	if len(held) > aheadKeep {
		held = held[len(held)-aheadKeep:]
	}
	s.ahead.by[p] = held
}

// takeAhead returns what claimAhead made of this batch, if it did (nil,
// nil otherwise), and forgets it.
func (s *Service) takeAhead(p int, batch []jetstream.Msg) (*prepared, *claimRound) {
	first, last, ok := seqs(batch)
	if !ok {
		return nil, nil
	}
	s.ahead.mu.Lock()
	defer s.ahead.mu.Unlock()
	held := s.ahead.by[p]
	for i := len(held) - 1; i >= 0; i-- {
		if b := held[i]; b.first == first && b.last == last && b.n == len(batch) {
			s.ahead.by[p] = append(held[:i:i], held[i+1:]...)
			return b.pre, b.round
		}
	}
	return nil, nil
}
