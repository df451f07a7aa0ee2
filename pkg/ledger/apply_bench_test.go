package ledger

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/receiptflow/receiptflow/pkg/testenv"
)

// BenchmarkApply applies batches of new submissions to one partition on a
// real redis-server, as the windower does with a batch (1000 records over
// a few windows). Besides ns/op (one batch) it reports per event: wall-us,
// client-us, redis-us and script-us (as BenchmarkClaimThrough). Apply is
// unfenced (static mode), ApplyFenced carries an epoch.
func BenchmarkApply(b *testing.B) {
	const batch = 1000
	r := testenv.RedisServer(b)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr()})
	b.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	s := NewStore(rdb, Config{Keys: Keys{Prefix: "rf:1:"}, Lateness: 5 * time.Minute, Grace: time.Hour, Horizon: 24 * time.Hour})
	for _, bench := range applyBenches(s) {
		b.Run(bench.name, func(b *testing.B) {
			if err := rdb.FlushAll(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			base := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC).UnixMilli()
			seq := uint64(0)
			next := func() []Record {
				recs := make([]Record, batch)
				for j := range recs {
					seq++
					recs[j] = Record{Seq: seq, Kind: Submission, EventID: fmt.Sprintf("e-%d", seq),
						Time: base + int64(seq%4)*3600_000 + int64(seq)%60_000, RawSeq: seq, Store: fmt.Sprintf("s%d", seq%20),
						AmountCents: int64(seq % 5000), Priced: true}
				}
				return recs
			}
			// Load the script outside the measurement.
			if _, err := bench.store.Apply(ctx, 0, next(), 0, 0); err != nil {
				b.Fatal(err)
			}
			spent := meterRedis(b, rdb)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				recs := next()
				b.StartTimer()
				if _, err := bench.store.Apply(ctx, 0, recs, seq-batch, 0); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			n := float64(b.N * batch)
			cpu, self := spent()
			_, usec := evalshaStats(b, rdb)
			b.ReportMetric(float64(b.Elapsed().Microseconds())/n, "wall-us/event")
			b.ReportMetric(self*1e6/n, "client-us/event")
			b.ReportMetric(cpu*1e6/n, "redis-us/event")
			b.ReportMetric(usec/n, "script-us/event")
		})
	}
}

// applyBench is one store BenchmarkApply measures.
type applyBench struct {
	name  string
	store *Store
}

func applyBenches(s *Store) []applyBench {
	return []applyBench{{"Apply", s}, {"ApplyFenced", s.Fence(map[int]uint64{0: 7})}}
}
