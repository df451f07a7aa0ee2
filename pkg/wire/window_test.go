package wire_test

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

// acceptedTime folds (sec, nsec) into [foldFrom, foldTo) and returns the
// time when the contract accepts an event at it (received then too).
func acceptedTime(t *testing.T, v *contract.Validator, sec int64, nsec uint32) (time.Time, bool) {
	t.Helper()
	span := foldTo - foldFrom
	sec = foldFrom + (((sec-foldFrom)%span)+span)%span
	at := time.Unix(sec, int64(nsec%1e9)).UTC()
	rec := `{"schema_version":2,"event_id":"e","receipt_id":"r","type":"submitted","occurred_at":"` +
		at.Format(time.RFC3339Nano) + `","partition_key":"k","producer_version":"p"}`
	ev, err := v.Validate([]byte(rec), at)
	if err != nil {
		return time.Time{}, false
	}
	return ev.OccurredAt, true
}

// FuzzSnapshotOfAcceptedTime: the snapshot of the window of any event time
// the contract accepts — built as the publisher builds it, with the
// watermark at the event time − lateness, at EndOfStream, at EndOfStream −
// lateness or not yet set, and updated_at at the event time — encodes
// without error and decodes to the same snapshot (the publisher's KV value
// and the reader's view of it).
func FuzzSnapshotOfAcceptedTime(f *testing.F) {
	for _, s := range [][2]int64{
		{contract.MinEventUnix, 0},
		{contract.MaxEventUnix - 1, 999999999},
		{time.Date(2026, 12, 2, 10, 15, 0, 0, time.UTC).Unix(), 0},
		{contract.MaxEventUnix, 0},
		{time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC).Unix(), 999999999},
	} {
		for kind := range uint8(4) {
			f.Add(s[0], uint32(s[1]), kind, int64(3))
		}
	}
	v, err := contract.NewValidator(contract.Config{})
	if err != nil {
		f.Fatal(err)
	}
	const latenessMs, graceMs = int64(5 * 60 * 1000), int64(60 * 60 * 1000)
	f.Fuzz(func(t *testing.T, sec int64, nsec uint32, kind uint8, count int64) {
		at, ok := acceptedTime(t, v, sec, nsec)
		if !ok {
			return // not an accepted time: nothing after the validator sees it
		}
		ms := window.Ms(at)
		wm := [...]int64{window.Advance(window.NoWatermark, ms, latenessMs), window.EndOfStream,
			window.EndOfStream - latenessMs, window.NoWatermark}[kind%4]
		b := window.Of(ms)
		start, err := window.ParseID(b.ID)
		if err != nil {
			t.Fatal(err)
		}
		end := start + window.WidthMs
		status := window.StatusOf(wm, end, graceMs)
		w := wire.Window{
			WindowID: b.ID, Start: window.Time(start), End: window.Time(end), Count: count,
			Version: 1 + status.Ordinal(), Status: status, Watermark: window.Time(wm), UpdatedAt: at,
			FirstOutputVersion: 1, Digest: "0", Generation: "",
			Partitions: []wire.Partial{{Partition: 0, Count: count, Version: 1}},
		}
		body, err := json.Marshal(&w)
		if err != nil {
			t.Fatalf("snapshot of the window of %v (watermark %d) does not encode: %v", at, wm, err)
		}
		var back wire.Window
		if err := json.Unmarshal(body, &back); err != nil {
			t.Fatalf("%s does not decode: %v", body, err)
		}
		again, err := json.Marshal(&back)
		if err != nil || !bytes.Equal(again, body) {
			t.Fatalf("round trip changed the snapshot:\n%s\n%s (%v)", body, again, err)
		}
		if !back.Start.Equal(w.Start) || !back.End.Equal(w.End) || !back.Watermark.Equal(w.Watermark) || !back.UpdatedAt.Equal(at) {
			t.Fatalf("times changed in the round trip: %+v, want %+v", back, w)
		}
	})
}
