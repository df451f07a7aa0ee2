package connect

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/receiptflow/receiptflow/pkg/testenv"
)

// TestReadRedisMemoryNamesThePolicy: a real redis-server's eviction policy
// is read, and only noeviction passes CheckEviction.
func TestReadRedisMemoryNamesThePolicy(t *testing.T) {
	for _, policy := range []string{"allkeys-lru", "volatile-lru", "noeviction"} {
		t.Run(policy, func(t *testing.T) {
			r := testenv.RedisServer(t, testenv.WithArgs("--maxmemory-policy", policy))
			rc := redis.NewClient(&redis.Options{Addr: r.Addr()})
			defer rc.Close()
			m, err := ReadRedisMemory(context.Background(), rc)
			if err != nil {
				t.Fatal(err)
			}
			if m.Policy != policy || m.Used <= 0 || !m.HasRoom() {
				t.Fatalf("read %+v, want policy %s, used memory, room", m, policy)
			}
			err = CheckEviction(m)
			switch {
			case policy == SafeEvictionPolicy && err != nil:
				t.Fatalf("noeviction refused: %v", err)
			case policy != SafeEvictionPolicy && (!errors.Is(err, ErrUnsafeEviction) || !strings.Contains(err.Error(), policy)):
				t.Fatalf("%s: CheckEviction = %v, want ErrUnsafeEviction naming the policy", policy, err)
			}
		})
	}
}

// TestReadRedisMemoryUnderACL: a user refused CONFIG reads the policy with
// INFO; one refused INFO with CONFIG GET; one refused both learns why.
func TestReadRedisMemoryUnderACL(t *testing.T) {
	r := testenv.RedisServer(t, testenv.WithArgs("--maxmemory-policy", "volatile-lru",
		"--user", "noconfig", "on", ">pw", "~*", "-@all", "+ping", "+hello", "+info",
		"--user", "noinfo", "on", ">pw", "~*", "-@all", "+ping", "+hello", "+config|get",
		"--user", "neither", "on", ">pw", "~*", "-@all", "+ping", "+hello"))
	read := func(user string) (RedisMemory, error) {
		rc := redis.NewClient(&redis.Options{Addr: r.Addr(), Username: user, Password: "pw", DisableIdentity: true})
		defer rc.Close()
		if err := rc.Ping(context.Background()).Err(); err != nil {
			t.Fatalf("%s: %v", user, err)
		}
		return ReadRedisMemory(context.Background(), rc)
	}
	if m, err := read("noconfig"); err != nil || m.Policy != "volatile-lru" || m.Source != "info" {
		t.Errorf("without CONFIG: %+v, %v; want volatile-lru from INFO", m, err)
	}
	if m, err := read("noinfo"); err != nil || m.Policy != "volatile-lru" || m.Source != "config" {
		t.Errorf("without INFO: %+v, %v; want volatile-lru from CONFIG GET", m, err)
	}
	if _, err := read("neither"); !errors.Is(err, ErrPolicyUnknown) || !strings.Contains(err.Error(), "+info") {
		t.Errorf("without INFO and CONFIG: %v, want ErrPolicyUnknown saying to grant +info", err)
	}
}

// TestFullWatchFollowsOOM: an OOM reply makes Redis full until the refused
// command succeeds again; reads in between change nothing.
func TestFullWatchFollowsOOM(t *testing.T) {
	r := testenv.RedisServer(t)
	ctx := context.Background()
	rc := redis.NewClient(&redis.Options{Addr: r.Addr()})
	defer rc.Close()
	var changes []bool
	w := NewFullWatch(func(refused error) { changes = append(changes, refused != nil) })
	rc.AddHook(w)
	admin := redis.NewClient(&redis.Options{Addr: r.Addr()})
	defer admin.Close()
	if err := admin.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	err := rc.HSet(ctx, "h", "f", "v").Err()
	if !RedisFull(err) || w.Full() == nil || w.Refusals() != 1 {
		t.Fatalf("HSET at maxmemory: %v; full %v, %d refusals", err, w.Full(), w.Refusals())
	}
	if err := rc.Get(ctx, "k").Err(); err != redis.Nil || w.Full() == nil {
		t.Fatalf("a read (%v) cleared the refusal", err)
	}
	pipe := rc.Pipeline()
	pipe.Get(ctx, "k")
	zadd := pipe.ZAdd(ctx, "z", redis.Z{Score: 1, Member: "m"})
	if _, err := pipe.Exec(ctx); !RedisFull(zadd.Err()) || w.Refusals() != 2 {
		t.Fatalf("pipelined ZADD at maxmemory: %v (%v); %d refusals", zadd.Err(), err, w.Refusals())
	}
	if err := admin.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rc.HSet(ctx, "h", "f", "v").Err(); err != nil || w.Full() == nil {
		t.Fatalf("HSET with room: %v; full %v, want still full (ZADD not retried)", err, w.Full())
	}
	if err := rc.ZAdd(ctx, "z", redis.Z{Score: 1, Member: "m"}).Err(); err != nil || w.Full() != nil {
		t.Fatalf("ZADD with room: %v; full %v", err, w.Full())
	}
	if len(changes) != 2 || !changes[0] || changes[1] {
		t.Fatalf("changes %v, want [full, free]", changes)
	}
}
