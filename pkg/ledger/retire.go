package ledger

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed retire.lua
	retireSrc    string
	retireScript = fencedScript(retireSrc)
)

// Retire deletes partition p's state of the windows ids (which must all
// end at or before mark) and raises p's retired mark to mark, atomically.
// From then on apply drops events of windows ending at or before the mark
// (decision Retired). Retiring again is a no-op. It returns the ledger
// entries removed, or an error wrapping ErrFenced (nothing deleted) when a
// later owner holds p (Fence).
func (s *Store) Retire(ctx context.Context, p int, mark int64, ids []string) (int64, error) {
	keys := []string{s.keys.Checkpoint(p), s.keys.Index(p)}
	args := []any{mark, len(ids), LedgerShards, s.epoch(p)}
	for _, id := range ids {
		keys = append(keys, s.keys.Partial(p, id), s.keys.Explain(p, id))
		for n := 0; n < LedgerShards; n++ {
			keys = append(keys, s.keys.LedgerShard(p, id, n))
		}
		args = append(args, id)
	}
	raw, err := retireScript.Run(ctx, s.rdb, keys, args...).Slice()
	if err != nil {
		return 0, fmt.Errorf("ledger: retire partition %d: %w", p, fenced(err))
	}
	if len(raw) != 2 {
		return 0, fmt.Errorf("ledger: retire partition %d: bad reply %v", p, raw)
	}
	n, _ := strconv.ParseInt(str(raw[0]), 10, 64)
	return n, nil
}

// GlobalWatermark is the minimum watermark over partitions 0..n-1.
func (s *Store) GlobalWatermark(ctx context.Context, n int) (int64, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, n)
	for p := 0; p < n; p++ {
		cmds[p] = pipe.HGet(ctx, s.keys.Checkpoint(p), "wm")
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return 0, fmt.Errorf("ledger: watermarks: %w", err)
	}
	g := int64(-1)
	for _, c := range cmds {
		v, _ := strconv.ParseInt(c.Val(), 10, 64) // absent: 0, nothing seen
		if g < 0 || v < g {
			g = v
		}
	}
	return max(g, 0), nil
}

// Grace returns the grace period in ms.
func (s *Store) Grace() int64 { return s.grace }
