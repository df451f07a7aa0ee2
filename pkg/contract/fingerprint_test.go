package contract

import (
	"testing"
	"time"
)

func mustValidate(t *testing.T, v *Validator, rec []byte) Event {
	t.Helper()
	e, err := v.Validate(rec, clock)
	if err != nil {
		t.Fatalf("Validate(%s): %v", rec, err)
	}
	return e
}

func TestFingerprintSameContent(t *testing.T) {
	v := newValidator(t, Config{})
	base := mustValidate(t, v, with(v2Fields(), nil))
	same := map[string][]byte{
		"v1 form": with(v1Fields(), nil),
		"v1 form, other ingest and producer": with(v1Fields(), map[string]any{
			"ingested_at": "2026-12-02T10:20:00Z", "producer_version": "old 1.0"}),
		"other producer_version": with(v2Fields(), map[string]any{"producer_version": "pos 4.1"}),
		"other ingested_at":      with(v2Fields(), map[string]any{"ingested_at": "2026-12-02T10:16:00Z"}),
		"same instant, +00:00":   with(v2Fields(), map[string]any{"occurred_at": "2026-12-02T10:15:00.000+00:00"}),
		"sub-millisecond change": with(v2Fields(), map[string]any{"occurred_at": "2026-12-02T10:15:00.0009Z"}),
		"payload formatting": with(v2Fields(), map[string]any{
			"payload": raw("{ \"total_cents\" : 1299 ,\n\t\"currency\":\"\\u0045UR\" }")}),
		"payload numbers by value": with(v2Fields(), map[string]any{
			"payload": raw(`{"currency":"EUR","total_cents":1.299e3}`)}),
		"other event_id": with(v2Fields(), map[string]any{"event_id": "evt-2"}),
	}
	for name, rec := range same {
		if e := mustValidate(t, v, rec); e.Fingerprint != base.Fingerprint {
			t.Errorf("%s: fingerprint %x, want %x", name, e.Fingerprint, base.Fingerprint)
		}
	}

	// An absent payload is an empty one.
	a := mustValidate(t, v, with(v2Fields(), map[string]any{"payload": nil}))
	b := mustValidate(t, v, with(v2Fields(), map[string]any{"payload": raw("{ }")}))
	if a.Fingerprint != b.Fingerprint {
		t.Errorf("absent payload %x, empty payload %x", a.Fingerprint, b.Fingerprint)
	}
}

func TestFingerprintDifferentContent(t *testing.T) {
	v := newValidator(t, Config{})
	base := mustValidate(t, v, with(v2Fields(), nil))
	differ := map[string][]byte{
		"payload value":        with(v2Fields(), map[string]any{"payload": raw(`{"currency":"EUR","total_cents":1300}`)}),
		"payload key":          with(v2Fields(), map[string]any{"payload": raw(`{"Currency":"EUR","total_cents":1299}`)}),
		"payload number type":  with(v2Fields(), map[string]any{"payload": raw(`{"currency":"EUR","total_cents":"1299"}`)}),
		"payload extra key":    with(v2Fields(), map[string]any{"payload": raw(`{"currency":"EUR","total_cents":1299,"x":null}`)}),
		"no payload":           with(v2Fields(), map[string]any{"payload": nil}),
		"type":                 with(v2Fields(), map[string]any{"type": "viewed"}),
		"time by 1ms":          with(v2Fields(), map[string]any{"occurred_at": "2026-12-02T10:15:00.001Z"}),
		"time by 1 minute":     with(v2Fields(), map[string]any{"occurred_at": "2026-12-02T10:16:00Z"}),
		"receipt_id":           with(v2Fields(), map[string]any{"receipt_id": "rcpt-2"}),
		"partition_key":        with(v2Fields(), map[string]any{"partition_key": "store-18"}),
		"field boundary moved": with(v2Fields(), map[string]any{"receipt_id": "rcpt-1s", "partition_key": "tore-17"}),
	}
	for name, rec := range differ {
		if e := mustValidate(t, v, rec); e.Fingerprint == base.Fingerprint {
			t.Errorf("%s: same fingerprint %x as the base event", name, e.Fingerprint)
		}
	}
	arr1 := mustValidate(t, v, with(v2Fields(), map[string]any{"payload": raw(`{"a":[1,2]}`)}))
	arr2 := mustValidate(t, v, with(v2Fields(), map[string]any{"payload": raw(`{"a":[2,1]}`)}))
	if arr1.Fingerprint == arr2.Fingerprint {
		t.Error("array order must matter")
	}
}

func TestFingerprintOfEvent(t *testing.T) {
	e := Event{
		SchemaVersion: 2,
		EventID:       "evt-1",
		ReceiptID:     "rcpt-1",
		Type:          TypeSubmitted,
		OccurredAt:    time.Date(2026, 12, 2, 10, 15, 0, 0, time.UTC),
		PartitionKey:  "store-17",
		Payload:       raw(`{"total_cents":1299,"currency":"EUR"}`),
	}
	v := newValidator(t, Config{})
	if got, want := Fingerprint(&e), mustValidate(t, v, with(v2Fields(), nil)).Fingerprint; got != want {
		t.Errorf("Fingerprint of a hand-built event %x, of the validated record %x", got, want)
	}
	// The stored Fingerprint field is not an input.
	e.Fingerprint = 42
	if Fingerprint(&e) == 42 {
		t.Error("Fingerprint returned the stored field")
	}
	// Invalid payload bytes are hashed, not a panic, and differ from valid ones.
	bad := e
	bad.Payload = raw(`{"total_cents":`)
	if Fingerprint(&bad) == Fingerprint(&e) {
		t.Error("invalid payload has the fingerprint of the valid one")
	}
}

func TestCanonicalNumber(t *testing.T) {
	tests := map[string]string{
		"0": "0", "-0": "0", "-0.0": "0", "1": "1", "1.0": "1", "1e0": "1", "10E-1": "1",
		"1299": "1299", "1.299e3": "1299", "0.5": "0.5", "5e-1": "0.5", "-2.50": "-2.5",
		"12345678901234567890": "12345678901234567890", // integer literals stay exact
		"9007199254740992.0":   "9007199254740992",
		"1e300":                "1e+300",
		"1e999":                "1e999", // out of float64 range: as written
	}
	for in, want := range tests {
		if got := canonicalNumber(in); got != want {
			t.Errorf("canonicalNumber(%s) = %s, want %s", in, got, want)
		}
	}
}
