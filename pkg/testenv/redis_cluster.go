package testenv

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisCluster is a Redis Cluster of real redis-server masters on
// loopback, without replicas, the slots split evenly by redis-cli.
type RedisCluster struct {
	// Nodes are the masters, in the order they were started.
	Nodes []*RedisProc
}

// NewRedisCluster starts n (≥ 3) cluster-enabled redis-servers, joins them
// with `redis-cli --cluster create` and waits until every node says
// cluster_state:ok. The servers are killed by t.Cleanup.
func NewRedisCluster(t testing.TB, n int) *RedisCluster {
	t.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		lookRedisServer(t) // skips or fails loudly, as for a missing server
		t.Fatalf("testenv: redis-cli not found on PATH (Debian: apt-get install -y redis-tools): %v", err)
	}
	c := &RedisCluster{}
	for range n {
		bus, err := Port()
		if err != nil {
			t.Fatal(err)
		}
		// The bus port defaults to port+10000, which may not exist.
		c.Nodes = append(c.Nodes, RedisServer(t, WithArgs("--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf", "--cluster-port", strconv.Itoa(bus),
			"--cluster-node-timeout", "5000")))
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("testenv: redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	ctx := context.Background()
	for _, node := range c.Nodes {
		rdb := redis.NewClient(&redis.Options{Addr: node.Addr(), Protocol: 2, DisableIdentity: true})
		CheckFor(t, 20*time.Second, 50*time.Millisecond, func() error {
			info, err := rdb.ClusterInfo(ctx).Result()
			if err != nil {
				return err
			}
			if !strings.Contains(info, "cluster_state:ok") {
				return fmt.Errorf("%s: cluster not ok yet", node.Addr())
			}
			return nil
		})
		rdb.Close()
	}
	return c
}

// Addrs are the masters' host:port addresses.
func (c *RedisCluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Client is a cluster client of c, closed by t.Cleanup.
func (c *RedisCluster) Client(t testing.TB) *redis.ClusterClient {
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// NodeOf is the master that holds key.
func (c *RedisCluster) NodeOf(t testing.TB, key string) *RedisProc {
	t.Helper()
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: c.Nodes[0].Addr(), Protocol: 2, DisableIdentity: true})
	defer rdb.Close()
	slot, err := rdb.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	//lint:ignore SA1019 CLUSTER SLOTS answers on Redis 6 too; CLUSTER SHARDS needs 7
	slots, err := rdb.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range slots {
		if int64(s.Start) <= slot && slot <= int64(s.End) && len(s.Nodes) > 0 {
			for _, n := range c.Nodes {
				if n.Addr() == s.Nodes[0].Addr {
					return n
				}
			}
		}
	}
	t.Fatalf("testenv: no master holds %q", key)
	return nil
}
