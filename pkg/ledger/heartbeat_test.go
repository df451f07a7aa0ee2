package ledger

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/receiptflow/receiptflow/pkg/window"
)

// busyPartition is one partition's VALID records: a submission every
// minute from 10:00 for two hours, each followed, every `every` records,
// by a heartbeat whose progress is three hours ahead (another partition of
// the source runs ahead of this one). every <= 0 sends no heartbeat but
// the end-of-stream one.
func busyPartition(every int) []Record {
	var recs []Record
	seq := uint64(0)
	for i := range 120 {
		seq++
		recs = append(recs, Record{Seq: seq, Kind: Submission, EventID: fmt.Sprintf("e%03d", i), Time: h10 + int64(i)*minute})
		if every > 0 && (i+1)%every == 0 {
			seq++
			recs = append(recs, Record{Seq: seq, Kind: Heartbeat, Time: h10 + int64(i)*minute + 180*minute})
		}
	}
	seq++
	return append(recs, Record{Seq: seq, Kind: Heartbeat, Time: window.EndOfStream})
}

// submissionCodes are the decisions on the submissions of res, by event id.
func submissionCodes(recs []Record, res *Result) map[string]Code {
	out := map[string]Code{}
	for i, r := range recs {
		if r.Kind == Submission {
			out[r.EventID] = res.Decisions[i].Code
		}
	}
	return out
}

// TestHeartbeatFrequencyDoesNotChangeResults: docs/spec.md §3 — a heartbeat
// advances only a partition that got no event since the previous
// heartbeat. A partition that gets an event between every two heartbeats
// is decided by its own events alone, however often heartbeats come; the
// end-of-stream heartbeat still closes every window.
func TestHeartbeatFrequencyDoesNotChangeResults(t *testing.T) {
	backends(t, func(t *testing.T, rdb *redis.Client) {
		ctx := context.Background()
		var want map[string]Code
		for _, every := range []int{0, 1, 2, 7, 50} {
			s := NewStore(rdb, Config{Keys: Keys{Prefix: fmt.Sprintf("rf:hb%d:", every)}, Lateness: 5 * time.Minute, Grace: time.Hour})
			recs := busyPartition(every)
			res, err := s.Apply(ctx, 0, recs, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			got := submissionCodes(recs, res)
			if every == 0 {
				want = got
				for id, c := range got {
					if c != Counted {
						t.Fatalf("no heartbeats: %s is %s, want every event counted on time", id, c)
					}
				}
			} else if !reflect.DeepEqual(got, want) {
				var diff []string
				for id, c := range got {
					if c != want[id] {
						diff = append(diff, fmt.Sprintf("%s %s (without heartbeats %s)", id, c, want[id]))
					}
				}
				t.Errorf("heartbeat every %d records: %d decisions changed, e.g. %v", every, len(diff), firstN(diff, 3))
			}
			if wm := res.Watermark; wm != window.EndOfStream-5*minute {
				t.Errorf("heartbeat every %d: watermark after end of stream %d, want %d", every, wm, window.EndOfStream-5*minute)
			}
		}
	})
}

// TestHeartbeatAdvancesIdlePartitionOnly: a heartbeat after an event does
// not move the watermark; the next one, with no event in between, does; a
// retry changes nothing, not even whether the partition is busy. Applying
// the records again, whole or in two halves, changes nothing.
func TestHeartbeatAdvancesIdlePartitionOnly(t *testing.T) {
	backends(t, func(t *testing.T, rdb *redis.Client) {
		ctx := context.Background()
		recs := []Record{
			{Seq: 1, Kind: Heartbeat, Time: h10},                            // idle since the start: W = 09:55
			{Seq: 2, Kind: Submission, EventID: "a", Time: h10 + 10*minute}, // W = 10:05
			{Seq: 3, Kind: Heartbeat, Time: h10 + 200*minute},               // busy (a): W stays 10:05
			{Seq: 4, Kind: Submission, EventID: "a", Time: h10 + 10*minute}, // retry
			{Seq: 5, Kind: Heartbeat, Time: h10 + 200*minute},               // idle (a retry is nothing): W = 13:15
			{Seq: 6, Kind: Other, EventID: "v", Time: h10},                  // busy, W stays
			{Seq: 7, Kind: Heartbeat, Time: h10 + 400*minute},               // busy (v): W stays 13:15
			{Seq: 8, Kind: Submission, EventID: "b", Time: h10 + 20*minute}, // too late against 13:15
			{Seq: 9, Kind: Heartbeat, Time: h10 + 400*minute},               // busy (b): stays
		}
		want := []Code{Progress, Counted, Progress, Duplicate, Progress, Ignored, Progress, Late, Progress}
		wms := []int64{h10 - 5*minute, h10 + 5*minute, h10 + 5*minute, h10 + 5*minute, h10 + 195*minute, h10 + 195*minute, h10 + 195*minute, h10 + 195*minute, h10 + 195*minute}
		for half := range 2 {
			s := NewStore(rdb, Config{Keys: Keys{Prefix: fmt.Sprintf("rf:idle%d:", half)}, Lateness: 5 * time.Minute, Grace: time.Hour})
			var res *Result
			var err error
			if half == 0 {
				res, err = s.Apply(ctx, 1, recs, 0, 0)
			} else {
				// One record at a time: the busy flag lives in the
				// checkpoint, not in the script call.
				res = &Result{}
				for _, r := range recs {
					one, err := s.Apply(ctx, 1, []Record{r}, 0, 0)
					if err != nil {
						t.Fatal(err)
					}
					if one.Watermark != wms[r.Seq-1] {
						t.Errorf("after seq %d: watermark %s, want %s", r.Seq, window.Time(one.Watermark), window.Time(wms[r.Seq-1]))
					}
					res.Decisions = append(res.Decisions, one.Decisions...)
					res.Watermark = one.Watermark
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := codes(res); !reflect.DeepEqual(got, want) {
				t.Fatalf("decisions = %v, want %v", got, want)
			}
			if d := res.Decisions[7]; d.Watermark != h10+195*minute {
				t.Errorf("late decision judged against %s, want 13:15", window.Time(d.Watermark))
			}
			if res.Watermark != h10+195*minute {
				t.Errorf("watermark %s, want 13:15", window.Time(res.Watermark))
			}
			before := dump(t, rdb)
			for _, part := range [][]Record{recs, recs[:4], recs[4:]} {
				again, err := s.Apply(ctx, 1, part, 0, 0)
				if err != nil {
					t.Fatal(err)
				}
				for i, d := range again.Decisions {
					if d.Code != Replayed && d.Code != LateAgain {
						t.Fatalf("replay %d = %+v", i, d)
					}
				}
			}
			if after := dump(t, rdb); !reflect.DeepEqual(before, after) {
				t.Fatalf("applying again changed state:\nbefore %v\nafter  %v", before, after)
			}
		}
	})
}

func firstN(s []string, n int) []string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
