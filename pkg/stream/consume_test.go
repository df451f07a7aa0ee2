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

// consumeEnv is a stream "T" on subject t.* with n messages, and a durable
// ack-all consumer over it.
func consumeEnv(tb testing.TB, n int) (jetstream.JetStream, jetstream.Consumer) {
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
	c, err := st.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckAllPolicy, MaxAckPending: 20000})
	if err != nil {
		tb.Fatal(err)
	}
	return js, c
}

func TestConsumeDeliversEverythingInOrderInBoundedBatches(t *testing.T) {
	const n = 3000
	_, c := consumeEnv(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got []int
	batches := 0
	err := Consume(ctx, c, BatchOptions{Max: 100}, func(ctx context.Context, batch []jetstream.Msg) error {
		if len(batch) == 0 || len(batch) > 100 {
			return fmt.Errorf("batch of %d", len(batch))
		}
		batches++
		for _, m := range batch {
			v, _ := strconv.Atoi(string(m.Data()))
			got = append(got, v)
		}
		if err := batch[len(batch)-1].Ack(); err != nil {
			return err
		}
		if len(got) == n {
			cancel()
		}
		return nil
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
	err := Consume(ctx, c, BatchOptions{Max: 100, Linger: 20 * time.Millisecond}, func(ctx context.Context, batch []jetstream.Msg) error {
		mu.Lock()
		waited = append(waited, time.Since(<-sent))
		mu.Unlock()
		cancel()
		return batch[len(batch)-1].Ack()
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

func TestConsumeReturnsHandlerErrorAndStopsOnDeletedConsumer(t *testing.T) {
	js, c := consumeEnv(t, 10)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	boom := errors.New("boom")
	if err := Consume(ctx, c, BatchOptions{}, func(context.Context, []jetstream.Msg) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Consume = %v, want the handler's error", err)
	}
	done := make(chan error, 1)
	go func() {
		done <- Consume(ctx, c, BatchOptions{}, func(_ context.Context, b []jetstream.Msg) error {
			return b[len(b)-1].Ack()
		})
	}()
	time.Sleep(300 * time.Millisecond)
	if err := js.DeleteConsumer(ctx, "T", "c"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrConsumeStopped) {
			t.Fatalf("Consume after the consumer was deleted = %v, want ErrConsumeStopped", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Consume did not stop after its consumer was deleted")
	}
}

// BenchmarkConsume is the cost per message of the batched consume loop on
// a backlog of b.N messages, acking once per batch (run it with a fixed
// count, e.g. -benchtime=200000x). cpu-ns/msg is the process's CPU time,
// the embedded server's included.
func BenchmarkConsume(b *testing.B) {
	benchConsume(b, Consume)
}

func benchConsume(b *testing.B, consume func(context.Context, jetstream.Consumer, BatchOptions, BatchHandler) error) {
	n := b.N
	_, c := consumeEnv(b, n)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := 0
	cpu0 := cpuNow()
	b.ResetTimer()
	err := consume(ctx, c, BatchOptions{}, func(ctx context.Context, batch []jetstream.Msg) error {
		got += len(batch)
		if got >= n {
			cancel()
		}
		return batch[len(batch)-1].Ack()
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
