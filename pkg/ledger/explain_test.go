package ledger

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// TestExplainRecordIsWrittenWithTheCountAndRetiredWithIt: apply keeps each
// correction's id with the partial version it produced and counts the
// duplicates dropped, in the same step; applying the batch again changes
// neither; Holds finds the window's ids; retiring the window deletes the
// record with the partial.
func TestExplainRecordIsWrittenWithTheCountAndRetiredWithIt(t *testing.T) {
	backends(t, func(t *testing.T, rdb *redis.Client) {
		ctx := context.Background()
		s := NewStore(rdb, Config{Keys: Keys{Prefix: "rf:1:"}, Lateness: 5 * time.Minute, Grace: time.Hour, Horizon: time.Hour})
		batch := []Record{
			{Seq: 1, Kind: Submission, EventID: "a", Time: h10 + 10*minute},
			{Seq: 2, Kind: Submission, EventID: "a", Time: h10 + 10*minute}, // retry
			{Seq: 3, Kind: Other, EventID: "v", Time: h10 + 70*minute},      // W = 11:05
			{Seq: 4, Kind: Submission, EventID: "b", Time: h10 + 20*minute}, // correction, version 2
			{Seq: 5, Kind: Submission, EventID: "e", Time: h10 + 25*minute}, // correction, version 3
			{Seq: 6, Kind: Other, EventID: "w", Time: h10 + 125*minute},     // W = 12:00
			{Seq: 7, Kind: Submission, EventID: "c", Time: h10 + 30*minute}, // too late, version 4
			{Seq: 8, Kind: Submission, EventID: "c", Time: h10 + 30*minute}, // retry of a late id
			{Seq: 9, Kind: Submission, EventID: "b", Time: h10 + 20*minute}, // retry of a correction
		}
		if _, err := s.Apply(ctx, 2, batch, 0, 0); err != nil {
			t.Fatal(err)
		}
		want := &WindowRecord{Partition: 2, Held: true, Duplicates: 3,
			Corrections: []CorrectionRecord{{EventID: "b", Version: 2}, {EventID: "e", Version: 3}}}
		check := func(when string) {
			t.Helper()
			got, err := s.ReadWindow(ctx, 2, "2026-12-02T10")
			if err != nil {
				t.Fatal(err)
			}
			if got.Partial.Count != 3 || got.Partial.Corrections != 2 || got.Partial.Version != 4 {
				t.Fatalf("%s: partial %+v", when, got.Partial)
			}
			got.Partial = wire0(got.Partial.Partition)
			want.Partial = got.Partial
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: record %+v, want %+v", when, got, want)
			}
		}
		check("applied")
		before := dump(t, rdb)
		if _, err := s.Apply(ctx, 2, batch, 0, 0); err != nil {
			t.Fatal(err)
		}
		if after := dump(t, rdb); !reflect.DeepEqual(before, after) {
			t.Fatalf("second apply changed state:\nbefore %v\nafter  %v", before, after)
		}
		check("applied again")

		held, err := s.Holds(ctx, 2, "2026-12-02T10", []string{"a", "c", "zz"})
		if err != nil || !reflect.DeepEqual(held, map[string]bool{"a": true, "c": true}) {
			t.Fatalf("holds %v, %v", held, err)
		}

		if _, err := s.Retire(ctx, 2, h10+60*minute, []string{"2026-12-02T10"}); err != nil {
			t.Fatal(err)
		}
		for k := range dump(t, rdb) {
			if strings.Contains(k, "2026-12-02T10") {
				t.Fatalf("retired window left %s", k)
			}
		}
		got, err := s.ReadWindow(ctx, 2, "2026-12-02T10")
		if err != nil || got.Held || len(got.Corrections) != 0 || got.Retired != h10+60*minute {
			t.Fatalf("after retirement: %+v, %v", got, err)
		}
	})
}

func wire0(p int) wire.Partial { return wire.Partial{Partition: p} }

// TestExplainRecordCost measures, on a real redis-server, what the explain
// record adds to one window in one partition (MEMORY USAGE of its key):
// nothing without corrections or duplicates, a small hash otherwise. The
// figures are in docs/performance.md; the bounds keep them honest.
func TestExplainRecordCost(t *testing.T) {
	ctx := context.Background()
	r := testenv.RedisServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr()})
	t.Cleanup(func() { rdb.Close() })
	keys := Keys{Prefix: "rf:1:"}
	s := NewStore(rdb, Config{Keys: keys, Lateness: 5 * time.Minute, Grace: time.Hour})
	for p, tc := range []struct {
		corrections, dups int
		maxBytes          int64
	}{
		{0, 0, 0}, {0, 5, 120}, {1, 0, 140}, {10, 5, 600}, {100, 5, 4500}, {1000, 5, 90000},
	} {
		seq := uint64(1)
		recs := []Record{
			{Seq: seq, Kind: Submission, EventID: fmt.Sprintf("pos-%04d:2026-12-02:%09d", p, 0), Time: h10 + minute},
			{Seq: seq, Kind: Other, EventID: "move", Time: h10 + 70*minute}, // the window's watermark passes its end
		}
		for i := 0; i < tc.corrections; i++ {
			recs = append(recs, Record{Seq: seq, Kind: Submission, EventID: fmt.Sprintf("pos-%04d:2026-12-02:%09d", p, i+1), Time: h10 + 2*minute})
		}
		for i := 0; i < tc.dups; i++ {
			recs = append(recs, Record{Seq: seq, Kind: Submission, EventID: fmt.Sprintf("pos-%04d:2026-12-02:%09d", p, 0), Time: h10 + minute})
		}
		if _, err := s.Apply(ctx, p, recs, 0, 0); err != nil {
			t.Fatal(err)
		}
		used, err := rdb.MemoryUsage(ctx, keys.Explain(p, "2026-12-02T10")).Result()
		if err == redis.Nil {
			used = 0
		} else if err != nil {
			t.Fatal(err)
		}
		enc, _ := rdb.ObjectEncoding(ctx, keys.Explain(p, "2026-12-02T10")).Result()
		t.Logf("explain record: %4d corrections, %d duplicates: %6d bytes (%s)", tc.corrections, tc.dups, used, enc)
		if used > tc.maxBytes {
			t.Fatalf("%d corrections, %d duplicates cost %d bytes, want at most %d", tc.corrections, tc.dups, used, tc.maxBytes)
		}
	}
}
