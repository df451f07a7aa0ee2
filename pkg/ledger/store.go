package ledger

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/receiptflow/receiptflow/pkg/internal/digest"
	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

var (
	//go:embed apply.lua
	applySrc string
	//go:embed read.lua
	readSrc string

	applyScript = fencedScript(applySrc)
	readScript  = redis.NewScript(readSrc)
)

// ErrRegressed means Redis holds an older checkpoint than the writer last
// saw: it lost writes. The writer must restart from the checkpoint.
var ErrRegressed = errors.New("ledger: checkpoint regressed")

// Client is what the store needs of a Redis client: scripts, and the
// commands used to read state. *redis.Client and *redis.ClusterClient fit.
type Client interface {
	redis.Scripter
	redis.Cmdable
}

var (
	_ Client = (*redis.Client)(nil)
	_ Client = (*redis.ClusterClient)(nil)
)

// Store reads and changes one generation's state.
type Store struct {
	rdb      Client
	keys     Keys
	lateness int64
	grace    int64
	horizon  int64
	// idle and forget are docs/spec.md §3.1's source idle and forget
	// times (ms).
	idle, forget int64
	copies       *progressCopies
	// epochs are the fencing tokens of the partitions the caller owns
	// (Fence; nil: not fenced).
	epochs map[int]uint64
}

// Config configures a Store.
type Config struct {
	// Keys names the generation's keys (its Prefix, e.g. "rf:1:").
	Keys Keys
	// Lateness and Grace are the watermark lateness and the grace period.
	Lateness, Grace time.Duration
	// Horizon is the replay horizon: a submission whose window ended at
	// least Grace + Horizon before its partition watermark is dropped as
	// Retired without touching any state, and Retire may delete such
	// windows' state. Zero keeps every window's state.
	Horizon time.Duration
	// SourceIdle is docs/spec.md §3.1's --source-idle (zero:
	// window.DefaultSourceIdle).
	SourceIdle time.Duration
}

// NewStore returns a Store over rdb configured by c.
func NewStore(rdb Client, c Config) *Store {
	idle := c.SourceIdle
	if idle <= 0 {
		idle = window.DefaultSourceIdle
	}
	return &Store{rdb: rdb, keys: c.Keys, lateness: c.Lateness.Milliseconds(), grace: c.Grace.Milliseconds(),
		horizon: c.Horizon.Milliseconds(), idle: idle.Milliseconds(), forget: max(window.SourceForget, idle).Milliseconds(),
		copies: &progressCopies{}}
}

// Horizon returns the replay horizon in ms (0: never retire).
func (s *Store) Horizon() int64 { return s.horizon }

// Keys returns the store's key builder.
func (s *Store) Keys() Keys { return s.keys }

// Kind is the kind of a VALID record.
type Kind byte

const (
	// Submission is a valid event of type submitted.
	Submission Kind = 's'
	// Other is a valid event of another type: it only moves the watermark.
	Other Kind = 'o'
	// Heartbeat is a source progress heartbeat.
	Heartbeat Kind = 'h'
)

// Record is one VALID message as the apply script sees it.
type Record struct {
	// Seq is the VALID stream sequence.
	Seq     uint64
	Kind    Kind
	EventID string
	// Time is the event time (ms), or the source progress of a heartbeat.
	Time int64
	// RawSeq, when not 0, is the record's RAW sequence, and the record
	// comes from the RAW partition of the same number, whose records VALID
	// holds in RAW order: a record at or below the highest RAW sequence
	// the partition applied is one applied before (a frame the validator
	// published again after a crash, cut at other bounds) and is Replayed.
	RawSeq uint64
	// Store, AmountCents and Priced are a submission's breakdown key (its
	// partition_key; "" unknown) and amount (wire.FrameRecord).
	Store       string
	AmountCents int64
	Priced      bool
	// Source is the id of the source that wrote the record to RAW,
	// Received the broker time (ms) of its RAW message (0: unknown), and
	// Leave marks the heartbeat with which its source leaves
	// (docs/spec.md §3.1).
	Source   string
	Received int64
	Leave    bool
}

// Code is the outcome of one record.
type Code string

const (
	Counted    Code = "counted"
	Correction Code = "correction"
	Late       Code = "late"
	Duplicate  Code = "duplicate"
	Retired    Code = "retired"
	Ignored    Code = "other"
	Progress   Code = "heartbeat"
	// Replayed: the checkpoint says the record was applied before; nothing
	// changed. LateAgain: replayed, and it had been routed late.
	Replayed  Code = "replayed"
	LateAgain Code = "replayed_late"
)

// Decision is the outcome of one record of a batch.
type Decision struct {
	Code Code
	// WindowID of a submission.
	WindowID string
	// Version is the partial's version after the record (counted, late).
	Version int64
	// Watermark the record was judged against (late, replayed_late).
	Watermark int64
}

// Result is what one Apply did.
type Result struct {
	Decisions []Decision
	// Seq and Watermark are the checkpoint after the batch.
	Seq       uint64
	Watermark int64
	// Added is the number of ledger entries the batch added.
	Added int64
	// Changed lists the windows whose partial changed, or may have changed
	// in an earlier application of a replayed record.
	Changed []string
}

// Apply applies recs (in VALID order) to partition p in one atomic script
// call. Applying the same records again changes nothing and returns
// Replayed decisions. Records of one VALID message (a frame) share its
// Seq: a record is new if its Seq is above the checkpoint the call found,
// so a frame is applied whole or not at all. Safe for concurrent use on different partitions; one
// partition must have one writer.
//
// expect is the checkpoint sequence the caller last saw (0 when unknown):
// if Redis holds an older checkpoint it lost writes, and Apply fails with
// ErrRegressed instead of applying on top of the loss. published is the
// last sequence whose outputs (LATE, CHANGES) the caller has published:
// it is kept in the checkpoint (Checkpoint.Published), so a restarted
// writer knows where to resume to publish lost outputs again. On a fenced
// store (Fence) a later owner's epoch fails it with ErrFenced, nothing
// applied.
func (s *Store) Apply(ctx context.Context, p int, recs []Record, expect, published uint64) (*Result, error) {
	widx := map[string]int{}
	var starts []int64
	var wids []string
	recWin := make([]int, len(recs))
	for i, r := range recs {
		if r.Kind == Heartbeat {
			continue
		}
		b := window.Of(r.Time)
		j, ok := widx[b.ID]
		if !ok {
			starts = append(starts, b.Start)
			wids = append(wids, b.ID)
			j = len(wids)
			widx[b.ID] = j
		}
		recWin[i] = j
	}
	// Ledger shards the batch touches, numbered in order of first use.
	type shardOf struct{ win, shard int }
	sidx := map[shardOf]int{}
	var shardKeys []string
	hids := make([]string, len(recs))
	recShard := make([]int, len(recs))
	for i, r := range recs {
		if r.Kind != Submission {
			continue
		}
		hids[i] = IDKey(r.EventID)
		sk := shardOf{recWin[i], LedgerShardOf(hids[i])}
		k, ok := sidx[sk]
		if !ok {
			shardKeys = append(shardKeys, s.keys.LedgerShard(p, wids[sk.win-1], sk.shard))
			k = len(shardKeys)
			sidx[sk] = k
		}
		recShard[i] = k
	}
	keys := make([]string, 0, 2+2*len(wids)+len(shardKeys))
	keys = append(keys, s.keys.Checkpoint(p), s.keys.Index(p))
	for _, id := range wids {
		keys = append(keys, s.keys.Partial(p, id))
	}
	for _, id := range wids {
		keys = append(keys, s.keys.Explain(p, id))
	}
	keys = append(keys, shardKeys...)
	keys = append(keys, s.keys.Sources(p))
	var sources []string
	recSource := make([]int, len(recs))
	for i, r := range recs {
		j := slices.Index(sources, r.Source)
		if j < 0 {
			j = len(sources)
			sources = append(sources, r.Source)
		}
		recSource[i] = j + 1
	}
	args := make([]any, 0, 11+2*len(wids)+len(sources)+4*len(recs))
	args = append(args, s.lateness, s.grace, s.horizon, len(wids))
	for _, st := range starts {
		args = append(args, st)
	}
	for _, id := range wids {
		args = append(args, id)
	}
	args = append(args, expect, published, s.epoch(p), s.idle, s.forget, len(sources))
	for _, id := range sources {
		args = append(args, id)
	}
	args = append(args, len(recs))
	var buf []byte
	for i, r := range recs {
		var h1, h2 uint32
		eventID := ""
		if r.Kind == Submission {
			h1, h2 = digest.Halves(r.EventID)
			eventID = r.EventID
		}
		kind := byte(r.Kind)
		if r.Kind == Heartbeat && r.Leave {
			kind = 'H'
		}
		// The numbers and the kind go as one argument (apply.lua's
		// record line): a call carries 4 arguments a record, not 14.
		buf = strconv.AppendUint(buf[:0], r.Seq, 10)
		buf = append(buf, ',', kind, ',')
		buf = strconv.AppendInt(buf, int64(recWin[i]), 10)
		buf = append(buf, ',')
		buf = strconv.AppendInt(buf, int64(recShard[i]), 10)
		buf = append(buf, ',')
		buf = strconv.AppendInt(buf, r.Time, 10)
		buf = append(buf, ',')
		buf = strconv.AppendUint(buf, uint64(h1), 10)
		buf = append(buf, ',')
		buf = strconv.AppendUint(buf, uint64(h2), 10)
		buf = append(buf, ',')
		buf = strconv.AppendUint(buf, r.RawSeq, 10)
		buf = append(buf, ',')
		if r.Priced {
			buf = strconv.AppendInt(buf, r.AmountCents, 10)
		}
		buf = append(buf, ',')
		buf = strconv.AppendInt(buf, int64(recSource[i]), 10)
		buf = append(buf, ',')
		buf = strconv.AppendInt(buf, r.Received, 10)
		args = append(args, string(buf), hids[i], r.Store, eventID)
	}
	raw, err := applyScript.Run(ctx, s.rdb, keys, args...).Slice()
	if err != nil {
		if redis.HasErrorPrefix(err, "REGRESSED") {
			return nil, fmt.Errorf("ledger: apply partition %d: %w: %v", p, ErrRegressed, err)
		}
		return nil, fmt.Errorf("ledger: apply partition %d: %w", p, fenced(err))
	}
	if len(raw) != 3+len(recs) {
		return nil, fmt.Errorf("ledger: apply partition %d: %d replies for %d records", p, len(raw), len(recs))
	}
	res := &Result{Decisions: make([]Decision, len(recs))}
	seq, err1 := strconv.ParseUint(str(raw[0]), 10, 64)
	wm, err2 := strconv.ParseInt(str(raw[1]), 10, 64)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("ledger: apply partition %d: bad checkpoint reply %v %v", p, raw[0], raw[1])
	}
	res.Seq, res.Watermark = seq, wm
	res.Added, _ = raw[2].(int64)
	changed := map[string]bool{}
	for i := range recs {
		d, err := parseDecision(str(raw[3+i]))
		if err != nil {
			return nil, fmt.Errorf("ledger: apply partition %d: %w", p, err)
		}
		if recs[i].Kind != Heartbeat {
			d.WindowID = wids[recWin[i]-1]
		}
		if recs[i].Kind == Submission {
			switch d.Code {
			// A replayed record may belong to a batch whose change notice
			// was lost in a crash: report its window as possibly changed.
			case Counted, Correction, Late, Replayed, LateAgain:
				if !changed[d.WindowID] {
					changed[d.WindowID] = true
					res.Changed = append(res.Changed, d.WindowID)
				}
			}
		}
		res.Decisions[i] = d
	}
	return res, nil
}

func parseDecision(s string) (Decision, error) {
	parts := strings.Split(s, ":")
	num := func(i int) int64 {
		if i >= len(parts) {
			return 0
		}
		v, _ := strconv.ParseInt(parts[i], 10, 64)
		return v
	}
	switch parts[0] {
	case "c":
		return Decision{Code: Counted, Version: num(1)}, nil
	case "k":
		return Decision{Code: Correction, Version: num(1)}, nil
	case "l":
		return Decision{Code: Late, Version: num(1), Watermark: num(2)}, nil
	case "d":
		return Decision{Code: Duplicate}, nil
	case "x":
		return Decision{Code: Retired, Watermark: num(1)}, nil
	case "o":
		return Decision{Code: Ignored}, nil
	case "h":
		return Decision{Code: Progress}, nil
	case "R":
		return Decision{Code: Replayed}, nil
	case "RL":
		return Decision{Code: LateAgain, Watermark: num(1)}, nil
	}
	return Decision{}, fmt.Errorf("unknown decision %q", s)
}

// markScript raises the published mark (ARGV[1]) of the checkpoint
// KEYS[1], fenced by the writer's epoch ARGV[2] (apply.lua's fence).
var markScript = fencedScript(`
local refused = fence(KEYS[1], 'fence', ARGV[2])
if refused then return refused end
local cur = tonumber(redis.call('HGET', KEYS[1], 'pub')) or 0
local seq = tonumber(redis.call('HGET', KEYS[1], 'seq')) or 0
local want = tonumber(ARGV[1])
if want > seq then want = seq end
if want > cur then redis.call('HSET', KEYS[1], 'pub', string.format('%d', want)) end
return 1`)

// MarkPublished records that the outputs of partition p's records up to
// seq are published (the mark only moves forward and never past the
// checkpoint). Safe to call twice. Fenced like Apply.
func (s *Store) MarkPublished(ctx context.Context, p int, seq uint64) error {
	if err := markScript.Run(ctx, s.rdb, []string{s.keys.Checkpoint(p)}, seq, s.epoch(p)).Err(); err != nil {
		return fmt.Errorf("ledger: mark published %d: %w", p, fenced(err))
	}
	return nil
}

// Checkpoint is a partition's checkpoint.
type Checkpoint struct {
	Seq       uint64
	Watermark int64
	// Retired: state of windows ending at or before it is gone.
	Retired int64
	// Entries is the number of ledger entries held.
	Entries int64
	// Published is the last sequence whose outputs were published (at or
	// below Seq): records after it may have lost their LATE and CHANGES
	// messages in a crash, and are re-driven on restart.
	Published uint64
}

// Checkpoint reads partition p's checkpoint (zero for a new partition).
func (s *Store) Checkpoint(ctx context.Context, p int) (Checkpoint, error) {
	v, err := s.rdb.HMGet(ctx, s.keys.Checkpoint(p), checkpointFields...).Result()
	if err != nil {
		return Checkpoint{}, fmt.Errorf("ledger: checkpoint %d: %w", p, err)
	}
	return checkpointOf(v), nil
}

// Checkpoints reads the checkpoints of partitions ps in one round trip
// (one per node on Redis Cluster); out[i] is partition ps[i]'s.
func (s *Store) Checkpoints(ctx context.Context, ps []int) ([]Checkpoint, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, len(ps))
	for i, p := range ps {
		cmds[i] = pipe.HMGet(ctx, s.keys.Checkpoint(p), checkpointFields...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("ledger: checkpoints %v: %w", ps, err)
	}
	out := make([]Checkpoint, len(ps))
	for i, c := range cmds {
		out[i] = checkpointOf(c.Val())
	}
	return out, nil
}

// checkpointFields are the checkpoint hash's fields checkpointOf reads.
var checkpointFields = []string{"seq", "wm", "retired", "entries", "pub"}

// checkpointOf is a checkpoint from the values of checkpointFields; an
// absent field reads as zero.
func checkpointOf(v []any) Checkpoint {
	var c Checkpoint
	c.Seq, _ = strconv.ParseUint(str(v[0]), 10, 64)
	c.Watermark, _ = strconv.ParseInt(str(v[1]), 10, 64)
	c.Retired, _ = strconv.ParseInt(str(v[2]), 10, 64)
	c.Entries, _ = strconv.ParseInt(str(v[3]), 10, 64)
	c.Published, _ = strconv.ParseUint(str(v[4]), 10, 64)
	return c
}

// str is a Redis reply value as text.
func str(v any) string {
	switch v := v.(type) {
	case nil:
		return ""
	case string:
		return v
	case int64:
		return strconv.FormatInt(v, 10)
	}
	return fmt.Sprint(v)
}

// Windows lists the ids of the windows partition p holds, oldest first.
func (s *Store) Windows(ctx context.Context, p int) ([]string, error) {
	ids, err := s.rdb.ZRange(ctx, s.keys.Index(p), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("ledger: windows %d: %w", p, err)
	}
	return ids, nil
}

// PartitionView is one partition's watermark and partials, read atomically.
type PartitionView struct {
	Partition int
	Watermark int64
	Seq       uint64
	Retired   int64
	// Partials by window id; a window the partition never touched is absent.
	Partials map[string]wire.Partial
}

// Read reads partition p's watermark and its partials of the windows ids
// in one atomic step.
func (s *Store) Read(ctx context.Context, p int, ids []string) (*PartitionView, error) {
	views, err := s.ReadAll(ctx, []int{p}, ids)
	if err != nil {
		return nil, err
	}
	return views[0], nil
}

// ReadAll is Read for each partition of ps, sent as one pipeline: each
// partition's read stays atomic (one script call), and the round trips of
// the partitions overlap. Views are returned in the order of ps.
func (s *Store) ReadAll(ctx context.Context, ps []int, ids []string) ([]*PartitionView, error) {
	keys := make([][]string, len(ps))
	for i, p := range ps {
		k := make([]string, 0, 1+len(ids))
		k = append(k, s.keys.Checkpoint(p))
		for _, id := range ids {
			k = append(k, s.keys.Partial(p, id))
		}
		keys[i] = k
	}
	run := func(full bool) ([]*redis.Cmd, error) {
		pipe := s.rdb.Pipeline()
		cmds := make([]*redis.Cmd, len(ps))
		for i := range ps {
			if full {
				cmds[i] = readScript.Eval(ctx, pipe, keys[i])
			} else {
				cmds[i] = readScript.EvalSha(ctx, pipe, keys[i])
			}
		}
		_, err := pipe.Exec(ctx)
		return cmds, err
	}
	cmds, err := run(false)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		// First use on this server, or after SCRIPT FLUSH: send the source
		// (EVAL caches it; the publisher's user may not SCRIPT LOAD).
		cmds, err = run(true)
	}
	if err != nil {
		return nil, fmt.Errorf("ledger: read partitions: %w", err)
	}
	views := make([]*PartitionView, len(ps))
	for i, p := range ps {
		raw, err := cmds[i].Slice()
		if err != nil {
			return nil, fmt.Errorf("ledger: read partition %d: %w", p, err)
		}
		if views[i], err = parseView(p, ids, raw); err != nil {
			return nil, err
		}
	}
	return views, nil
}

func parseView(p int, ids []string, raw []any) (*PartitionView, error) {
	if len(raw) != 3+len(ids) {
		return nil, fmt.Errorf("ledger: read partition %d: %d replies for %d windows", p, len(raw), len(ids))
	}
	v := &PartitionView{Partition: p, Partials: make(map[string]wire.Partial, len(ids))}
	v.Watermark, _ = strconv.ParseInt(str(raw[0]), 10, 64)
	v.Seq, _ = strconv.ParseUint(str(raw[1]), 10, 64)
	v.Retired, _ = strconv.ParseInt(str(raw[2]), 10, 64)
	for i, id := range ids {
		f, _ := raw[3+i].([]any)
		if part, ok := parsePartial(p, f); ok {
			part.Watermark = v.Watermark
			v.Partials[id] = part
		}
	}
	return v, nil
}

// parsePartial reads a partial hash's fields (HGETALL: field, value, ...)
// as apply.lua writes them; ok is false for a hash that holds none (no
// version: the window has nothing in this partition).
func parsePartial(p int, f []any) (wire.Partial, bool) {
	part := wire.Partial{Partition: p}
	var hi, lo int64
	hasVer := false
	for i := 0; i+1 < len(f); i += 2 {
		k, val := str(f[i]), str(f[i+1])
		x, _ := strconv.ParseInt(val, 10, 64)
		switch k {
		case "n":
			part.Count = x
		case "corr":
			part.Corrections = x
		case "late":
			part.LateDropped = x
		case "ver":
			part.Version, hasVer = x, true
		case "otv":
			part.OnTimeVersion = x
		case "d1":
			hi = x
		case "d2":
			lo = x
		default:
			kind, store, ok := strings.Cut(k, ":")
			if !ok {
				continue
			}
			if part.Stores == nil {
				part.Stores = map[string]wire.StoreTotal{}
			}
			st := part.Stores[store]
			st.Store = store
			switch kind {
			case "c":
				st.Count = x
			case "a":
				st.AmountCents = x
			case "u":
				st.Unpriced = x
			default:
				continue
			}
			part.Stores[store] = st
		}
	}
	part.Digest = digest.Digest{Hi: uint32(hi), Lo: uint32(lo)}
	return part, hasVer
}

// SourceState is what partition p knows of one source (docs/spec.md §3.1),
// in the partition's broker time (ms).
type SourceState struct {
	ID string
	// Progress is h(s,p): the largest event time the source brought to
	// the partition, raised by its heartbeats.
	Progress int64
	// Grew is the broker clock when Progress last grew, Last the broker
	// time of the source's last message in the partition.
	Grew, Last int64
	Busy       bool
	// Live: the source holds the partition's watermark (its progress grew
	// less than --source-idle ago on the partition's clock).
	Live bool
}

// sourcesOf reads partition p's sources hash all at broker clock clock,
// ordered by id.
func (s *Store) sourcesOf(p int, all map[string]string, clock int64) ([]SourceState, error) {
	out := make([]SourceState, 0, len(all))
	for id, v := range all {
		f := strings.Split(v, ",")
		if len(f) != 4 {
			return nil, fmt.Errorf("ledger: sources %d: source %q holds %q", p, id, v)
		}
		st := SourceState{ID: id, Busy: f[2] == "1"}
		st.Progress, _ = strconv.ParseInt(f[0], 10, 64)
		st.Grew, _ = strconv.ParseInt(f[1], 10, 64)
		st.Last, _ = strconv.ParseInt(f[3], 10, 64)
		st.Live = clock-st.Grew < s.idle
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b SourceState) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// PartitionState is what a health report reads of one partition: its
// checkpoint, the number of windows it holds and its sources (as Sources).
type PartitionState struct {
	Checkpoint Checkpoint
	Windows    int64
	Sources    []SourceState
}

// States reads the PartitionState of partitions 0..n-1 in one round trip
// (one per node on Redis Cluster); it is not one snapshot: each
// partition's parts may be read between two of its writes.
func (s *Store) States(ctx context.Context, n int) ([]PartitionState, error) {
	pipe := s.rdb.Pipeline()
	cks := make([]*redis.SliceCmd, n)
	wins := make([]*redis.IntCmd, n)
	srcs := make([]*redis.MapStringStringCmd, n)
	fields := append(slices.Clone(checkpointFields), "clk")
	for p := range n {
		cks[p] = pipe.HMGet(ctx, s.keys.Checkpoint(p), fields...)
		wins[p] = pipe.ZCard(ctx, s.keys.Index(p))
		srcs[p] = pipe.HGetAll(ctx, s.keys.Sources(p))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("ledger: partition states: %w", err)
	}
	out := make([]PartitionState, n)
	for p := range n {
		v := cks[p].Val()
		if len(v) != len(fields) {
			return nil, fmt.Errorf("ledger: partition %d checkpoint: %d values for %d fields", p, len(v), len(fields))
		}
		clock, _ := strconv.ParseInt(str(v[len(fields)-1]), 10, 64)
		sources, err := s.sourcesOf(p, srcs[p].Val(), clock)
		if err != nil {
			return nil, err
		}
		out[p] = PartitionState{Checkpoint: checkpointOf(v), Windows: wins[p].Val(), Sources: sources}
	}
	return out, nil
}
