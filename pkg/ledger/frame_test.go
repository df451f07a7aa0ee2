package ledger

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestApplyFramesWholeAndSkipsRepublishedRecords: the records of one
// VALID frame share its sequence and are all applied; a frame the
// validator published again after a crash, cut at other RAW bounds, is a
// new VALID message whose records at or below the RAW sequence already
// applied are Replayed (the late one LateAgain) and change nothing, while
// its new records are applied; a frame whose records were all applied
// before still moves the checkpoint past it.
func TestApplyFramesWholeAndSkipsRepublishedRecords(t *testing.T) {
	backends(t, func(t *testing.T, rdb *redis.Client) {
		ctx := context.Background()
		s := NewStore(rdb, Config{Keys: Keys{Prefix: "rf:1:"}, Lateness: 5 * time.Minute, Grace: time.Hour})
		frame1 := []Record{ // VALID seq 1, RAW 10..13
			{Seq: 1, Kind: Submission, EventID: "a", Time: h10 + 10*minute, RawSeq: 10},
			{Seq: 1, Kind: Other, EventID: "v", Time: h10 + 130*minute, RawSeq: 11}, // W = 12:05
			{Seq: 1, Kind: Submission, EventID: "late", Time: h10 + 20*minute, RawSeq: 12},
			{Seq: 1, Kind: Submission, EventID: "b", Time: h10 + 125*minute, RawSeq: 13},
		}
		res, err := s.Apply(ctx, 2, frame1, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := codes(res), []Code{Counted, Ignored, Late, Counted}; !reflect.DeepEqual(got, want) {
			t.Fatalf("frame 1 decisions = %v, want %v", got, want)
		}
		if res.Seq != 1 {
			t.Fatalf("checkpoint after frame 1 = %d, want 1", res.Seq)
		}
		before := dump(t, rdb)

		// Republished with other bounds (RAW 12..14) as VALID seq 2, then
		// RAW 12..13 alone as VALID seq 3.
		frame2 := []Record{
			{Seq: 2, Kind: Submission, EventID: "late", Time: h10 + 20*minute, RawSeq: 12},
			{Seq: 2, Kind: Submission, EventID: "b", Time: h10 + 125*minute, RawSeq: 13},
			{Seq: 2, Kind: Submission, EventID: "c", Time: h10 + 126*minute, RawSeq: 14},
		}
		frame3 := []Record{
			{Seq: 3, Kind: Submission, EventID: "late", Time: h10 + 20*minute, RawSeq: 12},
			{Seq: 3, Kind: Heartbeat, Time: h10 + 300*minute, RawSeq: 13},
		}
		res, err = s.Apply(ctx, 2, append(append([]Record(nil), frame2...), frame3...), 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := codes(res), []Code{LateAgain, Replayed, Counted, LateAgain, Replayed}; !reflect.DeepEqual(got, want) {
			t.Fatalf("republished decisions = %v, want %v", got, want)
		}
		if res.Seq != 3 {
			t.Fatalf("checkpoint after the republished frames = %d, want 3", res.Seq)
		}
		if res.Watermark != h10+125*minute {
			t.Fatalf("watermark %d moved by a replayed heartbeat, want %d", res.Watermark, h10+125*minute)
		}
		// Only c was new: one partial changed by exactly one count.
		after := dump(t, rdb)
		var changed []string
		for k, v := range after {
			if before[k] != v {
				changed = append(changed, k)
			}
		}
		if len(changed) != 3 { // checkpoint, the 12:00 partial, its ledger shard
			t.Fatalf("republished frames changed %v", changed)
		}
		v, err := s.Read(ctx, 2, []string{"2026-12-02T12"})
		if err != nil {
			t.Fatal(err)
		}
		if n := v.Partials["2026-12-02T12"].Count; n != 2 {
			t.Fatalf("12:00 count = %d, want 2 (b, c)", n)
		}

		// The same frames delivered again (a windower crash before its
		// ack): everything Replayed, nothing changes.
		state := dump(t, rdb)
		res, err = s.Apply(ctx, 2, frame3, 3, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := codes(res), []Code{LateAgain, Replayed}; !reflect.DeepEqual(got, want) {
			t.Fatalf("redelivered decisions = %v, want %v", got, want)
		}
		if !reflect.DeepEqual(state, dump(t, rdb)) {
			t.Fatal("a redelivered frame changed state")
		}
	})
}
