package windower

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestJudge: the verdict on a checkpoint at 559 from answers so far.
func TestJudge(t *testing.T) {
	leader := func(last uint64) streamAnswer { return streamAnswer{Last: last, Leader: true} }
	replica := func(last uint64) streamAnswer { return streamAnswer{Last: last} }
	for _, c := range []struct {
		name    string
		answers []streamAnswer
		want    check
	}{
		{"leader holds it", []streamAnswer{leader(559)}, checkOK},
		{"one stale leader answer", []streamAnswer{leader(558)}, checkSuspect},
		{"two leader answers", []streamAnswer{leader(558), leader(558)}, checkSuspect},
		{"three leader answers", []streamAnswer{leader(558), leader(550), leader(558)}, checkBehind},
		{"stale replicas only", []streamAnswer{replica(558), replica(558), replica(558), replica(558)}, checkSuspect},
		{"a replica then the leader", []streamAnswer{replica(558), leader(558), leader(558)}, checkSuspect},
		{"the leader caught up", []streamAnswer{leader(558), leader(558), leader(560)}, checkOK},
		{"a replica that has it", []streamAnswer{leader(558), replica(559)}, checkOK},
	} {
		if got := judge(559, c.answers, confirmAnswers); got != c.want {
			t.Errorf("%s: judge = %d, want %d", c.name, got, c.want)
		}
	}
}

// TestConfirm: answer sequences as a cluster gives them after a
// partition heals (a rejoined replica first) and as a stream that lost
// its tail gives them.
func TestConfirm(t *testing.T) {
	leader := func(last uint64) streamAnswer { return streamAnswer{Last: last, Leader: true} }
	replica := func(last uint64) streamAnswer { return streamAnswer{Last: last} }
	unavailable := &jetstream.APIError{Code: 503, ErrorCode: 10008}
	type reply struct {
		a   streamAnswer
		err error
	}
	for _, c := range []struct {
		name  string
		first streamAnswer
		next  []reply
		want  check
		asked int
	}{
		{"stale replica, then the leader", replica(558), []reply{{a: leader(560)}}, checkOK, 1},
		{"stale leader that steps down", leader(558), []reply{{err: unavailable}, {a: replica(558)}, {a: leader(561)}}, checkOK, 3},
		{"leaderless for the whole check", replica(558), []reply{{a: replica(558)}, {a: replica(558)}, {a: replica(558)}, {a: replica(558)}, {a: replica(558)}}, checkSuspect, 5},
		{"the stream lost its tail", leader(558), []reply{{a: leader(558)}, {a: leader(558)}}, checkBehind, 2},
		{"lost, asked through an election", leader(558), []reply{{err: unavailable}, {a: replica(558)}, {a: leader(558)}, {a: leader(558)}}, checkBehind, 4},
	} {
		asked := 0
		ask := func(context.Context) (streamAnswer, error) {
			if asked >= len(c.next) {
				t.Fatalf("%s: asked %d times, the sequence has %d answers", c.name, asked+1, len(c.next))
			}
			r := c.next[asked]
			asked++
			return r.a, r.err
		}
		got, _, err := confirm(context.Background(), 559, c.first, time.Millisecond, ask)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got != c.want || asked != c.asked {
			t.Errorf("%s: verdict %d after %d more answers, want %d after %d", c.name, got, asked, c.want, c.asked)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := confirm(ctx, 559, leader(558), time.Hour, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("confirm with an ended context: %v, want context.Canceled", err)
	}
}
