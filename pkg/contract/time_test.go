package contract

// Hostile time (docs/spec.md §2): the received time — the broker's receive
// time of the RAW message — bounds both times of a record, and a time the
// contract accepts is one every later stage can write.

import (
	"encoding/json"
	"strings"

	"testing"
	"time"
)

// TestTimeBounds: year 9999 and later is bad_timestamp (not
// representable), so is an ingested_at before 2000; a year-2100 event is
// future_timestamp against a received time of today, and so is a forged
// ingested_at however fine the event time. Each case is also held to the
// same result on the fast and the schema path, for Validate and Check.
func TestTimeBounds(t *testing.T) {
	v := newValidator(t, Config{})
	received := clock // 2026-12-02T12:00:00Z
	plus := func(d time.Duration) string { return received.Add(d).Format(time.RFC3339Nano) }
	oa := func(occurred string) map[string]any { return map[string]any{"occurred_at": occurred} }
	both := func(occurred, ingested string) map[string]any {
		return map[string]any{"occurred_at": occurred, "ingested_at": ingested}
	}
	ia := func(ingested string) map[string]any { return map[string]any{"ingested_at": ingested} }
	cases := []struct {
		name string
		rec  []byte
		at   time.Time // received time; zero means received
		// reason is the expected rejection ("" valid); detail a substring
		// of its Detail.
		reason Reason
		detail string
	}{
		{name: "occurred_at year 9999, first instant", rec: v2rec("b1", oa("9999-01-01T00:00:00Z")), reason: ReasonBadTimestamp, detail: "year 9999 or later"},
		{name: "occurred_at year 9999, last instant", rec: v2rec("b2", oa("9999-12-31T23:59:59.999999999Z")), reason: ReasonBadTimestamp, detail: "year 9999 or later"},
		{name: "occurred_at year 10000", rec: v2rec("b3", oa("10000-01-01T00:00:00Z")), reason: ReasonBadTimestamp, detail: "occurred_at"},
		{name: "occurred_at 9998-12-31, future against today", rec: v2rec("b4", oa("9998-12-31T23:59:59.999999999Z")), reason: ReasonFutureTimestamp, detail: "after the received time 2026-12-02T12:00:00Z"},
		{name: "occurred_at 9998-12-31, received then", rec: v2rec("b5", oa("9998-12-31T23:59:59.999999999Z")), at: time.Date(9998, 12, 31, 23, 59, 0, 0, time.UTC)},
		{name: "occurred_at 1 s before 2000", rec: v2rec("b6", oa("1999-12-31T23:59:59Z")), reason: ReasonBadTimestamp, detail: "before 2000-01-01T00:00:00Z"},
		{name: "occurred_at exactly 2000", rec: v2rec("b7", oa("2000-01-01T00:00:00Z"))},
		{name: "ingested_at 1970", rec: v2rec("b8", ia("1970-01-01T00:00:00Z")), reason: ReasonBadTimestamp, detail: "ingested_at 1970-01-01T00:00:00Z is before 2000"},
		{name: "ingested_at year 0", rec: v2rec("b9", ia("0000-01-01T00:00:00Z")), reason: ReasonBadTimestamp, detail: "before 2000"},
		{name: "ingested_at 1999 by its offset", rec: v2rec("b10", ia("2000-01-01T00:30:00+01:00")), reason: ReasonBadTimestamp, detail: "before 2000"},
		{name: "ingested_at year 9999", rec: v2rec("b11", ia("9999-12-31T23:59:59Z")), reason: ReasonBadTimestamp, detail: "ingested_at 9999-12-31T23:59:59Z is in year 9999"},
		{name: "ingested_at year 9999 by its offset", rec: v2rec("b12", ia("9998-12-31T23:30:00-01:00")), reason: ReasonBadTimestamp, detail: "year 9999"},
		{name: "year 2100, ingested_at 2100", rec: v2rec("b13", both("2100-01-01T00:00:00Z", "2100-01-01T00:00:00Z")), reason: ReasonFutureTimestamp, detail: "event time 2100-01-01T00:00:00Z is"},
		{name: "year 2100, no ingested_at", rec: v2rec("b14", oa("2100-01-01T00:00:00Z")), reason: ReasonFutureTimestamp, detail: "after the received time"},
		{name: "occurred exactly received + skew", rec: v2rec("b15", oa(plus(DefaultMaxFutureSkew)))},
		{name: "occurred received + skew + 1 ns", rec: v2rec("b16", oa(plus(DefaultMaxFutureSkew+1))), reason: ReasonFutureTimestamp, detail: "5m0.000000001s after the received time"},
		{name: "ingested_at exactly received + skew", rec: v2rec("b17", ia(plus(DefaultMaxFutureSkew)))},
		{name: "forged ingested_at received + skew + 1 ns", rec: v2rec("b18", ia(plus(DefaultMaxFutureSkew+1))), reason: ReasonFutureTimestamp, detail: "ingested_at " + plus(DefaultMaxFutureSkew+1) + " is 5m0.000000001s after the received time"},
		{name: "forged ingested_at 2100, event time fine", rec: v2rec("b19", ia("2100-01-01T00:00:00Z")), reason: ReasonFutureTimestamp, detail: "ingested_at 2100-01-01T00:00:00Z is"},
		{name: "forged ingested_at 2100 with an offset", rec: v2rec("b20", ia("2100-01-01T05:00:00+05:00")), reason: ReasonFutureTimestamp, detail: "ingested_at 2100-01-01T00:00:00Z is"},
		{name: "v1 first minute of year 9999", rec: v1rec("b21", map[string]any{"occurred_minute": maxEventMinute}), reason: ReasonBadTimestamp, detail: "occurred_minute 4222846080 is in year 9999"},
		{name: "v1 last minute of 9998, future", rec: v1rec("b22", map[string]any{"occurred_minute": maxEventMinute - 1}), reason: ReasonFutureTimestamp, detail: "after the received time"},
		{name: "v1 2^53 minutes", rec: v1rec("b23", map[string]any{"occurred_minute": raw("9007199254740992")}), reason: ReasonBadTimestamp, detail: "year 9999"},
		{name: "v1 year 2100", rec: v1rec("b24", map[string]any{"occurred_minute": time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC).Unix() / 60}), reason: ReasonFutureTimestamp, detail: "after the received time"},
		{name: "v1 forged ingested_at", rec: v1rec("b25", map[string]any{"ingested_at": "2100-01-01T00:00:00Z"}), reason: ReasonFutureTimestamp, detail: "ingested_at 2100"},
		// Order: every bad_timestamp (rule 7) before any future_timestamp
		// (rule 8), occurred before ingested, and within rule 8 the event
		// time against the received time first.
		{name: "order: occurred 9999 before ingested 1970", rec: v2rec("b26", both("9999-01-01T00:00:00Z", "1970-01-01T00:00:00Z")), reason: ReasonBadTimestamp, detail: "occurred_at"},
		{name: "order: ingested 1970 before occurred 2100", rec: v2rec("b27", both("2100-01-01T00:00:00Z", "1970-01-01T00:00:00Z")), reason: ReasonBadTimestamp, detail: "ingested_at"},
		{name: "order: occurred 2100 before ingested 2200", rec: v2rec("b28", both("2100-01-01T00:00:00Z", "2200-01-01T00:00:00Z")), reason: ReasonFutureTimestamp, detail: "event time 2100"},
		{name: "order: ingested 2100 before occurred past ingested", rec: v2rec("b29", both(plus(4*time.Minute), "2100-01-01T00:00:00Z")), reason: ReasonFutureTimestamp, detail: "ingested_at 2100"},
		{name: "occurred beyond its own ingested_at", rec: v2rec("b30", both(plus(-time.Hour), plus(-2*time.Hour))), reason: ReasonFutureTimestamp, detail: "after ingested_at"},
	}
	for _, tc := range cases {
		at := tc.at
		if at.IsZero() {
			at = received
		}
		e, err := v.Validate(tc.rec, at)
		if tc.reason == "" {
			if err != nil {
				t.Errorf("%s: %v, want valid", tc.name, err)
			} else if mustMarshal(t, e) == nil {
				t.Errorf("%s: the valid event does not encode", tc.name)
			}
		} else if r, ok := AsReject(err); !ok || r.Reason != tc.reason || !strings.Contains(r.Detail, tc.detail) {
			t.Errorf("%s: %v, want %s with %q", tc.name, err, tc.reason, tc.detail)
		}
		if _, diff := compareFastSchema(v, tc.rec, at); diff != "" {
			t.Errorf("%s: %s", tc.name, diff)
		}
	}
}

// mustMarshal encodes e as JSON, failing t on an error.
func mustMarshal(t *testing.T, e Event) []byte {
	t.Helper()
	b, err := json.Marshal(&e)
	if err != nil {
		t.Errorf("json.Marshal(%+v): %v", e, err)
		return nil
	}
	return b
}

// FuzzTimestampPaths: any occurred_at, ingested_at and received time, the
// fast and the schema path decide alike, and whatever they accept lies in
// [2000, 9999) and within the skew of the received time, and encodes.
func FuzzTimestampPaths(f *testing.F) {
	seeds := []string{
		"2026-12-02T10:15:00Z", "2000-01-01T00:00:00Z", "1999-12-31T23:59:59.999999999Z",
		"9998-12-31T23:59:59.999999999Z", "9999-01-01T00:00:00Z", "9999-12-31T23:59:59Z",
		"10000-01-01T00:00:00Z", "1970-01-01T00:00:00Z", "0000-01-01T00:00:00Z",
		"2100-01-01T00:00:00Z", "2026-12-02T12:05:00Z", "2026-12-02T12:05:00.000000001Z",
		"9998-12-31T23:30:00-01:00", "2000-01-01T00:30:00+01:00", "2026-12-02t12:00:00z", "",
	}
	for i, s := range seeds {
		f.Add(s, seeds[(i*7+3)%len(seeds)], clock.UnixNano(), i%3 == 0)
	}
	f.Add("9998-12-31T23:59:59.999999999Z", "9998-12-31T23:59:59Z", time.Date(9998, 12, 31, 23, 59, 0, 0, time.UTC).UnixNano(), true)
	v := newValidator(f, Config{})
	f.Fuzz(func(t *testing.T, occurred, ingested string, receivedNano int64, withIngested bool) {
		received := time.Unix(0, receivedNano).UTC()
		set := map[string]any{"occurred_at": occurred}
		if withIngested {
			set["ingested_at"] = ingested
		}
		rec := v2rec("fz", set)
		if _, diff := compareFastSchema(v, rec, received); diff != "" {
			t.Fatalf("%s\nrecord: %q received %v", diff, rec, received)
		}
		e, err := v.Validate(rec, received)
		if err != nil {
			return
		}
		limit := received.Add(v.opts.MaxFutureSkew)
		for _, tm := range []time.Time{e.OccurredAt, e.IngestedAt} {
			if withIngested || tm == e.OccurredAt {
				if tm.Before(minEventTime) || !tm.Before(maxEventTime) || tm.After(limit) {
					t.Fatalf("accepted %v (record %q, received %v): outside [2000, 9999) or after %v", tm, rec, received, limit)
				}
			}
			if _, err := tm.MarshalJSON(); err != nil {
				t.Fatalf("accepted %v does not encode: %v", tm, err)
			}
		}
	})
}
