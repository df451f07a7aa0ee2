package stream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/testenv"
)

// consumeEnv is a stream "T" on subject t.* with n messages, and the spec
// of a durable ack-all consumer over it.
func consumeEnv(tb testing.TB, n int) (jetstream.JetStream, ConsumerSpec) {
	tb.Helper()
	_, url := testenv.NATS(tb)
	nc, err := nats.Connect(url)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		tb.Fatal(err)
	}
	ctx := context.Background()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.*"}, Storage: jetstream.FileStorage})
	if err != nil {
		tb.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if _, err := js.PublishAsync("t."+strconv.Itoa(i%4), []byte(strconv.Itoa(i))); err != nil {
			tb.Fatal(err)
		}
		if i%2000 == 1999 || i == n-1 {
			select {
			case <-js.PublishAsyncComplete():
			case <-time.After(30 * time.Second):
				tb.Fatal("publish timed out")
			}
		}
	}
	_ = st
	return js, ConsumerSpec{Stream: "T", Durable: "c", AckAll: true}
}

func TestConsumeDeliversEverythingInOrderInBoundedBatches(t *testing.T) {
	const n = 3000
	js, c := consumeEnv(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got []int
	batches := 0
	err := Consume(ctx, js, c, BatchConfig{Max: 100}, func(ctx context.Context, batch []jetstream.Msg) (Outcome, error) {
		if len(batch) == 0 || len(batch) > 100 {
			return Outcome{}, fmt.Errorf("batch of %d", len(batch))
		}
		batches++
		for _, m := range batch {
			v, _ := strconv.Atoi(string(m.Data()))
			got = append(got, v)
		}
		if len(got) == n {
			cancel()
		}
		return Outcome{}, nil
	})
	if err != nil {
		t.Fatalf("Consume = %v, want nil after cancel", err)
	}
	if len(got) != n {
		t.Fatalf("got %d messages, want %d", len(got), n)
	}
	for i, v := range got {
		if v != i {
			t.Fatalf("message %d is %d: out of order", i, v)
		}
	}
	if batches > n/10 {
		t.Errorf("%d batches for %d backlogged messages: batching does not fill", batches, n)
	}
}

func TestConsumeLingerBoundsTheWait(t *testing.T) {
	js, c := consumeEnv(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	var waited []time.Duration
	sent := make(chan time.Time, 1)
	go func() {
		time.Sleep(200 * time.Millisecond) // the consumer is pulling by now
		sent <- time.Now()
		if _, err := js.Publish(ctx, "t.0", []byte("0")); err != nil {
			t.Error(err)
		}
	}()
	err := Consume(ctx, js, c, BatchConfig{Max: 100, Linger: 20 * time.Millisecond}, func(ctx context.Context, batch []jetstream.Msg) (Outcome, error) {
		mu.Lock()
		waited = append(waited, time.Since(<-sent))
		mu.Unlock()
		cancel()
		return Outcome{}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// One message and nothing more: handled after about Linger, not held
	// until Max messages arrive.
	if len(waited) != 1 || waited[0] > 2*time.Second {
		t.Fatalf("batches handled after %v", waited)
	}
}

func TestConsumeReturnsHandlerErrorAndRecreatesADeletedConsumer(t *testing.T) {
	js, c := consumeEnv(t, 10)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	boom := errors.New("boom")
	if err := Consume(ctx, js, c, BatchConfig{}, func(context.Context, []jetstream.Msg) (Outcome, error) { return Outcome{}, boom }); !errors.Is(err, boom) {
		t.Fatalf("Consume = %v, want the handler's error", err)
	}
	// Deleted under the loop, the consumer is opened again at the
	// checkpoint: nothing is lost, nothing processed is delivered again.
	var mu sync.Mutex
	got := map[int]int{}
	done := make(chan error, 1)
	go func() {
		done <- Consume(ctx, js, c, BatchConfig{RetryInitial: 10 * time.Millisecond}, func(_ context.Context, b []jetstream.Msg) (Outcome, error) {
			mu.Lock()
			defer mu.Unlock()
			for _, m := range b {
				v, _ := strconv.Atoi(string(m.Data()))
				got[v]++
			}
			return Outcome{}, nil
		})
	}()
	count := func(n int) func() error {
		return func() error {
			mu.Lock()
			defer mu.Unlock()
			if len(got) != n {
				return fmt.Errorf("%d of %d delivered", len(got), n)
			}
			return nil
		}
	}
	testenv.CheckFor(t, 20*time.Second, 10*time.Millisecond, count(10))
	if err := js.DeleteConsumer(ctx, "T", "c"); err != nil {
		t.Fatal(err)
	}
	for i := 10; i < 20; i++ {
		if _, err := js.Publish(ctx, "t.0", []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	testenv.CheckFor(t, 20*time.Second, 10*time.Millisecond, count(20))
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Consume = %v, want nil after cancel", err)
	}
	for v, k := range got {
		if k != 1 {
			t.Errorf("message %d handled %d times", v, k)
		}
	}
}

// BenchmarkConsume is the cost per message of the batched consume loop on
// a backlog of b.N messages, acking once per batch (run it with a fixed
// count, e.g. -benchtime=200000x). cpu-ns/msg is the process's CPU time,
// the embedded server's included.
func BenchmarkConsume(b *testing.B) {
	n := b.N
	js, c := consumeEnv(b, n)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := 0
	cpu0 := cpuNow()
	b.ResetTimer()
	err := Consume(ctx, js, c, BatchConfig{}, func(ctx context.Context, batch []jetstream.Msg) (Outcome, error) {
		got += len(batch)
		if got >= n {
			cancel()
		}
		return Outcome{}, nil
	})
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(cpuNow()-cpu0)/float64(n), "cpu-ns/msg")
}

// cpuNow is the process's user plus system CPU time in ns.
func cpuNow() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
