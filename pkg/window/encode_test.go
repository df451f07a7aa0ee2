package window_test

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/window"
)

// Fuzzed times are folded into [foldFrom, foldTo): a year around each end
// of the contract's range, so the contract's own verdict, not the fold,
// keeps year 9999 out.
var (
	foldFrom = time.Date(1999, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	foldTo   = time.Date(10001, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
)

// acceptedTime folds (sec, nsec) into [foldFrom, foldTo) and returns the
// time when the contract accepts an event at it (received then too), so
// the fuzz targets below only ever work with times the validator lets
// through: the contract, not the test, decides.
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

// extremes are (sec, nsec) seeds: the first and the last instant the
// contract accepts, an ordinary one, and the first and the last instant of
// year 9999 (rejected).
var extremes = [][2]int64{
	{contract.MinEventUnix, 0},
	{contract.MaxEventUnix - 1, 999999999},
	{time.Date(2026, 12, 2, 10, 15, 0, 0, time.UTC).Unix(), 0},
	{contract.MaxEventUnix, 0},
	{time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC).Unix(), 999999999},
}

// FuzzWindowOfAcceptedTime: for every event time the contract accepts,
// the window, its id, its end, the watermarks derived from it (time −
// lateness, EndOfStream, EndOfStream − lateness) and the status all
// compute and encode: the id parses back to the start, start ≤ t < end,
// every instant writes as RFC 3339 JSON, and every ms value survives a Lua
// number (a float64).
func FuzzWindowOfAcceptedTime(f *testing.F) {
	for _, e := range extremes {
		f.Add(e[0], uint32(e[1]), int64(5*time.Minute/time.Millisecond))
	}
	v, err := contract.NewValidator(contract.Config{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, sec int64, nsec uint32, latenessMs int64) {
		at, ok := acceptedTime(t, v, sec, nsec)
		if !ok {
			return // not an accepted time: nothing after the validator sees it
		}
		latenessMs = ((latenessMs % (24 * 3600 * 1000)) + 24*3600*1000) % (24 * 3600 * 1000)
		ms := window.Ms(at)
		b := window.Of(ms)
		if b.Start > ms || ms >= b.End || b.End-b.Start != window.WidthMs || b.ID != window.ID(ms) {
			t.Fatalf("Of(%d) = %+v", ms, b)
		}
		start, err := window.ParseID(b.ID)
		if err != nil || start != b.Start {
			t.Fatalf("ParseID(%q) = %d, %v; want %d", b.ID, start, err, b.Start)
		}
		grace := time.Hour.Milliseconds()
		wms := []int64{window.Advance(window.NoWatermark, ms, latenessMs), window.EndOfStream, window.EndOfStream - latenessMs, ms}
		for _, instant := range append([]int64{b.Start, b.End, ms}, wms...) {
			if float64(instant) != float64(int64(float64(instant))) || int64(float64(instant)) != instant {
				t.Fatalf("%d does not survive a Lua number", instant)
			}
			j, err := json.Marshal(window.Time(instant))
			if err != nil {
				t.Fatalf("window.Time(%d) (window of %v) does not encode: %v", instant, at, err)
			}
			var back time.Time
			if err := json.Unmarshal(j, &back); err != nil || back.UnixMilli() != instant {
				t.Fatalf("%s decodes to %v, %v; want %d ms", j, back, err, instant)
			}
		}
		for _, w := range wms {
			switch s := window.StatusOf(w, b.End, grace); s {
			case window.StatusOpen, window.StatusInGrace, window.StatusFinal:
			default:
				t.Fatalf("StatusOf(%d, %d) = %q", w, b.End, s)
			}
		}
		if window.StatusOf(window.EndOfStream, b.End, grace) != window.StatusFinal {
			t.Fatalf("EndOfStream does not finalize the window %s (the last accepted hour must close)", b.ID)
		}
		if _, err := strconv.Atoi(b.ID[:4]); err != nil || len(b.ID) != len(window.IDLayout) {
			t.Fatalf("window id %q is not of the form %s", b.ID, window.IDLayout)
		}
	})
}
