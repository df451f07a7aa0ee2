package contract

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// clock is the fixed ingest time of the tests.
var clock = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func newValidator(t testing.TB, opts Config) *Validator {
	t.Helper()
	v, err := NewValidator(opts)
	if err != nil {
		t.Fatalf("NewValidator: %v", err)
	}
	return v
}

// v1Fields and v2Fields are one valid record of each version; the v2 one is
// the same event as the v1 one.
func v1Fields() map[string]any {
	return map[string]any{
		"schema_version":  1,
		"event_id":        "evt-1",
		"receipt_id":      "rcpt-1",
		"type":            "submitted",
		"occurred_minute": 29936775, // 2026-12-02T10:15:00Z
		"partition_key":   "store-17",
		"payload":         map[string]any{"total_cents": 1299, "currency": "EUR"},
	}
}

func v2Fields() map[string]any {
	return map[string]any{
		"schema_version":   2,
		"event_id":         "evt-1",
		"receipt_id":       "rcpt-1",
		"type":             "submitted",
		"occurred_at":      "2026-12-02T10:15:00Z",
		"partition_key":    "store-17",
		"producer_version": "pos 4.0",
		"payload":          map[string]any{"currency": "EUR", "total_cents": 1299},
	}
}

// with returns a JSON record of base with fields set (a nil value deletes
// the field; a json.RawMessage is written as it is).
func with(base map[string]any, set map[string]any) []byte {
	m := maps.Clone(base)
	for k, v := range set {
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

type raw = json.RawMessage

// reject describes an expected rejection.
type reject struct {
	reason Reason
	id     string // expected EventID
	detail string // substring of Detail
}

func TestValidateRejects(t *testing.T) {
	v := newValidator(t, Config{})
	v2 := v2Fields()
	v1 := v1Fields()
	tests := []struct {
		name string
		rec  []byte
		want reject
	}{
		// malformed_json
		{"empty", []byte(""), reject{ReasonMalformedJSON, "", "empty"}},
		{"only spaces", []byte(" \n\t "), reject{ReasonMalformedJSON, "", "empty"}},
		{"null", []byte("null"), reject{ReasonMalformedJSON, "", "not a JSON object"}},
		{"array", []byte(`[{"event_id":"evt-1"}]`), reject{ReasonMalformedJSON, "evt-1", "not a JSON object"}},
		{"string", []byte(`"evt-1"`), reject{ReasonMalformedJSON, "", "not a JSON object"}},
		{"truncated", []byte(`{"event_id":"evt-1","type":"submi`), reject{ReasonMalformedJSON, "evt-1", "unterminated string"}},
		{"trailing data", append(with(v2, nil), []byte(` {}`)...), reject{ReasonMalformedJSON, "evt-1", "after the top-level value"}},
		{"trailing comma", []byte(`{"event_id":"evt-1",}`), reject{ReasonMalformedJSON, "evt-1", "want a string key"}},
		{"unquoted key", []byte(`{event_id:"evt-1"}`), reject{ReasonMalformedJSON, "", "want a string key"}},
		{"leading zero", []byte(`{"event_id":"evt-1","payload":{"n":01}}`), reject{ReasonMalformedJSON, "evt-1", ""}},
		{"NaN", []byte(`{"event_id":"evt-1","payload":{"n":NaN}}`), reject{ReasonMalformedJSON, "evt-1", "want a value"}},
		{"bad escape", []byte(`{"event_id":"evt-1","payload":{"s":"\x"}}`), reject{ReasonMalformedJSON, "evt-1", "invalid escape"}},
		{"control character", []byte("{\"event_id\":\"evt-1\",\"payload\":{\"s\":\"a\tb\"}}"), reject{ReasonMalformedJSON, "evt-1", "control character"}},
		{"invalid UTF-8", []byte("{\"event_id\":\"evt-1\",\"partition_key\":\"s\xc3\"}"), reject{ReasonMalformedJSON, "evt-1", "UTF-8"}},
		{"lone low surrogate", []byte(`{"event_id":"evt-1","partition_key":"\udc00"}`), reject{ReasonMalformedJSON, "evt-1", "surrogate"}},
		{"high surrogate without low", []byte(`{"event_id":"evt-1","partition_key":"\ud83d\u0041"}`), reject{ReasonMalformedJSON, "evt-1", "surrogate"}},
		{"byte order mark", append([]byte("\xef\xbb\xbf"), with(v2, nil)...), reject{ReasonMalformedJSON, "evt-1", ""}},
		{"syntax error wins over duplicate", []byte(`{"event_id":"evt-1","event_id":"evt-2",`), reject{ReasonMalformedJSON, "evt-1", ""}},

		// invalid_field: keys
		{"duplicate event_id", []byte(`{"schema_version":2,"event_id":"evt-1","event_id":"evt-2"}`), reject{ReasonInvalidField, "", `key "event_id" appears more than once`}},
		{"duplicate event_id through escape", []byte(`{"schema_version":2,"event_id":"evt-1","event\u005fid":"evt-2"}`), reject{ReasonInvalidField, "", `"event_id" appears more than once`}},
		{"duplicate type", []byte(`{"schema_version":2,"event_id":"evt-1","type":"viewed","type":"submitted"}`), reject{ReasonInvalidField, "evt-1", `key "type" appears more than once`}},
		{"duplicate in payload", with(v2, map[string]any{"payload": raw(`{"a":{"b":1,"b":2}}`)}), reject{ReasonInvalidField, "evt-1", `key "b" appears more than once inside "payload"`}},
		{"case variant beside field", with(v2, map[string]any{"EVENT_ID": "evt-2"}), reject{ReasonInvalidField, "", `"EVENT_ID" differs from the field "event_id" only by case`}},
		{"case variant alone", with(v2, map[string]any{"event_id": nil, "Event_Id": "evt-1"}), reject{ReasonInvalidField, "", `"Event_Id"`}},
		{"case variant of type", with(v2, map[string]any{"Type": "viewed"}), reject{ReasonInvalidField, "evt-1", `"Type" differs from the field "type"`}},
		{"unicode case folding", with(v2, map[string]any{"\u017fchema_version": 2}), reject{ReasonInvalidField, "evt-1", `"schema_version" only by case`}},
		{"too deep", with(v2, map[string]any{"payload": raw(`{"a":` + strings.Repeat("[", 300) + strings.Repeat("]", 300) + `}`)}), reject{ReasonInvalidField, "evt-1", "nested deeper than 256"}},

		// schema_version
		{"schema_version missing", with(v2, map[string]any{"schema_version": nil}), reject{ReasonMissingField, "evt-1", "schema_version is required"}},
		{"schema_version 3", with(v2, map[string]any{"schema_version": 3}), reject{ReasonUnsupportedSchema, "evt-1", "schema_version 3"}},
		{"schema_version 0", with(v1, map[string]any{"schema_version": 0}), reject{ReasonUnsupportedSchema, "evt-1", ""}},
		{"schema_version -1", with(v1, map[string]any{"schema_version": -1}), reject{ReasonUnsupportedSchema, "evt-1", ""}},
		{"schema_version string", with(v2, map[string]any{"schema_version": "2"}), reject{ReasonUnsupportedSchema, "evt-1", `schema_version "2"`}},
		{"schema_version 2.0", with(v2, map[string]any{"schema_version": raw("2.0")}), reject{ReasonUnsupportedSchema, "evt-1", "2.0"}},
		{"schema_version 1e0", with(v1, map[string]any{"schema_version": raw("1e0")}), reject{ReasonUnsupportedSchema, "evt-1", ""}},
		{"schema_version true", with(v2, map[string]any{"schema_version": true}), reject{ReasonUnsupportedSchema, "evt-1", ""}},
		{"schema_version object", with(v2, map[string]any{"schema_version": map[string]any{}}), reject{ReasonUnsupportedSchema, "evt-1", "an object"}},
		{"schema_version beyond 2^53", with(v2, map[string]any{"schema_version": raw("9007199254740993")}), reject{ReasonInvalidField, "evt-1", "beyond"}},
		{"schema_version beyond int64", with(v2, map[string]any{"schema_version": raw("-99999999999999999999")}), reject{ReasonInvalidField, "evt-1", "beyond"}},

		// missing_field
		{"v1 without event_id", with(v1, map[string]any{"event_id": nil}), reject{ReasonMissingField, "", "event_id"}},
		{"v1 without receipt_id", with(v1, map[string]any{"receipt_id": nil}), reject{ReasonMissingField, "evt-1", "receipt_id"}},
		{"v1 without type", with(v1, map[string]any{"type": nil}), reject{ReasonMissingField, "evt-1", "type"}},
		{"v1 without occurred_minute", with(v1, map[string]any{"occurred_minute": nil}), reject{ReasonMissingField, "evt-1", "occurred_minute"}},
		{"v1 without partition_key", with(v1, map[string]any{"partition_key": nil}), reject{ReasonMissingField, "evt-1", "partition_key"}},
		{"v2 without occurred_at", with(v2, map[string]any{"occurred_at": nil}), reject{ReasonMissingField, "evt-1", "occurred_at"}},
		{"v2 without producer_version", with(v2, map[string]any{"producer_version": nil}), reject{ReasonMissingField, "evt-1", "producer_version"}},
		{"v2 with occurred_minute instead of occurred_at", with(v2, map[string]any{"occurred_at": nil, "occurred_minute": 29936775}), reject{ReasonMissingField, "evt-1", "occurred_at"}},
		{"missing wins over unknown type", with(v2, map[string]any{"receipt_id": nil, "type": "deleted"}), reject{ReasonMissingField, "evt-1", "receipt_id"}},

		// unknown_type
		{"type deleted", with(v2, map[string]any{"type": "deleted"}), reject{ReasonUnknownType, "evt-1", `type "deleted"`}},
		{"type wrong case", with(v1, map[string]any{"type": "SUBMITTED"}), reject{ReasonUnknownType, "evt-1", ""}},
		{"type empty", with(v1, map[string]any{"type": ""}), reject{ReasonUnknownType, "evt-1", ""}},
		{"type number", with(v2, map[string]any{"type": 1}), reject{ReasonUnknownType, "evt-1", "type 1"}},
		{"type null", with(v2, map[string]any{"type": raw("null")}), reject{ReasonUnknownType, "evt-1", "type null"}},
		{"unknown type wins over bad time", with(v2, map[string]any{"type": "x", "occurred_at": "soon"}), reject{ReasonUnknownType, "evt-1", ""}},

		// bad_timestamp
		{"not RFC 3339", with(v2, map[string]any{"occurred_at": "2026-12-02 10:15:00Z"}), reject{ReasonBadTimestamp, "evt-1", "occurred_at"}},
		{"no offset", with(v2, map[string]any{"occurred_at": "2026-12-02T10:15:00"}), reject{ReasonBadTimestamp, "evt-1", ""}},
		{"non-UTC offset", with(v2, map[string]any{"occurred_at": "2026-12-02T11:15:00+01:00"}), reject{ReasonBadTimestamp, "evt-1", "not UTC"}},
		{"negative offset", with(v2, map[string]any{"occurred_at": "2026-12-02T05:15:00-05:00"}), reject{ReasonBadTimestamp, "evt-1", "not UTC"}},
		{"month 13", with(v2, map[string]any{"occurred_at": "2026-13-02T10:15:00Z"}), reject{ReasonBadTimestamp, "evt-1", ""}},
		{"February 29 of a common year", with(v2, map[string]any{"occurred_at": "2026-02-29T10:15:00Z"}), reject{ReasonBadTimestamp, "evt-1", ""}},
		{"hour 24", with(v2, map[string]any{"occurred_at": "2026-12-02T24:00:00Z"}), reject{ReasonBadTimestamp, "evt-1", ""}},
		{"empty fraction", with(v2, map[string]any{"occurred_at": "2026-12-02T10:15:00.Z"}), reject{ReasonBadTimestamp, "evt-1", ""}},
		{"leap second", with(v2, map[string]any{"occurred_at": "2026-12-31T23:59:60Z", "ingested_at": "2027-01-01T00:00:00Z"}), reject{ReasonBadTimestamp, "evt-1", "leap second"}},
		{"before 2000", with(v2, map[string]any{"occurred_at": "1999-12-31T23:59:59.999999999Z"}), reject{ReasonBadTimestamp, "evt-1", "before 2000-01-01"}},
		{"year 0001", with(v2, map[string]any{"occurred_at": "0001-01-01T00:00:00Z"}), reject{ReasonBadTimestamp, "evt-1", "before"}},
		{"occurred_at number", with(v2, map[string]any{"occurred_at": 1796206500}), reject{ReasonBadTimestamp, "evt-1", "occurred_at must be"}},
		{"occurred_at empty", with(v2, map[string]any{"occurred_at": ""}), reject{ReasonBadTimestamp, "evt-1", ""}},
		{"ingested_at unparsable", with(v2, map[string]any{"ingested_at": "now"}), reject{ReasonBadTimestamp, "evt-1", "ingested_at"}},
		{"ingested_at number", with(v1, map[string]any{"ingested_at": 1}), reject{ReasonBadTimestamp, "evt-1", "ingested_at"}},
		{"v1 minute before 2000", with(v1, map[string]any{"occurred_minute": minEventMinute - 1}), reject{ReasonBadTimestamp, "evt-1", "before 2000-01-01"}},
		{"v1 minute negative", with(v1, map[string]any{"occurred_minute": -5}), reject{ReasonBadTimestamp, "evt-1", "before"}},
		{"v1 minute string", with(v1, map[string]any{"occurred_minute": "29936775"}), reject{ReasonBadTimestamp, "evt-1", "occurred_minute"}},
		{"v1 minute null", with(v1, map[string]any{"occurred_minute": raw("null")}), reject{ReasonBadTimestamp, "evt-1", ""}},

		// invalid_field: values
		{"v1 minute with exponent", with(v1, map[string]any{"occurred_minute": raw("2.9936775e7")}), reject{ReasonInvalidField, "evt-1", "without fraction or exponent"}},
		{"v1 minute with zero fraction", with(v1, map[string]any{"occurred_minute": raw("29936775.0")}), reject{ReasonInvalidField, "evt-1", ""}},
		{"v1 minute with fraction", with(v1, map[string]any{"occurred_minute": raw("29936775.5")}), reject{ReasonInvalidField, "evt-1", ""}},
		{"v1 minute huge exponent", with(v1, map[string]any{"occurred_minute": raw("1e999999999")}), reject{ReasonInvalidField, "evt-1", ""}},
		{"v1 minute beyond 2^53", with(v1, map[string]any{"occurred_minute": raw("9007199254740993")}), reject{ReasonInvalidField, "evt-1", "beyond"}},
		{"v1 minute far beyond", with(v1, map[string]any{"occurred_minute": raw(strings.Repeat("9", 400))}), reject{ReasonInvalidField, "evt-1", "beyond"}},
		{"event_id alphabet", with(v2, map[string]any{"event_id": "evt/1"}), reject{ReasonInvalidField, "", "event_id"}},
		{"event_id too long", with(v2, map[string]any{"event_id": strings.Repeat("e", 129)}), reject{ReasonInvalidField, "", "event_id"}},
		{"event_id empty", with(v2, map[string]any{"event_id": ""}), reject{ReasonInvalidField, "", "event_id"}},
		{"event_id number", with(v1, map[string]any{"event_id": 7}), reject{ReasonInvalidField, "", "event_id"}},
		{"receipt_id unicode", with(v2, map[string]any{"receipt_id": "rcpt-é"}), reject{ReasonInvalidField, "evt-1", "receipt_id"}},
		{"partition_key empty", with(v2, map[string]any{"partition_key": ""}), reject{ReasonInvalidField, "evt-1", "partition_key is 0 characters"}},
		{"partition_key 129 characters", with(v2, map[string]any{"partition_key": strings.Repeat("ü", 129)}), reject{ReasonInvalidField, "evt-1", "partition_key is 129 characters"}},
		{"partition_key number", with(v2, map[string]any{"partition_key": 17}), reject{ReasonInvalidField, "evt-1", "partition_key"}},
		{"producer_version 65 characters", with(v2, map[string]any{"producer_version": strings.Repeat("v", 65)}), reject{ReasonInvalidField, "evt-1", "producer_version is 65"}},
		{"producer_version null", with(v2, map[string]any{"producer_version": raw("null")}), reject{ReasonInvalidField, "evt-1", "producer_version"}},
		{"payload array", with(v2, map[string]any{"payload": []int{1}}), reject{ReasonInvalidField, "evt-1", "payload"}},
		{"payload null", with(v2, map[string]any{"payload": raw("null")}), reject{ReasonInvalidField, "evt-1", "payload"}},
		{"payload string", with(v1, map[string]any{"payload": "{}"}), reject{ReasonInvalidField, "evt-1", "payload"}},
		{"unknown field", with(v2, map[string]any{"amount": 12}), reject{ReasonInvalidField, "evt-1", `unknown field "amount"`}},
		{"v1 with occurred_at", with(v1, map[string]any{"occurred_at": "2026-12-02T10:15:00Z"}), reject{ReasonInvalidField, "evt-1", `unknown field "occurred_at"`}},
		{"v2 with occurred_minute", with(v2, map[string]any{"occurred_minute": 29936775}), reject{ReasonInvalidField, "evt-1", `unknown field "occurred_minute"`}},
		{"bad time beats invalid field", with(v2, map[string]any{"occurred_at": "x", "amount": 1}), reject{ReasonBadTimestamp, "evt-1", ""}},

		// future_timestamp
		{"future by default clock", with(v2, map[string]any{"occurred_at": "2026-12-02T12:05:00.001Z"}), reject{ReasonFutureTimestamp, "evt-1", "after the received time"}},
		{"future by record ingested_at", with(v2, map[string]any{"ingested_at": "2026-12-02T10:00:00Z", "occurred_at": "2026-12-02T10:06:00Z"}), reject{ReasonFutureTimestamp, "evt-1", "2026-12-02T10:00:00Z"}},
		{"future v1", with(v1, map[string]any{"occurred_minute": 29936886}), reject{ReasonFutureTimestamp, "evt-1", ""}},
		{"year 9999", with(v2, map[string]any{"occurred_at": "9999-12-31T23:59:59.999999999Z"}), reject{ReasonBadTimestamp, "evt-1", "year 9999"}},
		{"v1 near 2^53", with(v1, map[string]any{"occurred_minute": raw("9007199254740992")}), reject{ReasonBadTimestamp, "evt-1", "year 9999"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := v.Validate(tt.rec, clock)
			if err == nil {
				t.Fatalf("Validate(%s) = %+v, want %s", tt.rec, e, tt.want.reason)
			}
			r, ok := AsReject(err)
			if !ok {
				t.Fatalf("Validate(%s) error %v (%T), want a *RejectError", tt.rec, err, err)
			}
			if r.Reason != tt.want.reason {
				t.Errorf("reason %s (%s), want %s\nrecord: %s", r.Reason, r.Detail, tt.want.reason, tt.rec)
			}
			if r.EventID != tt.want.id {
				t.Errorf("EventID %q, want %q", r.EventID, tt.want.id)
			}
			if !strings.Contains(r.Detail, tt.want.detail) {
				t.Errorf("Detail %q does not contain %q", r.Detail, tt.want.detail)
			}
			if r.Detail == "" {
				t.Error("empty Detail")
			}
			if !errors.Is(err, sentinels[tt.want.reason]) {
				t.Errorf("errors.Is(err, sentinel of %s) is false", tt.want.reason)
			}
			if !reflect.DeepEqual(e, Event{}) {
				t.Errorf("rejected record returned a non-zero Event %+v", e)
			}
		})
	}
}

func TestValidateAccepts(t *testing.T) {
	v := newValidator(t, Config{})
	v2 := v2Fields()
	v1 := v1Fields()
	tests := []struct {
		name string
		rec  []byte
	}{
		{"v1", with(v1, nil)},
		{"v2", with(v2, nil)},
		{"v1 minimal", with(v1, map[string]any{"payload": nil})},
		{"v1 with producer_version and ingested_at", with(v1, map[string]any{"producer_version": "p", "ingested_at": "2026-12-02T10:16:00Z"})},
		{"v2 draft_saved", with(v2, map[string]any{"type": "draft_saved"})},
		{"v2 viewed", with(v2, map[string]any{"type": "viewed"})},
		{"v1 viewed", with(v1, map[string]any{"type": "viewed"})},
		{"lower-case t and z", with(v2, map[string]any{"occurred_at": "2026-12-02t10:15:00z"})},
		{"+00:00", with(v2, map[string]any{"occurred_at": "2026-12-02T10:15:00+00:00"})},
		{"-00:00", with(v2, map[string]any{"occurred_at": "2026-12-02T10:15:00-00:00"})},
		{"nanoseconds", with(v2, map[string]any{"occurred_at": "2026-12-02T10:15:00.123456789Z"})},
		{"more than nine fraction digits", with(v2, map[string]any{"occurred_at": "2026-12-02T10:15:00.1234567891234Z"})},
		{"exactly 2000-01-01", with(v2, map[string]any{"occurred_at": "2000-01-01T00:00:00Z"})},
		{"February 29 of a leap year", with(v2, map[string]any{"occurred_at": "2024-02-29T10:15:00Z"})},
		{"exactly max skew ahead", with(v2, map[string]any{"occurred_at": "2026-12-02T12:05:00Z"})},
		{"ingested_at with offset", with(v2, map[string]any{"ingested_at": "2026-12-02T13:00:00+02:00"})},
		{"ids of the whole alphabet", with(v2, map[string]any{"event_id": "AZaz09._:-", "receipt_id": strings.Repeat("r", 128)})},
		{"partition_key of 128 multi-byte characters", with(v2, map[string]any{"partition_key": strings.Repeat("ü", 128)})},
		{"partition_key with spaces and symbols", with(v2, map[string]any{"partition_key": "Store #1 / Zürich ✓"})},
		{"empty producer_version", with(v2, map[string]any{"producer_version": ""})},
		{"producer_version of 64 characters", with(v2, map[string]any{"producer_version": strings.Repeat("é", 64)})},
		{"empty payload", with(v2, map[string]any{"payload": map[string]any{}})},
		{"payload of every kind", with(v2, map[string]any{"payload": raw(`{"a":[1,-2.5e-3,true,false,null,"x\u00e9\n",{}],"b":{"c":[]}}`)})},
		{"payload key like a field", with(v2, map[string]any{"payload": raw(`{"event_id":"other","EVENT_ID":"x"}`)})},
		{"whitespace around everything", []byte(" \r\n\t{ \"schema_version\" : 1 , \"event_id\" : \"evt-1\" ,\"receipt_id\":\"r\",\"type\":\"viewed\",\"occurred_minute\":29936775,\"partition_key\":\"p\" } \n")},
		{"escaped strings", []byte(`{"schema_version":1,"event_\u0069d":"evt\u002d1","receipt_id":"r","type":"sub\u006ditted","occurred_minute":29936775,"partition_key":"\ud83d\ude00"}`)},
		{"payload nested 250 levels", with(v2, map[string]any{"payload": raw(`{"a":` + strings.Repeat("[", 250) + strings.Repeat("]", 250) + `}`)})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := v.Validate(tt.rec, clock)
			if err != nil {
				t.Fatalf("Validate(%s): %v", tt.rec, err)
			}
			if e.EventID == "" || e.OccurredAt.Location() != time.UTC || e.IngestedAt.Location() != time.UTC {
				t.Errorf("Event %+v: want an id and UTC times", e)
			}
			if e.Fingerprint != Fingerprint(&e) {
				t.Errorf("Fingerprint %x, Fingerprint(&e) %x", e.Fingerprint, Fingerprint(&e))
			}
		})
	}
}

func TestValidateUpcast(t *testing.T) {
	v := newValidator(t, Config{})
	e1, err := v.Validate(with(v1Fields(), nil), clock)
	if err != nil {
		t.Fatal(err)
	}
	want := Event{
		SchemaVersion: 1,
		EventID:       "evt-1",
		ReceiptID:     "rcpt-1",
		Type:          TypeSubmitted,
		OccurredAt:    time.Date(2026, 12, 2, 10, 15, 0, 0, time.UTC),
		IngestedAt:    clock,
		PartitionKey:  "store-17",
		Payload:       raw(`{"currency":"EUR","total_cents":1299}`),
		Fingerprint:   e1.Fingerprint,
	}
	if fmt.Sprint(e1) != fmt.Sprint(want) {
		t.Errorf("v1 event\n got %+v\nwant %+v", e1, want)
	}
	if !e1.Counts() {
		t.Error("a submitted event must count")
	}

	e2, err := v.Validate(with(v2Fields(), nil), clock)
	if err != nil {
		t.Fatal(err)
	}
	if e2.SchemaVersion != 2 || e2.ProducerVersion != "pos 4.0" {
		t.Errorf("v2 event %+v", e2)
	}
	e2.SchemaVersion, e2.ProducerVersion = 1, ""
	if fmt.Sprint(e1) != fmt.Sprint(e2) {
		t.Errorf("the v1 and v2 forms of one event differ beyond version and producer:\nv1 %+v\nv2 %+v", e1, e2)
	}
}

func TestValidateIngestedAt(t *testing.T) {
	v := newValidator(t, Config{})
	// From the record, converted to UTC.
	e, err := v.Validate(with(v2Fields(), map[string]any{"ingested_at": "2026-12-02T11:16:00.5+01:00"}), clock)
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2026, 12, 2, 10, 16, 0, 5e8, time.UTC); !e.IngestedAt.Equal(want) || e.IngestedAt.Location() != time.UTC {
		t.Errorf("IngestedAt %v, want %v", e.IngestedAt, want)
	}
	// From the default, in any zone, without a monotonic reading (only
	// time.Now has one; the event is old enough for any real clock).
	zone := time.FixedZone("X", 3*3600)
	e, err = v.Validate(with(v2Fields(), map[string]any{"occurred_at": "2000-01-01T00:00:00Z"}), time.Now().In(zone))
	if err != nil {
		t.Fatal(err)
	}
	if e.IngestedAt.Location() != time.UTC || e.IngestedAt != e.IngestedAt.Round(0) {
		t.Errorf("IngestedAt %v: want UTC without monotonic clock", e.IngestedAt)
	}
	// The record's ingested_at cannot lift the bound of the received time.
	rec := with(v2Fields(), map[string]any{"occurred_at": "2026-12-02T13:00:00Z", "ingested_at": "2026-12-02T12:59:00Z"})
	if _, err := v.Validate(rec, clock); !errors.Is(err, ErrFutureTimestamp) {
		t.Errorf("event 1m after its own ingested_at, 1h after the received time: %v, want future_timestamp", err)
	}
}

func TestValidateOptions(t *testing.T) {
	for _, bad := range []Config{{MaxFutureSkew: -1}, {MaxSize: -1}} {
		if _, err := NewValidator(bad); err == nil {
			t.Errorf("NewValidator(%+v) accepted", bad)
		}
	}
	v := newValidator(t, Config{})
	if got := v.Config(); got.MaxFutureSkew != DefaultMaxFutureSkew || got.MaxSize != DefaultMaxSize {
		t.Errorf("defaults %+v", got)
	}

	rec := with(v2Fields(), map[string]any{"occurred_at": "2026-12-02T12:30:00Z"})
	if _, err := v.Validate(rec, clock); !errors.Is(err, ErrFutureTimestamp) {
		t.Errorf("30m ahead with the default skew: %v", err)
	}
	wide := newValidator(t, Config{MaxFutureSkew: time.Hour})
	if _, err := wide.Validate(rec, clock); err != nil {
		t.Errorf("30m ahead with a 1h skew: %v", err)
	}

	small := newValidator(t, Config{MaxSize: 100})
	if _, err := small.Validate(with(v2Fields(), nil), clock); !errors.Is(err, ErrTooLarge) {
		t.Errorf("record over a 100-byte limit: %v", err)
	}
}

// padded returns a valid v2 record of exactly size bytes.
func padded(t *testing.T, size int) []byte {
	t.Helper()
	rec := with(v2Fields(), map[string]any{"payload": map[string]any{"pad": ""}})
	rec = with(v2Fields(), map[string]any{"payload": map[string]any{"pad": strings.Repeat("x", size-len(rec))}})
	if len(rec) != size {
		t.Fatalf("padded record is %d bytes, want %d", len(rec), size)
	}
	return rec
}

func TestValidateTooLarge(t *testing.T) {
	v := newValidator(t, Config{})
	at := padded(t, 64<<10)
	if _, err := v.Validate(at, clock); err != nil {
		t.Fatalf("record of exactly 64 KiB: %v", err)
	}
	over := padded(t, 64<<10+1)
	_, err := v.Validate(over, clock)
	r, ok := AsReject(err)
	if !ok || r.Reason != ReasonTooLarge {
		t.Fatalf("record of 64 KiB + 1: %v, want too_large", err)
	}
	if r.EventID != "evt-1" || !strings.Contains(r.Detail, "65537 bytes") {
		t.Errorf("rejection %+v: want EventID evt-1 and the size in Detail", r)
	}
	// Size is checked before anything else.
	junk := []byte(strings.Repeat("{", 64<<10+1))
	if _, err := v.Validate(junk, clock); !errors.Is(err, ErrTooLarge) {
		t.Errorf("oversized junk: %v, want too_large", err)
	}
}

func TestValidateDoesNotKeepRaw(t *testing.T) {
	v := newValidator(t, Config{})
	rec := with(v2Fields(), nil)
	e, err := v.Validate(rec, clock)
	if err != nil {
		t.Fatal(err)
	}
	before := fmt.Sprint(e)
	for i := range rec {
		rec[i] = 'X'
	}
	if after := fmt.Sprint(e); after != before {
		t.Errorf("Event changed when raw was overwritten:\n%s\n%s", before, after)
	}
}

func TestValidateConcurrent(t *testing.T) {
	v := newValidator(t, Config{})
	good := with(v2Fields(), nil)
	bad := with(v2Fields(), map[string]any{"type": "nope", "amount": 1})
	want, err := v.Validate(good, clock)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				e, err := v.Validate(good, clock)
				if err != nil || e.Fingerprint != want.Fingerprint {
					t.Errorf("concurrent Validate: %v %x", err, e.Fingerprint)
					return
				}
				if _, err := v.Validate(bad, clock); !errors.Is(err, ErrUnknownType) {
					t.Errorf("concurrent Validate of a bad record: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestParseTimestamp(t *testing.T) {
	tests := []struct {
		in      string
		utcOnly bool
		want    time.Time
		ok      bool
	}{
		{"2026-12-02T10:15:00Z", true, time.Date(2026, 12, 2, 10, 15, 0, 0, time.UTC), true},
		{"2026-12-02T10:15:00.5Z", true, time.Date(2026, 12, 2, 10, 15, 0, 5e8, time.UTC), true},
		{"2026-12-02T10:15:00.000000001Z", true, time.Date(2026, 12, 2, 10, 15, 0, 1, time.UTC), true},
		{"2026-12-02T10:15:00.9999999999Z", true, time.Date(2026, 12, 2, 10, 15, 0, 999999999, time.UTC), true},
		{"2026-12-02T10:15:00+05:30", false, time.Date(2026, 12, 2, 4, 45, 0, 0, time.UTC), true},
		{"2026-12-02T10:15:00-23:59", false, time.Date(2026, 12, 3, 10, 14, 0, 0, time.UTC), true},
		{"2026-12-02T10:15:00+05:30", true, time.Time{}, false},
		{"2026-12-02T10:15:00+24:00", false, time.Time{}, false},
		{"2026-12-02T10:15:00+05:60", false, time.Time{}, false},
		{"2026-12-02T10:15:00+0530", false, time.Time{}, false},
		{"2026-12-02T10:15:00ZZ", false, time.Time{}, false},
		{"2026-12-02T10:15:00.Z", false, time.Time{}, false},
		{"2026-12-02T10:15:60Z", false, time.Time{}, false},
		{"2026-12-02T10:60:00Z", false, time.Time{}, false},
		{"2026-12-32T10:15:00Z", false, time.Time{}, false},
		{"2026-04-31T10:15:00Z", false, time.Time{}, false},
		{"2026-00-01T10:15:00Z", false, time.Time{}, false},
		{"1900-02-29T10:15:00Z", false, time.Time{}, false},
		{"2000-02-29T10:15:00Z", true, time.Date(2000, 2, 29, 10, 15, 0, 0, time.UTC), true},
		{"+026-12-02T10:15:00Z", false, time.Time{}, false},
		{"2026-12-02X10:15:00Z", false, time.Time{}, false},
		{"2026-12-02", false, time.Time{}, false},
		{"", false, time.Time{}, false},
	}
	for _, tt := range tests {
		got, err := parseTimestamp(tt.in, tt.utcOnly)
		if (err == nil) != tt.ok || !got.Equal(tt.want) {
			t.Errorf("parseTimestamp(%q, %v) = %v, %v; want %v, ok %v", tt.in, tt.utcOnly, got, err, tt.want, tt.ok)
		}
		if err == nil && got.Location() != time.UTC {
			t.Errorf("parseTimestamp(%q) not in UTC", tt.in)
		}
		// Agree with the standard library on what it accepts.
		if std, serr := time.Parse(time.RFC3339Nano, tt.in); err == nil && (serr != nil || !std.Equal(got)) {
			t.Errorf("parseTimestamp(%q) = %v, time.Parse = %v, %v", tt.in, got, std, serr)
		}
	}
}
