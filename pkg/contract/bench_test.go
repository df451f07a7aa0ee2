package contract

import (
	"encoding/json"
	"testing"
)

// Typical records of about 400 bytes.
var (
	benchV2 = []byte(`{"schema_version":2,"event_id":"pos-0042:2026-12-02:000123456","receipt_id":"rcpt-88a1f0c2-77","type":"submitted","occurred_at":"2026-12-02T10:15:42.123Z","ingested_at":"2026-12-02T10:15:43.001Z","partition_key":"store-0042","producer_version":"pos-gateway 4.0.0","payload":{"total_cents":1299,"currency":"EUR","channel":"pos","lines":[{"sku":"A-1","qty":2},{"sku":"B-7","qty":1}],"loyalty":true}}`)
	benchV1 = []byte(`{"schema_version":1,"event_id":"pos-0042:2026-12-02:000123457","receipt_id":"rcpt-88a1f0c2-78","type":"submitted","occurred_minute":29936775,"ingested_at":"2026-12-02T10:15:43.001Z","partition_key":"store-0042","producer_version":"pos-gateway 3.9.2","payload":{"total_cents":2599,"currency":"EUR","channel":"pos","lines":[{"sku":"A-1","qty":1},{"sku":"C-3","qty":4}],"loyalty":false,"note":"v1 record"}}`)
	// benchBad breaks the schema in two places.
	benchBad = []byte(`{"schema_version":2,"event_id":"pos-0042:2026-12-02:000123458","receipt_id":"rcpt-88a1f0c2-79","type":"refunded","occurred_at":"2026-12-02T10:15:42.123Z","ingested_at":"2026-12-02T10:15:43.001Z","partition_key":"store-0042","producer_version":"pos-gateway 4.0.0","amount":12,"payload":{"total_cents":1299,"currency":"EUR","channel":"pos","lines":[{"sku":"A-1","qty":2}]}}`)
)

// BenchmarkValidate is the validator's cost per record. Sub-benchmarks
// split it: decode (the record reader), schema (step 6 on the decoded value;
// schema-library is the JSON Schema library doing the same) and fingerprint.
func BenchmarkValidate(b *testing.B) {
	v := newValidator(b, Config{})
	run := func(name string, rec []byte, wantErr bool) {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(rec)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := v.Validate(rec, clock); (err != nil) != wantErr {
					b.Fatal(err)
				}
			}
		})
	}
	run("v2", benchV2, false)
	run("v1", benchV1, false)
	run("rejected", benchBad, true)
	b.Run("check-v2", func(b *testing.B) { // what the batch pass calls
		b.SetBytes(int64(len(benchV2)))
		b.ReportAllocs()
		var c Checked
		for b.Loop() {
			if err := v.Check(benchV2, clock, &c); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("schema-path-v2", func(b *testing.B) { // the fast path off
		s := *v
		s.schemaOnly = true
		b.SetBytes(int64(len(benchV2)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.Validate(benchV2, clock); err != nil {
				b.Fatal(err)
			}
		}
	})

	b.Run("decode", func(b *testing.B) {
		b.SetBytes(int64(len(benchV2)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeRecord(benchV2); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode-encoding-json", func(b *testing.B) { // for comparison
		b.SetBytes(int64(len(benchV2)))
		b.ReportAllocs()
		for b.Loop() {
			var m map[string]any
			if err := json.Unmarshal(benchV2, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("schema", func(b *testing.B) {
		rec, err := decodeRecord(benchV2)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if fs := checkSchema(rec.fields, 2); len(fs) > 0 {
				b.Fatal(fs)
			}
		}
	})
	b.Run("schema-library", func(b *testing.B) { // the oracle, for comparison
		rec, err := decodeRecord(benchV2)
		if err != nil {
			b.Fatal(err)
		}
		s, err := eventSchemas()
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if err := s[1].Validate(rec.fields); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("fingerprint", func(b *testing.B) {
		e, err := v.Validate(benchV2, clock)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			Fingerprint(&e)
		}
	})
}

func BenchmarkStampIngestedAt(b *testing.B) {
	var plain map[string]any
	if err := json.Unmarshal(benchV2, &plain); err != nil {
		b.Fatal(err)
	}
	unstamped := with(plain, map[string]any{"ingested_at": nil})
	b.Run("stamp", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			StampIngestedAt(unstamped, clock)
		}
	})
	b.Run("already-stamped", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			StampIngestedAt(benchV2, clock)
		}
	})
}

func BenchmarkPeekEventID(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		PeekEventID(benchBad)
	}
}
