package ledger

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/receiptflow/receiptflow/pkg/testenv"
)

// BenchmarkClaimThrough claims batches of new event ids on a real
// redis-server, as the validator does with a partition's batch (500
// records, claims kept 3 days). Besides ns/op (one batch) it reports per
// claim: wall-us (the caller's wait), client-us (this process's user+system
// CPU, mostly go-redis), redis-us (the server's user+system CPU, INFO cpu)
// and script-us (EVALSHA's usec of INFO commandstats, which includes the
// commands a script runs); and evalsha/batch, the script calls of a batch.
// ClaimThroughFenced is ClaimThrough with the partition's epoch (its mark
// checks the fence).
func BenchmarkClaimThrough(b *testing.B) {
	const batch = 500
	r := testenv.RedisServer(b)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr()})
	b.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	s := NewStore(rdb, Config{Keys: Keys{Prefix: "rf:1:"}, Lateness: 5 * time.Minute, Grace: time.Hour, Horizon: 24 * time.Hour})
	fencedStore := s.Fence(map[int]uint64{0: 7})
	day := time.Now().Unix() / 86400
	for _, bench := range []struct {
		name string
		run  func(p int, claims []Claim, through uint64) error
	}{
		{"Claims", func(_ int, claims []Claim, _ uint64) error {
			_, err := s.Claims(ctx, claims)
			return err
		}},
		{"ClaimThrough", func(p int, claims []Claim, through uint64) error {
			_, _, err := s.ClaimThrough(ctx, p, claims, through, 0)
			return err
		}},
		{"ClaimThroughFenced", func(p int, claims []Claim, through uint64) error {
			_, _, err := fencedStore.ClaimThrough(ctx, p, claims, through, 0)
			return err
		}},
	} {
		b.Run(bench.name, func(b *testing.B) {
			if err := rdb.FlushAll(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			// Load the scripts outside the measurement.
			if err := bench.run(0, []Claim{{EventID: "warm", Fingerprint: 1, Seq: 1, Day: day}}, 1); err != nil {
				b.Fatal(err)
			}
			claims := make([]Claim, batch)
			seq := uint64(1)
			spent := meterRedis(b, rdb)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for j := range claims {
					seq++
					claims[j] = Claim{EventID: fmt.Sprintf("%s-%d", bench.name, seq), Fingerprint: seq, Seq: seq, Day: day}
				}
				if err := bench.run(0, claims, seq); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			n := float64(b.N * batch)
			cpu, self := spent()
			calls, usec := evalshaStats(b, rdb)
			b.ReportMetric(float64(b.Elapsed().Microseconds())/n, "wall-us/claim")
			b.ReportMetric(self*1e6/n, "client-us/claim")
			b.ReportMetric(cpu*1e6/n, "redis-us/claim")
			b.ReportMetric(usec/n, "script-us/claim")
			b.ReportMetric(calls/float64(b.N), "evalsha/batch")
		})
	}
}

// meterRedis resets the server's statistics (INFO commandstats) and
// returns what tells the CPU spent since, the server's and this
// process's, in seconds.
func meterRedis(b *testing.B, rdb *redis.Client) func() (server, self float64) {
	b.Helper()
	if err := rdb.ConfigResetStat(context.Background()).Err(); err != nil {
		b.Fatal(err)
	}
	cpu0, self0 := redisCPU(b, rdb), selfCPU(b)
	return func() (float64, float64) { return redisCPU(b, rdb) - cpu0, selfCPU(b) - self0 }
}

// selfCPU is this process's user+system CPU so far, in seconds.
func selfCPU(b *testing.B) float64 {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// redisCPU is the server's user+system CPU so far, in seconds.
func redisCPU(b *testing.B, rdb *redis.Client) float64 {
	b.Helper()
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(info, "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			sum += f
		}
	}
	return sum
}

// evalshaStats is EVALSHA's calls and total usec since the last CONFIG
// RESETSTAT.
func evalshaStats(tb testing.TB, rdb *redis.Client) (calls, usec float64) {
	tb.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:")
		if !ok {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(f, "=")
			x, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "calls":
				calls = x
			case "usec":
				usec = x
			}
		}
	}
	return calls, usec
}

// BenchmarkClaimConflicts reads a claimed batch's verdicts again, as the
// validator's barrier does once every lower copy is claimed (ClaimConflicts,
// 500 claims, kept 3 days), and reports per claim what
// BenchmarkClaimThrough does: wall-us, client-us, redis-us.
func BenchmarkClaimConflicts(b *testing.B) {
	const batch, batches = 500, 20
	r := testenv.RedisServer(b)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr()})
	b.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	s := NewStore(rdb, Config{Keys: Keys{Prefix: "rf:1:"}, Lateness: 5 * time.Minute, Grace: time.Hour, Horizon: 24 * time.Hour})
	day := time.Now().Unix() / 86400
	all := make([][]Claim, batches)
	seq := uint64(0)
	for k := range all {
		all[k] = make([]Claim, batch)
		for j := range all[k] {
			seq++
			all[k][j] = Claim{EventID: fmt.Sprintf("conflicts-%d", seq), Fingerprint: seq, Seq: seq, Day: day}
		}
		if _, err := s.Claims(ctx, all[k]); err != nil {
			b.Fatal(err)
		}
	}
	if _, _, err := s.ClaimConflicts(ctx, all[0]); err != nil { // scripts loaded outside the measurement
		b.Fatal(err)
	}
	spent := meterRedis(b, rdb)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		conflict, _, err := s.ClaimConflicts(ctx, all[i%batches])
		if err != nil {
			b.Fatal(err)
		}
		if slices.Contains(conflict, true) {
			b.Fatal("a conflict among claims of distinct ids")
		}
	}
	b.StopTimer()
	n := float64(b.N * batch)
	cpu, self := spent()
	b.ReportMetric(float64(b.Elapsed().Microseconds())/n, "wall-us/claim")
	b.ReportMetric(self*1e6/n, "client-us/claim")
	b.ReportMetric(cpu*1e6/n, "redis-us/claim")
}
