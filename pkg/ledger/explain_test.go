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

// TestExplainRecordIsWrittenWithTheCountAndKeptPastRetirement: apply keeps
// each correction's id with the partial version it produced and counts the
// duplicates dropped, in the same step; applying the batch again changes
// neither; Holds finds the window's ids; retiring the window deletes the
// partial and the ledger but keeps the record, with what explain reads of
// the partial (on time, version), until Forget (the publisher's prune).
func TestExplainRecordIsWrittenWithTheCountAndKeptPastRetirement(t *testing.T) {
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
		want := &WindowRecord{Partition: 2, Held: true, Duplicates: 3, OnTime: 1, Version: 4,
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

		kept := func(when string) {
			t.Helper()
			for k := range dump(t, rdb) {
				if strings.Contains(k, "2026-12-02T10") && k != s.keys.Explain(2, "2026-12-02T10") {
					t.Fatalf("%s: retired window left %s", when, k)
				}
			}
			got, err := s.ReadWindow(ctx, 2, "2026-12-02T10")
			if err != nil {
				t.Fatal(err)
			}
			want := &WindowRecord{Partition: 2, Retired: h10 + 60*minute, Partial: wire0(2), Kept: true, OnTime: 1, Version: 4,
				Duplicates: 3, Corrections: []CorrectionRecord{{EventID: "b", Version: 2}, {EventID: "e", Version: 3}}}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: record %+v, want %+v", when, got, want)
			}
		}
		for _, when := range []string{"retired", "retired again"} {
			if _, err := s.Retire(ctx, 2, h10+60*minute, []string{"2026-12-02T10"}); err != nil {
				t.Fatal(err)
			}
			kept(when)
		}
		for range 2 {
			if err := s.Forget(ctx, []int{0, 1, 2}, "2026-12-02T10"); err != nil {
				t.Fatal(err)
			}
		}
		for k := range dump(t, rdb) {
			if strings.Contains(k, "2026-12-02T10") {
				t.Fatalf("forgotten window left %s", k)
			}
		}
		got, err := s.ReadWindow(ctx, 2, "2026-12-02T10")
		if err != nil || got.Held || got.Kept || len(got.Corrections) != 0 || got.Retired != h10+60*minute {
			t.Fatalf("after Forget: %+v, %v", got, err)
		}
	})
}

func wire0(p int) wire.Partial { return wire.Partial{Partition: p} }

// TestExplainRecordCost measures, on a real redis-server, what the explain
// record adds to one window in one partition (MEMORY USAGE of its key):
// nothing without corrections or duplicates, a small hash otherwise; and
// what is kept of the window once its state is retired, until it is
// pruned: the record with the partial's on-time count and version. The
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
		maxBytes, maxKept int64
	}{
		{0, 0, 0, 120}, {0, 5, 120, 120}, {1, 0, 140, 160}, {10, 5, 600, 600}, {100, 5, 4500, 4500}, {1000, 5, 90000, 90000},
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
		if used > tc.maxBytes {
			t.Fatalf("%d corrections, %d duplicates cost %d bytes, want at most %d", tc.corrections, tc.dups, used, tc.maxBytes)
		}
		if _, err := s.Retire(ctx, p, h10+60*minute, []string{"2026-12-02T10"}); err != nil {
			t.Fatal(err)
		}
		kept, err := rdb.MemoryUsage(ctx, keys.Explain(p, "2026-12-02T10")).Result()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("explain record: %4d corrections, %d duplicates: %6d bytes (%s); kept after retirement: %6d bytes",
			tc.corrections, tc.dups, used, enc, kept)
		if kept > tc.maxKept {
			t.Fatalf("%d corrections, %d duplicates: %d bytes kept after retirement, want at most %d", tc.corrections, tc.dups, kept, tc.maxKept)
		}
	}
}
