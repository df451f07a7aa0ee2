package ledger

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/receiptflow/receiptflow/pkg/window"
)

// h12 is two hours after h10 (ms); t0 a broker time three days later.
var (
	h12 = h10 + 120*minute
	t0  = h12 + 3*24*60*minute
)

// sourced is a submission of source src received at broker time at.
func sourced(seq uint64, id string, t int64, src string, at int64) Record {
	return Record{Seq: seq, Kind: Submission, EventID: id, Time: t, Source: src, Received: at}
}

// beat is a heartbeat of source src with progress t, received at at.
func beat(seq uint64, t int64, src string, at int64, leave bool) Record {
	return Record{Seq: seq, Kind: Heartbeat, Time: t, Source: src, Received: at, Leave: leave}
}

// twoSources is partition 0 of the scenario of docs/spec.md §3.1: source b
// sends 60 submissions of 10:00–10:59 in order, and between its 30th and
// 31st, two of source a's heartbeats (a's events went to other
// partitions) reach every partition.
func twoSources(a, b string) []Record {
	var recs []Record
	seq := uint64(0)
	for i := range 60 {
		if i == 30 {
			// a's heartbeats after its 1000th and 2000th records.
			for k := range int64(2) {
				seq++
				recs = append(recs, beat(seq, h12+(20+20*k)*minute, a, t0+(31+k)*time.Second.Milliseconds(), false))
			}
		}
		seq++
		recs = append(recs, sourced(seq, fmt.Sprintf("b%02d", i), h10+int64(i)*minute, b, t0+int64(i)*50))
	}
	return recs
}

func codeCounts(recs []Record, res *Result) map[Code]int {
	out := map[Code]int{}
	for i, r := range recs {
		if r.Kind == Submission {
			out[res.Decisions[i].Code]++
		}
	}
	return out
}

// TestSourcesDoNotMakeEachOthersEventsLate: with sources apart, a's
// heartbeat does not raise b's partition past b's own progress, so b's
// in-order events are all counted on time; written as one source (the rule
// of docs/spec.md §3 alone) the same messages make b's last 30 too late.
func TestSourcesDoNotMakeEachOthersEventsLate(t *testing.T) {
	backends(t, func(t *testing.T, rdb *redis.Client) {
		ctx := context.Background()
		for _, c := range []struct {
			a, b string
			want map[Code]int
		}{
			{"a", "b", map[Code]int{Counted: 60}},
			{"", "", map[Code]int{Counted: 30, Late: 30}},
		} {
			s := NewStore(rdb, Config{Keys: Keys{Prefix: "rf:" + c.a + c.b + ":"}, Lateness: 5 * time.Minute, Grace: time.Hour})
			recs := twoSources(c.a, c.b)
			res, err := s.Apply(ctx, 0, recs, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if got := codeCounts(recs, res); !reflect.DeepEqual(got, c.want) {
				t.Errorf("sources %q and %q: decisions %v, want %v", c.a, c.b, got, c.want)
			}
		}
	})
}

// TestSourceIdleLeaveAndEndOfStream: a source stops holding a partition
// when its progress stands still for --source-idle of broker time, or
// when it leaves; its progress growing makes it live again; the end of
// stream closes every window whatever sources are live.
func TestSourceIdleLeaveAndEndOfStream(t *testing.T) {
	backends(t, func(t *testing.T, rdb *redis.Client) {
		ctx := context.Background()
		s := NewStore(rdb, Config{Keys: Keys{Prefix: "rf:idle:"}, Lateness: 5 * time.Minute, Grace: time.Hour, SourceIdle: 2 * time.Minute})
		sec := time.Second.Milliseconds()
		steps := []struct {
			rec  Record
			want int64 // W_p after it
		}{
			{sourced(1, "b1", h10, "b", t0), h10 - 5*minute},
			{beat(2, h12, "a", t0+1*sec, false), h10 - 5*minute},
			// b's progress stands still for 119 s: still live.
			{beat(3, h12+minute, "a", t0+119*sec, false), h10 - 5*minute},
			// b sends, but its progress does not grow: 2 minutes of broker
			// time on, a alone holds.
			{sourced(4, "b0", h10-minute, "b", t0+121*sec), h12 + minute - 5*minute},
			{beat(5, h12+2*minute, "a", t0+130*sec, false), h12 + 2*minute - 5*minute},
			// b grows again: live again, W_p stays (it never goes back).
			{sourced(6, "b2", h10+minute, "b", t0+131*sec), h12 + 2*minute - 5*minute},
			{beat(7, h12+20*minute, "a", t0+132*sec, false), h12 + 2*minute - 5*minute},
			// b leaves (its own last progress counts once more), then a
			// alone holds; a new source c holds from its first message on.
			{beat(8, h10+minute, "b", t0+133*sec, true), h12 + 2*minute - 5*minute},
			{sourced(9, "c1", h12+21*minute, "c", t0+134*sec), h12 + 20*minute - 5*minute},
			{beat(10, h12+40*minute, "a", t0+135*sec, false), h12 + 21*minute - 5*minute},
			// c's end of stream closes everything, a notwithstanding.
			{beat(11, window.EndOfStream, "c", t0+136*sec, true), window.EndOfStream - 5*minute},
		}
		for i, st := range steps {
			res, err := s.Apply(ctx, 0, []Record{st.rec}, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if res.Watermark != st.want {
				t.Fatalf("step %d (%+v): W_p %s, want %s", i+1, st.rec, window.Time(res.Watermark), window.Time(st.want))
			}
		}
		srcs, err := rdb.HGetAll(ctx, s.keys.Sources(0)).Result()
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := srcs["b"]; ok || len(srcs) != 1 {
			t.Errorf("sources after b and c left: %v, want a alone", srcs)
		}
	})
}

// TestSourceForgotten: a source whose progress has not grown for
// window.SourceForget of the partition's broker time is forgotten; when it
// sends again it is new, and holds from that message on.
func TestSourceForgotten(t *testing.T) {
	backends(t, func(t *testing.T, rdb *redis.Client) {
		ctx := context.Background()
		s := NewStore(rdb, Config{Keys: Keys{Prefix: "rf:forget:"}, Lateness: 0, Grace: time.Hour})
		day := window.SourceForget.Milliseconds()
		recs := []Record{
			sourced(1, "b1", h12, "b", t0),
			sourced(2, "a1", h12, "a", t0),
			beat(3, h12+30*minute, "a", t0+day-1, false),
		}
		if _, err := s.Apply(ctx, 0, recs, 0, 0); err != nil {
			t.Fatal(err)
		}
		if n, _ := rdb.HLen(ctx, s.keys.Sources(0)).Result(); n != 2 {
			t.Fatalf("%d sources a moment before the forget time, want 2", n)
		}
		res, err := s.Apply(ctx, 0, []Record{beat(4, h12+31*minute, "a", t0+day, false)}, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if srcs, _ := rdb.HGetAll(ctx, s.keys.Sources(0)).Result(); len(srcs) != 1 || srcs["a"] == "" {
			t.Fatalf("sources after the forget time: %v, want a alone", srcs)
		}
		if res.Watermark != h12+31*minute {
			t.Fatalf("W_p %s, want a's progress", window.Time(res.Watermark))
		}
		// b comes back with an old event: new, live, it holds W_p where it
		// is (never back).
		res, err = s.Apply(ctx, 0, []Record{sourced(5, "b2", h12+minute, "b", t0+day+1), beat(6, h12+50*minute, "a", t0+day+2, false)}, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if res.Watermark != h12+31*minute {
			t.Fatalf("W_p %s after b came back, want it held at %s", window.Time(res.Watermark), window.Time(h12+31*minute))
		}
	})
}

// TestSourcesReplaySafe: random interleavings of three sources, applied in
// one call, in random batches, and with every batch applied twice, give
// the same decisions, watermarks and state: the sources' state is part of
// the checkpoint.
func TestSourcesReplaySafe(t *testing.T) {
	backends(t, func(t *testing.T, rdb *redis.Client) {
		ctx := context.Background()
		for seed := range uint64(5) {
			r := rand.New(rand.NewPCG(seed, 7))
			recs := randomSources(r, 300)
			var want []Code
			var wantWM int64
			for _, mode := range []string{"whole", "batches", "twice"} {
				s := NewStore(rdb, Config{Keys: Keys{Prefix: fmt.Sprintf("rf:rs%d%s:", seed, mode)}, Lateness: 5 * time.Minute, Grace: 30 * time.Minute, SourceIdle: time.Minute})
				var got []Code
				var wm int64
				for i := 0; i < len(recs); {
					n := len(recs) - i
					if mode != "whole" {
						n = min(n, 1+r.IntN(40))
					}
					res, err := s.Apply(ctx, 0, recs[i:i+n], 0, 0)
					if err != nil {
						t.Fatal(err)
					}
					if mode == "twice" {
						again, err := s.Apply(ctx, 0, recs[i:i+n], 0, 0)
						if err != nil {
							t.Fatal(err)
						}
						if again.Watermark != res.Watermark {
							t.Fatalf("seed %d: a batch applied again moved W_p %d -> %d", seed, res.Watermark, again.Watermark)
						}
					}
					for _, d := range res.Decisions {
						got = append(got, d.Code)
					}
					wm = res.Watermark
					i += n
				}
				if mode == "whole" {
					want, wantWM = got, wm
					continue
				}
				if !reflect.DeepEqual(got, want) || wm != wantWM {
					t.Fatalf("seed %d, %s: decisions or W_p (%d) differ from one call (%d)", seed, mode, wm, wantWM)
				}
			}
		}
	})
}

// randomSources is n VALID records of partition 0 from three sources, each
// in its own event-time order from its own start, with heartbeats (some
// leaving), retries and broker time moving on by up to 20 s a record.
func randomSources(r *rand.Rand, n int) []Record {
	type src struct {
		id   string
		t    int64
		sent int
	}
	srcs := []*src{{id: "live", t: h12}, {id: "catching-up", t: h10}, {id: "", t: h10 + 30*minute}}
	at := t0
	var recs []Record
	for i := range n {
		s := srcs[r.IntN(len(srcs))]
		at += r.Int64N(20 * time.Second.Milliseconds())
		seq := uint64(i + 1)
		switch k := r.IntN(10); {
		case k == 0:
			recs = append(recs, beat(seq, s.t+r.Int64N(10*minute), s.id, at, r.IntN(4) == 0))
		case k == 1 && s.sent > 0:
			recs = append(recs, sourced(seq, fmt.Sprintf("%s-%d", s.id, r.IntN(s.sent)), s.t, s.id, at)) // a retry
		default:
			s.t += r.Int64N(3 * minute)
			recs = append(recs, sourced(seq, fmt.Sprintf("%s-%d", s.id, s.sent), s.t, s.id, at))
			s.sent++
		}
	}
	return recs
}

// TestLegacyCheckpointCarriesOn: a checkpoint written before sources (a
// busy field, no sources hash) goes on as the one legacy source: a
// heartbeat that the old rule would not let move a busy partition does not
// move it now either.
func TestLegacyCheckpointCarriesOn(t *testing.T) {
	backends(t, func(t *testing.T, rdb *redis.Client) {
		ctx := context.Background()
		s := NewStore(rdb, Config{Keys: Keys{Prefix: "rf:legacy:"}, Lateness: 5 * time.Minute, Grace: time.Hour})
		ck := s.keys.Checkpoint(0)
		if err := rdb.HSet(ctx, ck, "seq", 10, "wm", h10+30*minute-5*minute, "busy", 1, "raw", 0, "entries", 0, "pub", 0).Err(); err != nil {
			t.Fatal(err)
		}
		res, err := s.Apply(ctx, 0, []Record{{Seq: 11, Kind: Heartbeat, Time: h12}}, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if res.Watermark != h10+25*minute {
			t.Fatalf("a heartbeat moved a busy legacy partition to %s", window.Time(res.Watermark))
		}
		res, err = s.Apply(ctx, 0, []Record{{Seq: 12, Kind: Heartbeat, Time: h12}}, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if res.Watermark != h12-5*minute {
			t.Fatalf("the next heartbeat left W_p at %s", window.Time(res.Watermark))
		}
		if busy, _ := rdb.HExists(ctx, ck, "busy").Result(); busy {
			t.Error("the old busy field is still in the checkpoint")
		}
	})
}
