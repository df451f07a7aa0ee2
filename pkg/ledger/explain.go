package ledger

import (
	"context"
	_ "embed"
	"fmt"
	"sort"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/receiptflow/receiptflow/pkg/wire"
)

var (
	//go:embed explain.lua
	explainSrc    string
	explainScript = redis.NewScript(explainSrc)
)

// Fields of the explain record that are not event ids (an event id never
// starts with '#', docs/spec.md §2): the duplicates count, and what
// retire.lua keeps of the partial (counted on time, version).
const (
	duplicatesField = "#d"
	onTimeField     = "#o"
	versionField    = "#v"
)

// WindowRecord is what partition p holds about one window: its partial,
// each correction with the partial's version after it, and the copies its
// ledger dropped as duplicates.
type WindowRecord struct {
	Partition int
	// Retired is the partition's retired mark (ms): a window ending at or
	// before it has no state left.
	Retired int64
	// Partial is the window's partial; Held is false when the partition
	// holds none.
	Partial wire.Partial
	Held    bool
	// Kept is true when the partial is retired and the explain record
	// kept what explain reads of it (until the window is pruned).
	Kept bool
	// OnTime (counted before the window's watermark passed its end) and
	// Version are the partial's, from the partial or from the kept record.
	OnTime, Version int64
	Corrections     []CorrectionRecord
	Duplicates      int64
}

// CorrectionRecord is one submission counted as a correction.
type CorrectionRecord struct {
	EventID string
	Version int64
}

// ReadWindow reads partition p's record of window id in one atomic step:
// from its partial and explain record, or from the record alone once the
// partial is retired (Kept). It only reads; safe for concurrent use.
func (s *Store) ReadWindow(ctx context.Context, p int, id string) (*WindowRecord, error) {
	keys := []string{s.keys.Checkpoint(p), s.keys.Partial(p, id), s.keys.Explain(p, id)}
	raw, err := explainScript.Run(ctx, s.rdb, keys).Slice()
	if err != nil {
		return nil, fmt.Errorf("ledger: read window %s of partition %d: %w", id, p, err)
	}
	if len(raw) != 3 {
		return nil, fmt.Errorf("ledger: read window %s of partition %d: bad reply %v", id, p, raw)
	}
	r := &WindowRecord{Partition: p}
	r.Retired, _ = strconv.ParseInt(str(raw[0]), 10, 64)
	f, _ := raw[1].([]any)
	r.Partial, r.Held = parsePartial(p, f)
	x, _ := raw[2].([]any)
	for i := 0; i+1 < len(x); i += 2 {
		k, v := str(x[i]), str(x[i+1])
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("ledger: explain record of %s in partition %d: field %q: %w", id, p, k, err)
		}
		switch k {
		case duplicatesField:
			r.Duplicates = n
		case onTimeField:
			r.OnTime = n
		case versionField:
			r.Version, r.Kept = n, true
		default:
			r.Corrections = append(r.Corrections, CorrectionRecord{EventID: k, Version: n})
		}
	}
	if r.Held {
		r.OnTime, r.Version, r.Kept = r.Partial.Count-r.Partial.Corrections, r.Partial.Version, false
	}
	sort.Slice(r.Corrections, func(i, j int) bool { return r.Corrections[i].Version < r.Corrections[j].Version })
	return r, nil
}

// Holds reports which of eventIDs partition p's ledger of window id holds
// (counted or routed late there), as one pipeline of reads.
func (s *Store) Holds(ctx context.Context, p int, id string, eventIDs []string) (map[string]bool, error) {
	if len(eventIDs) == 0 {
		return map[string]bool{}, nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.BoolCmd, len(eventIDs))
	for i, e := range eventIDs {
		k := IDKey(e)
		cmds[i] = pipe.HExists(ctx, s.keys.LedgerShard(p, id, LedgerShardOf(k)), k)
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, fmt.Errorf("ledger: ledger of %s in partition %d: %w", id, p, err)
	}
	held := make(map[string]bool, len(eventIDs))
	for i, e := range eventIDs {
		if cmds[i].Val() {
			held[e] = true
		}
	}
	return held, nil
}

// Forget deletes the explain records of window id in partitions ps: the
// publisher calls it when it prunes the window (the record has then
// nothing left to explain). Safe to call twice.
func (s *Store) Forget(ctx context.Context, ps []int, id string) error {
	pipe := s.rdb.Pipeline()
	for _, p := range ps {
		pipe.Del(ctx, s.keys.Explain(p, id))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("ledger: forget the explain records of %s: %w", id, err)
	}
	return nil
}
