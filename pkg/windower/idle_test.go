package windower

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/receiptflow/receiptflow/pkg/ledger"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// TestIdleWindowerAsksRedisOncePerPass: an idle windower of 8 partitions,
// with nothing left to retire, asks Redis twice per retirement pass (the
// global watermark, then every owned checkpoint) and once per checkpoint
// or stream check, not once per partition in each (it asked 16 times per
// pass and 8 times per check).
func TestIdleWindowerAsksRedisOncePerPass(t *testing.T) {
	const parts = 8
	const every = 50 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, url := testenv.NATS(t)
	js := testenv.JetStream(t, url)
	names := wire.For("")
	if err := stream.Ensure(ctx, js, names, stream.Config{Partitions: parts}); err != nil {
		t.Fatal(err)
	}
	mr := testenv.Miniredis(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	trips := testenv.CountRoundTrips(rdb)
	store := ledger.NewStore(rdb, ledger.Config{Keys: ledger.Keys{Prefix: names.RedisPrefix()}, Grace: time.Minute, Horizon: time.Hour})
	// Every partition's watermark is a day on: the first passes retire
	// through the mark (nothing is held), later ones find nothing to do.
	wm := time.Now().Add(24 * time.Hour).UnixMilli()
	for p := range parts {
		if err := rdb.HSet(ctx, store.Keys().Checkpoint(p), "wm", strconv.FormatInt(wm, 10)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	w := New(js, store, Config{Names: names, Partitions: parts, RetireEvery: every})
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := w.Run(wctx); err != nil {
			t.Errorf("windower: %v", err)
		}
	}()
	defer func() { stop(); wg.Wait() }()
	testenv.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		for p := range parts {
			ck, err := store.Checkpoint(ctx, p)
			if err != nil {
				return err
			}
			if ck.Retired == 0 {
				return fmt.Errorf("partition %d not retired yet", p)
			}
		}
		return nil
	})
	const window = 2 * time.Second
	trips.Take()
	began := time.Now()
	time.Sleep(window)
	got := trips.Take()
	took := time.Since(began)
	// At most: 2 per retirement pass, 1 per checkpoint check (every
	// second) and 1 per stream check (every 2 s), each rounded up.
	passes := int64(took/every) + 1
	checks := int64(took/time.Second) + 1 + int64(took/(2*time.Second)) + 1
	if want := 2*passes + checks; got > want {
		t.Errorf("%d Redis round trips in %v idle, want at most %d (%d passes, %d checks)", got, took, want, passes, checks)
	}
	if got <= checks {
		t.Errorf("%d Redis round trips in %v idle, no more than the %d checks: the retirement passes do not run", got, took, checks)
	}
}
