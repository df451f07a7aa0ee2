package stream

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

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
