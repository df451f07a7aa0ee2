package ledger

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/receiptflow/receiptflow/pkg/testenv"
)

// TestClusterClaimLossOnAnyNodeIsSeen: on Redis Cluster the claims are
// spread over every master. A master that loses its data (here FLUSHALL;
// in production a replica promoted before it had the last writes) takes
// claims with it even when another master holds the claim progress, so
// the progress must go back too: marking on top of the loss fails with
// ErrClaimsRegressed, the progress read after a later claim shows the
// loss (the validator's barrier waits on it), and claiming the range
// again and marking it restores the progress.
func TestClusterClaimLossOnAnyNodeIsSeen(t *testing.T) {
	rc := testenv.NewRedisCluster(t, 3)
	rdb := rc.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	keys := Keys{Prefix: "rf:1:"}
	s := NewStore(rdb, Config{Keys: keys, Lateness: 5 * time.Minute, Grace: time.Hour, Horizon: 24 * time.Hour})
	today := time.Now().Unix() / 86400

	const n = 300
	claims := make([]Claim, n)
	for i := range claims {
		claims[i] = Claim{EventID: "ev-" + strconv.Itoa(i), Fingerprint: uint64(i + 1), Seq: uint64(i + 1), Day: today}
	}
	if _, _, err := s.ClaimThrough(ctx, 0, claims, n, 0); err != nil {
		t.Fatal(err)
	}

	// Lose a master that holds claims but not the single-Redis progress
	// key: each master holds about a third of the claims.
	var victim *testenv.RedisProc
	for _, node := range rc.Nodes {
		if node != rc.NodeOf(t, keys.ClaimProgress()) {
			victim = node
		}
	}
	var lost []Claim
	for _, c := range claims {
		if rc.NodeOf(t, keys.Claims(c.EventID, today)) == victim {
			lost = append(lost, c)
		}
	}
	if len(lost) == 0 {
		t.Fatal("the victim holds no claims")
	}
	direct := redis.NewClient(&redis.Options{Addr: victim.Addr(), Protocol: 2, DisableIdentity: true})
	defer direct.Close()
	if err := direct.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("lost %d of %d claims on %s", len(lost), n, victim.Addr())

	if _, err := s.MarkClaimed(ctx, 0, n+1, n); !errors.Is(err, ErrClaimsRegressed) {
		t.Fatalf("MarkClaimed on top of a lost master: err %v, want ErrClaimsRegressed", err)
	}
	pr, err := s.ClaimProgress(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if pr[0] >= n {
		t.Fatalf("claim progress of partition 0 is %d after a master lost its claims, want below %d", pr[0], n)
	}
	// A conflicting copy in another partition: the progress read after its
	// claim tells that partition 0's copy may be missing.
	later := Claim{EventID: lost[0].EventID, Fingerprint: 999, Seq: 1000, Day: today}
	if _, _, err := s.ClaimThrough(ctx, 1, []Claim{later}, 1000, 0); err != nil {
		t.Fatal(err)
	}
	_, after, err := s.ClaimConflicts(ctx, []Claim{later})
	if err != nil {
		t.Fatal(err)
	}
	if after[0] >= lost[0].Seq {
		t.Fatalf("progress read after the later copy's claim says partition 0 claimed through %d; its claim of seq %d is lost", after[0], lost[0].Seq)
	}

	// Rebuilt: claims again, then the mark with no floor.
	if _, err := s.Claims(ctx, claims); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MarkClaimed(ctx, 0, n, 0); err != nil {
		t.Fatal(err)
	}
	conflict, after, err := s.ClaimConflicts(ctx, []Claim{later})
	if err != nil {
		t.Fatal(err)
	}
	if after[0] != n || !conflict[0] {
		t.Fatalf("after the rebuild: progress %d (want %d), conflict %v (want true)", after[0], n, conflict[0])
	}
	if _, err := s.MarkClaimed(ctx, 0, n+1, n); err != nil {
		t.Fatalf("marking on top of the rebuilt progress: %v", err)
	}
}

// TestClusterClaimsOneCallPerMaster: on Redis Cluster a batch's claims
// go in one claims.lua call per master (keys of many slots in one call,
// with the script flag allow-cross-slot-keys), not one per slot; and a
// slot map that is out of date (a resharding) costs a retry, not a wrong
// verdict: the call that meets a key its master does not hold fails, the
// map is read again and the batch claimed again.
func TestClusterClaimsOneCallPerMaster(t *testing.T) {
	rc := testenv.NewRedisCluster(t, 3)
	rdb := rc.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := NewStore(rdb, Config{Keys: Keys{Prefix: "rf:1:"}, Lateness: 5 * time.Minute, Grace: time.Hour, Horizon: 24 * time.Hour})
	today := time.Now().Unix() / 86400
	calls := func() int64 {
		var n int64
		for _, node := range rc.Nodes {
			direct := redis.NewClient(&redis.Options{Addr: node.Addr(), Protocol: 2, DisableIdentity: true})
			stats, err := direct.InfoMap(ctx, "commandstats").Result()
			direct.Close()
			if err != nil {
				t.Fatal(err)
			}
			if v, ok := stats["Commandstats"]["cmdstat_evalsha"]; ok {
				var c int64
				for _, f := range strings.Split(v, ",") {
					if strings.HasPrefix(f, "calls=") {
						c, _ = strconv.ParseInt(strings.TrimPrefix(f, "calls="), 10, 64)
					}
				}
				n += c
			}
		}
		return n
	}
	batch := func(from int) []Claim {
		claims := make([]Claim, 500)
		for i := range claims {
			claims[i] = Claim{EventID: "ev-" + strconv.Itoa(from+i), Fingerprint: uint64(from + i + 1), Seq: uint64(from + i + 1), Day: today}
		}
		return claims
	}
	if _, err := s.Claims(ctx, batch(0)); err != nil { // loads the scripts
		t.Fatal(err)
	}
	before := calls()
	if _, err := s.Claims(ctx, batch(500)); err != nil {
		t.Fatal(err)
	}
	if n := calls() - before; n > int64(len(rc.Nodes)) {
		t.Fatalf("500 claims took %d script calls on %d masters, want one per master", n, len(rc.Nodes))
	}

	// An out-of-date map: every slot's master shifted by one.
	owner, err := s.slotOwners(ctx)
	if err != nil {
		t.Fatal(err)
	}
	addrs := rc.Addrs()
	shifted := make([]string, len(owner))
	for sl, m := range owner {
		for i, a := range addrs {
			if a == m {
				shifted[sl] = addrs[(i+1)%len(addrs)]
			}
		}
	}
	s.copies.mu.Lock()
	s.copies.owner, s.copies.at = shifted, time.Now()
	s.copies.mu.Unlock()
	claims := batch(1000)
	claims[3].Fingerprint = 7 // again[3] below has fingerprint 7 too: no conflict
	if _, err := s.Claims(ctx, claims); err != nil {
		t.Fatalf("claims with an out-of-date slot map: %v", err)
	}
	again := batch(1000)
	for i := range again {
		again[i].Fingerprint++
		again[i].Seq += 10000
	}
	again[3].Fingerprint = 7
	conflict, err := s.Claims(ctx, again)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range conflict {
		if c != (i != 3) {
			t.Fatalf("claim %d: conflict %v after claiming with an out-of-date slot map", i, c)
		}
	}
}
