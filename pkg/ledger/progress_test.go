package ledger

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestClaimProgressNeverGoesBack: marking a partition's claim progress
// keeps the highest sequence; marking again or lower changes nothing.
func TestClaimProgressNeverGoesBack(t *testing.T) {
	backends(t, func(t *testing.T, rdb *redis.Client) {
		ctx := context.Background()
		s := NewStore(rdb, Config{Keys: Keys{Prefix: "rf:1:"}, Lateness: 5 * time.Minute, Grace: time.Hour, Horizon: 24 * time.Hour})
		if pr, err := s.ClaimProgress(ctx); err != nil || len(pr) != 0 {
			t.Fatalf("fresh progress %v, %v; want none", pr, err)
		}
		steps := []struct {
			p    int
			seq  uint64
			want Claimed
		}{
			{0, 10, Claimed{0: 10}},
			{1, 4, Claimed{0: 10, 1: 4}},
			{0, 7, Claimed{0: 10, 1: 4}},
			{0, 10, Claimed{0: 10, 1: 4}},
			{1, 40, Claimed{0: 10, 1: 40}},
		}
		for i, st := range steps {
			pr, err := s.MarkClaimed(ctx, st.p, st.seq, 0)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(pr, st.want) {
				t.Fatalf("step %d: progress %v, want %v", i, pr, st.want)
			}
		}
		if pr, err := s.ClaimProgress(ctx); err != nil || !reflect.DeepEqual(pr, Claimed{0: 10, 1: 40}) {
			t.Fatalf("progress %v, %v", pr, err)
		}
	})
}

// TestClaimThroughReadsProgressBeforeClaiming: ClaimThrough returns the
// progress as it was before its claims and marks its own partition after
// them; applied twice it decides the same and leaves the same state.
func TestClaimThroughReadsProgressBeforeClaiming(t *testing.T) {
	backends(t, func(t *testing.T, rdb *redis.Client) {
		ctx := context.Background()
		s := NewStore(rdb, Config{Keys: Keys{Prefix: "rf:1:"}, Lateness: 5 * time.Minute, Grace: time.Hour, Horizon: 24 * time.Hour})
		day := time.Now().Unix() / 86400
		if _, err := s.MarkClaimed(ctx, 1, 3, 0); err != nil {
			t.Fatal(err)
		}
		// Partition 1 claimed the id at RAW 3; partition 0's copy at RAW 2
		// with other content takes it over.
		if c, err := s.Claims(ctx, []Claim{{EventID: "x", Fingerprint: 1, Seq: 3, Day: day}}); err != nil || c[0] {
			t.Fatalf("first claim: %v, %v", c, err)
		}
		batch := []Claim{{EventID: "x", Fingerprint: 2, Seq: 2, Day: day}, {EventID: "y", Fingerprint: 3, Seq: 5, Day: day}}
		conflicts, before, err := s.ClaimThrough(ctx, 0, batch, 6, 0)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(conflicts, []bool{false, false}) || !reflect.DeepEqual(before, Claimed{1: 3}) {
			t.Fatalf("conflicts %v, progress before %v; want none, {1:3}", conflicts, before)
		}
		state := dump(t, rdb)
		again, before2, err := s.ClaimThrough(ctx, 0, batch, 6, 0)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(again, conflicts) || !reflect.DeepEqual(before2, Claimed{0: 6, 1: 3}) {
			t.Fatalf("again: conflicts %v, progress before %v", again, before2)
		}
		if after := dump(t, rdb); !reflect.DeepEqual(after, state) {
			t.Fatalf("applying twice changed the state:\n%v\n%v", state, after)
		}
		// Partition 1's copy is now the conflicting one.
		if c, err := s.Claims(ctx, []Claim{{EventID: "x", Fingerprint: 1, Seq: 3, Day: day}}); err != nil || !c[0] {
			t.Fatalf("the higher copy again: %v, %v; want a conflict", c, err)
		}
		// A batch with no valid records only marks.
		if c, _, err := s.ClaimThrough(ctx, 1, nil, 9, 0); err != nil || len(c) != 0 {
			t.Fatalf("empty batch: %v, %v", c, err)
		}
		if pr, _ := s.ClaimProgress(ctx); !reflect.DeepEqual(pr, Claimed{0: 6, 1: 9}) {
			t.Fatalf("progress %v", pr)
		}
	})
}

// TestClaimScriptsAfterScriptFlush: the first use after SCRIPT FLUSH loads
// the scripts again.
func TestClaimScriptsAfterScriptFlush(t *testing.T) {
	backends(t, func(t *testing.T, rdb *redis.Client) {
		ctx := context.Background()
		s := NewStore(rdb, Config{Keys: Keys{Prefix: "rf:1:"}, Lateness: 5 * time.Minute, Grace: time.Hour, Horizon: 24 * time.Hour})
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.ClaimThrough(ctx, 0, []Claim{{EventID: "z", Fingerprint: 1, Seq: 1, Day: 1}}, 1, 0); err != nil {
			t.Fatal(err)
		}
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.MarkClaimed(ctx, 0, 2, 0); err != nil {
			t.Fatal(err)
		}
	})
}

// TestClaimProgressBelowTheFloorIsARegression: a mark or a ClaimThrough
// that finds less progress than its writer last saw there (Redis lost
// writes) writes no progress and fails with ErrClaimsRegressed; with the
// floor met it marks as usual.
func TestClaimProgressBelowTheFloorIsARegression(t *testing.T) {
	backends(t, func(t *testing.T, rdb *redis.Client) {
		ctx := context.Background()
		s := NewStore(rdb, Config{Keys: Keys{Prefix: "rf:1:"}, Lateness: 5 * time.Minute, Grace: time.Hour, Horizon: 24 * time.Hour})
		if _, err := s.MarkClaimed(ctx, 0, 10, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := s.MarkClaimed(ctx, 0, 12, 10); err != nil {
			t.Fatalf("mark at the floor: %v", err)
		}
		// Redis loses the progress (a FLUSHALL, a replica promoted).
		if err := rdb.Del(ctx, s.keys.ClaimProgress()).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.MarkClaimed(ctx, 0, 20, 12); !errors.Is(err, ErrClaimsRegressed) {
			t.Fatalf("mark over a loss: %v, want ErrClaimsRegressed", err)
		}
		claims := []Claim{{EventID: "x", Fingerprint: 1, Seq: 15, Day: 1}}
		if _, _, err := s.ClaimThrough(ctx, 0, claims, 20, 12); !errors.Is(err, ErrClaimsRegressed) {
			t.Fatalf("ClaimThrough over a loss: %v, want ErrClaimsRegressed", err)
		}
		if pr, err := s.ClaimProgress(ctx); err != nil || pr.Through(0) != 0 {
			t.Fatalf("progress after refused marks %v, %v; want none", pr, err)
		}
		if _, _, err := s.ClaimThrough(ctx, 0, claims, 20, 0); err != nil {
			t.Fatal(err)
		}
		if pr, _ := s.ClaimProgress(ctx); pr.Through(0) != 20 {
			t.Fatalf("progress %v, want 0 through 20", pr)
		}
	})
}

// TestClaimsUnmovedSeesEveryTakeover: after a ClaimRound, ClaimsUnmoved
// says unmoved while claims of new ids, the same copies again and later
// copies come in, and moved once a lower copy takes any claim over; a
// Redis that lost its data says it through the progress it returns.
func TestClaimsUnmovedSeesEveryTakeover(t *testing.T) {
	backends(t, func(t *testing.T, rdb *redis.Client) {
		ctx := context.Background()
		s := NewStore(rdb, Config{Keys: Keys{Prefix: "rf:1:"}, Lateness: 5 * time.Minute, Grace: time.Hour, Horizon: 24 * time.Hour})
		day := time.Now().Unix() / 86400
		r, err := s.ClaimRound(ctx, 0, []Claim{{EventID: "a", Fingerprint: 1, Seq: 10, Day: day}, {EventID: "b", Fingerprint: 2, Seq: 11, Day: day}}, 11, 0)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Counted || !reflect.DeepEqual(r.Conflicts, []bool{false, false}) {
			t.Fatalf("round %+v: want counted, no conflicts", r)
		}
		unmoved := func(want bool, what string) {
			t.Helper()
			pr, ok, err := s.ClaimsUnmoved(ctx, r.Takeovers)
			if err != nil {
				t.Fatal(err)
			}
			if ok != want {
				t.Fatalf("%s: unmoved %v, want %v (progress %v)", what, ok, want, pr)
			}
		}
		unmoved(true, "right after the round")
		// Neither a new id, nor the same copy again, nor a later copy
		// with other content (a conflict, not a takeover) moves a claim.
		if _, _, err := s.ClaimThrough(ctx, 1, []Claim{{EventID: "c", Fingerprint: 3, Seq: 12, Day: day}, {EventID: "a", Fingerprint: 1, Seq: 10, Day: day}, {EventID: "b", Fingerprint: 9, Seq: 13, Day: day}}, 13, 0); err != nil {
			t.Fatal(err)
		}
		unmoved(true, "new id, same copy, later copy")
		// A lower copy of b with other content takes b over.
		if c, err := s.Claims(ctx, []Claim{{EventID: "b", Fingerprint: 7, Seq: 5, Day: day}}); err != nil || c[0] {
			t.Fatalf("lower copy: %v, %v; want it to hold", c, err)
		}
		unmoved(false, "after a takeover")
		r2, err := s.ClaimRound(ctx, 0, nil, 14, 11)
		if err != nil || r2.Takeovers != r.Takeovers+1 {
			t.Fatalf("round after the takeover: %+v, %v; want count %d", r2, err, r.Takeovers+1)
		}
		// Redis loses everything: the count starts again, and so does the
		// progress, which the caller checks.
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		pr, _, err := s.ClaimsUnmoved(ctx, 0)
		if err != nil || pr.Through(0) != 0 {
			t.Fatalf("after FLUSHALL: progress %v, %v; want partition 0 gone", pr, err)
		}
	})
}
