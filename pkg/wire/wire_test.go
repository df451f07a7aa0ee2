package wire_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/wire"
)

// The names are interfaces operators script against (docs/spec.md §1):
// each is pinned here.
func TestNames(t *testing.T) {
	g1, g2 := wire.For(""), wire.For("2")
	cases := []struct{ got, want string }{
		{g1.Generation, wire.DefaultGeneration},
		{g1.Stream(wire.Raw), "RAW"},
		{g2.Stream(wire.Raw), "RAW"},
		{g1.Stream(wire.Valid), "VALID"},
		{g2.Stream(wire.Valid), "VALID_2"},
		{g2.Stream(wire.Changes), "CHANGES_2"},
		{g1.Subject(wire.Raw, 3), "rf.raw.3"},
		{g2.Subject(wire.Raw, 3), "rf.raw.3"},
		{g1.Subject(wire.Valid, 0), "rf.valid.0"},
		{g2.Subject(wire.Valid, 7), "rf.g2.valid.7"},
		{g2.Wildcard(wire.Late), "rf.g2.late.*"},
		{g1.Wildcard(wire.Rejected), "rf.rejected.*"},
		{g1.Bucket(), "receipts-1"},
		{g2.Bucket(), "receipts-2"},
		{g2.RedisPrefix(), "rf:2:"},
		{wire.WindowKey("2026-12-03T10"), "window.2026-12-03T10"},
		{wire.Durable("windower", 4), "windower-p4"},
		{wire.Durable("publisher", -1), "publisher"},
		{wire.ControlBucket, "receipts"},
		{wire.ActiveKey, "meta.generation"},
		{wire.HealthKey, "meta.health"},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

// roundTrip encodes v, checks the JSON field names against want, and
// decodes it back into a fresh value equal to v.
func roundTrip[T any](t *testing.T, v T, wantKeys ...string) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(b, &keys); err != nil {
		t.Fatal(err)
	}
	for _, k := range wantKeys {
		if _, ok := keys[k]; !ok {
			t.Errorf("%T: no field %q in %s", v, k, b)
		}
	}
	if len(keys) != len(wantKeys) {
		t.Errorf("%T: %d fields, want %d: %s", v, len(keys), len(wantKeys), b)
	}
	var back T
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, v) {
		t.Errorf("%T round trip:\n got %+v\nwant %+v", v, back, v)
	}
}

func TestChangeRoundTrip(t *testing.T) {
	roundTrip(t, wire.Change{Partition: 2, Seq: 41, Watermark: 1764756000000, Windows: []string{"2026-12-03T10"}},
		"partition", "seq", "watermark", "windows")
	// No changed window: the field is left out.
	roundTrip(t, wire.Change{Partition: 0, Seq: 1, Watermark: 5}, "partition", "seq", "watermark")
}

func TestLateEventRoundTrip(t *testing.T) {
	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	roundTrip(t, wire.LateEvent{EventID: "e1", WindowID: "2026-12-03T08", Reason: wire.ReasonAfterGrace,
		Watermark: at, Partition: 1, Seq: 9, Event: json.RawMessage(`{"event_id":"e1"}`)},
		"event_id", "window_id", "reason", "watermark", "partition", "seq", "event")
	roundTrip(t, wire.LateEvent{EventID: "e1", WindowID: "2026-12-03T08", Reason: wire.ReasonAfterGrace,
		Watermark: at, Partition: 1, Seq: 9, Source: "pos-1"},
		"event_id", "window_id", "reason", "watermark", "partition", "seq", "source")
}

func TestHealthFieldNames(t *testing.T) {
	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	roundTrip(t, wire.Health{UpdatedAt: at, GlobalWatermark: at, Watermarks: []time.Time{at},
		Backlog: map[string]uint64{"validator-p0": 3}, LedgerEntries: 5, Windows: 2, LateTotal: 1,
		Corrections: 1, SourceLastSeen: at, Stale: true, StaleAfter: "2m0s", Generation: "1", Grace: "1h0m0s",
		LateLastMinute: 1, CorrectionsLastMinute: 1, CorrectionBacklog: 1, PartitionRecent: []int64{4},
		Hottest: []wire.PartitionHeat{{Partition: 0, Recent: 4}}, LiveSources: 1,
		Sources: []wire.PartitionSources{{Partition: 0, Sources: []wire.SourceState{{ID: "pos-1", Progress: at, LastSeen: at, Live: true}}}}},
		"updated_at", "global_watermark", "watermarks", "backlog", "ledger_entries", "windows", "late_total",
		"corrections", "source_last_seen", "stale", "stale_after", "generation", "grace", "late_per_minute",
		"corrections_per_minute", "correction_backlog", "partition_recent", "hottest_partitions", "live_sources", "sources")
}

func TestKeepBytes(t *testing.T) {
	cases := []struct {
		maxSize    int
		maxPayload int64
		want       int
	}{
		{maxSize: 4096, maxPayload: 0, want: 16384},          // unknown payload limit: 4x
		{maxSize: 4096, maxPayload: 1 << 20, want: 16384},    // plenty of room
		{maxSize: 4096, maxPayload: 16 << 10, want: 8 << 10}, // room left for headers
		{maxSize: 4096, maxPayload: 10 << 10, want: 16384},   // no room above maxSize: 4x
	}
	for _, c := range cases {
		if got := wire.KeepBytes(c.maxSize, c.maxPayload); got != c.want {
			t.Errorf("KeepBytes(%d, %d) = %d, want %d", c.maxSize, c.maxPayload, got, c.want)
		}
	}
}

func TestOwnsConsumer(t *testing.T) {
	one, two := wire.For(""), wire.For("2")
	for _, tc := range []struct {
		n    wire.Names
		name string
		want bool
	}{
		{one, "validator-p0", true},
		{one, "windower-p15", true},
		{one, "publisher", true},
		{one, one.ServiceDurable("windower", 3), true},
		{two, "validator-g2-p7", true},
		{two, two.ServiceDurable("publisher", -1), true},
		{two, "publisher-g2", true},
		{one, "validator-g2-p7", false}, // another generation's
		{two, "validator-p7", false},
		{one, "publisher-g2", false},
		{one, "validator-p", false},
		{one, "validator-px", false},
		{one, "validator-p1x", false},
		{one, "Cq1hD7_1", false}, // an ordered consumer
		{one, "report", false},
	} {
		if got := tc.n.OwnsConsumer(tc.name); got != tc.want {
			t.Errorf("generation %s OwnsConsumer(%q) = %v, want %v", tc.n.Generation, tc.name, got, tc.want)
		}
	}
}
