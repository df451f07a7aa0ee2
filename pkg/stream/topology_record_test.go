package stream

import (
	"context"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// TestEnsureRecordsWhereAbsent: Ensure records its Record on RAW's metadata
// only under keys RAW has none for; a recorded value is never replaced, an
// Ensure without a Record (an older set-up, ingest) or of another
// generation keeps every key, and RAW's settings are still updated.
func TestEnsureRecordsWhereAbsent(t *testing.T) {
	_, url := testenv.NATS(t)
	js := testenv.JetStream(t, url)
	ctx := context.Background()
	if meta, err := RawMetadata(ctx, js); meta != nil || err != nil {
		t.Fatalf("no RAW: %v, %v", meta, err)
	}
	steps := []struct {
		gen string
		cfg Config
	}{
		{"1", Config{Record: map[string]string{"rf.1.grace": "1h0m0s"}}},
		{"1", Config{Record: map[string]string{"rf.1.grace": "2h0m0s", "rf.1.lateness": "5m0s"}}},
		{"1", Config{DupWindow: time.Minute}},
		{"2", Config{DupWindow: time.Minute, Record: map[string]string{"rf.2.grace": "3h0m0s"}}},
	}
	for _, s := range steps {
		if err := Ensure(ctx, js, wire.For(s.gen), s.cfg); err != nil {
			t.Fatal(err)
		}
	}
	meta, err := RawMetadata(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"rf.1.grace": "1h0m0s", "rf.1.lateness": "5m0s", "rf.2.grace": "3h0m0s"} {
		if meta[k] != v {
			t.Errorf("RAW metadata %s = %q, want %q (all: %v)", k, meta[k], v, meta)
		}
	}
	raw, err := js.Stream(ctx, wire.Raw)
	if err != nil {
		t.Fatal(err)
	}
	if got := raw.CachedInfo().Config.Duplicates; got != time.Minute {
		t.Errorf("RAW's duplicate window %v, want the last Ensure's 1m", got)
	}
}
