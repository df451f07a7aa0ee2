package connect_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/testenv"
)

// TestRedisSentinel: with --redis-sentinel the URL names the sentinels,
// and the client writes to the master they name (real redis-server and
// Sentinel processes). Sentinel and cluster together are refused.
func TestRedisSentinel(t *testing.T) {
	master := testenv.RedisServer(t)
	port := master.Addr()[strings.LastIndexByte(master.Addr(), ':')+1:]
	sentinel := testenv.RedisServer(t, testenv.WithArgs("--sentinel", "--sentinel", "monitor", "rf", "127.0.0.1", port, "1"))
	rdb, err := connect.ConnectRedisSecure(sentinel.Addr(), connect.RedisSecurity{Sentinel: "rf"})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	ctx := context.Background()
	if err := rdb.Set(ctx, "through-sentinel", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	direct := redis.NewClient(&redis.Options{Addr: master.Addr()})
	defer direct.Close()
	if v, err := direct.Get(ctx, "through-sentinel").Result(); err != nil || v != "1" {
		t.Fatalf("the master holds %q, %v; want the value written through the sentinel", v, err)
	}
	if _, err := connect.ConnectRedisSecure(sentinel.Addr(), connect.RedisSecurity{Sentinel: "rf", Cluster: true}); err == nil {
		t.Fatal("--redis-sentinel with --redis-cluster was accepted")
	}
	if _, err := connect.ConnectRedisSecure("127.0.0.1:1,127.0.0.1:"+strconv.Itoa(2), connect.RedisSecurity{}); err == nil {
		t.Fatal("two addresses without --redis-cluster or --redis-sentinel were accepted")
	}
}
