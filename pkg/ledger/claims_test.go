package ledger

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// claimStep is one Claims call of a single claim and the conflict it must
// report.
type claimStep struct {
	seq      uint64
	fp       uint64
	day      int64
	conflict bool
}

func runClaimSteps(t *testing.T, s *Store, id string, steps []claimStep) {
	t.Helper()
	for i, st := range steps {
		got, err := s.Claims(context.Background(), []Claim{{EventID: id, Fingerprint: st.fp, Seq: st.seq, Day: st.day}})
		if err != nil {
			t.Fatal(err)
		}
		if got[0] != st.conflict {
			t.Fatalf("step %d (seq %d, fingerprint %d, day %d): conflict %v, want %v", i, st.seq, st.fp, st.day, got[0], st.conflict)
		}
	}
}

// TestClaimLowestSequenceTakesOver (docs/spec.md §2): between copies with
// different content the lowest RAW sequence holds the id, whatever order
// the claims arrive in; a copy with the holder's content is never a
// conflict.
func TestClaimLowestSequenceTakesOver(t *testing.T) {
	backends(t, func(t *testing.T, rdb *redis.Client) {
		s := NewStore(rdb, Config{Keys: Keys{Prefix: "rf:1:"}, Lateness: 5 * time.Minute, Grace: time.Hour, Horizon: 24 * time.Hour})
		day := time.Now().Unix() / 86400
		runClaimSteps(t, s, "ev-1", []claimStep{
			{seq: 10, fp: 1, day: day},                 // first seen: holds
			{seq: 5, fp: 2, day: day},                  // lower, other content: takes over
			{seq: 10, fp: 1, day: day, conflict: true}, // the first copy again: now conflicting
			{seq: 5, fp: 2, day: day},                  // the holder again (a redelivery)
			{seq: 7, fp: 1, day: day, conflict: true},  // between: conflicting
			{seq: 12, fp: 2, day: day},                 // later, holder's content: a retry, no conflict
			{seq: 3, fp: 1, day: day - 1},              // lower still, a day earlier: takes over
			{seq: 5, fp: 2, day: day, conflict: true},
			{seq: 10, fp: 1, day: day},
		})
	})
}

// TestClaimOrderDoesNotDecide: the same copies claimed in every order end
// with the same holder and the same verdicts once all are claimed.
func TestClaimOrderDoesNotDecide(t *testing.T) {
	backends(t, func(t *testing.T, rdb *redis.Client) {
		ctx := context.Background()
		day := time.Now().Unix() / 86400
		copies := []Claim{{Seq: 4, Fingerprint: 7}, {Seq: 9, Fingerprint: 8}, {Seq: 20, Fingerprint: 7}, {Seq: 31, Fingerprint: 9}}
		want := []bool{false, true, false, true}
		for _, order := range [][]int{{0, 1, 2, 3}, {3, 2, 1, 0}, {1, 3, 0, 2}, {2, 0, 3, 1}} {
			s := NewStore(rdb, Config{Keys: Keys{Prefix: fmt.Sprintf("rf:o%v:", order)}, Lateness: 5 * time.Minute, Grace: time.Hour, Horizon: 24 * time.Hour})
			for _, i := range order {
				c := copies[i]
				c.EventID, c.Day = "ev", day
				if _, err := s.Claims(ctx, []Claim{c}); err != nil {
					t.Fatal(err)
				}
			}
			all := make([]Claim, len(copies))
			for i, c := range copies {
				c.EventID, c.Day = "ev", day
				all[i] = c
			}
			// Reading only gives the same verdicts, a copy at a time or
			// all together.
			read, _, err := s.ClaimConflicts(ctx, all)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(read, want) {
				t.Errorf("order %v: ClaimConflicts %v, want %v", order, read, want)
			}
			for i, c := range copies {
				c.EventID, c.Day = "ev", day
				got, err := s.Claims(ctx, []Claim{c})
				if err != nil {
					t.Fatal(err)
				}
				if got[0] != want[i] {
					t.Errorf("order %v: copy at %d conflict %v, want %v", order, c.Seq, got[0], want[i])
				}
			}
		}
	})
}

// TestClaimTwiceSameState: claiming the same batch again changes nothing
// and decides the same; a redelivered copy (equal sequence) is not a
// conflict.
func TestClaimTwiceSameState(t *testing.T) {
	backends(t, func(t *testing.T, rdb *redis.Client) {
		ctx := context.Background()
		s := NewStore(rdb, Config{Keys: Keys{Prefix: "rf:1:"}, Lateness: 5 * time.Minute, Grace: time.Hour, Horizon: 24 * time.Hour})
		day := time.Now().Unix() / 86400
		batch := []Claim{
			{EventID: "a", Fingerprint: 1, Seq: 3, Day: day},
			{EventID: "b", Fingerprint: 2, Seq: 4, Day: day},
			{EventID: "a", Fingerprint: 5, Seq: 6, Day: day},
			{EventID: "a", Fingerprint: 1, Seq: 8, Day: day},
		}
		first, err := s.Claims(ctx, batch)
		if err != nil {
			t.Fatal(err)
		}
		if want := []bool{false, false, true, false}; !reflect.DeepEqual(first, want) {
			t.Fatalf("first call %v, want %v", first, want)
		}
		state := dump(t, rdb)
		again, err := s.Claims(ctx, batch)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(again, first) {
			t.Fatalf("second call %v, first %v", again, first)
		}
		if after := dump(t, rdb); !reflect.DeepEqual(after, state) {
			t.Fatalf("second call changed the state:\n%v\n%v", state, after)
		}
	})
}

// TestClaimsKeptForTheHorizon (docs/spec.md §2): a conflict is detected
// for as long as the ledger keeps the id: with the default 24 h horizon
// a conflicting copy ingested two days after the first is still caught
// (before, claims were looked up one day back); a store without a horizon
// keeps its ledger, and its claims, for ever.
func TestClaimsKeptForTheHorizon(t *testing.T) {
	backends(t, func(t *testing.T, rdb *redis.Client) {
		day := time.Now().Unix() / 86400
		s := NewStore(rdb, Config{Keys: Keys{Prefix: "rf:1:"}, Lateness: 5 * time.Minute, Grace: time.Hour, Horizon: 24 * time.Hour})
		runClaimSteps(t, s, "ev-h", []claimStep{
			{seq: 1, fp: 1, day: day},
			{seq: 2, fp: 2, day: day + 2, conflict: true},
		})
		forever := NewStore(rdb, Config{Keys: Keys{Prefix: "rf:2:"}, Lateness: 5 * time.Minute, Grace: time.Hour})
		runClaimSteps(t, forever, "ev-h", []claimStep{
			{seq: 1, fp: 1, day: day},
			{seq: 2, fp: 2, day: day + 40, conflict: true},
		})
	})
}

// TestClaimWithoutSequenceHolds: a claim written without a sequence (by an
// older validator, or a caller that does not know it) ranks before every
// known sequence.
func TestClaimWithoutSequenceHolds(t *testing.T) {
	backends(t, func(t *testing.T, rdb *redis.Client) {
		s := NewStore(rdb, Config{Keys: Keys{Prefix: "rf:1:"}, Lateness: 5 * time.Minute, Grace: time.Hour, Horizon: 24 * time.Hour})
		day := time.Now().Unix() / 86400
		runClaimSteps(t, s, "ev-0", []claimStep{
			{seq: 0, fp: 1, day: day},
			{seq: 1, fp: 2, day: day, conflict: true},
			{seq: 0, fp: 3, day: day, conflict: true},
			{seq: 0, fp: 1, day: day},
		})
	})
}

// TestClaimReadsSeeEveryDayAndWriteNothing: ClaimConflicts and
// ClaimHolders (claims.lua's "read" mode) find the holder over every kept
// day, the lowest sequence first, judge an id no day holds against the
// batch's first copy, and write nothing: an id they read is not claimed.
func TestClaimReadsSeeEveryDayAndWriteNothing(t *testing.T) {
	backends(t, func(t *testing.T, rdb *redis.Client) {
		ctx := context.Background()
		s := NewStore(rdb, Config{Keys: Keys{Prefix: "rf:1:"}, Lateness: 5 * time.Minute, Grace: time.Hour, Horizon: 24 * time.Hour})
		if s.ClaimDays() < 3 {
			t.Fatalf("ClaimDays %d: the test needs three kept days", s.ClaimDays())
		}
		day := time.Now().Unix() / 86400
		for _, c := range []Claim{
			{EventID: "a", Fingerprint: 2, Seq: 9, Day: day},
			{EventID: "a", Fingerprint: 1, Seq: 3, Day: day - 2}, // lower, two days back: holds a
			{EventID: "b", Fingerprint: 5, Seq: 5, Day: day - 1},
		} {
			if _, err := s.Claims(ctx, []Claim{c}); err != nil {
				t.Fatal(err)
			}
		}
		before := dump(t, rdb)
		read := []Claim{
			{EventID: "a", Fingerprint: 2, Seq: 9, Day: day},
			{EventID: "a", Fingerprint: 1, Seq: 3, Day: day},
			{EventID: "b", Fingerprint: 5, Seq: 5, Day: day},
			{EventID: "c", Fingerprint: 7, Seq: 11, Day: day}, // never claimed
			{EventID: "c", Fingerprint: 8, Seq: 12, Day: day},
		}
		conflict, _, err := s.ClaimConflicts(ctx, read)
		if err != nil {
			t.Fatal(err)
		}
		if want := []bool{true, false, false, false, true}; !reflect.DeepEqual(conflict, want) {
			t.Errorf("ClaimConflicts = %v, want %v", conflict, want)
		}
		holders, err := s.ClaimHolders(ctx, read)
		if err != nil {
			t.Fatal(err)
		}
		if want := []uint64{3, 3, 5, 0, 0}; !reflect.DeepEqual(holders, want) {
			t.Errorf("ClaimHolders = %v, want %v", holders, want)
		}
		if after := dump(t, rdb); !reflect.DeepEqual(after, before) {
			t.Errorf("reading the claims wrote to Redis:\nbefore %v\nafter  %v", before, after)
		}
	})
}
