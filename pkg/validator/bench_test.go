package validator

import (
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/traffic"
)

// BenchmarkRecords is the validator's own work per RAW record, without
// JetStream or Redis: validate the record and build its frame record
// (validateOne), then encode the frames of a 500-record batch, on the bench's records
// (pkg/traffic defaults of make bench: ~405 B, 20% v1, 25% other types).
func BenchmarkRecords(b *testing.B) {
	v, err := contract.NewValidator(contract.Config{})
	if err != nil {
		b.Fatal(err)
	}
	s := New(nil, nil, Config{Partitions: 8, Validator: v})
	opts := traffic.Config{Seed: 1, Events: 500, Hours: 24, Stores: 256, DisorderRate: 0.1, V1Share: 0.2, OtherTypeShare: 0.25}
	var recs [][]byte
	var last time.Time
	if _, err := traffic.Each(opts, func(r traffic.Record) error {
		recs = append(recs, r.Line)
		last = time.UnixMilli(r.EventTime)
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	received := last.Add(time.Hour)
	b.ReportAllocs()
	b.ResetTimer()
	n := 0
	for b.Loop() {
		items := make([]item, 0, len(recs))
		for i, raw := range recs {
			it, rej := s.validateOne(raw, nil, received)
			if rej != nil {
				b.Fatalf("record %d: %v", i, rej)
			}
			it.rec.RawSeq = uint64(i + 1)
			items = append(items, it)
		}
		s.m.out.WithLabelValues("valid").Add(float64(len(items)))
		s.frames(0, items)
		n += len(recs)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/record")
}
