package windower

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/receiptflow/receiptflow/pkg/internal/streamtest"
	"github.com/receiptflow/receiptflow/pkg/ledger"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// TestServerRestartsMidDeliveryLoseNoEvent: 3000 on-time submissions of
// one window; while the windower consumes them, nats-server is restarted
// nine times, each time with the deliveries it had in flight lost (a proxy
// between the windower and the server drops them, as a SIGKILL does). The
// window must count all 3000. Before the consume loop checked delivery
// sequences, the AckAll after each restart acknowledged the lost
// deliveries and the window came out short (2949 of 3000 in one run).
func TestServerRestartsMidDeliveryLoseNoEvent(t *testing.T) {
	const n = 3000
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, url := testenv.NATS(t)
	// direct reaches the server without the proxy, across its restarts.
	dnc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer dnc.Close()
	direct, err := jetstream.New(dnc)
	if err != nil {
		t.Fatal(err)
	}
	names := wire.For("")
	durable := wire.Durable("windower", 0)
	if err := stream.Ensure(ctx, direct, names, stream.Config{Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	base := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for i := 0; i < n; i++ {
		id := "ev-" + strconv.Itoa(i)
		m := stream.NewMsg(names.Subject(wire.Valid, 0), id, []byte(`{}`))
		m.Header.Set(wire.HdrKind, "s")
		m.Header.Set(wire.HdrTime, strconv.FormatInt(base.Add(time.Duration(i)*100*time.Millisecond).UnixMilli(), 10))
		m.Header.Set(wire.HdrEventID, id)
		m.Header.Set(wire.HdrRawSeq, strconv.Itoa(i+1))
		if _, err := direct.PublishMsgAsync(m); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-direct.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal("publish timed out")
	}

	proxy := streamtest.NewCutProxy(t, strings.TrimPrefix(url, "nats://"))
	nc, err := nats.Connect(proxy.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	mr := testenv.Miniredis(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	store := ledger.NewStore(rdb, ledger.Config{Keys: ledger.Keys{Prefix: names.RedisPrefix()}, Grace: time.Minute})

	// crash runs inside Trace, right after a batch's script: between
	// fetches, with the batch not yet acknowledged.
	var mu sync.Mutex
	batches, crashes := 0, 0
	crash := func(last uint64) {
		proxy.Freeze()
		for i := 0; i < 100; i++ {
			ictx, icancel := context.WithTimeout(ctx, time.Second)
			c, err := direct.Consumer(ictx, names.Stream(wire.Valid), durable)
			icancel()
			if err == nil && c.CachedInfo().Delivered.Stream > last+300 {
				break
			}
			time.Sleep(10 * time.Millisecond) // bounded: shaping the fault, not waiting for a result
		}
		srv = testenv.RestartNATS(t, srv)
		proxy.Cut()
	}
	trace := func(p int, recs []Trace) {
		mu.Lock()
		defer mu.Unlock()
		batches++
		if batches%7 == 3 && crashes < 9 {
			crashes++
			crash(recs[len(recs)-1].ValidSeq)
		}
	}
	// A supervisor: an instance that fails is started again, as in a
	// deployment.
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan struct{})
	var runErrs []error
	go func() {
		defer close(done)
		for attempt := 0; attempt < 100 && runCtx.Err() == nil; attempt++ {
			w := New(js, store, Config{Names: names, Partitions: 1, Batch: 50, Trace: trace})
			if err := w.Run(runCtx); err != nil {
				mu.Lock()
				runErrs = append(runErrs, err)
				mu.Unlock()
			}
		}
	}()

	wid := window.Of(base.UnixMilli()).ID
	count := func() (int64, error) {
		views, err := store.ReadAll(ctx, []int{0}, []string{wid})
		if err != nil {
			return 0, err
		}
		return views[0].Partials[wid].Count, nil
	}
	// Until the window holds every event, or the windower has nothing
	// left to be delivered and has applied the whole stream (then what it
	// skipped is lost for good).
	testenv.CheckFor(t, 90*time.Second, 50*time.Millisecond, func() error {
		got, err := count()
		if err != nil || got == n {
			return err
		}
		ictx, icancel := context.WithTimeout(ctx, time.Second)
		defer icancel()
		c, err := direct.Consumer(ictx, names.Stream(wire.Valid), durable)
		if err != nil {
			return err
		}
		ck, err := store.Checkpoint(ctx, 0)
		if err != nil {
			return err
		}
		info := c.CachedInfo()
		if info.NumPending != 0 || info.NumAckPending != 0 || ck.Seq != n {
			return fmt.Errorf("window counts %d of %d; pending %d, ack pending %d, checkpoint %d", got, n, info.NumPending, info.NumAckPending, ck.Seq)
		}
		return nil
	})
	stop()
	<-done
	got, err := count()
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if crashes < 9 {
		t.Fatalf("%d restarts, want 9", crashes)
	}
	if got != n {
		t.Fatalf("window %s counts %d of %d events after %d server restarts (instance errors: %v)", wid, got, n, crashes, runErrs)
	}
	t.Logf("%d batches, %d restarts, %d instance errors", batches, crashes, len(runErrs))
}
