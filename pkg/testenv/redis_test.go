package testenv

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func redisClient(t *testing.T, p *RedisProc) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(p.URL())
	if err != nil {
		t.Fatalf("ParseURL(%q): %v", p.URL(), err)
	}
	opts.MaxRetries = -1 // see every failure; CheckFor does the retrying
	c := redis.NewClient(opts)
	t.Cleanup(func() { c.Close() })
	return c
}

func TestRedisServerAOFSurvivesKill(t *testing.T) {
	p := RedisServer(t, WithAOF())
	if !strings.HasPrefix(p.URL(), "redis://127.0.0.1:") || p.URL() != "redis://"+p.Addr() {
		t.Fatalf("URL %q / Addr %q", p.URL(), p.Addr())
	}
	c := redisClient(t, p)
	ctx := context.Background()
	if got, err := c.ConfigGet(ctx, "appendfsync").Result(); err != nil || got["appendfsync"] != "always" {
		t.Fatalf("appendfsync = %v, %v; want always", got, err)
	}
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	addr := p.Addr()

	p.Kill()
	if p.Running() {
		t.Fatal("Running after Kill")
	}
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING answered after Kill")
	}
	p.Kill() // twice is fine

	p.Restart(t)
	if p.Addr() != addr || !p.Running() {
		t.Fatalf("after Restart: addr %s (was %s), running %v", p.Addr(), addr, p.Running())
	}
	// The same client reconnects to the same address by itself.
	CheckFor(t, 5*time.Second, 20*time.Millisecond, func() error {
		got, err := c.Get(ctx, "k").Result()
		if err != nil {
			return err
		}
		if got != "v" {
			return errors.New("k = " + got)
		}
		return nil
	})
}

func TestRedisServerNothingPersistedByDefault(t *testing.T) {
	p := RedisServer(t)
	c := redisClient(t, p)
	ctx := context.Background()
	got, err := c.ConfigGet(ctx, "appendonly").Result()
	if err != nil || got["appendonly"] != "no" {
		t.Fatalf("appendonly = %v, %v; want no", got, err)
	}
	if got, err := c.ConfigGet(ctx, "save").Result(); err != nil || got["save"] != "" {
		t.Fatalf("save = %v, %v; want empty", got, err)
	}
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	p.Restart(t) // kills the running server first
	CheckFor(t, 5*time.Second, 20*time.Millisecond, func() error {
		n, err := c.Exists(ctx, "k").Result()
		if err != nil {
			return err
		}
		if n != 0 {
			return errors.New("k survived a restart without persistence")
		}
		return nil
	})
}

func TestRedisServerArgs(t *testing.T) {
	p := RedisServer(t, WithArgs("--maxmemory", "12345678", "--maxmemory-policy", "noeviction"))
	c := redisClient(t, p)
	got, err := c.ConfigGet(context.Background(), "maxmemory").Result()
	if err != nil || got["maxmemory"] != "12345678" {
		t.Fatalf("maxmemory = %v, %v; want 12345678", got, err)
	}
}

func TestRedisServersAreSeparate(t *testing.T) {
	a, b := RedisServer(t), RedisServer(t)
	if a.Addr() == b.Addr() || a.Dir() == b.Dir() {
		t.Fatalf("two servers share %s / %s", a.Addr(), a.Dir())
	}
}

func TestRedisServerMissingBinary(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // no redis-server here

	t.Run("local", func(t *testing.T) {
		t.Setenv("CI", "")
		r := &recorder{TB: t}
		lookRedisServer(r)
		if r.fatal != "" || !strings.Contains(r.skip, "NOT run") || !strings.Contains(r.skip, "apt-get install -y redis-server") {
			t.Fatalf("skip %q, fatal %q: want a loud skip with install hint", r.skip, r.fatal)
		}
	})
	t.Run("ci", func(t *testing.T) {
		t.Setenv("CI", "true")
		r := &recorder{TB: t}
		lookRedisServer(r)
		if r.skip != "" || !strings.Contains(r.fatal, "CI=true") {
			t.Fatalf("skip %q, fatal %q: want a failure under CI", r.skip, r.fatal)
		}
	})
}
