package windower

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/receiptflow/receiptflow/pkg/ledger"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// TestPausedOwnerIsFenced: an owner (epoch 5) pauses between a batch's
// apply script and its publish, as a stopped process or a long GC pause
// would. A later owner (epoch 7) takes the partition over, replays that
// batch and applies the rest. When the paused owner wakes, its next Redis
// step (the published mark) is refused: its Run returns ErrFenced, the
// refusal is counted, and the windows are exactly the clean result. The
// CHANGES notice it published on waking is only a wake-up for the
// publisher, which reads Redis (docs/architecture.md, "Fencing").
func TestPausedOwnerIsFenced(t *testing.T) {
	const n = 600
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, url := testenv.NATS(t)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	names := wire.For("")
	if err := stream.Ensure(ctx, js, names, stream.Config{Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	base := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	publish := func(from, to int) {
		for i := from; i < to; i++ {
			id := "ev-" + strconv.Itoa(i)
			m := stream.NewMsg(names.Subject(wire.Valid, 0), id, []byte(`{}`))
			m.Header.Set(wire.HdrKind, "s")
			m.Header.Set(wire.HdrTime, strconv.FormatInt(base.Add(time.Duration(i)*time.Second).UnixMilli(), 10))
			m.Header.Set(wire.HdrEventID, id)
			m.Header.Set(wire.HdrRawSeq, strconv.Itoa(i+1))
			if _, err := js.PublishMsg(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	r := testenv.RedisServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr()})
	defer rdb.Close()
	store := ledger.NewStore(rdb, ledger.Config{Keys: ledger.Keys{Prefix: names.RedisPrefix()}, Grace: time.Hour})

	// The first owner applies the first half, then pauses inside its
	// next batch, right after the script.
	publish(0, n/2)
	paused, wake := make(chan struct{}), make(chan struct{})
	var once sync.Once
	oldReg := prometheus.NewRegistry()
	old := New(js, store, Config{Names: names, Partitions: 1, Epochs: map[int]uint64{0: 5}, Batch: 50, Registerer: oldReg,
		Trace: func(_ int, recs []Trace) {
			if recs[len(recs)-1].ValidSeq > n/4 {
				once.Do(func() { close(paused); <-wake })
			}
		}})
	oldDone := make(chan error, 1)
	go func() { oldDone <- old.Run(ctx) }()
	select {
	case <-paused:
	case err := <-oldDone:
		t.Fatalf("the first owner stopped before its pause: %v", err)
	}

	// The later owner takes over and applies everything.
	publish(n/2, n)
	newReg := prometheus.NewRegistry()
	nctx, ncancel := context.WithCancel(ctx)
	defer ncancel()
	next := New(js, store, Config{Names: names, Partitions: 1, Epochs: map[int]uint64{0: 7}, Batch: 50, Registerer: newReg})
	newDone := make(chan error, 1)
	go func() { newDone <- next.Run(nctx) }()
	testenv.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		ck, err := store.Checkpoint(ctx, 0)
		if err != nil || ck.Seq != n || ck.Published != n {
			return errors.New("the later owner has not applied and published everything yet")
		}
		return nil
	})
	want := windowCounts(t, store)

	// The paused owner wakes: refused, counted, stopped; nothing changed.
	close(wake)
	select {
	case err := <-oldDone:
		if !errors.Is(err, ledger.ErrFenced) {
			t.Fatalf("the stale owner's Run returned %v, want ErrFenced", err)
		}
	case <-ctx.Done():
		t.Fatal("the stale owner did not stop")
	}
	if got := testenv.CounterSum(t, oldReg, "receiptflow_windower_fenced_writes_total"); got < 1 {
		t.Fatalf("fenced writes counted %v, want at least 1", got)
	}
	if got := testenv.CounterSum(t, newReg, "receiptflow_windower_fenced_writes_total"); got != 0 {
		t.Fatalf("the owner was fenced %v times", got)
	}
	if got := windowCounts(t, store); !equalCounts(got, want) {
		t.Fatalf("windows after the stale owner woke %v, before %v", got, want)
	}
	total := int64(0)
	for _, c := range want {
		total += c
	}
	if total != n {
		t.Fatalf("the windows count %d events, want %d (%v)", total, n, want)
	}
	ncancel()
	if err := <-newDone; err != nil {
		t.Fatal(err)
	}
}

// windowCounts is each window's count and version in partition 0.
func windowCounts(t *testing.T, store *ledger.Store) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	ids, err := store.Windows(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	v, err := store.Read(ctx, 0, ids)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for id, p := range v.Partials {
		if p.Version != p.Count {
			t.Fatalf("window %s: version %d for %d events (counted twice?)", id, p.Version, p.Count)
		}
		out[id] = p.Count
	}
	if len(out) == 0 {
		t.Fatal("no window")
	}
	return out
}

func equalCounts(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
