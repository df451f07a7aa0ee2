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

// duplicatesField is the explain record's field holding the duplicates
// count; an event id never starts with '#' (docs/spec.md §2).
const duplicatesField = "#d"

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
	Partial     wire.Partial
	Held        bool
	Corrections []CorrectionRecord
	Duplicates  int64
}

// CorrectionRecord is one submission counted as a correction.
type CorrectionRecord struct {
	EventID string
	Version int64
}

// ReadWindow reads partition p's record of window id in one atomic step.
// It only reads and is safe for concurrent use.
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
		if k == duplicatesField {
			r.Duplicates = n
			continue
		}
		r.Corrections = append(r.Corrections, CorrectionRecord{EventID: k, Version: n})
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
