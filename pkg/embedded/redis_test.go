package embedded

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestStartRedis(t *testing.T) {
	m, err := StartRedis()
	if err != nil {
		t.Fatalf("StartRedis: %v", err)
	}
	t.Cleanup(m.Close)

	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer c.Close()
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET = %q, %v; want v", got, err)
	}
	// A script runs too: the windower's Lua scripts need EVAL.
	n, err := c.Eval(ctx, "return redis.call('INCR', KEYS[1])", []string{"{p0}:n"}).Int()
	if err != nil || n != 1 {
		t.Fatalf("EVAL = %d, %v; want 1", n, err)
	}

	other, err := StartRedis()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	if other.Addr() == m.Addr() || other.Exists("k") {
		t.Fatal("second StartRedis is not a separate empty server")
	}
}
