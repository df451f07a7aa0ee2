package ledger

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/receiptflow/receiptflow/pkg/testenv"
)

func fenceStore(rdb Client) *Store {
	return NewStore(rdb, Config{Keys: Keys{Prefix: "rf:1:"}, Lateness: 5 * time.Minute, Grace: time.Hour, Horizon: 24 * time.Hour})
}

// fenceRecs are n submissions of partition p from VALID sequence from on.
func fenceRecs(from uint64, n int) []Record {
	base := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC).UnixMilli()
	recs := make([]Record, n)
	for i := range recs {
		seq := from + uint64(i)
		recs[i] = Record{Seq: seq, Kind: Submission, EventID: fmt.Sprintf("ev-%d", seq), Time: base + int64(seq)*1000, RawSeq: seq}
	}
	return recs
}

// partitionKeys dumps every key of windower partition p.
func partitionKeys(t *testing.T, rdb *redis.Client, p int) map[string]string {
	t.Helper()
	out := map[string]string{}
	tag := fmt.Sprintf("{p%d}", p)
	for k, v := range dump(t, rdb) {
		if strings.Contains(k, tag) {
			out[k] = v
		}
	}
	return out
}

// TestFencedWindowerStepsRefused: a windower partition's steps carry the
// owner's epoch. A newer epoch takes over and raises the fence; every step
// of an older one (apply, published mark, retirement) is then refused with
// ErrFenced and changes nothing; epoch 0 is not fenced (static mode), and
// another partition's fence is its own.
func TestFencedWindowerStepsRefused(t *testing.T) {
	r := testenv.RedisServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr()})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	s := fenceStore(rdb)
	old, next := s.Fence(map[int]uint64{0: 5, 1: 5}), s.Fence(map[int]uint64{0: 7})

	if _, err := old.Apply(ctx, 0, fenceRecs(1, 10), 0, 0); err != nil {
		t.Fatalf("first owner: %v", err)
	}
	res, err := next.Apply(ctx, 0, fenceRecs(11, 10), 10, 0)
	if err != nil {
		t.Fatalf("a later owner takes over: %v", err)
	}
	if res.Seq != 20 {
		t.Fatalf("checkpoint %d after the new owner's batch, want 20", res.Seq)
	}
	before := partitionKeys(t, rdb, 0)
	if _, err := old.Apply(ctx, 0, fenceRecs(21, 10), 10, 0); !errors.Is(err, ErrFenced) {
		t.Fatalf("stale apply: %v, want ErrFenced", err)
	}
	if err := old.MarkPublished(ctx, 0, 20); !errors.Is(err, ErrFenced) {
		t.Fatalf("stale published mark: %v, want ErrFenced", err)
	}
	if _, err := old.Retire(ctx, 0, time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC).UnixMilli(), nil); !errors.Is(err, ErrFenced) {
		t.Fatalf("stale retirement: %v, want ErrFenced", err)
	}
	if after := partitionKeys(t, rdb, 0); !reflect.DeepEqual(after, before) {
		t.Fatalf("the stale steps changed the partition:\nbefore %v\nafter  %v", before, after)
	}
	// The old owner's other partition is not fenced by partition 0's.
	if _, err := old.Apply(ctx, 1, fenceRecs(1, 3), 0, 0); err != nil {
		t.Fatalf("partition 1 under epoch 5: %v", err)
	}
	// The new owner goes on; epoch 0 (static mode) is not checked.
	if err := next.MarkPublished(ctx, 0, 20); err != nil {
		t.Fatal(err)
	}
	if res, err := s.Apply(ctx, 0, fenceRecs(21, 10), 20, 20); err != nil || res.Seq != 30 {
		t.Fatalf("unfenced apply: %v, %v", res, err)
	}
	if v, _ := rdb.HGet(ctx, s.Keys().Checkpoint(0), "fence").Result(); v != "7" {
		t.Fatalf("fence %q, want 7 (epoch 0 leaves it)", v)
	}
	// A still later owner takes over from there.
	if _, err := s.Fence(map[int]uint64{0: 9}).Apply(ctx, 0, fenceRecs(31, 1), 30, 20); err != nil {
		t.Fatal(err)
	}
	if _, err := next.Apply(ctx, 0, fenceRecs(32, 1), 31, 20); !errors.Is(err, ErrFenced) {
		t.Fatalf("epoch 7 after 9: %v, want ErrFenced", err)
	}
}

// TestUnfencedStoreWritesNoFence: a store without epochs leaves no fence
// and the same state as before fencing existed (static mode unchanged).
func TestUnfencedStoreWritesNoFence(t *testing.T) {
	backends(t, func(t *testing.T, rdb *redis.Client) {
		ctx := context.Background()
		s := fenceStore(rdb)
		for _, st := range []*Store{s, s.Fence(nil), s.Fence(map[int]uint64{3: 4})} {
			if _, err := st.Apply(ctx, 0, fenceRecs(1, 5), 0, 0); err != nil {
				t.Fatal(err)
			}
			if err := st.MarkPublished(ctx, 0, 5); err != nil {
				t.Fatal(err)
			}
			if _, err := st.MarkClaimed(ctx, 0, 5, 0); err != nil {
				t.Fatal(err)
			}
		}
		for k := range dump(t, rdb) {
			if strings.Contains(k, "fence") {
				t.Errorf("key %s written by an unfenced store", k)
			}
		}
		if v, err := rdb.HGet(ctx, s.Keys().Checkpoint(0), "fence").Result(); !errors.Is(err, redis.Nil) {
			t.Errorf("checkpoint fence %q, %v; want none", v, err)
		}
	})
}

// TestFencedClaimProgressRefused: a validator partition's marks carry the
// owner's epoch; a newer epoch takes over, and an older one's marks (alone
// or after its batch's claims) are refused with ErrFenced and leave the
// progress as it was; epoch 0 is not fenced.
func TestFencedClaimProgressRefused(t *testing.T) {
	backends(t, func(t *testing.T, rdb *redis.Client) {
		ctx := context.Background()
		s := fenceStore(rdb)
		old, next := s.Fence(map[int]uint64{0: 5, 1: 5}), s.Fence(map[int]uint64{0: 7})
		day := time.Now().Unix() / 86400
		claim := func(seq uint64) []Claim {
			return []Claim{{EventID: fmt.Sprintf("ev-%d", seq), Fingerprint: 1, Seq: seq, Day: day}}
		}
		if _, _, err := old.ClaimThrough(ctx, 0, claim(10), 10, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := next.MarkClaimed(ctx, 0, 20, 10); err != nil {
			t.Fatalf("a later owner takes over: %v", err)
		}
		if _, _, err := old.ClaimThrough(ctx, 0, claim(30), 30, 10); !errors.Is(err, ErrFenced) {
			t.Fatalf("stale claims and mark: %v, want ErrFenced", err)
		}
		if _, err := old.MarkClaimed(ctx, 0, 40, 10); !errors.Is(err, ErrFenced) {
			t.Fatalf("stale idle mark: %v, want ErrFenced", err)
		}
		if pr, err := s.ClaimProgress(ctx); err != nil || !reflect.DeepEqual(pr, Claimed{0: 20}) {
			t.Fatalf("progress %v, %v; want {0: 20}: the stale marks must not land", pr, err)
		}
		// Another partition's fence is its own; epoch 0 is not checked.
		if _, err := old.MarkClaimed(ctx, 1, 3, 0); err != nil {
			t.Fatal(err)
		}
		if pr, err := s.MarkClaimed(ctx, 0, 50, 0); err != nil || pr[0] != 50 {
			t.Fatalf("unfenced mark: %v, %v", pr, err)
		}
		if _, _, err := next.ClaimThrough(ctx, 0, claim(60), 60, 50); err != nil {
			t.Fatal(err)
		}
	})
}

// TestStaleClaimsAreHarmless: the claims themselves are not fenced (they
// are spread over every hash slot). A stale validator can only claim RAW
// records the successor also claims, with the same content and sequence;
// under the lowest-RAW-sequence rule the result does not depend on who
// claims first or how often, so any interleaving of a stale instance's
// claims with the successor's leaves the claims the successor alone
// leaves, and the successor's verdicts are the same.
func TestStaleClaimsAreHarmless(t *testing.T) {
	r := testenv.RedisServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr()})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	day := time.Now().Unix() / 86400
	rng := rand.New(rand.NewSource(27))
	// RAW partition 0's records: 40 ids, some with copies of other content
	// at later sequences.
	var raw []Claim
	for seq := uint64(1); seq <= 200; seq++ {
		id := rng.Intn(40)
		raw = append(raw, Claim{EventID: fmt.Sprintf("ev-%d", id), Fingerprint: uint64(1 + rng.Intn(2)), Seq: seq, Day: day})
	}
	batches := func(recs []Claim, n int) [][]Claim {
		var out [][]Claim
		for len(recs) > 0 {
			k := min(n, len(recs))
			out = append(out, recs[:k])
			recs = recs[k:]
		}
		return out
	}
	run := func(prefix string, stale bool) ([][]bool, map[string]string) {
		s := NewStore(rdb, Config{Keys: Keys{Prefix: prefix}, Lateness: 5 * time.Minute, Grace: time.Hour, Horizon: 24 * time.Hour})
		succ := s.Fence(map[int]uint64{0: 7})
		old := s.Fence(map[int]uint64{0: 5})
		var verdicts [][]bool
		for i, b := range batches(raw, 25) {
			if stale {
				// The stale instance claims a window of records around
				// the successor's batch (one it fetched before it paused,
				// or one it fetched again), before and after it.
				lo, hi := max(0, i*25-30), min(len(raw), i*25+40)
				if _, err := old.Claims(ctx, raw[lo:hi]); err != nil {
					t.Fatal(err)
				}
			}
			v, _, err := succ.ClaimThrough(ctx, 0, b, b[len(b)-1].Seq, 0)
			if err != nil {
				t.Fatal(err)
			}
			verdicts = append(verdicts, v)
			if stale {
				if _, _, err := old.ClaimThrough(ctx, 0, raw[max(0, i*25-10):i*25+25], b[len(b)-1].Seq, 0); !errors.Is(err, ErrFenced) {
					t.Fatalf("stale mark: %v, want ErrFenced", err)
				}
			}
		}
		state := map[string]string{}
		for k, v := range dump(t, rdb) {
			if strings.HasPrefix(k, prefix) && !strings.Contains(k, "fence") {
				state[strings.TrimPrefix(k, prefix)] = v
			}
		}
		return verdicts, state
	}
	wantV, want := run("rf:1:", false)
	gotV, got := run("rf:2:", true)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("a stale instance's claims changed the state:\ngot  %v\nwant %v", got, want)
	}
	// The successor's verdicts: with the stale claims it may see a lower
	// copy earlier, never another holder; every copy of an id but the
	// lowest-sequence holder's content conflicts either way once every
	// lower copy is claimed (which the barrier waits for). Here the batches
	// come in RAW order, so each batch's lower copies are claimed already.
	if !reflect.DeepEqual(gotV, wantV) {
		t.Fatalf("verdicts with stale claims %v, without %v", gotV, wantV)
	}
}

// TestClusterFencedSteps: on Redis Cluster the fences live in the slot of
// what they guard (a windower partition's checkpoint; each master's copy
// of the claim progress), so the fenced scripts run there as on one Redis.
func TestClusterFencedSteps(t *testing.T) {
	rc := testenv.NewRedisCluster(t, 3)
	rdb := rc.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := fenceStore(rdb)
	old, next := s.Fence(map[int]uint64{0: 5}), s.Fence(map[int]uint64{0: 7})
	day := time.Now().Unix() / 86400
	claims := make([]Claim, 200)
	for i := range claims {
		claims[i] = Claim{EventID: fmt.Sprintf("ev-%d", i), Fingerprint: 1, Seq: uint64(i + 1), Day: day}
	}
	if _, _, err := old.ClaimThrough(ctx, 0, claims[:100], 100, 0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := next.ClaimThrough(ctx, 0, claims[100:], 200, 100); err != nil {
		t.Fatal(err)
	}
	if _, err := old.MarkClaimed(ctx, 0, 300, 100); !errors.Is(err, ErrFenced) {
		t.Fatalf("stale mark on the cluster: %v, want ErrFenced", err)
	}
	if pr, err := s.ClaimProgress(ctx); err != nil || pr[0] != 200 {
		t.Fatalf("progress %v, %v; want 200", pr, err)
	}
	if _, err := old.Apply(ctx, 0, fenceRecs(1, 10), 0, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := next.Apply(ctx, 0, fenceRecs(11, 10), 10, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := old.Apply(ctx, 0, fenceRecs(21, 10), 10, 0); !errors.Is(err, ErrFenced) {
		t.Fatalf("stale apply on the cluster: %v, want ErrFenced", err)
	}
	if ck, err := s.Checkpoint(ctx, 0); err != nil || ck.Seq != 20 {
		t.Fatalf("checkpoint %+v, %v; want seq 20", ck, err)
	}
}
