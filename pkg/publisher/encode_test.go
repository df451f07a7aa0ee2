package publisher_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// FuzzHealthOfAcceptedTime: the meta.health value the publisher writes to
// the KV bucket encodes and decodes unchanged for any watermark an
// accepted event time can produce (the event time − lateness, EndOfStream,
// EndOfStream − lateness, none yet), with source_last_seen at the event
// time. (The window snapshot itself is fuzzed in pkg/wire.)
func FuzzHealthOfAcceptedTime(f *testing.F) {
	for _, s := range [][2]int64{
		{contract.MinEventUnix, 0},
		{contract.MaxEventUnix - 1, 999999999},
		{contract.MaxEventUnix, 0},
	} {
		f.Add(s[0], uint32(s[1]))
	}
	v, err := contract.NewValidator(contract.Config{})
	if err != nil {
		f.Fatal(err)
	}
	from := time.Date(1999, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	to := time.Date(10001, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	const latenessMs = int64(5 * 60 * 1000)
	f.Fuzz(func(t *testing.T, sec int64, nsec uint32) {
		span := to - from
		at := time.Unix(from+(((sec-from)%span)+span)%span, int64(nsec%1e9)).UTC()
		raw := []byte(`{"schema_version":2,"event_id":"e","receipt_id":"r","type":"submitted","occurred_at":"` +
			at.Format(time.RFC3339Nano) + `","partition_key":"k","producer_version":"p"}`)
		ev, err := v.Validate(raw, at)
		if err != nil {
			return // not an accepted time: nothing after the validator sees it
		}
		ms := window.Ms(ev.OccurredAt)
		wms := []time.Time{window.Time(window.Advance(window.NoWatermark, ms, latenessMs)), window.Time(window.EndOfStream),
			window.Time(window.EndOfStream - latenessMs), window.Time(window.NoWatermark)}
		h := wire.Health{UpdatedAt: ev.OccurredAt, GlobalWatermark: wms[0], Watermarks: wms,
			Backlog: map[string]uint64{}, SourceLastSeen: ev.OccurredAt, StaleAfter: "2m0s", Grace: "1h0m0s"}
		body, err := json.Marshal(&h)
		if err != nil {
			t.Fatalf("health with watermarks %v does not encode: %v", wms, err)
		}
		var back wire.Health
		if err := json.Unmarshal(body, &back); err != nil {
			t.Fatalf("%s does not decode: %v", body, err)
		}
		if again, err := json.Marshal(&back); err != nil || !bytes.Equal(again, body) {
			t.Fatalf("round trip changed it:\n%s\n%s (%v)", body, again, err)
		}
	})
}
