package validator

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/receiptflow/receiptflow/pkg/ledger"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// commitRaw stores msgs on RAW as ingest does: ordered atomic batches of
// at most size, each commit naming where every partition's messages of the
// batch end (wire.HdrBatchLasts), unless marked is false.
func (e *conflictEnv) commitRaw(msgs []*nats.Msg, size int, marked bool) []stream.Ack {
	e.t.Helper()
	c := stream.NewCommitter(e.js, stream.CommitterConfig{BatchMax: size, SubjectLasts: marked})
	acks, err := c.Commit(e.ctx, msgs)
	if err != nil {
		e.t.Fatal(err)
	}
	return acks
}

// TestBarrierSpansRelease: one atomic batch holds a record of partition 0
// and then one of partition 2; partitions 1 and 3 hold nothing, run by
// another instance (so not nudged by 2's wait), and their idle progress
// is made too slow to help (an hour). Partition 2's record may publish
// once 0, 1 and 3 have claimed what they hold below it: with the commit's
// span, 1 and 3 are known to hold nothing there and 0 to end at its
// record, so both records are published at once. Without the span
// (plain, unmarked batches) partition 2 waits for 1 and 3's idle
// progress, and nothing of it reaches VALID.
func TestBarrierSpansRelease(t *testing.T) {
	for _, marked := range []bool{false, true} {
		t.Run(fmt.Sprintf("marked=%v", marked), func(t *testing.T) {
			conflictBackendsOn(t, []string{"miniredis"}, 0, func(t *testing.T, e *conflictEnv) {
				e.idleEvery = time.Hour
				msgs := []*nats.Msg{
					stream.NewMsg(e.names.Subject(wire.Raw, 0), "a-1", event(t, "a-1", 0, 1)),
					stream.NewMsg(e.names.Subject(wire.Raw, 2), "b-1", event(t, "b-1", 2, 1)),
				}
				e.commitRaw(msgs, 10, marked)
				e.start(0, 2)
				e.start(1, 3)
				if !marked {
					// Partition 0's record has no one to wait for below it.
					e.outcomes(1)
					time.Sleep(2 * time.Second)
					if n := e.count(wire.Valid); n != 1 {
						t.Fatalf("without spans VALID holds %d messages, want 1 (partition 2 waiting for 1 and 3)", n)
					}
					return
				}
				got := e.outcomes(2)
				wantOutcome(t, got, 1, "valid")
				wantOutcome(t, got, 2, "valid")
			})
		})
	}
}

// TestConflictManyCopiesCommitted is TestConflictManyCopiesAnyOrder's
// copies stored as ingest stores them, in atomic batches of random sizes
// with their spans, and judged by one instance or two: the spans let the
// barrier pass sooner, never past a lower copy. A barrier that took a
// partition's progress past its own unclaimed messages fails it.
func TestConflictManyCopiesCommitted(t *testing.T) {
	for _, split := range []bool{true, false} {
		t.Run(fmt.Sprintf("split=%v", split), func(t *testing.T) {
			conflictBackends(t, 0, func(t *testing.T, e *conflictEnv) {
				rng := rand.New(rand.NewPCG(5, 13))
				type copyOf struct {
					id         string
					content, p int
				}
				var copies []copyOf
				var msgs []*nats.Msg
				for i := 0; i < 600; i++ {
					c := copyOf{"many-" + strconv.Itoa(rng.IntN(120)), rng.IntN(3), rng.IntN(conflictParts)}
					copies = append(copies, c)
					msgs = append(msgs, stream.NewMsg(e.names.Subject(wire.Raw, c.p), fmt.Sprintf("%s:%d:%d", c.id, c.content, i), event(t, c.id, c.p, c.content)))
				}
				var acks []stream.Ack
				for len(msgs) > 0 {
					n := min(len(msgs), 1+rng.IntN(60))
					acks = append(acks, e.commitRaw(msgs[:n], n, true)...)
					msgs = msgs[n:]
				}
				lowest := map[string][2]int{}
				conflicting := map[uint64]bool{}
				for i, c := range copies {
					if a := acks[i]; a.Duplicate {
						t.Fatalf("record %d dropped as a duplicate", i)
					}
					if l, ok := lowest[c.id]; !ok {
						lowest[c.id] = [2]int{c.content, c.p}
					} else if l != [2]int{c.content, c.p} {
						conflicting[acks[i].Seq] = true
					}
				}
				e.startSplit(split)
				e.checkLowestWins(lowest, conflicting)
			})
		})
	}
}

// TestExtendSpans: a partition's progress is carried over adjacent spans
// in which its messages end at or below it, and no further.
func TestExtendSpans(t *testing.T) {
	b := newBarrier(nil)
	// RAW 1..10 (0 ends at 4, 1 at 10), 11..20 (0 ends at 12), then a
	// gap (21 unknown), 22..30 (0 absent).
	b.addSpan(rawSpan{first: 1, last: 10, lasts: map[int]uint64{0: 4, 1: 10}}, 4)
	b.addSpan(rawSpan{first: 22, last: 30, lasts: map[int]uint64{1: 25}}, 4)
	b.addSpan(rawSpan{first: 11, last: 20, lasts: map[int]uint64{0: 12}}, 4)
	for _, c := range []struct {
		q       int
		e, want uint64
	}{
		{0, 3, 3},   // its message at 4 is not claimed
		{0, 4, 10},  // ends at 4 in 1..10; 12 unclaimed in 11..20
		{0, 12, 20}, // then 21 is unknown
		{0, 21, 30}, // absent from 22..30
		{1, 0, 0},   // 1 holds 10
		{1, 10, 20}, // absent from 11..20; 21 unknown
		{1, 22, 22}, // 25 unclaimed
		{2, 0, 20},  // absent from both adjacent spans
		{3, 30, 30}, // past every span
		{3, 35, 35},
	} {
		b.mu.Lock()
		got := b.extendLocked(c.q, c.e)
		b.mu.Unlock()
		if got != c.want {
			t.Errorf("partition %d claimed through %d: extended to %d, want %d", c.q, c.e, got, c.want)
		}
	}
	b.mu.Lock()
	q, lag := b.laggingLocked(ledger.Claimed{0: 4, 1: 10, 2: 0, 3: 0}, 1, 4, 10)
	b.mu.Unlock()
	if lag {
		t.Errorf("partition %d lags at 10", q)
	}
	// 11 is inside 11..20, where 0's messages end at 12: 0 may still
	// hold an unclaimed one at 11.
	b.mu.Lock()
	q, lag = b.laggingLocked(ledger.Claimed{0: 4, 1: 10, 2: 0, 3: 0}, 1, 4, 11)
	b.mu.Unlock()
	if !lag || q != 0 {
		t.Errorf("lagging at 11 = %d, %v; want partition 0", q, lag)
	}
}

// TestSpansForgetOverlaps: a span overlapping a known one means RAW's
// sequences were used again; everything known before it is dropped.
func TestSpansForgetOverlaps(t *testing.T) {
	b := newBarrier(nil)
	b.addSpan(rawSpan{first: 1, last: 10, lasts: map[int]uint64{0: 10}}, 2)
	b.addSpan(rawSpan{first: 11, last: 20, lasts: map[int]uint64{1: 20}}, 2)
	b.addSpan(rawSpan{first: 11, last: 20, lasts: map[int]uint64{1: 20}}, 2) // the same commit read again
	if len(b.spans) != 2 {
		t.Fatalf("%d spans, want 2", len(b.spans))
	}
	b.addSpan(rawSpan{first: 5, last: 8, lasts: map[int]uint64{1: 8}}, 2)
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.spans) != 1 || b.spans[0].first != 5 {
		t.Fatalf("spans after an overlap: %+v", b.spans)
	}
	if got := b.extendLocked(0, 4); got != 8 {
		t.Fatalf("partition 0 from 4: %d, want 8 (the new span only)", got)
	}
	if got := b.extendLocked(0, 8); got != 8 {
		t.Fatalf("partition 0 from 8: %d, want 8 (9..20 no longer known)", got)
	}
}
