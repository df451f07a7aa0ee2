package ledger

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed progress.lua
	progressSrc    string
	progressScript = fencedScript(progressSrc)
)

// Claimed is the claim progress of the validator partitions: for each
// RAW partition, the highest RAW sequence through which it has written
// the claims of every record it holds (absent: none yet). The validator's
// publication barrier reads it (pkg/validator, barrier.go).
type Claimed map[int]uint64

// Through is the progress of partition p (0 when it has none).
func (pr Claimed) Through(p int) uint64 { return pr[p] }

// ErrClaimsRegressed means Redis holds less claim progress for a partition
// than its writer last saw there: Redis lost acknowledged writes (a
// failover to a replica behind its primary, a restore, a FLUSHALL), and
// the claims written since are lost with it. The writer must claim the
// lost RAW range again before it judges or marks anything.
var ErrClaimsRegressed = errors.New("ledger: claim progress regressed")

// regressed wraps a REGRESSED reply of progress.lua as ErrClaimsRegressed.
func regressed(err error) error {
	if redis.HasErrorPrefix(err, "REGRESSED") {
		return fmt.Errorf("%w: %v", ErrClaimsRegressed, err)
	}
	return err
}

// takeoverField is the field of the claim progress hash, on a single
// Redis, that claims.lua raises whenever a copy takes a claim over.
const takeoverField = "takeovers"

// parseProgress reads progress.lua's reply.
func parseProgress(v any) (Claimed, error) {
	pr, _, err := parseProgressCount(v)
	return pr, err
}

// parseProgressCount reads progress.lua's reply and the takeover count in
// it.
func parseProgressCount(v any) (Claimed, uint64, error) {
	flat, ok := v.([]any)
	if !ok || len(flat)%2 != 0 {
		return nil, 0, fmt.Errorf("bad progress reply %v", v)
	}
	m := make(map[string]string, len(flat)/2)
	for i := 0; i < len(flat); i += 2 {
		m[fmt.Sprint(flat[i])] = fmt.Sprint(flat[i+1])
	}
	return progressFields(m)
}

// progressOf reads the progress hash from an HGETALL.
func progressOf(cmd *redis.MapStringStringCmd) (Claimed, error) {
	m, err := cmd.Result()
	if err != nil {
		return nil, err
	}
	pr, _, err := progressFields(m)
	return pr, err
}

// progressFields reads the fields of the progress hash: a partition's
// progress per field, and the takeover count.
func progressFields(m map[string]string) (Claimed, uint64, error) {
	pr := make(Claimed, len(m))
	var takeovers uint64
	for k, v := range m {
		n, err2 := strconv.ParseUint(v, 10, 64)
		if k == takeoverField && err2 == nil {
			takeovers = n
			continue
		}
		p, err1 := strconv.Atoi(k)
		if err1 != nil || err2 != nil {
			return nil, 0, fmt.Errorf("bad progress entry %v=%v", k, v)
		}
		pr[p] = n
	}
	return pr, takeovers, nil
}

// progressArgs are progress.lua's arguments: mark partition p through seq
// if its progress is at least floor, fenced by the store's epoch of p, or
// only read when p < 0.
func (s *Store) progressArgs(p int, seq, floor uint64) []any {
	if p < 0 {
		return []any{"", 0, 0}
	}
	args := []any{strconv.Itoa(p), strconv.FormatUint(seq, 10), strconv.FormatUint(floor, 10)}
	if e := s.epoch(p); e > 0 {
		args = append(args, strconv.FormatUint(e, 10))
	}
	return args
}

// progressKeysOf are progress.lua's keys for the progress copy key: the
// fence hash beside it too when the call marks a fenced partition p.
func (s *Store) progressKeysOf(key string, p int) []string {
	if p < 0 || s.epoch(p) == 0 {
		return []string{key}
	}
	return []string{key, claimFenceOf(key)}
}

// runProgress runs progress.lua on every key the progress is kept under
// (progressKeys) and returns the least progress of each partition among
// them. A copy that holds less for p than floor fails the call with
// ErrClaimsRegressed; the others are marked all the same.
func (s *Store) runProgress(ctx context.Context, p int, seq, floor uint64) (Claimed, error) {
	var pr Claimed
	err := s.withScripts(ctx, func() error {
		keys, err := s.progressKeys(ctx)
		if err != nil {
			return err
		}
		args := s.progressArgs(p, seq, floor)
		if len(keys) == 1 {
			v, err := progressScript.EvalSha(ctx, s.rdb, s.progressKeysOf(keys[0], p), args...).Result()
			if err != nil {
				return fenced(regressed(err))
			}
			pr, err = parseProgress(v)
			return err
		}
		pipe := s.rdb.Pipeline()
		cmds := make([]*redis.Cmd, len(keys))
		for i, k := range keys {
			cmds[i] = progressScript.EvalSha(ctx, pipe, s.progressKeysOf(k, p), args...)
		}
		pipe.Exec(ctx) // each command's error is read below
		pr, err = mergeProgress(cmds)
		return err
	})
	return pr, err
}

// mergeProgress reads progress.lua's replies from every copy of the
// progress: a partition's progress is the least among them (absent from
// one: none). A NOSCRIPT reply wins, so the calls are made again; then a
// FENCED one, as ErrFenced; then any other error; then a REGRESSED one, as
// ErrClaimsRegressed.
func mergeProgress(cmds []*redis.Cmd) (Claimed, error) {
	var lost error
	copies := make([]Claimed, 0, len(cmds))
	for _, c := range cmds {
		if err := c.Err(); redis.HasErrorPrefix(err, "NOSCRIPT") {
			return nil, err
		}
	}
	for _, c := range cmds {
		if err := c.Err(); redis.HasErrorPrefix(err, "FENCED") {
			return nil, fenced(err)
		}
	}
	for _, c := range cmds {
		v, err := c.Result()
		if redis.HasErrorPrefix(err, "REGRESSED") {
			lost = regressed(err)
			continue
		}
		if err != nil {
			return nil, err
		}
		pr, err := parseProgress(v)
		if err != nil {
			return nil, err
		}
		copies = append(copies, pr)
	}
	if lost != nil {
		return nil, lost
	}
	return leastOf(copies), nil
}

// leastOf is each partition's least progress among copies (0, and so
// absent, when one copy does not have it).
func leastOf(copies []Claimed) Claimed {
	if len(copies) == 1 {
		return copies[0]
	}
	out := Claimed{}
	if len(copies) == 0 {
		return out
	}
	for p, v := range copies[0] {
		for _, c := range copies[1:] {
			v = min(v, c[p])
		}
		if v > 0 {
			out[p] = v
		}
	}
	return out
}

// progressCopies is what the store knows of a cluster's slot map: the
// keys the claim progress is kept under and each slot's master, kept for
// a while; and whether the servers refuse claims.lua across slots.
type progressCopies struct {
	mu      sync.Mutex
	keys    []string
	owner   []string // by hash slot: its master's address
	at      time.Time
	perSlot atomic.Bool
}

// stale makes the next use read the slot map again.
func (c *progressCopies) stale() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = time.Time{}
}

// copiesFresh is how long a cluster's slot map is used before it is read
// again.
const copiesFresh = 5 * time.Second

// progressKeys are the keys the claim progress is kept under: one on a
// single Redis, where every claim is; one on each master of a cluster,
// because claims are spread over every slot and a master that loses writes
// (a replica promoted behind it) must lose progress with them. The copy on
// a master is ClaimProgressCopy(k) for the least k whose slot it holds.
func (s *Store) progressKeys(ctx context.Context) ([]string, error) {
	if _, cluster := s.rdb.(*redis.ClusterClient); !cluster {
		return []string{s.keys.ClaimProgress()}, nil
	}
	keys, _, err := s.slotMap(ctx)
	return keys, err
}

// slotOwners is each hash slot's master on a cluster.
func (s *Store) slotOwners(ctx context.Context) ([]string, error) {
	_, owner, err := s.slotMap(ctx)
	return owner, err
}

// slotMap reads the cluster's slot map when the one held is older than
// copiesFresh, and returns the progress keys and the slots' masters.
func (s *Store) slotMap(ctx context.Context) ([]string, []string, error) {
	cc := s.rdb.(*redis.ClusterClient)
	s.copies.mu.Lock()
	defer s.copies.mu.Unlock()
	if s.copies.keys != nil && time.Since(s.copies.at) < copiesFresh {
		return s.copies.keys, s.copies.owner, nil
	}
	//lint:ignore SA1019 CLUSTER SLOTS answers on Redis 6 too; CLUSTER SHARDS needs 7
	slots, err := cc.ClusterSlots(ctx).Result()
	if err != nil {
		return nil, nil, fmt.Errorf("cluster slots: %w", err)
	}
	owner := make([]string, 16384)
	masters := map[string]bool{}
	for _, r := range slots {
		if len(r.Nodes) == 0 {
			continue
		}
		for sl := max(r.Start, 0); sl <= min(r.End, 16383); sl++ {
			owner[sl] = r.Nodes[0].Addr
		}
		masters[r.Nodes[0].Addr] = true
	}
	keys := make([]string, 0, len(masters))
	for k := 0; len(masters) > 0; k++ {
		if k == 1<<24 {
			return nil, nil, fmt.Errorf("no hash tag found for a slot of masters %v", masters)
		}
		key := s.keys.ClaimProgressCopy(k)
		if m := owner[keySlot(key)]; masters[m] {
			delete(masters, m)
			keys = append(keys, key)
		}
	}
	s.copies.keys, s.copies.owner, s.copies.at = keys, owner, time.Now()
	return keys, owner, nil
}

// ClaimProgress returns every partition's claim progress.
func (s *Store) ClaimProgress(ctx context.Context) (Claimed, error) {
	pr, err := s.runProgress(ctx, -1, 0, 0)
	if err != nil {
		return nil, fmt.Errorf("ledger: claim progress: %w", err)
	}
	return pr, nil
}

// MarkClaimed records that partition p has written the claims of every
// record it holds up to RAW sequence seq, and returns every partition's
// progress after it. floor is the progress the caller last saw for p (0:
// none): finding less, it writes nothing and fails with
// ErrClaimsRegressed. Progress never goes back, so marking again, or an
// older sequence, is a no-op. One partition must have one writer (the
// validator instance that owns it); on a fenced store (Fence) a later
// owner's epoch fails the mark with ErrFenced, nothing marked.
func (s *Store) MarkClaimed(ctx context.Context, p int, seq, floor uint64) (Claimed, error) {
	pr, err := s.runProgress(ctx, p, seq, floor)
	if err != nil {
		return nil, fmt.Errorf("ledger: mark partition %d claimed: %w", p, err)
	}
	return pr, nil
}

// ClaimThrough is Claims for a batch of partition p whose records all have
// RAW sequences up to through, followed by MarkClaimed(p, through). It
// also returns the progress of every partition as it was read before the
// claims were written: a partition q whose progress there is at least s
// had claimed each of its copies below s before this batch's claims, so
// the returned conflicts already account for them. (Claimed read after
// the claims would not tell that: q's claims may have landed in between.)
//
// On a single Redis the three steps are one MULTI/EXEC transaction;
// a cluster pipeline sends to each node in parallel, so there they are
// three round trips, one after the other. floor is as for MarkClaimed:
// progress below it fails the call with ErrClaimsRegressed, and the
// verdicts are then not to be used. On a fenced store (Fence) a later
// owner's epoch fails the mark with ErrFenced; the claims may have been
// written, which is harmless (fence.go). Safe to call twice with the same
// arguments.
func (s *Store) ClaimThrough(ctx context.Context, p int, claims []Claim, through, floor uint64) ([]bool, Claimed, error) {
	r, err := s.ClaimRound(ctx, p, claims, through, floor)
	return r.Conflicts, r.Before, err
}

// Round is what ClaimRound wrote and read.
type Round struct {
	// Conflicts says, for each claim, whether its id is held by a copy
	// with other content.
	Conflicts []bool
	// Before is every partition's progress read before the claims.
	Before Claimed
	// Takeovers is the takeover count right after the claims, when
	// Counted (a single Redis; a cluster counts none): ClaimsUnmoved
	// compares a later read with it.
	Takeovers uint64
	Counted   bool
}

// ClaimRound is ClaimThrough, and returns the takeover count after the
// claims as well.
func (s *Store) ClaimRound(ctx context.Context, p int, claims []Claim, through, floor uint64) (Round, error) {
	var (
		b *claimBatch
		r Round
	)
	key := []string{s.keys.ClaimProgress()}
	err := s.withScripts(ctx, func() error {
		if _, cluster := s.rdb.(*redis.ClusterClient); cluster {
			var err error
			if r.Before, err = s.runProgress(ctx, -1, 0, 0); err != nil {
				return err
			}
			if len(claims) > 0 {
				if b, err = s.execClaims(ctx, claims); err != nil {
					return err
				}
			}
			_, err = s.runProgress(ctx, p, through, floor)
			return err
		}
		// One transaction: the mark never lands without the claims
		// before it (a Redis that frees memory between them would
		// otherwise take the mark after refusing the claims with OOM).
		pipe := s.rdb.TxPipeline()
		read := progressScript.EvalSha(ctx, pipe, key, s.progressArgs(-1, 0, 0)...)
		b = s.queueClaims(ctx, pipe, claims, splitNone, nil)
		mark := progressScript.EvalSha(ctx, pipe, s.progressKeysOf(key[0], p), s.progressArgs(p, through, floor)...)
		if cmds, err := pipe.Exec(ctx); err != nil {
			return fenced(regressed(queuedErr(cmds, err)))
		}
		var err error
		if r.Before, err = parseProgress(read.Val()); err != nil {
			return err
		}
		_, r.Takeovers, err = parseProgressCount(mark.Val())
		r.Counted = err == nil
		return err
	})
	if err != nil {
		return Round{}, fmt.Errorf("ledger: claims of partition %d: %w", p, err)
	}
	if b == nil {
		r.Conflicts = []bool{}
		return r, nil
	}
	if r.Conflicts, err = b.conflicts(); err != nil {
		return Round{}, fmt.Errorf("ledger: claims of partition %d: %w", p, err)
	}
	return r, nil
}

// ClaimsUnmoved reads the claim progress and tells whether no claim was
// taken over since a ClaimRound that counted takeovers returned
// takeovers: then every verdict of that round still stands, and a caller
// that needs every lower copy claimed checks the progress returned (which
// also catches writes Redis lost: the count is kept beside the progress,
// and lost with it). On a cluster it always says false.
func (s *Store) ClaimsUnmoved(ctx context.Context, takeovers uint64) (Claimed, bool, error) {
	if _, cluster := s.rdb.(*redis.ClusterClient); cluster {
		pr, err := s.ClaimProgress(ctx)
		return pr, false, err
	}
	m, err := s.rdb.HGetAll(ctx, s.keys.ClaimProgress()).Result()
	if err != nil {
		return nil, false, fmt.Errorf("ledger: claim progress: %w", err)
	}
	pr, n, err := progressFields(m)
	if err != nil {
		return nil, false, fmt.Errorf("ledger: claim progress: %w", err)
	}
	return pr, n == takeovers, nil
}

// queuedErr is, for a transaction Redis discarded (EXECABORT), the error
// that made it discard it (OOM, say, when a command was refused as it was
// queued); otherwise err.
func queuedErr(cmds []redis.Cmder, err error) error {
	if !redis.HasErrorPrefix(err, "EXECABORT") {
		return err
	}
	for _, c := range cmds {
		if e := c.Err(); e != nil && !redis.HasErrorPrefix(e, "EXECABORT") {
			return e
		}
	}
	return err
}
