package pipeline

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/testenv"
)

// TestStartRefusesAnEvictingRedis: a given Redis must be noeviction; the
// embedded miniredis, which never evicts and answers neither INFO memory
// nor CONFIG, is not checked.
func TestStartRefusesAnEvictingRedis(t *testing.T) {
	_, natsURL := testenv.NATS(t)
	r := testenv.RedisServer(t, testenv.WithArgs("--maxmemory-policy", "allkeys-lru"))
	p, err := Start(context.Background(), Config{NATSURL: natsURL, RedisURL: r.URL(), Services: []string{}})
	if err == nil {
		p.Close()
		t.Fatal("started on an allkeys-lru Redis")
	}
	if !errors.Is(err, connect.ErrUnsafeEviction) || !strings.Contains(err.Error(), "allkeys-lru") {
		t.Fatalf("error %v, want ErrUnsafeEviction naming allkeys-lru", err)
	}
	p, err = Start(context.Background(), Config{NATSURL: natsURL, Services: []string{}})
	if err != nil {
		t.Fatalf("embedded miniredis: %v", err)
	}
	p.Close()
}
