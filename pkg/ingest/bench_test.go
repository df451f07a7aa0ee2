package ingest

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// BenchmarkFile ingests a generated file of 20,000 records into a fresh
// RAW on an in-process nats-server (file store) per iteration and reports
// records per second. Run: go test -run '^$' -bench File ./ingest/
func BenchmarkFile(b *testing.B) {
	const n = 20000
	data := fixture(b, n)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	_, url := testenv.NATS(b)
	_, js := dial(b, url, 0)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		if err := js.DeleteStream(ctx, wire.Raw); err != nil && i > 0 {
			b.Fatal(err)
		}
		ensure(b, ctx, js)
		in := newTestIngester(b, js, nil)
		b.StartTimer()
		if _, err := File(ctx, in, bytes.NewReader(data), nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "records/s")
}
