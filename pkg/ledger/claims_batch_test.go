package ledger

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/receiptflow/receiptflow/pkg/testenv"
)

// scriptCounter is a go-redis hook that counts the script calls sent.
type scriptCounter struct{ n int }

func (h *scriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}

func (h *scriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			h.count(c)
		}
		return next(ctx, cmds)
	}
}

func (h *scriptCounter) count(cmd redis.Cmder) {
	if n := cmd.Name(); n == "evalsha" || n == "eval" {
		h.n++
	}
}

// TestClaimsOneScriptCallPerBatch: on a single Redis a batch of claims
// costs one script call, whatever its size and the ids' buckets and days;
// ClaimThrough adds the progress read and mark.
func TestClaimsOneScriptCallPerBatch(t *testing.T) {
	backends(t, func(t *testing.T, rdb *redis.Client) {
		ctx := context.Background()
		s := NewStore(rdb, Config{Keys: Keys{Prefix: "rf:1:"}, Lateness: 5 * time.Minute, Grace: time.Hour, Horizon: 24 * time.Hour})
		day := time.Now().Unix() / 86400
		// Load the scripts first: a NOSCRIPT answer is followed by a retry.
		if _, _, err := s.ClaimThrough(ctx, 1, []Claim{{EventID: "warm", Fingerprint: 1, Seq: 1, Day: day}}, 1, 0); err != nil {
			t.Fatal(err)
		}
		h := &scriptCounter{}
		rdb.AddHook(h)
		info, _ := rdb.Info(ctx, "commandstats").Result()
		stats := strings.Contains(info, "cmdstat_")
		if stats {
			if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		const n = 300
		claims := make([]Claim, 0, n+1)
		for i := range n {
			claims = append(claims, Claim{EventID: fmt.Sprintf("ev-%d", i), Fingerprint: uint64(i), Seq: uint64(10 + i), Day: day - int64(i%3)})
		}
		claims = append(claims, Claim{EventID: "ev-7", Fingerprint: 99, Seq: 999, Day: day})
		got, err := s.Claims(ctx, claims)
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range got {
			if c != (i == n) {
				t.Fatalf("claim %d conflict %v", i, c)
			}
		}
		if h.n != 1 {
			t.Fatalf("Claims of %d claims sent %d script calls, want 1", len(claims), h.n)
		}
		h.n = 0
		for i := range claims {
			claims[i].EventID += "-b"
		}
		if _, _, err := s.ClaimThrough(ctx, 0, claims, 2000, 0); err != nil {
			t.Fatal(err)
		}
		if h.n != 3 {
			t.Fatalf("ClaimThrough sent %d script calls, want 3 (progress read, claims, mark)", h.n)
		}
		if stats {
			info, err := rdb.Info(ctx, "commandstats").Result()
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(info, "cmdstat_evalsha:calls=4,") {
				t.Fatalf("redis-server counted other EVALSHA calls than 4:\n%s", info)
			}
		}
	})
}

// collidingIDs returns pairs of event ids whose claims share a bucket, then
// singles.
func collidingIDs(pairs, singles int) []string {
	var ids []string
	seen := map[int]string{}
	for i := 0; len(ids) < 2*pairs; i++ {
		id := fmt.Sprintf("id-%d", i)
		b := idBucket(IDKey(id), ClaimBuckets)
		if other, ok := seen[b]; ok && other != "" {
			ids = append(ids, other, id)
			seen[b] = ""
			continue
		}
		if _, ok := seen[b]; !ok {
			seen[b] = id
		}
	}
	for i := range singles {
		ids = append(ids, fmt.Sprintf("single-%d", i))
	}
	return ids
}

// TestClaimsBatchIsClaimsOneByOne: a batch decides every claim as if it
// were claimed alone, in order, and leaves the same claims, each bucket
// with its expiry; ids sharing a bucket, claims over several days and
// takeovers included. Applied twice, it decides the same and changes
// nothing.
func TestClaimsBatchIsClaimsOneByOne(t *testing.T) {
	backends(t, func(t *testing.T, rdb *redis.Client) {
		ctx := context.Background()
		day := time.Now().Unix() / 86400
		batched := NewStore(rdb, Config{Keys: Keys{Prefix: "rf:b:"}, Lateness: 5 * time.Minute, Grace: time.Hour, Horizon: 24 * time.Hour})
		single := NewStore(rdb, Config{Keys: Keys{Prefix: "rf:s:"}, Lateness: 5 * time.Minute, Grace: time.Hour, Horizon: 24 * time.Hour})
		ids := collidingIDs(6, 20)
		rng := rand.New(rand.NewPCG(1, 2))
		for round := range 6 {
			// A batch holds each id at most once: a second copy in one
			// batch is judged against the first (TestClaimTwiceSameState).
			var batch []Claim
			for _, i := range rng.Perm(len(ids))[:len(ids)*2/3] {
				batch = append(batch, Claim{
					EventID:     ids[i],
					Fingerprint: uint64(rng.IntN(3)),
					Seq:         uint64(rng.IntN(50)),
					Day:         day - int64(rng.IntN(3)),
				})
			}
			got, err := batched.Claims(ctx, batch)
			if err != nil {
				t.Fatal(err)
			}
			want := make([]bool, len(batch))
			for i, c := range batch {
				v, err := single.Claims(ctx, []Claim{c})
				if err != nil {
					t.Fatal(err)
				}
				want[i] = v[0]
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("round %d: batch decided %v, one by one %v", round, got, want)
			}
			state := claimsState(t, rdb, "rf:b:")
			if s := claimsState(t, rdb, "rf:s:"); !reflect.DeepEqual(state, s) {
				t.Fatalf("round %d: batch left\n%v\none by one\n%v", round, state, s)
			}
			again, err := batched.Claims(ctx, batch)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(again, got) {
				t.Fatalf("round %d: again %v, first %v", round, again, got)
			}
			if after := claimsState(t, rdb, "rf:b:"); !reflect.DeepEqual(after, state) {
				t.Fatalf("round %d: applying twice changed the state:\n%v\n%v", round, state, after)
			}
		}
	})
}

// claimsState is dump's view of the claims under prefix, keys without it;
// it fails the test if a claims hash has no expiry.
func claimsState(t *testing.T, rdb *redis.Client, prefix string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for k, v := range dump(t, rdb) {
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		// Every claims hash expires; the progress hash (which holds the
		// takeover count) is kept.
		if ttl, err := rdb.TTL(context.Background(), k).Result(); k != (Keys{Prefix: prefix}).ClaimProgress() && (err != nil || ttl < 0) {
			t.Fatalf("%s: TTL %v, %v; want an expiry", k, ttl, err)
		}
		out[strings.TrimPrefix(k, prefix)] = v
	}
	return out
}

// TestClaimsGroupBySlot: on a cluster the claims go in one call per
// master (or per hash slot), every call's keys on its master (in its
// slot), every id sent once; elsewhere in one call per claimsPerCall ids.
func TestClaimsGroupBySlot(t *testing.T) {
	s := NewStore(nil, Config{Keys: Keys{Prefix: "rf:1:"}, Lateness: 5 * time.Minute, Grace: time.Hour, Horizon: 24 * time.Hour})
	day := int64(20000)
	var claims []Claim
	for i := range 2000 {
		claims = append(claims, Claim{EventID: fmt.Sprintf("ev-%d", i%1500), Seq: uint64(i + 1), Day: day - int64(i%2)})
	}
	if b := s.groupClaims(claims[:claimsPerCall], splitNone, nil); len(b.calls) != 1 || len(b.calls[0].send) != claimsPerCall {
		t.Fatalf("single Redis, %d claims: %d calls", claimsPerCall, len(b.calls))
	}
	if b := s.groupClaims(claims, splitNone, nil); len(b.calls) != 2 || len(b.calls[0].send) != claimsPerCall || len(b.calls[1].send) != 1500-claimsPerCall {
		t.Fatalf("single Redis, 1500 ids: %d calls", len(b.calls))
	}
	b := s.groupClaims(claims, splitSlot, nil)
	slots := map[int]bool{}
	sent := map[string]bool{}
	for _, c := range b.calls {
		slot := keySlot(c.keys[0])
		if slots[slot] {
			t.Fatalf("two calls for slot %d", slot)
		}
		slots[slot] = true
		for _, k := range c.keys {
			if keySlot(k) != slot {
				t.Fatalf("call of slot %d has key %s of slot %d", slot, k, keySlot(k))
			}
		}
		if len(c.args) != 1+4*len(c.send) {
			t.Fatalf("%d arguments for %d claims", len(c.args), len(c.send))
		}
		for _, i := range c.send {
			if sent[claims[i].EventID] {
				t.Fatalf("%s sent twice", claims[i].EventID)
			}
			sent[claims[i].EventID] = true
		}
	}
	if len(sent) != 1500 {
		t.Fatalf("%d ids sent, want 1500", len(sent))
	}
	t.Logf("%d claims of 1500 ids in %d slot calls", len(claims), len(b.calls))

	// Three masters, the slots split in thirds as redis-cli does.
	owner := make([]string, 16384)
	for sl := range owner {
		owner[sl] = []string{"a", "b", "c"}[sl*3/16384]
	}
	b = s.groupClaims(claims, splitNode, owner)
	perMaster := map[string]int{}
	clear(sent)
	for _, c := range b.calls {
		m := owner[keySlot(c.keys[0])]
		perMaster[m]++
		for _, k := range c.keys {
			if owner[keySlot(k)] != m {
				t.Fatalf("call of master %s has key %s of master %s", m, k, owner[keySlot(k)])
			}
		}
		for _, i := range c.send {
			if sent[claims[i].EventID] {
				t.Fatalf("%s sent twice", claims[i].EventID)
			}
			sent[claims[i].EventID] = true
		}
	}
	if len(sent) != 1500 || len(perMaster) != 3 {
		t.Fatalf("%d ids sent to %d masters, want 1500 to 3", len(sent), len(perMaster))
	}
	for m, n := range perMaster {
		if n != 1 {
			t.Errorf("master %s: %d calls for about 500 ids, want 1", m, n)
		}
	}
}

// TestKeySlot: the Redis Cluster hash slots of the cluster specification
// and tutorial.
func TestKeySlot(t *testing.T) {
	for key, want := range map[string]int{
		"123456789":            0x31C3, // the specification's CRC16 check value
		"foo":                  12182,
		"hello":                866,
		"{foo}:anything":       12182,
		"x{foo}y{bar}":         12182,
		"rf:1:{c5}:claims:100": keySlot("c5"),
	} {
		if got := keySlot(key); got != want {
			t.Errorf("keySlot(%q) = %d, want %d", key, got, want)
		}
	}
	if keySlot("{}foo") == keySlot("foo") {
		t.Errorf("an empty hash tag must not count as one")
	}
}

// TestKeySlotIsRedisClusters: keySlot agrees with CLUSTER KEYSLOT of a
// real cluster-enabled redis-server on the hash tag of every claims
// bucket.
func TestKeySlotIsRedisClusters(t *testing.T) {
	r := testenv.RedisServer(t, testenv.WithArgs("--cluster-enabled", "yes"))
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr()})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	keys := Keys{Prefix: "rf:1:"}
	pipe := rdb.Pipeline()
	cmds := make([]*redis.IntCmd, ClaimBuckets)
	for b := range cmds {
		cmds[b] = pipe.ClusterKeySlot(ctx, keys.ClaimBucket(b, 20000))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	for b, cmd := range cmds {
		if key := keys.ClaimBucket(b, 20000); int64(keySlot(key)) != cmd.Val() {
			t.Fatalf("keySlot(%s) = %d, CLUSTER KEYSLOT %d", key, keySlot(key), cmd.Val())
		}
	}
}
