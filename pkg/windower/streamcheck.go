package windower

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// errStreamBehind marks a stream that lost messages the checkpoint counted.
var errStreamBehind = errors.New("checkpoint ahead of the stream")

func behind(p int, streamName string, seq, last uint64) error {
	return fmt.Errorf("windower: partition %d checkpoint at %s sequence %d is ahead of the stream's last sequence %d: "+
		"JetStream lost data the Redis state already counted; see docs/recovery.md (\"checkpoint ahead of the stream\"): %w",
		p, streamName, seq, last, errStreamBehind)
}

// The "checkpoint ahead of the stream" verdict needs confirmAnswers
// answers from the stream's leader, confirmEvery apart, all behind the
// checkpoint. One answer can be stale: in a cluster, a replica that finds
// its group leaderless (cut off, just rejoined, an election) answers stream
// info from its own state, and a leader cut off from its peers answers
// until it steps down.
const (
	confirmAnswers = 3
	confirmEvery   = 2 * time.Second
	// confirmAsks bounds the answers of one confirmation: without
	// confirmAnswers leader answers among them it only logs.
	confirmAsks = 2 * confirmAnswers
)

// streamAnswer is one answer to a stream info request.
type streamAnswer struct {
	// Last is the stream's last sequence as the answering server has it.
	Last uint64
	// Leader: the stream's leader answered (or a server without a
	// cluster); a replica answering on its own names no leader.
	Leader bool
}

// answerOf reads a stream info answer.
func answerOf(info *jetstream.StreamInfo) streamAnswer {
	return streamAnswer{Last: info.State.LastSeq, Leader: info.Cluster == nil || info.Cluster.Leader != ""}
}

// check is the verdict on a checkpoint from the answers so far.
type check int

const (
	checkOK      check = iota // an answer holds the checkpoint's sequence
	checkSuspect              // behind, not (yet) confirmed
	checkBehind               // confirmed: the stream lost data
)

// judge returns the verdict on checkpoint seq from answers (oldest
// first): OK as soon as one answer reaches seq, Behind once need answers
// of the leader are all below it, else Suspect.
func judge(seq uint64, answers []streamAnswer, need int) check {
	leader := 0
	for _, a := range answers {
		if a.Last >= seq {
			return checkOK
		}
		if a.Leader {
			leader++
		}
	}
	if leader >= need && need > 0 {
		return checkBehind
	}
	return checkSuspect
}

// confirm asks for the stream's state until judge decides or confirmAsks
// answers came, every spacing, starting from first. It returns the
// verdict and the last answer. A failed request counts as no answer.
func confirm(ctx context.Context, seq uint64, first streamAnswer, spacing time.Duration, ask func(context.Context) (streamAnswer, error)) (check, streamAnswer, error) {
	answers := []streamAnswer{first}
	last := first
	for asked := 1; ; asked++ {
		v := judge(seq, answers, confirmAnswers)
		if v != checkSuspect || asked >= confirmAsks {
			return v, last, nil
		}
		t := time.NewTimer(spacing)
		select {
		case <-ctx.Done():
			t.Stop()
			return checkSuspect, last, context.Cause(ctx)
		case <-t.C:
		}
		a, err := ask(ctx)
		if err != nil {
			continue
		}
		answers, last = append(answers, a), a
	}
}

// askStream asks for VALID's state once, bounded by 5s.
func (s *Service) askStream(ctx context.Context) (streamAnswer, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := s.js.Stream(ctx, s.cfg.Names.Stream(wire.Valid))
	if err != nil {
		return streamAnswer{}, err
	}
	return answerOf(st.CachedInfo()), nil
}

// verify compares checkpoints (partition → sequence) with VALID's last
// sequence. It returns the "checkpoint ahead of the stream" error only
// when confirmed (see confirmAnswers); an unconfirmed answer is logged.
// It returns other errors of the first request as they are.
func (s *Service) verify(ctx context.Context, owned []int, cks []uint64) error {
	first, err := s.askStream(ctx)
	if err != nil {
		return err
	}
	// The largest checkpoint behind the first answer decides.
	p, seq := -1, uint64(0)
	for i, ck := range cks {
		if ck > first.Last && ck > seq {
			p, seq = owned[i], ck
		}
	}
	if p < 0 {
		return nil
	}
	v, last, err := confirm(ctx, seq, first, s.confirmEvery, s.askStream)
	name := s.cfg.Names.Stream(wire.Valid)
	switch {
	case err != nil:
		return err
	case v == checkBehind:
		s.cfg.Logger.Error("stream behind the checkpoint, confirmed by its leader", "partition", p, "checkpoint", seq, "last", last.Last, "answers", confirmAnswers)
		return behind(p, name, seq, last.Last)
	case v == checkSuspect:
		s.cfg.Logger.Warn("a stream info answer was behind the checkpoint, not confirmed by the stream's leader: taken for stale",
			"stream", name, "partition", p, "checkpoint", seq, "answered_last", first.Last, "answered_by_leader", first.Leader)
	}
	return nil
}

// verifyAtStart is verify for partition p before it starts: a cluster that
// cannot answer for now is waited for (connect.Transient).
func (s *Service) verifyAtStart(ctx context.Context, p int, seq uint64) error {
	return connect.WaitFor(ctx, func(ctx context.Context) error {
		return s.verify(ctx, []int{p}, []uint64{seq})
	}, func(attempt int, err error, next time.Duration) {
		s.cfg.Logger.Warn("windower: waiting for VALID's state", "partition", p, "attempt", attempt, "err", err, "retry_in", next.Round(time.Millisecond).String())
	})
}
