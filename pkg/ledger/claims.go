package ledger

import (
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/receiptflow/receiptflow/pkg/window"
)

var (
	//go:embed claims.lua
	claimsSrc    string
	claimsScript = redis.NewScript(claimsSrc)
	// nodeClaimsScript is claims.lua for the claims of one cluster master:
	// its keys are in many slots (Redis ≥ 7.0).
	nodeClaimsScript = redis.NewScript("#!lua flags=allow-cross-slot-keys\n" + claimsSrc)
)

const (
	dayMs = 86400 * 1000
	// claimSlackMs is kept beyond the replay horizon on top of a window's
	// width, the grace and the lateness: the future skew an event time may
	// have over its ingest time, clock skew between the servers, and some
	// watermark lag.
	claimSlackMs = 3600 * 1000
	// foreverDay is the claim day of a store that never retires (horizon
	// 0): every claim is filed there and none expires.
	foreverDay = 0
)

// Claim asks whether eventID may pass with content fingerprint fp.
type Claim struct {
	EventID     string
	Fingerprint uint64
	// Seq is the RAW sequence of the copy. Between copies with different
	// content the lowest sequence holds the id (docs/spec.md §2). Zero means
	// unknown and ranks before every known sequence (as do claims written
	// before claims carried one).
	Seq uint64
	// Day is the record's ingest day (days since the epoch, UTC).
	Day int64
}

// ClaimDays is how many ingest days a claim is kept and looked up: a record
// is checked against the claims of its ingest day and the ClaimDays-1 days
// before, and older claims are retired. It covers the replay horizon
// (docs/spec.md §2: conflicts are detected for as long as the ledger keeps the
// id): an id stays in the ledger until its window (which ends at most an
// hour and the future skew after the record's ingest time) is final and
// the horizon has passed, so a claim is kept for the horizon, the grace, a
// window's width, the lateness and claimSlackMs, rounded up to whole days,
// plus the day the claim was made. Zero means forever: a store without a
// horizon keeps its ledger for ever, and its claims too.
func (s *Store) ClaimDays() int64 {
	if s.horizon <= 0 {
		return 0
	}
	keep := s.horizon + s.grace + window.WidthMs + s.lateness + claimSlackMs
	return (keep+dayMs-1)/dayMs + 1
}

// claimDay is the day a claim of ingest day d is filed under.
func (s *Store) claimDay(d int64) int64 {
	if s.ClaimDays() == 0 {
		return foreverDay
	}
	return d
}

// claimValue is the stored claim: the fingerprint's 8 bytes (big-endian),
// then the RAW sequence in decimal when it is known. Small and mostly fixed
// in size, so the buckets stay small listpack hashes.
func claimValue(c Claim) string {
	v := binary.BigEndian.AppendUint64(nil, c.Fingerprint)
	if c.Seq > 0 {
		v = strconv.AppendUint(v, c.Seq, 10)
	}
	return string(v)
}

// claimFingerprint is the fingerprint part of a stored claim.
func claimFingerprint(v string) string {
	if len(v) < 8 {
		return v
	}
	return v[:8]
}

// claimBatch is one call's claims queued on a pipeline.
type claimBatch struct {
	claims []Claim
	first  map[string]int
	calls  []*claimCall
}

// claimCall is one claims.lua call: the claims of the whole batch, or on
// a cluster those of one master (or of one hash slot).
type claimCall struct {
	keys   []string
	args   []any              // n, then four per claim (claims.lua)
	groups map[claimGroup]int // first key of each group, 1-based
	send   []int              // the claims sent, as indexes into claimBatch.claims
	cmd    *redis.Cmd
}

// claimGroup names the claims hashes a claim reads: its bucket and day.
type claimGroup struct {
	bucket int
	day    int64
}

// claimsPerCall bounds the claims of one claims.lua call, so one call
// holds Redis (a script runs alone) for a few milliseconds at most: a
// validator batch (500 records by default) is one call.
const claimsPerCall = 1000

// How a batch's claims are split into claims.lua calls.
type claimSplit int

const (
	splitNone claimSplit = iota // one call (a single Redis)
	splitNode                   // one per cluster master: its keys in many slots
	splitSlot                   // one per hash slot
)

// queueClaims queues the claims.lua calls of claims (the first claim of
// every id; later ones of the same id are judged against its result).
// owner maps a hash slot to its master for splitNode.
func (s *Store) queueClaims(ctx context.Context, pipe redis.Pipeliner, claims []Claim, split claimSplit, owner []string) *claimBatch {
	b := s.groupClaims(claims, split, owner)
	for _, c := range b.calls {
		if split == splitNode {
			// Redis Cluster checks that a call's declared keys share a
			// slot: declare the first, pass the others (all on the same
			// master) as arguments.
			// No takeover count on a cluster: the claims of one call
			// are on one master, the progress on every one.
			args := make([]any, 0, 3+len(c.keys)+len(c.args))
			args = append(args, c.args[0], len(c.keys)-1, 0)
			for _, k := range c.keys[1:] {
				args = append(args, k)
			}
			args = append(args, c.args[1:]...)
			c.cmd = nodeClaimsScript.EvalSha(ctx, pipe, c.keys[:1], args...)
			continue
		}
		t := 0
		keys := c.keys
		if split == splitNone {
			// A single Redis counts takeovers in the claim progress hash.
			keys = append(keys[:len(keys):len(keys)], s.keys.ClaimProgress())
			t = len(keys)
		}
		args := make([]any, 0, 3+len(c.args))
		args = append(args, c.args[0], 0, t)
		args = append(args, c.args[1:]...)
		c.cmd = claimsScript.EvalSha(ctx, pipe, keys, args...)
	}
	return b
}

// groupClaims builds the claims.lua calls of claims as split says (and
// another call every claimsPerCall claims).
func (s *Store) groupClaims(claims []Claim, split claimSplit, owner []string) *claimBatch {
	b := &claimBatch{claims: claims, first: make(map[string]int, len(claims))}
	n := s.ClaimDays()
	if n == 0 {
		n = 1
	}
	calls := map[string]*claimCall{}
	// Sized for the whole batch in one call (a single Redis): a call's
	// slices are then allocated once.
	size := min(len(claims), claimsPerCall)
	// The expiry argument of the last day seen, boxed once: a batch's
	// claims are nearly all of one ingest day.
	atDay, at := int64(-1), any(nil)
	for i, c := range claims {
		if _, ok := b.first[c.EventID]; ok {
			continue
		}
		b.first[c.EventID] = i
		hid := IDKey(c.EventID)
		g := claimGroup{bucket: idBucket(hid, ClaimBuckets), day: s.claimDay(c.Day)}
		var part string
		switch split {
		case splitSlot:
			part = strconv.Itoa(keySlot(s.keys.ClaimBucket(g.bucket, g.day)))
		case splitNode:
			part = owner[keySlot(s.keys.ClaimBucket(g.bucket, g.day))]
		}
		call := calls[part]
		if call == nil || len(call.send) == claimsPerCall {
			call = &claimCall{args: make([]any, 1, 1+4*size), groups: make(map[claimGroup]int, size),
				keys: make([]string, 0, int(n)*size), send: make([]int, 0, size)}
			call.args[0] = n
			calls[part] = call
			b.calls = append(b.calls, call)
		}
		k, ok := call.groups[g]
		if !ok {
			k = len(call.keys) + 1
			call.groups[g] = k
			for j := int64(0); j < n; j++ {
				call.keys = append(call.keys, s.keys.ClaimBucket(g.bucket, g.day-j))
			}
		}
		if g.day != atDay {
			atDay, at = g.day, s.claimsExpireAt(g.day)
		}
		call.args = append(call.args, k, hid, claimValue(c), at)
		call.send = append(call.send, i)
	}
	return b
}

// execClaims runs the claims.lua calls of claims and returns them
// executed. On a cluster it sends one call per master, and per hash slot
// on a server that refuses that (a Redis before 7.0) or while the slot
// map it holds is out of date (a resharding): a call that met a key it
// does not hold fails before writing it and is made again.
func (s *Store) execClaims(ctx context.Context, claims []Claim) (*claimBatch, error) {
	if _, cluster := s.rdb.(*redis.ClusterClient); !cluster {
		var b *claimBatch
		err := s.withScripts(ctx, func() error {
			pipe := s.rdb.Pipeline()
			b = s.queueClaims(ctx, pipe, claims, splitNone, nil)
			_, err := pipe.Exec(ctx)
			return err
		})
		return b, err
	}
	var (
		b    *claimBatch
		last error
	)
	for attempt := 0; attempt < 3; attempt++ {
		split, owner := splitSlot, []string(nil)
		if attempt < 2 && !s.copies.perSlot.Load() {
			var err error
			if owner, err = s.slotOwners(ctx); err != nil {
				return nil, err
			}
			split = splitNode
		}
		last = s.withScripts(ctx, func() error {
			pipe := s.rdb.Pipeline()
			b = s.queueClaims(ctx, pipe, claims, split, owner)
			_, err := pipe.Exec(ctx)
			return err
		})
		switch {
		case last == nil:
			return b, nil
		case split != splitNode:
			return nil, last
		case scriptFlagsRefused(last):
			s.copies.perSlot.Store(true)
		case strings.Contains(last.Error(), "non local key") || redis.HasErrorPrefix(last, "CROSSSLOT") ||
			redis.HasErrorPrefix(last, "TRYAGAIN") || redis.HasErrorPrefix(last, "MOVED") || redis.HasErrorPrefix(last, "ASK"):
			s.copies.stale()
		default:
			return nil, last
		}
	}
	return nil, last
}

// conflicts reads the executed batch: for each claim, whether the id is
// held by a copy with other content.
func (b *claimBatch) conflicts() ([]bool, error) {
	held := make(map[string]string, len(b.first))
	for _, c := range b.calls {
		vals, err := c.cmd.Slice()
		if err != nil {
			return nil, err
		}
		if len(vals) != len(c.send) {
			return nil, fmt.Errorf("claims.lua answered %d claims of %d", len(vals), len(c.send))
		}
		for k, i := range c.send {
			v, _ := vals[k].(string)
			held[b.claims[i].EventID] = v
		}
	}
	conflict := make([]bool, len(b.claims))
	for i, c := range b.claims {
		conflict[i] = claimFingerprint(held[c.EventID]) != claimFingerprint(claimValue(c))
	}
	return conflict, nil
}

// scriptFlagsRefused tells a server that does not know script flags
// (Redis before 7.0 reads "#!lua" as a syntax error).
func scriptFlagsRefused(err error) bool {
	return redis.HasErrorPrefix(err, "ERR Error compiling script") || strings.Contains(err.Error(), "shebang")
}

// withScripts runs f, and once more after loading this file's scripts when
// the server did not know one (first use on this server, or after SCRIPT
// FLUSH). f must be safe to run twice: every script here is.
func (s *Store) withScripts(ctx context.Context, f func() error) error {
	err := f()
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		for _, sc := range []*redis.Script{claimsScript, progressScript} {
			if err = sc.Load(ctx, s.rdb).Err(); err != nil {
				return err
			}
		}
		if _, cluster := s.rdb.(*redis.ClusterClient); cluster && !s.copies.perSlot.Load() {
			if err = nodeClaimsScript.Load(ctx, s.rdb).Err(); err != nil {
				if !scriptFlagsRefused(err) {
					return err
				}
				s.copies.perSlot.Store(true)
			}
		}
		err = f()
	}
	return err
}

// Claims records, for every event id the validator passes, the content
// fingerprint and RAW sequence of the copy that holds it: the copy with the
// lowest RAW sequence. A copy with another fingerprint than the holder's is
// a conflicting duplicate; a copy with a lower sequence than the holder
// takes the claim over, whatever order the claims arrive in
// (docs/spec.md §2). Claiming the same copy again is a no-op, so a validator that crashes
// and is redelivered the same records decides the same, and a copy with
// the holder's content is never a conflict (it is a retry). A claim is seen
// by records ingested up to ClaimDays days later.
//
// It returns, for each claim in order, true when the id is held, at the
// end of the call, by a copy with other content. Claims of the same id in
// one call are judged against the first of them, which must be the one
// with the lowest sequence (a partition's batch is in RAW order). Safe for
// concurrent use.
func (s *Store) Claims(ctx context.Context, claims []Claim) ([]bool, error) {
	if len(claims) == 0 {
		return []bool{}, nil
	}
	b, err := s.execClaims(ctx, claims)
	if err != nil {
		return nil, fmt.Errorf("ledger: claims: %w", err)
	}
	conflict, err := b.conflicts()
	if err != nil {
		return nil, fmt.Errorf("ledger: claims: %w", err)
	}
	return conflict, nil
}

// claimsExpireAt is when the claims of ingest day are no longer read: the
// end of the last day whose records look them up, plus an hour for clock
// skew between the servers that stamp RAW and Redis. Zero: never.
func (s *Store) claimsExpireAt(day int64) int64 {
	n := s.ClaimDays()
	if n == 0 {
		return 0
	}
	return (day+n)*86400 + 3600
}

// RetireClaims deletes the claims of ingest days up to and including
// day-ClaimDays (at most 8 days back from there, and none before the
// first call, which only sets the marker): called when the newest ingest
// day seen advances. A store that keeps claims for ever (ClaimDays 0)
// retires nothing. A marker key remembers the last day
// retired, so the ClaimBuckets deletions of a day are sent once, not on
// every validator start. Safe to call repeatedly and concurrently. (The
// buckets also expire by themselves on a real Redis: claims.lua sets their
// expiry; miniredis does not expire keys on its own clock.)
func (s *Store) RetireClaims(ctx context.Context, day int64) error {
	n := s.ClaimDays()
	if n == 0 {
		return nil
	}
	last := day - n
	marker := s.keys.ClaimsRetired()
	done, err := s.rdb.Get(ctx, marker).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("ledger: retire claims: %w", err)
	}
	if err == nil && done >= last {
		return nil
	}
	if err != nil {
		// No marker: a new deployment (or a Redis that lost its data, and
		// with it every claim). Nothing older can exist; start here.
		if err := s.rdb.Set(ctx, marker, last, 0).Err(); err != nil {
			return fmt.Errorf("ledger: retire claims: %w", err)
		}
		return nil
	}
	from := max(last-7, done+1)
	const chunk = 4096
	pipe := s.rdb.Pipeline()
	flush := func() error {
		if pipe.Len() == 0 {
			return nil
		}
		_, err := pipe.Exec(ctx)
		return err
	}
	for d := from; d <= last; d++ {
		for b := 0; b < ClaimBuckets; b++ {
			pipe.Unlink(ctx, s.keys.ClaimBucket(b, d))
			if pipe.Len() >= chunk {
				if err := flush(); err != nil {
					return fmt.Errorf("ledger: retire claims: %w", err)
				}
			}
		}
	}
	if err := flush(); err != nil {
		return fmt.Errorf("ledger: retire claims: %w", err)
	}
	// Two instances racing here may set the marker a day back; that only
	// sends one day's deletions again.
	if err := s.rdb.Set(ctx, marker, last, 0).Err(); err != nil {
		return fmt.Errorf("ledger: retire claims: %w", err)
	}
	return nil
}

// ClaimConflicts reports, for each claim, whether its id is held now by a
// copy with other content, as Claims would, but only reads: plain HGETs
// of every kept day, no script, nothing written. It also returns the claim
// progress read after the claims (on a single Redis in the same pipeline,
// so on the same server): a caller that needs every lower copy claimed
// checks it there, which also catches claims lost between its last look
// and this read. The validator's barrier uses it to read a batch's
// verdicts again once every lower copy is claimed. Safe for concurrent use.
func (s *Store) ClaimConflicts(ctx context.Context, claims []Claim) ([]bool, Claimed, error) {
	conflict := make([]bool, len(claims))
	if len(claims) == 0 {
		pr, err := s.ClaimProgress(ctx)
		return conflict, pr, err
	}
	n := s.ClaimDays()
	if n == 0 {
		n = 1
	}
	first := map[string]int{}
	var send []int
	for i, c := range claims {
		if _, ok := first[c.EventID]; !ok {
			first[c.EventID] = i
			send = append(send, i)
		}
	}
	pipe := s.rdb.Pipeline()
	cmds := make([][]*redis.StringCmd, len(send))
	for k, i := range send {
		c := claims[i]
		hid := IDKey(c.EventID)
		day := s.claimDay(c.Day)
		cmds[k] = make([]*redis.StringCmd, n)
		for j := range cmds[k] {
			cmds[k][j] = pipe.HGet(ctx, s.keys.claimsOf(hid, day-int64(j)), hid)
		}
	}
	// The progress is a plain hash: read it as such, after the claims.
	// On a cluster it has a copy on every master, and a cluster pipeline
	// sends to each node in parallel: there it is a round trip of its own,
	// after them.
	_, cluster := s.rdb.(*redis.ClusterClient)
	var after *redis.MapStringStringCmd
	if !cluster {
		after = pipe.HGetAll(ctx, s.keys.ClaimProgress())
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, nil, fmt.Errorf("ledger: claim conflicts: %w", err)
	}
	var pr Claimed
	var err error
	if cluster {
		pr, err = s.runProgress(ctx, -1, 0, 0)
	} else {
		pr, err = progressOf(after)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("ledger: claim conflicts: %w", err)
	}
	held := make(map[string]string, len(send))
	for k, i := range send {
		if v, ok := holder(cmds[k]); ok {
			held[claims[i].EventID] = v
		}
	}
	for i, c := range claims {
		want, ok := held[c.EventID]
		if !ok {
			// Not claimed at all (retired meanwhile): judged against the
			// batch's first copy, as Claims would record it.
			want = claimValue(claims[first[c.EventID]])
		}
		conflict[i] = claimFingerprint(want) != claimFingerprint(claimValue(c))
	}
	return conflict, pr, nil
}

// claimSeq is the RAW sequence of a stored claim (0: unknown), as
// claims.lua reads it.
// holder is the claim with the lowest RAW sequence among the answers of
// one id's HGETs over the kept days; ok is false when none holds it.
func holder(cmds []*redis.StringCmd) (v string, ok bool) {
	var best uint64
	for _, cmd := range cmds {
		got, err := cmd.Result()
		if err != nil {
			continue
		}
		if sq := claimSeq(got); !ok || sq < best {
			v, best, ok = got, sq, true
		}
	}
	return v, ok
}

// ClaimHolders returns, for each claim, the RAW sequence of the copy that
// holds its id now (the lowest over every kept day): 0 when none does, or
// when the holding claim was written before claims carried a sequence.
// It only reads (HGETs, like ClaimConflicts); the validator uses it to
// find the counted copy of a conflicting one. Safe for concurrent use.
func (s *Store) ClaimHolders(ctx context.Context, claims []Claim) ([]uint64, error) {
	out := make([]uint64, len(claims))
	if len(claims) == 0 {
		return out, nil
	}
	n := s.ClaimDays()
	if n == 0 {
		n = 1
	}
	pipe := s.rdb.Pipeline()
	cmds := make([][]*redis.StringCmd, len(claims))
	for i, c := range claims {
		hid := IDKey(c.EventID)
		day := s.claimDay(c.Day)
		cmds[i] = make([]*redis.StringCmd, n)
		for j := range cmds[i] {
			cmds[i][j] = pipe.HGet(ctx, s.keys.claimsOf(hid, day-int64(j)), hid)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("ledger: claim holders: %w", err)
	}
	for i := range claims {
		if v, ok := holder(cmds[i]); ok {
			out[i] = claimSeq(v)
		}
	}
	return out, nil
}

func claimSeq(v string) uint64 {
	if len(v) <= 8 {
		return 0
	}
	sq, err := strconv.ParseUint(v[8:], 10, 64)
	if err != nil {
		return 0
	}
	return sq
}
