package connect

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// SafeEvictionPolicy is the only maxmemory-policy the services accept:
// at maxmemory Redis refuses writes instead of dropping keys.
const SafeEvictionPolicy = "noeviction"

// ErrUnsafeEviction is wrapped by CheckEviction when Redis may evict keys
// (a ledger entry or a claim dropped silently counts an event twice).
var ErrUnsafeEviction = errors.New("redis may evict keys")

// ErrPolicyUnknown is wrapped when neither CONFIG GET nor INFO memory tells
// the eviction policy.
var ErrPolicyUnknown = errors.New("redis maxmemory-policy cannot be read")

// RedisMemory is what one Redis server says of its memory limit.
type RedisMemory struct {
	// Policy is maxmemory-policy; Source says how it was read ("info"
	// or "config").
	Policy, Source string
	// Used and Max are used_memory and maxmemory in bytes (INFO memory;
	// zero when INFO is refused). Max 0 means no limit.
	Used, Max int64
}

// HasRoom reports whether m says writes are accepted: no limit, or used
// memory at or below it. Without INFO it cannot tell and reports false.
func (m RedisMemory) HasRoom() bool { return m.Used > 0 && (m.Max == 0 || m.Used <= m.Max) }

// ReadRedisMemory reads the policy and memory of rc's server (each master
// of a cluster; the first unsafe one wins) by INFO memory, else CONFIG GET.
// Read only; safe for concurrent use.
func ReadRedisMemory(ctx context.Context, rc redis.UniversalClient) (RedisMemory, error) {
	cc, ok := rc.(*redis.ClusterClient)
	if !ok {
		return readMemory(ctx, rc)
	}
	var (
		mu    sync.Mutex
		found RedisMemory
		first error
	)
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		m, err := readMemory(ctx, c)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			first = errors.Join(first, fmt.Errorf("%s: %w", c.Options().Addr, err))
		} else if found.Policy == "" || found.Policy == SafeEvictionPolicy {
			found = m
		}
		return nil
	})
	if err == nil {
		err = first
	}
	return found, err
}

// readMemory reads one server: INFO memory, else CONFIG GET for the
// policy (asked only then: a refused command fills the server's ACL LOG).
func readMemory(ctx context.Context, c redis.Cmdable) (RedisMemory, error) {
	var m RedisMemory
	info, infoErr := c.Info(ctx, "memory").Result()
	if infoErr == nil {
		f := infoFields(info)
		m.Used, _ = strconv.ParseInt(f["used_memory"], 10, 64)
		m.Max, _ = strconv.ParseInt(f["maxmemory"], 10, 64)
		if p := f["maxmemory_policy"]; p != "" {
			return RedisMemory{Policy: p, Source: "info", Used: m.Used, Max: m.Max}, nil
		}
	}
	cfg, cfgErr := c.ConfigGet(ctx, "maxmemory-policy").Result()
	if p := cfg["maxmemory-policy"]; cfgErr == nil && p != "" {
		m.Policy, m.Source = p, "config"
	}
	if m.Policy == "" {
		for _, err := range []error{cfgErr, infoErr} {
			if err != nil && !isRedisReply(err) {
				return m, err // the server is away, not refusing
			}
		}
		return m, fmt.Errorf("%w: CONFIG GET: %v; INFO memory: %v (grant the service's Redis user +info)", ErrPolicyUnknown, orNone(cfgErr), orNone(infoErr))
	}
	return m, nil
}

// CheckEviction returns nil when m's policy is SafeEvictionPolicy, else an
// error wrapping ErrUnsafeEviction that names the policy.
func CheckEviction(m RedisMemory) error {
	if m.Policy == SafeEvictionPolicy {
		return nil
	}
	return fmt.Errorf("%w: maxmemory-policy is %s, want %s (set it in redis.conf, or in the managed service's parameters: docs/deployment.md)",
		ErrUnsafeEviction, m.Policy, SafeEvictionPolicy)
}

func orNone(err error) string {
	if err == nil {
		return "no policy in the reply"
	}
	return err.Error()
}

// isRedisReply reports whether err is an error reply of the server (a
// refusal such as NOPERM or an unknown command), not a lost connection.
func isRedisReply(err error) bool {
	var rerr redis.Error
	var nerr net.Error
	return errors.As(err, &rerr) && !errors.As(err, &nerr)
}

// infoFields parses an INFO reply into its key:value fields.
func infoFields(info string) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if ok && !strings.HasPrefix(k, "#") {
			out[k] = v
		}
	}
	return out
}

// RedisFull reports whether err is an OOM reply: Redis at maxmemory refused
// a write, which changed nothing and may be retried once memory is freed.
func RedisFull(err error) bool { return redis.IsOOMError(err) }

// FullWatch is a go-redis hook following a client's OOM replies: full until
// each refused command succeeded again, or Freed. Safe for concurrent use.
type FullWatch struct {
	refusals atomic.Uint64
	onChange func(refused error)

	mu      sync.Mutex
	refused map[string]error // by command (name, and script for EVAL/EVALSHA)
	last    error
}

var _ redis.Hook = (*FullWatch)(nil)

// NewFullWatch returns a watch that calls onChange (if not nil) with the
// refusal when Redis turns full, and with nil when writes pass again.
func NewFullWatch(onChange func(refused error)) *FullWatch {
	return &FullWatch{onChange: onChange, refused: map[string]error{}}
}

// Refusals is the number of OOM replies seen.
func (w *FullWatch) Refusals() uint64 { return w.refusals.Load() }

// Full returns the last refusal while writes are refused, else nil.
func (w *FullWatch) Full() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.refused) == 0 {
		return nil
	}
	return w.last
}

// Freed forgets every refusal: Redis has room again (RedisMemory.HasRoom).
func (w *FullWatch) Freed() {
	w.mu.Lock()
	was := len(w.refused) > 0
	clear(w.refused)
	w.mu.Unlock()
	if was && w.onChange != nil {
		w.onChange(nil)
	}
}

// observe records cmd's reply err (go-redis sets cmd.Err only after the
// hooks of a single command have returned).
func (w *FullWatch) observe(cmd redis.Cmder, err error) {
	if err != nil && !RedisFull(err) {
		return // not about memory
	}
	key := cmd.Name()
	if key == "eval" || key == "evalsha" {
		key += " " + fmt.Sprint(cmd.Args()[1])
	}
	w.mu.Lock()
	was := len(w.refused) > 0
	if err != nil {
		w.refusals.Add(1)
		w.refused[key], w.last = err, err
	} else {
		delete(w.refused, key)
	}
	now := len(w.refused) > 0
	w.mu.Unlock()
	if was != now && w.onChange != nil {
		if now {
			w.onChange(err)
		} else {
			w.onChange(nil)
		}
	}
}

// DialHook is the identity.
func (w *FullWatch) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook observes each command's reply.
func (w *FullWatch) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		w.observe(cmd, err)
		return err
	}
}

// ProcessPipelineHook observes each reply of a pipeline.
func (w *FullWatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			w.observe(c, c.Err())
		}
		return err
	}
}
