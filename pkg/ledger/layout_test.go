package ledger

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/window"
)

func TestIDKeyIsFixedSizeAndSpreads(t *testing.T) {
	seen := map[string]bool{}
	shards := make([]int, LedgerShards)
	for i := 0; i < 64_000; i++ {
		k := IDKey(fmt.Sprintf("evt-1-%d", i))
		if len(k) != 16 {
			t.Fatalf("IDKey is %d bytes", len(k))
		}
		if seen[k] {
			t.Fatalf("IDKey collision at %d", i)
		}
		seen[k] = true
		shards[LedgerShardOf(k)]++
	}
	// 1,000 expected per shard; a broken spread puts far more in some.
	for s, n := range shards {
		if n < 800 || n > 1200 {
			t.Fatalf("shard %d holds %d of 64,000 ids, want about 1,000", s, n)
		}
	}
	if IDKey("a") == IDKey("b") || IDKey("") == IDKey(" ") {
		t.Fatal("IDKey maps different ids to one key")
	}
}

// TestStateStaysInListpackHashes: at the sizing the constants are made for
// (5,000 events of one window in one partition; 60 claims per bucket), every
// ledger shard and claims bucket is a listpack on a real redis-server, and
// retirement removes every shard.
func TestStateStaysInListpackHashes(t *testing.T) {
	ctx := context.Background()
	r := testenv.RedisServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr()})
	t.Cleanup(func() { rdb.Close() })
	keys := Keys{Prefix: "rf:1:"}
	s := NewStore(rdb, Config{Keys: keys, Grace: time.Minute, Horizon: time.Hour})

	const n = 5000
	recs := make([]Record, 0, 500)
	seq := uint64(0)
	for i := 0; i < n; i++ {
		seq++
		recs = append(recs, Record{Seq: seq, Kind: Submission, EventID: fmt.Sprintf("pos-0042:2026-12-02:%09d", i), Time: h10 + int64(i)})
		if len(recs) == cap(recs) {
			if _, err := s.Apply(ctx, 0, recs, 0, 0); err != nil {
				t.Fatal(err)
			}
			recs = recs[:0]
		}
	}
	// Replaying the first batch finds every id in its shard.
	again := make([]Record, 500)
	for i := range again {
		again[i] = Record{Seq: uint64(i + 1), Kind: Submission, EventID: fmt.Sprintf("pos-0042:2026-12-02:%09d", i), Time: h10 + int64(i)}
	}
	res, err := s.Apply(ctx, 0, again, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range res.Decisions {
		if d.Code != Replayed {
			t.Fatalf("replayed record %d: %v", i, d.Code)
		}
	}
	wid := window.ID(h10)
	total := int64(0)
	for k := 0; k < LedgerShards; k++ {
		key := keys.LedgerShard(0, wid, k)
		enc, err := rdb.ObjectEncoding(ctx, key).Result()
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		if enc != "listpack" {
			t.Fatalf("%s is %s, want listpack", key, enc)
		}
		total += rdb.HLen(ctx, key).Val()
	}
	if total != n {
		t.Fatalf("ledger shards hold %d entries, want %d", total, n)
	}
	ck, _ := s.Checkpoint(ctx, 0)
	if ck.Entries != n {
		t.Fatalf("checkpoint counts %d entries, want %d", ck.Entries, n)
	}

	// Claims: 60 per bucket on average; a day's buckets expire by themselves.
	today := time.Now().Unix() / 86400
	claims := make([]Claim, 0, 1000)
	for i := 0; i < 60*64; i++ {
		claims = append(claims, Claim{EventID: fmt.Sprintf("c-%d", i), Fingerprint: uint64(i), Day: today})
		if len(claims) == cap(claims) {
			if _, err := s.Claims(ctx, claims); err != nil {
				t.Fatal(err)
			}
			claims = claims[:0]
		}
	}
	if _, err := s.Claims(ctx, claims); err != nil {
		t.Fatal(err)
	}
	ck2 := keys.Claims("c-7", today)
	if enc := rdb.ObjectEncoding(ctx, ck2).Val(); enc != "listpack" {
		t.Fatalf("claims bucket %s is %q", ck2, enc)
	}
	at := rdb.ExpireTime(ctx, ck2).Val()
	if want := time.Duration(s.claimsExpireAt(today)) * time.Second; at != want {
		t.Fatalf("claims bucket expires at %v, want %v", at, want)
	}

	// Retirement removes the partial and every shard.
	removed, err := s.Retire(ctx, 0, h10+window.WidthMs, []string{wid})
	if err != nil {
		t.Fatal(err)
	}
	if removed != n {
		t.Fatalf("retire removed %d entries, want %d", removed, n)
	}
	left, err := rdb.Keys(ctx, keys.Ledger(0, wid)+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 || rdb.Exists(ctx, keys.Partial(0, wid)).Val() != 0 {
		t.Fatalf("after retirement: %s and the partial (%d) are left", strings.Join(left, ", "), rdb.Exists(ctx, keys.Partial(0, wid)).Val())
	}
}

// TestRetireClaimsSendsADayOnce: the marker keeps a second call from
// deleting the day's buckets again, and never moves back.
func TestRetireClaimsSendsADayOnce(t *testing.T) {
	backends(t, func(t *testing.T, rdb *redis.Client) {
		ctx := context.Background()
		keys := Keys{Prefix: "rf:1:"}
		s := NewStore(rdb, Config{Keys: keys, Grace: time.Minute, Horizon: 24 * time.Hour})
		day := time.Now().Unix() / 86400
		old := day - s.ClaimDays()
		// A claims bucket of a day that long passed (written without an
		// expiry, as miniredis keeps them), and one of today.
		if err := rdb.HSet(ctx, keys.Claims("old", old), IDKey("old"), "x").Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Claims(ctx, []Claim{{EventID: "new", Fingerprint: 2, Day: day}}); err != nil {
			t.Fatal(err)
		}
		// The first call only starts the marker, a day back.
		if err := s.RetireClaims(ctx, day-1); err != nil {
			t.Fatal(err)
		}
		if rdb.Exists(ctx, keys.Claims("old", old)).Val() != 1 {
			t.Fatal("the first RetireClaims deleted claims")
		}
		if err := s.RetireClaims(ctx, day); err != nil {
			t.Fatal(err)
		}
		if rdb.Exists(ctx, keys.Claims("old", old)).Val() != 0 || rdb.Exists(ctx, keys.Claims("new", day)).Val() != 1 {
			t.Fatal("RetireClaims kept the old day or dropped the new one")
		}
		if got := rdb.Get(ctx, keys.ClaimsRetired()).Val(); got != fmt.Sprint(old) {
			t.Fatalf("marker %q, want %d", got, old)
		}
		// A second call for the same day sends nothing: a bucket of the
		// retired day written since (a replay) stays until it expires.
		if err := rdb.HSet(ctx, keys.Claims("old2", old), "k", "v").Err(); err != nil {
			t.Fatal(err)
		}
		if err := s.RetireClaims(ctx, day); err != nil {
			t.Fatal(err)
		}
		if rdb.Exists(ctx, keys.Claims("old2", old)).Val() != 1 {
			t.Fatal("RetireClaims swept a retired day again")
		}
	})
}

// TestClaimBucketName: the claims hash's name is as it always was (state
// written by earlier releases is found by it).
func TestClaimBucketName(t *testing.T) {
	for _, c := range []struct {
		k    Keys
		b    int
		day  int64
		want string
	}{
		{Keys{Prefix: "rf:1:"}, 0, 20428, "rf:1:{c0}:claims:20428"},
		{Keys{Prefix: "rf:12:"}, 16383, 0, "rf:12:{c16383}:claims:0"},
		{Keys{}, 7, -1, "{c7}:claims:-1"},
	} {
		if got := c.k.ClaimBucket(c.b, c.day); got != c.want {
			t.Errorf("ClaimBucket(%d, %d) with prefix %q = %q, want %q", c.b, c.day, c.k.Prefix, got, c.want)
		}
	}
}
