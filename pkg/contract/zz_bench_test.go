package contract

import (
	"testing"
	"time"
	"encoding/json"
)

var benchRec = []byte(`{"schema_version":2,"event_id":"evt-2026-12-02-000000123456","receipt_id":"rcpt-88a1f0c2-77","type":"submitted","occurred_at":"2026-12-02T10:15:42.123Z","ingested_at":"2026-12-02T10:15:43.001Z","partition_key":"store-0042","producer_version":"pos-gateway 4.0.0","payload":{"total_cents":1299,"currency":"EUR","channel":"pos","lines":[{"sku":"A-1","qty":2,"unit_cents":450},{"sku":"B-7","qty":1,"unit_cents":399}],"tags":["promo","loyalty"]}}`)

func BenchmarkScratchValidate(b *testing.B) {
	v, _ := NewValidator(Options{})
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	b.SetBytes(int64(len(benchRec)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Validate(benchRec, now); err != nil {
			b.Fatal(err)
		}
	}
}
func BenchmarkScratchDecode(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		decodeRecord(benchRec)
	}
}
func BenchmarkScratchStdDecode(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		var m map[string]any
		json.Unmarshal(benchRec, &m)
	}
}
func BenchmarkScratchSchema(b *testing.B) {
	v, _ := NewValidator(Options{})
	rec, _ := decodeRecord(benchRec)
	b.ReportAllocs()
	for b.Loop() {
		if err := v.v2.Validate(rec.fields); err != nil { b.Fatal(err) }
	}
}
func BenchmarkScratchFP(b *testing.B) {
	v, _ := NewValidator(Options{})
	e, _ := v.Validate(benchRec, time.Now())
	rec, _ := decodeRecord(benchRec)
	b.ReportAllocs()
	for b.Loop() {
		fingerprint(&e, rec.fields["payload"])
	}
}
