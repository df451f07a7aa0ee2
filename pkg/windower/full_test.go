package windower

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/receiptflow/receiptflow/pkg/ledger"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// TestFullRedisWaitsAndResumes: on a real redis-server at maxmemory
// (noeviction) the apply script is refused with OOM; the windower keeps
// retrying with nothing applied or acknowledged, and applies everything
// once memory is freed, without stopping.
func TestFullRedisWaitsAndResumes(t *testing.T) {
	f := newFixture(t)
	r := testenv.RedisServer(t, testenv.WithArgs("--maxmemory-policy", "noeviction"))
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr()})
	t.Cleanup(func() { rdb.Close() })
	f.store = ledger.NewStore(rdb, ledger.Config{Keys: ledger.Keys{Prefix: f.names.RedisPrefix()}, Grace: time.Minute})
	base := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	const n = 20
	for i := 1; i <= n; i++ {
		f.submit("ev-"+strconv.Itoa(i), base.Add(time.Duration(i)*time.Second), i)
	}
	if err := rdb.ConfigSet(f.ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- New(f.js, f.store, Config{Names: f.names, Partitions: 1}).Run(ctx)
	}()
	oom := regexp.MustCompile(`errorstat_OOM:count=(\d+)`)
	state := func() (applied uint64, acked uint64, err error) {
		select {
		case err := <-done:
			t.Fatalf("the windower stopped on a full Redis: %v", err)
		default:
		}
		ck, err := f.store.Checkpoint(f.ctx, 0)
		if err != nil {
			return 0, 0, err
		}
		cons, err := f.js.Consumer(f.ctx, f.names.Stream(wire.Valid), f.names.ServiceDurable("windower", 0))
		if err != nil {
			return 0, 0, err
		}
		return ck.Seq, cons.CachedInfo().AckFloor.Stream, nil
	}
	testenv.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		applied, acked, err := state()
		if err != nil {
			return err
		}
		if applied != 0 || acked != 0 {
			t.Fatalf("Redis full: checkpoint %d, ack floor %d; want nothing applied or acknowledged", applied, acked)
		}
		info, err := rdb.Info(f.ctx, "errorstats").Result()
		if err != nil {
			return err
		}
		if m := oom.FindStringSubmatch(info); m == nil || atoi(m[1]) < 3 {
			return fmt.Errorf("OOM refusals %v, want at least 3: the batch tried again and again", m)
		}
		return nil
	})
	if err := rdb.ConfigSet(f.ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	testenv.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		applied, acked, err := state()
		if err != nil || applied != n || acked != n {
			return fmt.Errorf("checkpoint %d, ack floor %d (%v); want %d", applied, acked, err, n)
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("windower: %v", err)
	}
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }
