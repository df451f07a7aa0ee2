package windower_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// Fuzzed times are folded into [foldFrom, foldTo), a year around each end
// of the contract's range: the contract's verdict keeps year 9999 out.
var (
	foldFrom = time.Date(1999, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	foldTo   = time.Date(10001, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
)

// FuzzLateEventAndChange: for any event time the contract accepts, the
// LATE body (LateEvent, its watermark at the event time − lateness, at
// EndOfStream or at EndOfStream − lateness) and the CHANGES body (Change)
// the windower writes encode without error and decode to the same value.
// The windower drops their encoding errors, so an error here would be an
// empty message downstream.
func FuzzLateEventAndChange(f *testing.F) {
	for _, s := range [][2]int64{
		{contract.MinEventUnix, 0},
		{contract.MaxEventUnix - 1, 999999999},
		{time.Date(2026, 12, 2, 10, 15, 0, 0, time.UTC).Unix(), 0},
		{contract.MaxEventUnix, 0},
	} {
		for kind := range uint8(3) {
			f.Add(s[0], uint32(s[1]), kind)
		}
	}
	v, err := contract.NewValidator(contract.Config{})
	if err != nil {
		f.Fatal(err)
	}
	const latenessMs = int64(5 * 60 * 1000)
	f.Fuzz(func(t *testing.T, sec int64, nsec uint32, kind uint8) {
		span := foldTo - foldFrom
		at := time.Unix(foldFrom+(((sec-foldFrom)%span)+span)%span, int64(nsec%1e9)).UTC()
		raw := []byte(`{"schema_version":2,"event_id":"e-1","receipt_id":"r","type":"submitted","occurred_at":"` +
			at.Format(time.RFC3339Nano) + `","partition_key":"k","producer_version":"p"}`)
		ev, err := v.Validate(raw, at)
		if err != nil {
			return // not an accepted time: nothing after the validator sees it
		}
		ms := window.Ms(ev.OccurredAt)
		wm := [...]int64{window.Advance(window.NoWatermark, ms, latenessMs), window.EndOfStream, window.EndOfStream - latenessMs}[kind%3]
		le := wire.LateEvent{EventID: ev.EventID, WindowID: window.ID(ms), Reason: wire.ReasonAfterGrace,
			Watermark: window.Time(wm), Partition: 3, Seq: 42, Event: raw}
		roundTrip(t, &le, &wire.LateEvent{})
		ch := wire.Change{Partition: 3, Seq: 42, Watermark: wm, Windows: []string{window.ID(ms)}}
		roundTrip(t, &ch, &wire.Change{})
	})
}

// roundTrip encodes v, decodes it into into, and holds the second encoding
// to the first.
func roundTrip[T any](t *testing.T, v, into *T) {
	t.Helper()
	body, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("%+v does not encode: %v", *v, err)
	}
	if err := json.Unmarshal(body, into); err != nil {
		t.Fatalf("%s does not decode: %v", body, err)
	}
	again, err := json.Marshal(into)
	if err != nil || !bytes.Equal(body, again) {
		t.Fatalf("round trip changed it:\n%s\n%s (%v)", body, again, err)
	}
}
