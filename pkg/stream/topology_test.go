package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// TestEnsureConcurrentDifferentConfigs: services and a set-up job may call
// Ensure at the same moment with different settings (here the duplicate
// window); every call succeeds, none with "stream name already in use".
func TestEnsureConcurrentDifferentConfigs(t *testing.T) {
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
	ctx := context.Background()
	for g := 2; g < 30; g++ {
		n := wire.For(strconv.Itoa(g))
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i := range errs {
			wg.Go(func() {
				errs[i] = Ensure(ctx, js, n, Config{Partitions: 2, DupWindow: time.Duration(i+1) * time.Minute})
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("generation %d, Ensure %d: %v", g, i, err)
			}
		}
	}
	s, err := js.Stream(ctx, wire.For("2").Stream(wire.Late))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().Config.MaxAge; got != DefaultMaxAge {
		t.Errorf("LATE kept for %v, want the default %v", got, DefaultMaxAge)
	}
}

// TestLateAndRejectedKeepRowsForTheRetainedWindows: LATE and REJECTED
// keep their rows as long as the windows are retained, which is longer
// than the other streams' retention by default (30 against 7 days), so
// that explain names the late events and conflicts of every retained
// window; RAW and VALID keep the stream retention.
func TestLateAndRejectedKeepRowsForTheRetainedWindows(t *testing.T) {
	_, url := testenv.NATS(t)
	js := testenv.JetStream(t, url)
	ctx := context.Background()
	n := wire.For("")
	const windows = 30 * 24 * time.Hour
	if err := Ensure(ctx, js, n, Config{MaxAge: DefaultMaxAge, RowsAge: windows}); err != nil {
		t.Fatal(err)
	}
	for base, want := range map[string]time.Duration{wire.Raw: DefaultMaxAge, wire.Valid: DefaultMaxAge, wire.Late: windows, wire.Rejected: windows} {
		s, err := js.Stream(ctx, n.Stream(base))
		if err != nil {
			t.Fatal(err)
		}
		if got := s.CachedInfo().Config.MaxAge; got != want {
			t.Errorf("%s keeps messages for %v, want %v", base, got, want)
		}
	}
}

// TestEnsureWritesTheActivePointer (issue 14, papercut 12): the control
// bucket holds the active-generation pointer from the start, so a reader
// of the bucket sees which generation is live; Ensure never replaces a
// pointer a switch wrote, and concurrent Ensures both succeed. Before, the
// bucket stayed empty until the first switch.
func TestEnsureWritesTheActivePointer(t *testing.T) {
	_, url := testenv.NATS(t)
	js := testenv.JetStream(t, url)
	ctx := context.Background()
	// Another generation's set-up does not write it.
	if err := Ensure(ctx, js, wire.For("7"), Config{Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, wire.ControlBucket)
	if err != nil {
		t.Fatal(err)
	}
	if e, err := kv.Get(ctx, wire.ActiveKey); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("after setting up generation 7 the pointer is %v (%v), want none", e, err)
	}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() { errs[i] = Ensure(ctx, js, wire.For(""), Config{Partitions: 2}) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("concurrent Ensure: %v", err)
		}
	}
	e, err := kv.Get(ctx, wire.ActiveKey)
	if err != nil {
		t.Fatalf("no active-generation pointer after Ensure: %v", err)
	}
	var p wire.Pointer
	if err := json.Unmarshal(e.Value(), &p); err != nil || p.Generation != wire.DefaultGeneration || p.SwitchedAt.IsZero() {
		t.Fatalf("pointer %s (%v), want generation %s with its time", e.Value(), err, wire.DefaultGeneration)
	}
	// A switch to 7, then a service restarting: the pointer stays at 7.
	switched, _ := json.Marshal(wire.Pointer{Generation: "7", Previous: "1", SwitchedAt: time.Now().UTC()})
	rev, err := kv.Update(ctx, wire.ActiveKey, switched, e.Revision())
	if err != nil {
		t.Fatal(err)
	}
	if err := Ensure(ctx, js, wire.For(""), Config{Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	if e, err := kv.Get(ctx, wire.ActiveKey); err != nil || e.Revision() != rev || string(e.Value()) != string(switched) {
		t.Fatalf("after a switch and Ensure the pointer is %s at revision %d (%v), want %s at %d", e.Value(), e.Revision(), err, switched, rev)
	}
}

// TestOpenWaitsOutUnavailableCluster: with two of three nodes down, the
// third answers "JetStream system temporarily unavailable" (err_code
// 10008), which connect.Transient takes for transient; Open keeps trying
// until the nodes are back instead of failing (issue 23: the publisher
// exited on that answer).
func TestOpenWaitsOutUnavailableCluster(t *testing.T) {
	c := testenv.NewCluster(t, "open", 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	nc, err := nats.Connect(c.URLs(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	testenv.CheckFor(t, 30*time.Second, 100*time.Millisecond, func() error {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := js.CreateOrUpdateStream(rctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Replicas: 3})
		return err
	})
	keep := -1
	for i := range c.Len() {
		if !c.Server(i).JetStreamIsLeader() {
			keep = i
		}
	}
	for i := range c.Len() {
		if i != keep {
			c.Stop(i)
		}
	}
	var unavailable error
	testenv.CheckFor(t, 60*time.Second, 200*time.Millisecond, func() error {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := js.CreateConsumer(rctx, "T", jetstream.ConsumerConfig{Durable: "probe"})
		var api *jetstream.APIError
		if errors.As(err, &api) && api.ErrorCode == 10008 {
			unavailable = err
			return nil
		}
		return fmt.Errorf("no 10008 answer yet: %v", err)
	})
	if !connect.Transient(unavailable) {
		t.Fatalf("connect.Transient(%v) = false, want true", unavailable)
	}
	// Count Open's requests, so the nodes come back only after it failed
	// at least once.
	var mu sync.Mutex
	requests := 0
	sub, err := nc.Subscribe("$JS.API.CONSUMER.>", func(*nats.Msg) { mu.Lock(); requests++; mu.Unlock() })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	nc.Flush()
	opened := make(chan error, 1)
	go func() {
		_, err := Open(ctx, js, ConsumerSpec{Stream: "T", Durable: "d", Filter: "t.>"})
		opened <- err
	}()
	testenv.CheckFor(t, 60*time.Second, 50*time.Millisecond, func() error {
		select {
		case err := <-opened:
			t.Fatalf("Open returned while the cluster had no quorum: %v", err)
		default:
		}
		mu.Lock()
		defer mu.Unlock()
		if requests < 2 {
			return fmt.Errorf("%d consumer requests so far", requests)
		}
		return nil
	})
	for i := range c.Len() {
		if i != keep {
			c.Start(i)
		}
	}
	select {
	case err := <-opened:
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("Open did not succeed once the nodes were back")
	}
}
