package generation

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/receiptflow/receiptflow/pkg/ledger"
	"github.com/receiptflow/receiptflow/pkg/publisher"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// TestEveryBucketSaysWhichGenerationIsActive (docs/spec.md §5, issue 26
// papercut 10): meta.generation means the same in the control bucket and in
// a generation's own bucket, the active generation, and the latter also
// says whose bucket it is and whether that one is active. A rebuilt
// generation's publisher does not claim to be active; after a switch the
// bucket switched from says so though its publisher is stopped.
func TestEveryBucketSaysWhichGenerationIsActive(t *testing.T) {
	ctx, js := deployment(t)
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	mr := testenv.Miniredis(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	names := wire.For("g2")
	store := ledger.NewStore(rdb, ledger.Config{Keys: ledger.Keys{Prefix: names.RedisPrefix()}, Grace: time.Hour})
	pub := publisher.New(js, store, publisher.Config{Names: names, Partitions: 2, Tick: 10 * time.Millisecond})
	pctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- pub.Run(pctx) }()
	defer func() { stop(); <-done }()

	read := func(bucket string) (wire.GenerationMeta, error) {
		kv, err := js.KeyValue(ctx, bucket)
		if err != nil {
			return wire.GenerationMeta{}, err
		}
		e, err := kv.Get(ctx, wire.ActiveKey)
		if err != nil {
			return wire.GenerationMeta{}, err
		}
		var m wire.GenerationMeta
		err = json.Unmarshal(e.Value(), &m)
		return m, err
	}
	until := func(bucket string, want wire.GenerationMeta) {
		t.Helper()
		var got wire.GenerationMeta
		var err error
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if got, err = read(bucket); err == nil && got == want {
				return
			}
		}
		t.Fatalf("%s %s = %+v (%v), want %+v", bucket, wire.ActiveKey, got, err, want)
	}
	// The control bucket's pointer names generation 1; g2's publisher
	// says so in g2's bucket.
	until("receipts-g2", wire.GenerationMeta{Generation: "1", BucketGeneration: "g2", Active: false})
	if p, _, err := Active(ctx, js); err != nil || p.Generation != "1" {
		t.Fatalf("pointer %+v, %v", p, err)
	}

	if _, err := Switch(ctx, js, "g2", true); err != nil {
		t.Fatal(err)
	}
	// Generation 1 has no publisher running: the switch itself wrote its
	// bucket's key. g2's says it is active now.
	if got, err := read("receipts-1"); err != nil || got != (wire.GenerationMeta{Generation: "g2", BucketGeneration: "1", Active: false}) {
		t.Fatalf("receipts-1 after the switch: %+v, %v", got, err)
	}
	until("receipts-g2", wire.GenerationMeta{Generation: "g2", BucketGeneration: "g2", Active: true})
}
