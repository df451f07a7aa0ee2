package e2e

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/ingest"
	"github.com/receiptflow/receiptflow/pkg/pipeline"
)

// TestMetaKeysWrittenOnChange (issue 14, papercut 11): the publisher
// writes a meta.* key when its content changed, and otherwise only every
// keep-alive (at most a quarter of --stale-after), so KV watchers are not
// flooded. Before, every key was rewritten every publisher tick: with a
// 100 ms tick, each static key got about 50 updates in these 5 s.
func TestMetaKeysWrittenOnChange(t *testing.T) {
	o := troubled
	o.Events = 1000
	path, _ := writeGenerated(t, o)
	// Tick 100 ms (livePipeline); keep-alive 8s/4 = 2s.
	p := livePipeline(t, pipeline.Config{StaleAfter: 8 * time.Second}, path, true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kv, err := p.Admin.JS.KeyValue(ctx, p.Names.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.Watch(ctx, "meta.>", jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	updates := map[string]int{}
	collect := func(d time.Duration, stop func(jetstream.KeyValueEntry) bool) {
		end := time.After(d)
		for {
			select {
			case e := <-w.Updates():
				if e == nil {
					continue
				}
				updates[e.Key()]++
				if stop != nil && stop(e) {
					return
				}
			case <-end:
				return
			}
		}
	}
	collect(5*time.Second, nil)
	// Nothing moves after the drain: these keys are written by the
	// keep-alive only, 2 or 3 times in 5 s.
	for _, key := range []string{"meta.watermark", "meta.backlog", "meta.state", "meta.generation"} {
		if n := updates[key]; n < 1 || n > 3 {
			t.Errorf("%s: %d updates in 5 s of no change, want 1 to 3 (keep-alive 2s): %v", key, n, updates)
		}
	}

	// A change is written at the next tick: one more counted event grows
	// the ledger (meta.state).
	var before struct {
		LedgerEntries int64 `json:"ledger_entries"`
	}
	e, err := kv.Get(ctx, "meta.state")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(e.Value(), &before); err != nil {
		t.Fatal(err)
	}
	in := ingest.New(p.Admin.JS, ingest.Config{Partitions: 8, Validator: p.Validator})
	line := `{"schema_version":2,"event_id":"meta-extra-1","receipt_id":"r-meta","type":"submitted","occurred_at":"` +
		time.Now().UTC().Add(-time.Minute).Format(time.RFC3339Nano) + `","partition_key":"store-1","producer_version":"p"}`
	if err := in.Publish(ctx, []byte(line)); err != nil {
		t.Fatal(err)
	}
	if err := in.Close(ctx); err != nil {
		t.Fatal(err)
	}
	grown := false
	collect(3*time.Second, func(e jetstream.KeyValueEntry) bool {
		if e.Key() != "meta.state" {
			return false
		}
		var st struct {
			LedgerEntries int64 `json:"ledger_entries"`
		}
		grown = json.Unmarshal(e.Value(), &st) == nil && st.LedgerEntries > before.LedgerEntries
		return grown
	})
	if !grown {
		t.Errorf("meta.state was not rewritten with the new ledger entry within 3 s (updates %v)", updates)
	}
}
