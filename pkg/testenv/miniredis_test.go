package testenv

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestMiniredis(t *testing.T) {
	m := Miniredis(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer c.Close()
	if err := c.Set(context.Background(), "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.Get("k"); got != "v" {
		t.Fatalf("miniredis k = %q, want v", got)
	}
}
