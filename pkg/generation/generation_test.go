package generation

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/pipeline"
	"github.com/receiptflow/receiptflow/pkg/reconcile"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// deployment is an in-process NATS with the default generation's streams
// and buckets and those of generation g2.
func deployment(t *testing.T) (context.Context, jetstream.JetStream) {
	t.Helper()
	_, url := testenv.NATS(t)
	js := testenv.JetStream(t, url)
	ctx := context.Background()
	for _, gen := range []string{"", "g2"} {
		if err := stream.Ensure(ctx, js, wire.For(gen), stream.Config{Partitions: 2}); err != nil {
			t.Fatal(err)
		}
	}
	return ctx, js
}

// TestActiveDefaultsAndRejectsCorruptPointer: a fresh deployment's pointer
// names the default generation; with no pointer (a bucket set up by an
// older version) the default generation is active at revision 0; a pointer
// that is not a Pointer is an error, not a silent fallback.
func TestActiveDefaultsAndRejectsCorruptPointer(t *testing.T) {
	ctx, js := deployment(t)
	p, rev, err := Active(ctx, js)
	if err != nil || p.Generation != wire.DefaultGeneration || rev == 0 {
		t.Fatalf("Active = %+v, %d, %v; want the default generation's pointer", p, rev, err)
	}
	kv, err := js.KeyValue(ctx, wire.ControlBucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Purge(ctx, wire.ActiveKey); err != nil {
		t.Fatal(err)
	}
	p, rev, err = Active(ctx, js)
	if err != nil || p.Generation != wire.DefaultGeneration || rev != 0 {
		t.Fatalf("Active without a pointer = %+v, %d, %v; want the default generation at revision 0", p, rev, err)
	}
	for _, bad := range []string{"not json", `{"previous":"g1"}`} {
		if _, err := kv.Put(ctx, wire.ActiveKey, []byte(bad)); err != nil {
			t.Fatal(err)
		}
		if _, _, err := Active(ctx, js); err == nil || !strings.Contains(err.Error(), "corrupt") {
			t.Errorf("Active with pointer %q = %v, want a corrupt-pointer error", bad, err)
		}
	}
}

// TestActiveWithoutControlBucket: a deployment without the control bucket
// is an error that names it.
func TestActiveWithoutControlBucket(t *testing.T) {
	_, url := testenv.NATS(t)
	if _, _, err := Active(context.Background(), testenv.JetStream(t, url)); err == nil || !strings.Contains(err.Error(), "control bucket") {
		t.Fatalf("Active = %v, want a control bucket error", err)
	}
}

// TestParityRecordRoundTrip: RecordParity stores what ParityOf reads back;
// a generation without a record reports ErrNoParity.
func TestParityRecordRoundTrip(t *testing.T) {
	ctx, js := deployment(t)
	if _, err := ParityOf(ctx, js, "g2"); !errors.Is(err, ErrNoParity) {
		t.Fatalf("ParityOf before any record = %v, want ErrNoParity", err)
	}
	rec := Parity{Generation: "g2", Holds: true, RawLastSeq: 42, Summary: reconcile.Summary{Final: 3, Matched: 3}}
	if err := RecordParity(ctx, js, rec); err != nil {
		t.Fatal(err)
	}
	got, err := ParityOf(ctx, js, "g2")
	if err != nil {
		t.Fatal(err)
	}
	if got.Generation != "g2" || !got.Holds || got.RawLastSeq != 42 || got.Summary.Final != 3 || got.Summary.Matched != 3 {
		t.Fatalf("ParityOf = %+v, want %+v", got, rec)
	}
	kv, _ := js.KeyValue(ctx, wire.ControlBucket)
	if e, err := kv.Get(ctx, ParityKey("g2")); err != nil || ParityKey("g2") != "parity.g2" {
		t.Fatalf("record not under parity.g2: %v", err)
	} else {
		var m map[string]any
		if err := json.Unmarshal(e.Value(), &m); err != nil || m["holds"] != true || m["raw_last_seq"] != float64(42) {
			t.Fatalf("stored record %s", e.Value())
		}
	}
}

// TestSwitchNeedsPassingParity: Switch refuses a generation without a
// snapshot bucket, without a parity record, or with a failing one (unless
// forced); with a passing record it moves the pointer by revision, naming
// the previous generation, and switching back rolls it back.
func TestSwitchNeedsPassingParity(t *testing.T) {
	ctx, js := deployment(t)
	if _, err := Switch(ctx, js, "nosuch", true); err == nil || !strings.Contains(err.Error(), "no snapshot bucket") {
		t.Fatalf("Switch to a generation without a bucket = %v", err)
	}
	if _, err := Switch(ctx, js, "g2", false); !errors.Is(err, ErrNoParity) {
		t.Fatalf("Switch without parity = %v, want ErrNoParity", err)
	}
	if err := RecordParity(ctx, js, Parity{Generation: "g2", Holds: false, Summary: reconcile.Summary{UnexplainedDifferences: 2}}); err != nil {
		t.Fatal(err)
	}
	_, err := Switch(ctx, js, "g2", false)
	if !errors.Is(err, ErrNoParity) || !strings.Contains(err.Error(), "2 unexplained differences") {
		t.Fatalf("Switch with failing parity = %v", err)
	}
	if p, _, _ := Active(ctx, js); p.Generation != wire.DefaultGeneration {
		t.Fatalf("a refused switch moved the pointer to %s", p.Generation)
	}

	if err := RecordParity(ctx, js, Parity{Generation: "g2", Holds: true}); err != nil {
		t.Fatal(err)
	}
	next, err := Switch(ctx, js, "g2", false)
	if err != nil {
		t.Fatal(err)
	}
	if next.Generation != "g2" || next.Previous != wire.DefaultGeneration || next.Forced {
		t.Fatalf("Switch = %+v", next)
	}
	p, rev1, err := Active(ctx, js)
	if err != nil || p.Generation != "g2" || p.Previous != wire.DefaultGeneration || rev1 == 0 {
		t.Fatalf("Active after switch = %+v rev %d, %v", p, rev1, err)
	}

	// Back to the default generation: it has no parity record, so only a
	// forced switch goes through, and it is marked as forced.
	if _, err := Switch(ctx, js, wire.DefaultGeneration, false); !errors.Is(err, ErrNoParity) {
		t.Fatalf("unforced roll-back without parity = %v", err)
	}
	back, err := Switch(ctx, js, wire.DefaultGeneration, true)
	if err != nil || back.Previous != "g2" || !back.Forced {
		t.Fatalf("forced roll-back = %+v, %v", back, err)
	}
	p, rev2, err := Active(ctx, js)
	if err != nil || p.Generation != wire.DefaultGeneration || !p.Forced || rev2 <= rev1 {
		t.Fatalf("Active after roll-back = %+v rev %d (was %d), %v", p, rev2, rev1, err)
	}
}

// TestRebuildRefusesBadConfig: a rebuild needs both server URLs and an
// explicit target generation.
func TestRebuildRefusesBadConfig(t *testing.T) {
	ctx := context.Background()
	if _, err := Rebuild(ctx, RebuildConfig{Config: pipeline.Config{Generation: "g2"}}); err == nil || !strings.Contains(err.Error(), "--nats-url") {
		t.Errorf("Rebuild without URLs = %v", err)
	}
	if _, err := Rebuild(ctx, RebuildConfig{Config: pipeline.Config{NATSURL: "nats://127.0.0.1:1", RedisURL: "redis://127.0.0.1:1"}}); err == nil || !strings.Contains(err.Error(), "target --generation") {
		t.Errorf("Rebuild without a generation = %v", err)
	}
}
