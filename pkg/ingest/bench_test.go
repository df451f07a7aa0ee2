package ingest

import (
	"bytes"
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// BenchmarkFile ingests a generated file of 20,000 records into a fresh
// RAW on an in-process nats-server (file store) per iteration and reports
// records per second and the process's CPU per record (ingest and the
// server: the figure the bench's "Ingest alone" row gives). Run:
// go test -run '^$' -bench File ./ingest/
func BenchmarkFile(b *testing.B) {
	const n = 20000
	data := fixture(b, n)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	_, url := testenv.NATS(b)
	_, js := dial(b, url, 0)
	b.SetBytes(int64(len(data)))
	var cpu time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		if err := js.DeleteStream(ctx, wire.Raw); err != nil && i > 0 {
			b.Fatal(err)
		}
		ensure(b, ctx, js)
		in := newTestIngester(b, js, nil)
		cpu0 := processCPU(b)
		b.StartTimer()
		if _, err := File(ctx, in, bytes.NewReader(data), nil); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		cpu += processCPU(b) - cpu0
		b.StartTimer()
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(n*b.N), "cpu-µs/record")
}

// processCPU is the process's user and system CPU time so far.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
