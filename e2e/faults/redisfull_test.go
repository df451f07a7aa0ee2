package faults

// A full Redis (issue 23, deliverable 2): redis-server with noeviction
// reaches its maxmemory while the services work through a backlog. Writes
// are refused with OOM; the services must wait (not ready, naming the full
// Redis, the OOM counter rising, nothing acknowledged) without exiting,
// and resume by themselves once memory is freed; every final window must
// equal the clean run's.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/receiptflow/receiptflow/pkg/testenv"
)

// httpGet returns the status and body of a GET of url.
func httpGet(url string) (int, string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// metricValue is the value of the unlabelled metric name in a /metrics
// text, or -1 when it is not there.
func metricValue(text, name string) float64 {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindStringSubmatch(text)
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// oomRefusals is the OOM replies Redis has sent (INFO errorstats).
func oomRefusals(ctx context.Context, rc *redis.Client) (int, error) {
	info, err := rc.Info(ctx, "errorstats").Result()
	if err != nil {
		return 0, err
	}
	m := regexp.MustCompile(`errorstat_OOM:count=(\d+)`).FindStringSubmatch(info)
	if m == nil {
		return 0, nil
	}
	return strconv.Atoi(m[1])
}

func TestRedisFullMidRun(t *testing.T) {
	brokerSet.cleanRun(t)
	d := deployWith(t, setup{later: true, redisArgs: []string{"--maxmemory-policy", "noeviction"},
		env: []string{"RECEIPTS_STATS_INTERVAL=200ms"}})
	ctx, cancel := context.WithTimeout(context.Background(), brokerTimeout)
	defer cancel()
	admin := d.admin(ctx)
	rc := redis.NewClient(&redis.Options{Addr: d.redis.Addr()})
	defer rc.Close()
	// The whole input is in RAW first: the services then work through a
	// backlog, and Redis fills while they do.
	ip := d.startIngest(ctx, brokerSet.fixture(t))
	ip.wait()
	d.startServices()
	start, ok := untilProgress(ctx, admin, 0, 0)
	if !ok {
		t.Fatal("no backlog to process")
	}
	if _, ok := untilProgress(ctx, admin, start, start/5); !ok {
		t.Fatal("the backlog drained before Redis was filled")
	}
	// Room for a few more batches only: Redis fills mid-run.
	used, err := rc.Info(ctx, "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.ParseInt(regexp.MustCompile(`used_memory:(\d+)`).FindStringSubmatch(used)[1], 10, 64)
	if err := rc.ConfigSet(ctx, "maxmemory", strconv.FormatInt(n+64<<10, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("maxmemory set to %d bytes (used %d) with %d messages to process", n+64<<10, n, start)

	// Full: writes refused, a writing service not ready and saying why,
	// its OOM counter rising while it waits, work left, no process exit.
	testenv.CheckFor(t, 60*time.Second, 50*time.Millisecond, func() error {
		if n, err := oomRefusals(ctx, rc); err != nil || n == 0 {
			return fmt.Errorf("redis has refused no write yet (%v)", err)
		}
		return nil
	})
	first := map[string]float64{}
	testenv.CheckFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		for _, p := range d.procs {
			if p.Restarts() > 0 {
				t.Fatalf("%s exited on a full Redis (%d restarts); its last errors:\n%s", p.name, p.Restarts(), p.lastErrors(3))
			}
		}
		var saw []string
		for i, p := range d.procs[:3] { // the validator and the windowers write to Redis
			code, body, err := httpGet("http://" + p.http + "/readyz")
			if err != nil || code != http.StatusServiceUnavailable || !strings.Contains(body, "redis is full") || !strings.Contains(body, "OOM") {
				saw = append(saw, fmt.Sprintf("%s /readyz %d %q %v", p.name, code, strings.TrimSpace(body), err))
				continue
			}
			_, metrics, err := httpGet("http://" + p.http + "/metrics")
			if err != nil {
				return err
			}
			oom := metricValue(metrics, "receiptflow_"+p.name+"_redis_oom_total")
			key := strconv.Itoa(i)
			if oom <= 0 || metricValue(metrics, "receiptflow_"+p.name+"_redis_full") != 1 {
				saw = append(saw, fmt.Sprintf("%s redis_oom_total %v, redis_full not 1", p.name, oom))
				continue
			}
			if before, ok := first[key]; !ok {
				first[key] = oom
			} else if oom > before {
				return nil // still waiting, and still trying
			}
			saw = append(saw, fmt.Sprintf("%s redis_oom_total %v, not rising yet", p.name, oom))
		}
		return fmt.Errorf("no service waits on the full Redis: %s", strings.Join(saw, "; "))
	})
	if left, ok := pending(ctx, admin); !ok || left == 0 {
		t.Fatalf("backlog %d (known %v) while Redis is full: nothing left to resume", left, ok)
	}

	// Freed: the services resume by themselves and the run equals the
	// clean one.
	if err := rc.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	testenv.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		for _, p := range d.procs[:3] {
			if code, _, err := httpGet("http://" + p.http + "/readyz"); err != nil || code != http.StatusOK {
				return fmt.Errorf("%s not ready yet", p.name)
			}
		}
		return nil
	})
	t.Logf("every writer ready again %s after memory was freed", time.Since(freed).Round(10*time.Millisecond))
	o := d.outcome(ctx, admin, brokerSet)
	o.require(t)
	for _, p := range d.procs {
		testenv.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
			if code, body, err := httpGet("http://" + p.http + "/readyz"); err != nil || code != http.StatusOK {
				return fmt.Errorf("%s /readyz %d %q %v after memory was freed", p.name, code, body, err)
			}
			return nil
		})
		if p.Restarts() > 0 {
			t.Errorf("%s exited %d times; its last errors:\n%s", p.name, p.Restarts(), p.lastErrors(3))
		}
	}
}
