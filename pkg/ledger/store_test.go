package ledger

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/receiptflow/receiptflow/pkg/internal/digest"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/window"
)

// backends runs f against miniredis and a real redis-server.
func backends(t *testing.T, f func(t *testing.T, rdb *redis.Client)) {
	t.Run("miniredis", func(t *testing.T) {
		m := testenv.Miniredis(t)
		rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { rdb.Close() })
		f(t, rdb)
	})
	t.Run("redis-server", func(t *testing.T) {
		r := testenv.RedisServer(t)
		rdb := redis.NewClient(&redis.Options{Addr: r.Addr()})
		t.Cleanup(func() { rdb.Close() })
		f(t, rdb)
	})
}

// dump returns every key of the store as comparable text.
func dump(t *testing.T, rdb *redis.Client) map[string]string {
	t.Helper()
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, k := range keys {
		typ, _ := rdb.Type(ctx, k).Result()
		switch typ {
		case "hash":
			h, _ := rdb.HGetAll(ctx, k).Result()
			out[k] = fmt.Sprint(h)
		case "zset":
			z, _ := rdb.ZRangeWithScores(ctx, k, 0, -1).Result()
			out[k] = fmt.Sprint(z)
		default:
			out[k] = typ
		}
	}
	return out
}

var (
	h10    = mustTime("2026-12-02T10:00:00Z")
	minute = int64(60_000)
)

func mustTime(s string) int64 {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UnixMilli()
}

func codes(res *Result) []Code {
	var c []Code
	for _, d := range res.Decisions {
		c = append(c, d.Code)
	}
	return c
}

func TestApplyClassifiesAndIsIdempotent(t *testing.T) {
	backends(t, func(t *testing.T, rdb *redis.Client) {
		ctx := context.Background()
		s := NewStore(rdb, Config{Keys: Keys{Prefix: "rf:1:"}, Lateness: 5 * time.Minute, Grace: time.Hour})
		batch := []Record{
			{Seq: 1, Kind: Submission, EventID: "a", Time: h10 + 10*minute},
			{Seq: 2, Kind: Submission, EventID: "a", Time: h10 + 10*minute},  // retry
			{Seq: 3, Kind: Other, EventID: "v", Time: h10 + 70*minute},       // W = 11:05
			{Seq: 4, Kind: Submission, EventID: "b", Time: h10 + 20*minute},  // correction (W >= 11:00)
			{Seq: 5, Kind: Heartbeat, Time: h10 + 185*minute},                // busy partition: W stays 11:05
			{Seq: 6, Kind: Heartbeat, Time: h10 + 185*minute},                // idle since seq 5: W = 13:00
			{Seq: 7, Kind: Submission, EventID: "c", Time: h10 + 30*minute},  // too late (W >= 12:00)
			{Seq: 8, Kind: Submission, EventID: "c", Time: h10 + 30*minute},  // dup of a late id
			{Seq: 9, Kind: Submission, EventID: "d", Time: h10 + 181*minute}, // on time in 13:00
		}
		res, err := s.Apply(ctx, 3, batch, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		want := []Code{Counted, Duplicate, Ignored, Correction, Progress, Progress, Late, Duplicate, Counted}
		if got := codes(res); !reflect.DeepEqual(got, want) {
			t.Fatalf("decisions = %v, want %v", got, want)
		}
		if res.Seq != 9 || res.Watermark != h10+180*minute {
			t.Fatalf("checkpoint = %d/%d, want 9/%d", res.Seq, res.Watermark, h10+180*minute)
		}
		if d := res.Decisions[6]; d.Watermark != h10+180*minute || d.WindowID != "2026-12-02T10" || d.Version != 3 {
			t.Fatalf("late decision = %+v", d)
		}
		if res.Added != 4 {
			t.Fatalf("added = %d, want 4", res.Added)
		}
		if !reflect.DeepEqual(res.Changed, []string{"2026-12-02T10", "2026-12-02T13"}) {
			t.Fatalf("changed = %v", res.Changed)
		}

		before := dump(t, rdb)
		again, err := s.Apply(ctx, 3, batch, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		for i, d := range again.Decisions {
			switch {
			case i == 6 || i == 7:
				if d.Code != LateAgain || d.Watermark != h10+180*minute {
					t.Fatalf("replayed late %d = %+v", i, d)
				}
			case d.Code != Replayed:
				t.Fatalf("replayed %d = %+v, want replayed", i, d)
			}
		}
		// The replayed batch's notice may have been lost with a crash: its
		// windows are reported again so the publisher refreshes them.
		if !reflect.DeepEqual(again.Changed, []string{"2026-12-02T10", "2026-12-02T13"}) {
			t.Fatalf("replay changed = %v", again.Changed)
		}
		if after := dump(t, rdb); !reflect.DeepEqual(before, after) {
			t.Fatalf("second apply changed state:\nbefore %v\nafter  %v", before, after)
		}

		v, err := s.Read(ctx, 3, []string{"2026-12-02T10", "2026-12-02T13", "2026-12-02T14"})
		if err != nil {
			t.Fatal(err)
		}
		p := v.Partials["2026-12-02T10"]
		var dg digest.Digest
		dg.Add("a")
		dg.Add("b")
		if p.Count != 2 || p.Corrections != 1 || p.LateDropped != 1 || p.Version != 3 || p.OnTimeVersion != 1 || p.Digest != dg {
			t.Fatalf("partial 10 = %+v, digest want %v", p, dg)
		}
		if _, ok := v.Partials["2026-12-02T14"]; ok {
			t.Fatal("untouched window has a partial")
		}
		if v.Watermark != h10+180*minute || v.Seq != 9 {
			t.Fatalf("view checkpoint %d/%d", v.Seq, v.Watermark)
		}
		ids, err := s.Windows(ctx, 3)
		if err != nil || !reflect.DeepEqual(ids, []string{"2026-12-02T10", "2026-12-02T13"}) {
			t.Fatalf("windows = %v, %v", ids, err)
		}
		ck, err := s.Checkpoint(ctx, 3)
		if err != nil || ck.Seq != 9 || ck.Entries != 4 {
			t.Fatalf("checkpoint = %+v, %v", ck, err)
		}
	})
}

func TestApplyOverlappingBatchAppliesOnlyNewRecords(t *testing.T) {
	backends(t, func(t *testing.T, rdb *redis.Client) {
		ctx := context.Background()
		s := NewStore(rdb, Config{Keys: Keys{Prefix: "rf:1:"}, Lateness: 5 * time.Minute, Grace: time.Hour})
		var recs []Record
		for i := 1; i <= 200; i++ {
			recs = append(recs, Record{Seq: uint64(i), Kind: Submission, EventID: fmt.Sprintf("e%d", i%150), Time: h10 + int64(i)*1000})
		}
		if _, err := s.Apply(ctx, 0, recs[:120], 0, 0); err != nil {
			t.Fatal(err)
		}
		// A redelivery overlapping what was applied: 100..200.
		res, err := s.Apply(ctx, 0, recs[99:], 120, 0)
		if err != nil {
			t.Fatal(err)
		}
		var replayed int
		for _, d := range res.Decisions {
			if d.Code == Replayed {
				replayed++
			}
		}
		if replayed != 21 {
			t.Fatalf("replayed = %d, want 21", replayed)
		}
		v, err := s.Read(ctx, 0, []string{window.ID(h10)})
		if err != nil {
			t.Fatal(err)
		}
		var dg digest.Digest
		ids := map[string]bool{}
		for _, r := range recs {
			ids[r.EventID] = true
		}
		keys := make([]string, 0, len(ids))
		for id := range ids {
			keys = append(keys, id)
		}
		sort.Strings(keys)
		for _, id := range keys {
			dg.Add(id)
		}
		p := v.Partials[window.ID(h10)]
		if p.Count != 150 || p.Version != 150 || p.Digest != dg {
			t.Fatalf("partial = %+v, want count 150 digest %v", p, dg)
		}
	})
}

func TestApplyRefusesARegressedCheckpoint(t *testing.T) {
	backends(t, func(t *testing.T, rdb *redis.Client) {
		ctx := context.Background()
		s := NewStore(rdb, Config{Keys: Keys{Prefix: "rf:1:"}, Lateness: 5 * time.Minute, Grace: time.Hour})
		res, err := s.Apply(ctx, 1, []Record{{Seq: 5, Kind: Submission, EventID: "a", Time: h10}}, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		rdb.FlushAll(ctx) // Redis comes back empty
		_, err = s.Apply(ctx, 1, []Record{{Seq: 9, Kind: Submission, EventID: "b", Time: h10}}, res.Seq, 0)
		if !errors.Is(err, ErrRegressed) {
			t.Fatalf("apply on a regressed checkpoint: %v", err)
		}
		if n, _ := rdb.DBSize(ctx).Result(); n != 0 {
			t.Fatalf("the refused apply wrote %d keys", n)
		}
	})
}

// TestApplyAfterALostReplyChangesNothing: the script ran, but its reply was
// lost; the caller retries the same batch with the checkpoint it knew
// before. Nothing is applied twice and no regression is reported.
func TestApplyAfterALostReplyChangesNothing(t *testing.T) {
	backends(t, func(t *testing.T, rdb *redis.Client) {
		ctx := context.Background()
		s := NewStore(rdb, Config{Keys: Keys{Prefix: "rf:1:"}, Lateness: 5 * time.Minute, Grace: time.Hour})
		first := []Record{{Seq: 1, Kind: Submission, EventID: "a", Time: h10}}
		if _, err := s.Apply(ctx, 2, first, 0, 0); err != nil {
			t.Fatal(err)
		}
		batch := []Record{
			{Seq: 2, Kind: Submission, EventID: "b", Time: h10},
			{Seq: 3, Kind: Submission, EventID: "c", Time: h10 + minute},
		}
		if _, err := s.Apply(ctx, 2, batch, 1, 0); err != nil { // reply "lost"
			t.Fatal(err)
		}
		before := dump(t, rdb)
		again, err := s.Apply(ctx, 2, batch, 1, 0) // the retry, same expectation
		if err != nil {
			t.Fatalf("retry after a lost reply: %v", err)
		}
		for _, d := range again.Decisions {
			if d.Code != Replayed {
				t.Fatalf("retry decision %+v, want replayed", d)
			}
		}
		if after := dump(t, rdb); !reflect.DeepEqual(before, after) {
			t.Fatal("the retried script changed state")
		}
	})
}

// TestPublishedMarkTracksWhatWasPublished: the published mark only moves
// forward, never past the checkpoint, so a restart resumes where outputs may
// have been lost.
func TestPublishedMarkTracksWhatWasPublished(t *testing.T) {
	backends(t, func(t *testing.T, rdb *redis.Client) {
		ctx := context.Background()
		s := NewStore(rdb, Config{Keys: Keys{Prefix: "rf:1:"}, Lateness: 5 * time.Minute, Grace: time.Hour})
		b1 := []Record{{Seq: 10, Kind: Submission, EventID: "a", Time: h10}}
		b2 := []Record{{Seq: 20, Kind: Submission, EventID: "b", Time: h10}}
		if _, err := s.Apply(ctx, 4, b1, 0, 0); err != nil {
			t.Fatal(err)
		}
		// b1's outputs were published; b2 is applied, then the writer dies
		// before publishing b2's.
		if _, err := s.Apply(ctx, 4, b2, 10, 10); err != nil {
			t.Fatal(err)
		}
		ck, err := s.Checkpoint(ctx, 4)
		if err != nil || ck.Seq != 20 || ck.Published != 10 {
			t.Fatalf("checkpoint %+v, %v: want seq 20, published 10", ck, err)
		}
		// A mark beyond the checkpoint or behind the stored one is ignored.
		if _, err := s.Apply(ctx, 4, b2, 20, 99); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Apply(ctx, 4, b2, 20, 3); err != nil {
			t.Fatal(err)
		}
		if ck, _ := s.Checkpoint(ctx, 4); ck.Published != 10 {
			t.Fatalf("published = %d, want 10", ck.Published)
		}
		// After publishing b2's outputs the windower marks them directly.
		if err := s.MarkPublished(ctx, 4, 20); err != nil {
			t.Fatal(err)
		}
		if err := s.MarkPublished(ctx, 4, 15); err != nil {
			t.Fatal(err)
		}
		if ck, _ := s.Checkpoint(ctx, 4); ck.Published != 20 {
			t.Fatalf("published = %d after MarkPublished(20), want 20", ck.Published)
		}
	})
}
