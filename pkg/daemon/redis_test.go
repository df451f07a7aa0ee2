package daemon

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/receiptflow/receiptflow/pkg/testenv"
)

// counted is a service that counts how many of its runs are running.
type counted struct{ running, runs *atomic.Int32 }

func (c counted) Run(ctx context.Context) error {
	c.runs.Add(1)
	c.running.Add(1)
	defer c.running.Add(-1)
	<-ctx.Done()
	return nil
}

// get returns the status and body of a GET of url.
func get(url string) (int, string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// TestRefusesAnEvictingRedis: under a maxmemory-policy other than
// noeviction the service does not run, /readyz answers 503 naming the
// policy, the gauge says so and the log says it once per change; under
// noeviction it runs; a policy turned unsafe mid-run stops it again.
func TestRefusesAnEvictingRedis(t *testing.T) {
	for _, policy := range []string{"allkeys-lru", "volatile-lru"} {
		t.Run(policy, func(t *testing.T) {
			_, natsURL := testenv.NATS(t)
			r := testenv.RedisServer(t, testenv.WithArgs("--maxmemory-policy", policy))
			admin := redis.NewClient(&redis.Options{Addr: r.Addr()})
			defer admin.Close()
			addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var log syncBuf
			var running, runs atomic.Int32
			done := make(chan int, 1)
			go func() {
				done <- Main(ctx, "windower", []string{"--nats-url", natsURL, "--redis-url", r.URL(), "--partitions", "2",
					"--http-addr", addr, "--stats-interval", "100ms"}, &log,
					func(*Deps) (Runner, error) { return counted{&running, &runs}, nil })
			}()
			refused := func() error {
				code, body, err := get("http://" + addr + "/readyz")
				if err != nil || code != http.StatusServiceUnavailable || !strings.Contains(body, "maxmemory-policy is "+policy) {
					return fmt.Errorf("/readyz %d %q (%v), want 503 naming %s", code, body, err, policy)
				}
				_, metrics, err := get("http://" + addr + "/metrics")
				if want := `receiptflow_windower_redis_unsafe_eviction_policy{policy="` + policy + `"} 1`; err != nil || !strings.Contains(metrics, want) {
					return fmt.Errorf("/metrics lacks %s (%v)", want, err)
				}
				if n := running.Load(); n != 0 {
					return fmt.Errorf("%d runs of the service under %s", n, policy)
				}
				return nil
			}
			testenv.CheckFor(t, 15*time.Second, 20*time.Millisecond, refused)
			if n := runs.Load(); n != 0 {
				t.Fatalf("the service ran %d times under %s", n, policy)
			}

			if err := admin.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
				t.Fatal(err)
			}
			testenv.CheckFor(t, 15*time.Second, 20*time.Millisecond, func() error {
				code, body, err := get("http://" + addr + "/readyz")
				if err != nil || code != http.StatusOK || running.Load() != 1 {
					return fmt.Errorf("/readyz %d %q (%v), %d running; want ready, one running", code, body, err, running.Load())
				}
				return nil
			})

			if err := admin.ConfigSet(ctx, "maxmemory-policy", policy).Err(); err != nil {
				t.Fatal(err)
			}
			testenv.CheckFor(t, 15*time.Second, 20*time.Millisecond, refused)
			cancel()
			if code := <-done; code != 0 {
				t.Fatalf("exit %d:\n%s", code, log.String())
			}
			if n := strings.Count(log.String(), "redis refused"); n != 2 {
				t.Errorf("%d log lines refusing Redis, want 2 (one per change):\n%s", n, log.String())
			}
		})
	}
}
