package contract

// Hostile input, one test per row of docs/bad-input.md. The e2e twins of
// these tests (e2e/hostile_test.go) push the same kinds of record through
// the whole pipeline.

import (
	"bytes"
	"encoding/json"
	"errors"
	"runtime/debug"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// hostile is one hostile record and what the contract must make of it.
type hostile struct {
	name string
	rec  []byte
	// reason is the expected rejection; "" means the record is valid.
	reason Reason
	// id is the expected RejectError.EventID (or Event.EventID when valid).
	id string
	// detail is a substring of the rejection's Detail.
	detail string
}

// check validates h.rec with v (ingest time clock) and holds the result to h.
func (h hostile) check(t *testing.T, v *Validator) Event {
	t.Helper()
	e, err := v.Validate(h.rec, clock)
	if h.reason == "" {
		if err != nil {
			t.Fatalf("%s: Validate: %v, want valid\nrecord: %.300s", h.name, err, h.rec)
		}
		if e.EventID != h.id {
			t.Errorf("%s: EventID %q, want %q", h.name, e.EventID, h.id)
		}
		return e
	}
	r, ok := AsReject(err)
	if !ok {
		t.Fatalf("%s: Validate = %v, %v; want a rejection %s\nrecord: %.300s", h.name, e.EventID, err, h.reason, h.rec)
	}
	if r.Reason != h.reason {
		t.Errorf("%s: reason %s (%s), want %s\nrecord: %.300s", h.name, r.Reason, r.Detail, h.reason, h.rec)
	}
	if !errors.Is(err, sentinels[h.reason]) {
		t.Errorf("%s: errors.Is(err, sentinel of %s) is false", h.name, h.reason)
	}
	if r.EventID != h.id {
		t.Errorf("%s: EventID %q, want %q", h.name, r.EventID, h.id)
	}
	if !strings.Contains(r.Detail, h.detail) {
		t.Errorf("%s: Detail %q does not contain %q", h.name, r.Detail, h.detail)
	}
	headerSafe(t, h.name, r)
	return Event{}
}

// headerSafe holds a rejection to what the validator copies into NATS
// headers (Rf-Detail, Rf-Event-Id): printable UTF-8 without control
// characters, so no record can inject a header line, and an id of the id
// alphabet or none.
func headerSafe(t *testing.T, name string, r *RejectError) {
	t.Helper()
	if r.Detail == "" || len(r.Detail) > 512 || !utf8.ValidString(r.Detail) {
		t.Errorf("%s: Detail %q is empty, longer than 512 bytes or not UTF-8", name, r.Detail)
	}
	for _, c := range []byte(r.Detail) {
		if c < 0x20 || c == 0x7f {
			t.Errorf("%s: Detail %q holds control byte %#02x", name, r.Detail, c)
			break
		}
	}
	if r.EventID != "" && !isID(r.EventID) {
		t.Errorf("%s: EventID %q is outside the id alphabet", name, r.EventID)
	}
}

// v2rec is a valid v2 record with id, changed by set (see with).
func v2rec(id string, set map[string]any) []byte {
	m := map[string]any{"event_id": id}
	for k, v := range set {
		m[k] = v
	}
	return with(v2Fields(), m)
}

func v1rec(id string, set map[string]any) []byte {
	m := map[string]any{"event_id": id}
	for k, v := range set {
		m[k] = v
	}
	return with(v1Fields(), m)
}

// TestHostileMalformedJSON: a record that is not exactly one well-formed
// JSON object in UTF-8 is rejected malformed_json, with its event id when
// the text still shows one, and nothing of it is used.
func TestHostileMalformedJSON(t *testing.T) {
	v := newValidator(t, Config{})
	good := string(v2rec("mal-ok", nil))
	body := strings.TrimSuffix(strings.TrimPrefix(good, "{"), "}")
	cases := []hostile{
		{name: "cut off", rec: []byte(`{"schema_version":2,"event_id":"mal-cut","receipt_id":"r",`), id: "mal-cut", detail: "want a string key at byte 58"},
		{name: "trailing comma", rec: []byte("{" + body + ",}"), id: "mal-ok", detail: "want a string key"},
		{name: "two objects on one line", rec: []byte(good + good), id: "mal-ok", detail: "after the top-level value"},
		{name: "garbage after the object", rec: []byte(good + " x"), id: "mal-ok", detail: "after the top-level value"},
		{name: "second brace", rec: []byte(good + "}"), id: "mal-ok", detail: "after the top-level value"},
		{name: "single quotes", rec: []byte(`{'schema_version':2,'event_id':'mal-q'}`), detail: "want a string key"},
		{name: "unquoted key", rec: []byte(`{schema_version:2}`), detail: "want a string key"},
		{name: "NaN", rec: []byte(`{"event_id":"mal-nan","payload":{"x":NaN}}`), id: "mal-nan", detail: "want a value"},
		{name: "leading zero", rec: []byte(`{"event_id":"mal-zero","payload":{"x":01}}`), id: "mal-zero", detail: "want ',' or '}'"},
		{name: "comment", rec: []byte(`{"event_id":"mal-comment"} // note`), id: "mal-comment", detail: "after the top-level value"},
		{name: "array of events", rec: []byte("[" + good + "]"), id: "mal-ok", detail: "not a JSON object"},
		{name: "string", rec: []byte(`"{\"event_id\":\"x\"}"`), detail: "not a JSON object"},
		{name: "null", rec: []byte(`null`), detail: "not a JSON object"},
		{name: "number", rec: []byte(`42`), detail: "not a JSON object"},
		{name: "empty", rec: []byte(``), detail: "empty record"},
		{name: "blank", rec: []byte(" \t "), detail: "empty record"},
		{name: "byte order mark", rec: []byte("\uFEFF" + good), id: "mal-ok", detail: "non-ASCII"},
		{name: "NBSP after the object", rec: []byte(good + "\u00A0"), id: "mal-ok", detail: "after the top-level value"},
		{name: "invalid UTF-8", rec: []byte(`{"event_id":"mal-utf8","receipt_id":"r` + "\xff" + `"}`), id: "mal-utf8", detail: "invalid UTF-8"},
		{name: "overlong UTF-8", rec: []byte(`{"event_id":"mal-overlong","partition_key":"` + "\xc0\xaf" + `"}`), id: "mal-overlong", detail: "invalid UTF-8"},
		{name: "lone surrogate", rec: []byte(`{"event_id":"mal-surrogate","partition_key":"\ud800"}`), id: "mal-surrogate", detail: "unpaired surrogate"},
		{name: "NUL in a string", rec: []byte(`{"event_id":"mal-nul","partition_key":"a` + "\x00" + `b"}`), id: "mal-nul", detail: "control character"},
		{name: "raw newline in a string", rec: []byte(`{"event_id":"mal-nl","partition_key":"a` + "\n" + `b"}`), id: "mal-nl", detail: "control character"},
		{name: "bad escape", rec: []byte(`{"event_id":"mal-esc","partition_key":"\x"}`), id: "mal-esc", detail: "invalid escape"},
		{name: "id with an escape that breaks", rec: []byte(`{"event_id":"mal-\u00"}`), detail: "invalid \\u escape"},
	}
	for _, h := range cases {
		h.reason = ReasonMalformedJSON
		h.check(t, v)
	}
}

// TestHostileTooLarge: 64 KiB is the limit of the record as its producer
// wrote it. 64 KiB passes, 64 KiB + 1 byte is too_large, with its id; the
// stamp ingest adds and the white space around the line do not count, so
// ingest's copy and the batch pass's line are measured alike.
func TestHostileTooLarge(t *testing.T) {
	v := newValidator(t, Config{})
	at := padded(t, 64<<10)
	over := padded(t, 64<<10+1)
	hostile{name: "exactly 64 KiB", rec: at, id: "evt-1"}.check(t, v)
	hostile{name: "64 KiB + 1", rec: over, reason: ReasonTooLarge, id: "evt-1", detail: "record is 65537 bytes, more than the limit of 65536"}.check(t, v)

	// What ingest makes of the 64 KiB record: trimmed, then stamped.
	stamped, ok := StampIngestedAt(at, time.Date(2026, 12, 2, 12, 0, 0, 123456789, time.UTC))
	if !ok || len(stamped) <= 64<<10 {
		t.Fatalf("stamp: %v, %d bytes", ok, len(stamped))
	}
	hostile{name: "64 KiB stamped by ingest", rec: stamped, id: "evt-1"}.check(t, v)
	hostile{name: "64 KiB in white space", rec: append(append([]byte(" \t"), at...), " \r\n"...), id: "evt-1"}.check(t, v)
	stampedOver, _ := StampIngestedAt(over, clock)
	hostile{name: "64 KiB + 1 stamped", rec: stampedOver, reason: ReasonTooLarge, id: "evt-1", detail: "65537 bytes"}.check(t, v)
	if got := Size(stamped); got != 64<<10 {
		t.Errorf("Size(stamped 64 KiB) = %d", got)
	}
	// Only the exact stamp is free: an ingested_at the producer wrote in
	// another form counts.
	own := bytes.Replace(stamped, []byte(`.123456789Z"`), []byte(`.123456789+00:00"`), 1)
	if Size(own) != len(own) {
		t.Errorf("Size counts a non-stamp ingested_at as free: %d of %d", Size(own), len(own))
	}
	hostile{name: "64 KiB with a producer ingested_at", rec: own, reason: ReasonTooLarge, id: "evt-1"}.check(t, v)

	// Size is decided before anything is parsed: megabytes of anything.
	for _, junk := range [][]byte{
		bytes.Repeat([]byte("{"), 2<<20),
		append([]byte(`{"event_id":"big-junk","x":"`), bytes.Repeat([]byte{0xff}, 1<<20)...),
	} {
		h := hostile{name: "junk", rec: junk, reason: ReasonTooLarge, detail: "more than the limit"}
		if bytes.HasPrefix(junk, []byte(`{"event_id"`)) {
			h.id = "big-junk"
		}
		h.check(t, v)
	}
}

// nest returns a payload value nested n levels (the payload object itself is
// the first level), the levels below it objects (obj) or arrays.
func nest(n int, obj bool) string {
	var open strings.Builder
	closing := make([]byte, n)
	for i := 0; i < n; i++ {
		if obj || i == 0 {
			open.WriteString(`{"a":`)
			closing[n-1-i] = '}'
		} else {
			open.WriteByte('[')
			closing[n-1-i] = ']'
		}
	}
	return open.String() + "1" + string(closing)
}

// TestHostileDeepNesting: a record may nest objects and arrays at most
// maxDepth (256) levels deep, counting the record itself. Deeper is
// invalid_field, decided after at most maxDepth levels of recursion: the
// test runs with a 4 MiB stack limit, which unbounded recursion over 64 KiB
// of brackets would exceed (and crash the test binary).
func TestHostileDeepNesting(t *testing.T) {
	if maxDepth != 256 {
		t.Fatalf("maxDepth is %d; docs/bad-input.md says 256", maxDepth)
	}
	old := debug.SetMaxStack(4 << 20)
	defer debug.SetMaxStack(old)
	v := newValidator(t, Config{})

	hostile{name: "payload 255 levels (256 with the record)", rec: v2rec("deep-ok", map[string]any{"payload": raw(nest(255, true))}), id: "deep-ok"}.check(t, v)
	hostile{name: "payload 256 levels (257 with the record)", rec: v2rec("deep-257", map[string]any{"payload": raw(nest(256, true))}),
		reason: ReasonInvalidField, id: "deep-257", detail: "nested deeper than 256 levels"}.check(t, v)
	deepObj := v2rec("deep-obj", map[string]any{"payload": raw(nest(10000, true))})
	deepArr := v2rec("deep-arr", map[string]any{"payload": raw(nest(10000, false))})
	if len(deepObj) > 64<<10 || len(deepArr) > 64<<10 {
		t.Fatalf("fixtures too large: %d, %d", len(deepObj), len(deepArr))
	}
	hostile{name: "payload objects 10,000 deep", rec: deepObj, reason: ReasonInvalidField, id: "deep-obj", detail: "nested deeper than 256 levels"}.check(t, v)
	hostile{name: "payload arrays 10,000 deep", rec: deepArr, reason: ReasonInvalidField, id: "deep-arr", detail: "nested deeper than 256 levels"}.check(t, v)
	// The id comes after the deep payload: found by the byte scan.
	after := []byte(`{"payload":` + nest(10000, false) + `,"event_id":"deep-after"}`)
	hostile{name: "id after a deep payload", rec: after, reason: ReasonInvalidField, id: "deep-after", detail: "nested deeper"}.check(t, v)
	// Not an object at all, and deep: malformed_json, no id.
	brackets := bytes.Repeat([]byte("["), 64<<10)
	hostile{name: "64 KiB of [", rec: brackets, reason: ReasonMalformedJSON}.check(t, v)
	closed := []byte(strings.Repeat("[", 30000) + strings.Repeat("]", 30000))
	hostile{name: "30,000 nested arrays, well-formed", rec: closed, reason: ReasonMalformedJSON, detail: "not a JSON object"}.check(t, v)

	// The helpers ingest and the validator run on raw records are bounded
	// the same way.
	if out, ok := StampIngestedAt(deepObj, clock); ok || !bytes.Equal(out, deepObj) {
		t.Error("StampIngestedAt stamped a record nested too deep")
	}
	if id := PeekEventID(after); id != "deep-after" {
		t.Errorf("PeekEventID = %q", id)
	}
	e := Event{EventID: "x", Payload: raw(nest(10000, true))}
	if Fingerprint(&e) == 0 {
		t.Error("Fingerprint of a deep payload is 0")
	}
}

// BenchmarkHostileDeepNesting is the cost of rejecting a 60 KB record whose
// payload nests 10,000 levels: it stops at level 257.
func BenchmarkHostileDeepNesting(b *testing.B) {
	v := newValidator(b, Config{})
	rec := v2rec("deep", map[string]any{"payload": raw(nest(10000, false))})
	b.SetBytes(int64(len(rec)))
	for b.Loop() {
		if _, err := v.Validate(rec, clock); !errors.Is(err, ErrInvalidField) {
			b.Fatal(err)
		}
	}
}

// TestHostileDuplicateKeys: a repeated key anywhere, or a top-level key
// that is a contract field in other case (Unicode case folding included),
// is invalid_field. When the repeated or variant key is event_id, the
// rejection names no id at all: neither of the two ids is trusted, so
// neither can be claimed or blamed.
func TestHostileDuplicateKeys(t *testing.T) {
	v := newValidator(t, Config{})
	good := string(v2rec("dup-a", nil))
	cut := strings.TrimSuffix(good, "}")
	cases := []hostile{
		{name: "event_id twice, same value", rec: []byte(cut + `,"event_id":"dup-a"}`), detail: `key "event_id" appears more than once`},
		{name: "event_id twice, second id", rec: []byte(cut + `,"event_id":"dup-b"}`), detail: `key "event_id" appears more than once`},
		{name: "EVENT_ID next to event_id", rec: []byte(cut + `,"EVENT_ID":"dup-b"}`), detail: `"EVENT_ID" differs from the field "event_id" only by case`},
		{name: "Event_Id instead of event_id", rec: []byte(strings.Replace(good, `"event_id"`, `"Event_Id"`, 1)), detail: "only by case"},
		{name: "escaped event_id key", rec: []byte(cut + `,"event_\u0069d":"dup-b"}`), detail: `key "event_id" appears more than once`},
		{name: "long s in schema_version", rec: []byte(cut + `,"ſchema_version":1}`), id: "dup-a", detail: "only by case"},
		{name: "type twice", rec: []byte(cut + `,"type":"viewed"}`), id: "dup-a", detail: `key "type" appears more than once`},
		{name: "TYPE next to type", rec: []byte(cut + `,"TYPE":"viewed"}`), id: "dup-a", detail: "only by case"},
		{name: "partition_key twice", rec: []byte(cut + `,"partition_key":"other"}`), id: "dup-a", detail: `"partition_key" appears more than once`},
		{name: "key repeated inside payload", rec: []byte(cut + `,"payload":{"n":1,"n":2}}`), id: "dup-a", detail: `inside "payload"`},
		{name: "key repeated deep inside payload", rec: v2rec("dup-a", map[string]any{"payload": raw(`{"x":[{"k":1,"k":1}]}`)}), id: "dup-a", detail: `key "k" appears more than once inside "payload"`},
		{name: "event_id with a trailing space", rec: []byte(cut + `,"event_id ":"dup-b"}`), id: "dup-a", detail: `unknown field "event_id "`},
	}
	for _, h := range cases {
		h.reason = ReasonInvalidField
		h.check(t, v)
		// The validator service copies EventID into the REJECTED row only
		// when the contract gives one; PeekEventID would pick one of two
		// ids, so it must not be used for these records.
	}
	// Keys named like fields inside the payload are data: accepted, and
	// the event's id is the top-level one.
	hostile{name: "event_id keys inside payload", rec: v2rec("dup-c", map[string]any{"payload": raw(`{"event_id":"dup-x","EVENT_ID":"dup-y"}`)}), id: "dup-c"}.check(t, v)
}

// TestHostileBigIntegers: integers the contract reads (schema_version,
// occurred_minute) must be plain literals within ±2^53; beyond is
// invalid_field, decided without expanding the number. Payload numbers of
// any size are data: accepted, kept as written and compared exactly in the
// fingerprint, so two payloads that differ only past 2^53 are different
// content.
func TestHostileBigIntegers(t *testing.T) {
	v := newValidator(t, Config{})
	huge := strings.Repeat("9", 60000)
	cases := []hostile{
		{name: "schema_version 2^53+1", rec: v2rec("int-sv", map[string]any{"schema_version": raw("9007199254740993")}), reason: ReasonInvalidField, id: "int-sv", detail: "beyond ±2^53"},
		{name: "schema_version 60,000 digits", rec: v2rec("int-sv2", map[string]any{"schema_version": raw(huge)}), reason: ReasonInvalidField, id: "int-sv2", detail: "beyond ±2^53"},
		{name: "schema_version 2.0", rec: v2rec("int-sv3", map[string]any{"schema_version": raw("2.0")}), reason: ReasonUnsupportedSchema, id: "int-sv3"},
		{name: "schema_version 1e999999999", rec: v2rec("int-sv4", map[string]any{"schema_version": raw("1e999999999")}), reason: ReasonUnsupportedSchema, id: "int-sv4"},
		{name: "occurred_minute 2^53+1", rec: v1rec("int-om", map[string]any{"occurred_minute": raw("9007199254740993")}), reason: ReasonInvalidField, id: "int-om", detail: "beyond ±2^53"},
		{name: "occurred_minute -(2^53+1)", rec: v1rec("int-om2", map[string]any{"occurred_minute": raw("-9007199254740993")}), reason: ReasonInvalidField, id: "int-om2", detail: "beyond ±2^53"},
		{name: "occurred_minute 2^64", rec: v1rec("int-om3", map[string]any{"occurred_minute": raw("18446744073709551616")}), reason: ReasonInvalidField, id: "int-om3", detail: "beyond ±2^53"},
		{name: "occurred_minute 60,000 digits", rec: v1rec("int-om4", map[string]any{"occurred_minute": raw(huge)}), reason: ReasonInvalidField, id: "int-om4", detail: "beyond ±2^53"},
		{name: "occurred_minute 1e999999999", rec: v1rec("int-om5", map[string]any{"occurred_minute": raw("1e999999999")}), reason: ReasonInvalidField, id: "int-om5", detail: "without fraction or exponent"},
		{name: "occurred_minute 2.9936775e7", rec: v1rec("int-om6", map[string]any{"occurred_minute": raw("2.9936775e7")}), reason: ReasonInvalidField, id: "int-om6", detail: "without fraction or exponent"},
		{name: "occurred_minute exactly 2^53", rec: v1rec("int-om7", map[string]any{"occurred_minute": raw("9007199254740992")}), reason: ReasonBadTimestamp, id: "int-om7"},
		{name: "receipt_id a huge number", rec: v2rec("int-r", map[string]any{"receipt_id": raw("1e999999999")}), reason: ReasonInvalidField, id: "int-r", detail: "receipt_id must be string"},
		{name: "payload 2^53+1", rec: v2rec("int-p1", map[string]any{"payload": raw(`{"n":9007199254740993}`)}), id: "int-p1"},
		{name: "payload 60,000 digits", rec: v2rec("int-p2", map[string]any{"payload": raw(`{"n":` + huge + `}`)}), id: "int-p2"},
		{name: "payload 1e999999999", rec: v2rec("int-p3", map[string]any{"payload": raw(`{"n":1e999999999}`)}), id: "int-p3"},
	}
	for _, h := range cases {
		h.check(t, v)
	}

	fp := func(payload string) uint64 {
		return hostile{name: payload, rec: v2rec("int-fp", map[string]any{"payload": raw(payload)}), id: "int-fp"}.check(t, v).Fingerprint
	}
	if fp(`{"n":9007199254740993}`) == fp(`{"n":9007199254740992}`) {
		t.Error("payloads differing past 2^53 have one fingerprint: a conflicting duplicate would pass as a retry")
	}
	if fp(`{"n":123456789012345678901234567890}`) == fp(`{"n":123456789012345678901234567891}`) {
		t.Error("payloads differing in the 30th digit have one fingerprint")
	}
	if fp(`{"n":1299}`) != fp(`{"n":1.299e3}`) {
		t.Error("1299 and 1.299e3 should be the same content")
	}
	// The canonical event carries the payload as written: VALID keeps
	// every digit.
	e := hostile{name: "payload 2^53+1", rec: v2rec("int-p1", map[string]any{"payload": raw(`{"n":9007199254740993}`)}), id: "int-p1"}.check(t, v)
	body, err := json.Marshal(&e)
	if err != nil || !bytes.Contains(body, []byte(`"n":9007199254740993`)) {
		t.Errorf("canonical event %s (%v) lost the literal", body, err)
	}
}

// TestHostileTimes: event times before 2000-01-01 (negative, zero, the
// epoch), unparsable ones, ones Go cannot hold and ones in year 9999 or
// later (not representable) are bad_timestamp; the last instant of 9998
// parses and is future_timestamp. The same holds for v1 (minutes) and v2
// (RFC 3339), and for ingested_at.
func TestHostileTimes(t *testing.T) {
	v := newValidator(t, Config{})
	om := func(name string, val any, reason Reason, detail string) hostile {
		return hostile{name: "v1 " + name, rec: v1rec("t1", map[string]any{"occurred_minute": val}), reason: reason, id: "t1", detail: detail}
	}
	oa := func(name string, val any, reason Reason, detail string) hostile {
		return hostile{name: "v2 " + name, rec: v2rec("t2", map[string]any{"occurred_at": val}), reason: reason, id: "t2", detail: detail}
	}
	ia := func(name string, val any, reason Reason, detail string) hostile {
		return hostile{name: "ingested_at " + name, rec: v2rec("t3", map[string]any{"ingested_at": val}), reason: reason, id: "t3", detail: detail}
	}
	cases := []hostile{
		om("negative", -1, ReasonBadTimestamp, "before 2000"),
		om("zero", 0, ReasonBadTimestamp, "before 2000"),
		om("one minute before 2000", 15778079, ReasonBadTimestamp, "before 2000"),
		om("exactly 2000", 15778080, "", ""),
		om("year 9999", 253402300740/60, ReasonBadTimestamp, "year 9999 or later"),
		om("a string", "29936775", ReasonBadTimestamp, "must be an integer number of minutes"),
		om("null", raw("null"), ReasonBadTimestamp, "must be an integer number of minutes"),
		om("true", true, ReasonBadTimestamp, "must be an integer number of minutes"),
		om("a fraction", 29936775.5, ReasonInvalidField, "without fraction or exponent"),
		oa("negative year", "-2026-12-02T10:15:00Z", ReasonBadTimestamp, ""),
		oa("year zero", "0000-01-01T00:00:00Z", ReasonBadTimestamp, "before 2000"),
		oa("the epoch", "1970-01-01T00:00:00Z", ReasonBadTimestamp, "before 2000"),
		oa("1 ns before 2000", "1999-12-31T23:59:59.999999999Z", ReasonBadTimestamp, "before 2000"),
		oa("exactly 2000", "2000-01-01T00:00:00Z", "", ""),
		oa("year 9999", "9999-12-31T23:59:59.999999999Z", ReasonBadTimestamp, "year 9999 or later"),
		oa("last instant of 9998", "9998-12-31T23:59:59.999999999Z", ReasonFutureTimestamp, "after the received time"),
		oa("year 10000", "10000-01-01T00:00:00Z", ReasonBadTimestamp, ""),
		oa("February 30", "2026-02-30T10:15:00Z", ReasonBadTimestamp, ""),
		oa("hour 24", "2026-12-02T24:00:00Z", ReasonBadTimestamp, ""),
		oa("leap second", "2026-12-31T23:59:60Z", ReasonBadTimestamp, ""),
		oa("no zone", "2026-12-02T10:15:00", ReasonBadTimestamp, ""),
		oa("not UTC", "2026-12-02T11:15:00+01:00", ReasonBadTimestamp, ""),
		oa("a date", "2026-12-02", ReasonBadTimestamp, ""),
		oa("empty", "", ReasonBadTimestamp, ""),
		oa("words", "yesterday", ReasonBadTimestamp, ""),
		oa("full-width digits", "２０２６-12-02T10:15:00Z", ReasonBadTimestamp, ""),
		oa("Unix seconds", 1764670500, ReasonBadTimestamp, "must be an RFC 3339 date-time string"),
		oa("null", raw("null"), ReasonBadTimestamp, "must be an RFC 3339 date-time string"),
		ia("negative year", "-2026-12-02T10:15:00Z", ReasonBadTimestamp, "ingested_at"),
		ia("unparsable", "now", ReasonBadTimestamp, "ingested_at"),
		ia("a number", 0, ReasonBadTimestamp, "ingested_at"),
		ia("year zero", "0000-01-01T00:00:00Z", ReasonBadTimestamp, "ingested_at 0000-01-01T00:00:00Z is before 2000"),
		ia("the epoch", "1970-01-01T00:00:00Z", ReasonBadTimestamp, "ingested_at 1970-01-01T00:00:00Z is before 2000"),
		ia("year 9999", "9999-12-31T23:59:59Z", ReasonBadTimestamp, "year 9999 or later"),
		// A producer's ingested_at is bounded by the received time too.
		ia("year 2100", "2100-01-01T00:00:00Z", ReasonFutureTimestamp, "after the received time"),
	}
	for _, h := range cases {
		h.check(t, v)
	}
}

// TestHostileFutureTimestamp: an event time more than MaxFutureSkew after
// ingested_at (the record's, else the ingest time) is future_timestamp,
// for v1 and v2; exactly the skew is accepted. The e2e twin proves such a
// record never moves its partition's watermark.
func TestHostileFutureTimestamp(t *testing.T) {
	v := newValidator(t, Config{})
	ing := map[string]any{"ingested_at": "2026-12-02T10:00:00Z"}
	at := func(s string) map[string]any {
		m := map[string]any{"occurred_at": s}
		for k, x := range ing {
			m[k] = x
		}
		return m
	}
	cases := []hostile{
		{name: "5 min after ingest", rec: v2rec("f1", at("2026-12-02T10:05:00Z")), id: "f1"},
		{name: "5 min 1 ms after ingest", rec: v2rec("f2", at("2026-12-02T10:05:00.001Z")), reason: ReasonFutureTimestamp, id: "f2", detail: "after ingested_at 2026-12-02T10:00:00Z (limit 5m0s)"},
		{name: "4 hours after ingest", rec: v2rec("f3", at("2026-12-02T14:00:00Z")), reason: ReasonFutureTimestamp, id: "f3", detail: "2h0m0s after the received time"},
		{name: "v1 6 min after ingest", rec: v1rec("f4", map[string]any{"occurred_minute": 29936766, "ingested_at": "2026-12-02T10:00:00Z"}), reason: ReasonFutureTimestamp, id: "f4"},
		{name: "no ingested_at: the ingest time decides", rec: v2rec("f5", map[string]any{"occurred_at": "2026-12-02T12:06:00Z"}), reason: ReasonFutureTimestamp, id: "f5", detail: "2026-12-02T12:00:00Z"},
		{name: "ingested_at with an offset", rec: v2rec("f6", map[string]any{"occurred_at": "2026-12-02T10:06:00Z", "ingested_at": "2026-12-02T11:00:00+01:00"}), reason: ReasonFutureTimestamp, id: "f6"},
	}
	for _, h := range cases {
		h.check(t, v)
	}
}

// TestHostileConflictingContent: the fingerprint that decides
// conflicting_duplicate changes with every part of an event's content and
// with nothing else, so a retry is never taken for a conflict and a
// different record under a known id is never taken for a retry.
func TestHostileConflictingContent(t *testing.T) {
	v := newValidator(t, Config{})
	base := hostile{name: "base", rec: v2rec("c1", nil), id: "c1"}.check(t, v).Fingerprint
	same := map[string][]byte{
		"another ingested_at":     v2rec("c1", map[string]any{"ingested_at": "2026-12-02T11:00:00Z"}),
		"another producer":        v2rec("c1", map[string]any{"producer_version": "pos 9"}),
		"the v1 form":             v1rec("c1", nil),
		"payload keys reordered":  v2rec("c1", map[string]any{"payload": raw(`{"total_cents":1299,"currency":"EUR"}`)}),
		"payload with escapes":    v2rec("c1", map[string]any{"payload": raw(`{"currency":"\u0045UR","total_cents":1299}`)}),
		"payload number as float": v2rec("c1", map[string]any{"payload": raw(`{"currency":"EUR","total_cents":1299.0}`)}),
	}
	for name, rec := range same {
		if fp := (hostile{name: name, rec: rec, id: "c1"}).check(t, v).Fingerprint; fp != base {
			t.Errorf("%s: fingerprint %x, want the base's %x (a retry)", name, fp, base)
		}
	}
	other := map[string][]byte{
		"another payload":       v2rec("c1", map[string]any{"payload": raw(`{"currency":"EUR","total_cents":1300}`)}),
		"no payload":            v2rec("c1", map[string]any{"payload": nil}),
		"another partition_key": v2rec("c1", map[string]any{"partition_key": "store-18"}),
		"another receipt":       v2rec("c1", map[string]any{"receipt_id": "rcpt-2"}),
		"another type":          v2rec("c1", map[string]any{"type": "viewed"}),
		"1 ms later":            v2rec("c1", map[string]any{"occurred_at": "2026-12-02T10:15:00.001Z"}),
	}
	for name, rec := range other {
		if fp := (hostile{name: name, rec: rec, id: "c1"}).check(t, v).Fingerprint; fp == base {
			t.Errorf("%s: same fingerprint as the base: a conflicting duplicate would pass as a retry", name)
		}
	}
	// Keys that render alike are still different keys: é precomposed (NFC)
	// and decomposed (NFD) are not normalized into one.
	nfc := hostile{name: "NFC key", rec: v2rec("c1", map[string]any{"partition_key": "caf\u00e9"}), id: "c1"}.check(t, v).Fingerprint
	nfd := hostile{name: "NFD key", rec: v2rec("c1", map[string]any{"partition_key": "cafe\u0301"}), id: "c1"}.check(t, v).Fingerprint
	if nfc == nfd {
		t.Error("NFC and NFD partition keys have one fingerprint")
	}
}

// TestHostileIDsAndPartitionKeys: event and receipt ids are confined to
// [A-Za-z0-9._:-]{1,128}; anything else (NATS wildcards, Redis hash-tag
// braces, spaces, quotes, Lua and shell metacharacters, CR LF, Unicode) is
// invalid_field and the rejection names no id. Partition keys are free
// text: any of those characters are accepted, kept byte for byte and
// never normalized; they reach NATS and Redis only as a partition number.
func TestHostileIDsAndPartitionKeys(t *testing.T) {
	v := newValidator(t, Config{})
	for _, id := range []string{
		"evt.*", "evt.>", ">", "*", "evt{p1}", "{p1}", "evt }", "evt 1", " evt", "évt", "evt\u00a0", "ＥＶＴ",
		`evt"`, "evt'", `evt\`, "evt;", "evt$", "evt%", "evt/1", "evt#", "evt\r\nRf-Kind: s", "evt\x00", "evt\t",
		"redis.call('FLUSHALL')", "]]..os.exit()--", "KEYS[1]", "", strings.Repeat("e", 129),
	} {
		hostile{name: "event_id " + id, rec: v2rec(id, nil), reason: ReasonInvalidField, detail: "event_id"}.check(t, v)
		hostile{name: "receipt_id " + id, rec: v2rec("ok-1", map[string]any{"receipt_id": id}), reason: ReasonInvalidField, id: "ok-1", detail: "receipt_id"}.check(t, v)
	}
	// The id alphabet's own punctuation is fine, in any arrangement.
	for _, id := range []string{"evt.1", "a:b:c", "x_y-z", "..", "--", ":", "hb-0-42", "x:deadbeef", strings.Repeat("e", 128)} {
		hostile{name: "event_id " + id, rec: v2rec(id, nil), id: id}.check(t, v)
	}
	// Ids are case-sensitive: EVT-1 and evt-1 are two events.
	hostile{name: "evt-1", rec: v2rec("evt-1", nil), id: "evt-1"}.check(t, v)
	hostile{name: "EVT-1", rec: v2rec("EVT-1", nil), id: "EVT-1"}.check(t, v)
	keys := []string{
		"store.*.>{p1}", "store.*.>{p2}", "{p0}", "rf.raw.3", "$KV.receipts-1.>", "store 1", " ", "Zürich ✓", "caf\u00e9", "cafe\u0301",
		"日本の店", "'; DROP TABLE x; --", "redis.call('FLUSHALL')", "KEYS[1]", "a\r\nb", "nul\x00key", strings.Repeat("ü", 128),
	}
	for _, k := range keys {
		e := hostile{name: "partition_key " + k, rec: v2rec("pk-1", map[string]any{"partition_key": k}), id: "pk-1"}.check(t, v)
		if e.PartitionKey != k {
			t.Errorf("partition_key %q came back as %q", k, e.PartitionKey)
		}
	}
	hostile{name: "partition_key of 129 characters", rec: v2rec("pk-2", map[string]any{"partition_key": strings.Repeat("ü", 129)}), reason: ReasonInvalidField, id: "pk-2", detail: "partition_key is 129 characters"}.check(t, v)
	hostile{name: "partition_key empty", rec: v2rec("pk-3", map[string]any{"partition_key": ""}), reason: ReasonInvalidField, id: "pk-3", detail: "partition_key is 0 characters"}.check(t, v)
}
