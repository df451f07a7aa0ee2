package validator

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// TestFullRedisWaitsAndResumes: on a real redis-server at maxmemory
// (noeviction) the claims are refused with OOM; the validator keeps
// retrying with nothing published or acknowledged, and judges every record
// once memory is freed, without stopping.
func TestFullRedisWaitsAndResumes(t *testing.T) {
	r := testenv.RedisServer(t, testenv.WithArgs("--maxmemory-policy", "noeviction"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	_, url := testenv.NATS(t)
	js := testenv.JetStream(t, url)
	names := wire.For("")
	if err := stream.Ensure(ctx, js, names, stream.Config{Partitions: conflictParts}); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr()})
	t.Cleanup(func() { rdb.Close() })
	v, err := contract.NewValidator(contract.Config{})
	if err != nil {
		t.Fatal(err)
	}
	e := &conflictEnv{t: t, ctx: ctx, js: js, rdb: rdb, names: names, v: v}
	if err := rdb.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	e.start() // a Run that stops fails the test
	seqA, _ := e.publish(0, "a", event(t, "a", 0, 1))
	seqB, _ := e.publish(1, "b", event(t, "b", 1, 1))
	oom := regexp.MustCompile(`errorstat_OOM:count=(\d+)`)
	testenv.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		if n := e.count(wire.Valid) + e.count(wire.Rejected); n != 0 {
			t.Fatalf("%d outputs while Redis refuses the claims", n)
		}
		info, err := rdb.Info(ctx, "errorstats").Result()
		if err != nil {
			return err
		}
		if m := oom.FindStringSubmatch(info); m == nil || atoi(m[1]) < 10 {
			return fmt.Errorf("OOM refusals %v, want at least 10: the claims tried again and again", m)
		}
		return nil
	})
	if err := rdb.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	got := e.outcomes(2)
	wantOutcome(t, got, seqA, "valid")
	wantOutcome(t, got, seqB, "valid")
	e.acked(0, seqA)
	e.acked(1, seqB)
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }
