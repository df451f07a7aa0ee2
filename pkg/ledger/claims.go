package ledger

import (
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed claim.lua
	claimSrc    string
	claimScript = redis.NewScript(claimSrc)
)

// ClaimHorizonDays is how many days of ingest time a claim is kept: a
// record is checked against the claims of its ingest day and the day
// before, and claims older than that are retired.
const ClaimHorizonDays = 2

// Claim asks whether eventID may pass with content fingerprint fp.
type Claim struct {
	EventID     string
	Fingerprint uint64
	// Day is the record's ingest day (days since the epoch, UTC).
	Day int64
}

// Claims records, for every event id the validator passes, the fingerprint
// of its content: the first valid record of an id claims it, a later record
// with another fingerprint is a conflicting duplicate. Claiming the same id
// with the same fingerprint again is a no-op, so a validator that crashes
// and is redelivered the same records decides the same. A claim is seen by
// records ingested the same day or the next (ClaimHorizonDays); a
// conflicting record ingested later than that is not detected.
//
// It returns, for each claim in order, true when it conflicts with an
// earlier claim. Claims of the same id in one call are judged in order.
func (s *Store) Claims(ctx context.Context, claims []Claim) ([]bool, error) {
	conflict := make([]bool, len(claims))
	if len(claims) == 0 {
		return conflict, nil
	}
	first := map[string]int{}
	var send []int
	for i, c := range claims {
		if _, ok := first[c.EventID]; ok {
			continue
		}
		first[c.EventID] = i
		send = append(send, i)
	}
	// The claim is the fingerprint's 8 bytes (big-endian), under the id's
	// IDKey: fixed-size, so the buckets stay small listpack hashes.
	fp := func(c Claim) string { return string(binary.BigEndian.AppendUint64(nil, c.Fingerprint)) }
	hid := make([]string, len(claims))
	held := make(map[string]string, len(send))
	run := func() error {
		pipe := s.rdb.Pipeline()
		cmds := make([]*redis.Cmd, len(send))
		for k, i := range send {
			c := claims[i]
			if hid[i] == "" {
				hid[i] = IDKey(c.EventID)
			}
			cmds[k] = claimScript.EvalSha(ctx, pipe,
				[]string{s.keys.claimsOf(hid[i], c.Day), s.keys.claimsOf(hid[i], c.Day-1)}, hid[i], fp(c), claimsExpireAt(c.Day))
		}
		_, err := pipe.Exec(ctx)
		if err != nil {
			return err
		}
		for k, i := range send {
			v, _ := cmds[k].Val().(string)
			held[claims[i].EventID] = v
		}
		return nil
	}
	err := run()
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		// First use on this server, or after SCRIPT FLUSH: load, retry.
		if err = claimScript.Load(ctx, s.rdb).Err(); err == nil {
			err = run()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("ledger: claims: %w", err)
	}
	for i, c := range claims {
		want, ok := held[c.EventID]
		if !ok {
			want = fp(claims[first[c.EventID]])
		}
		conflict[i] = want != fp(c)
	}
	return conflict, nil
}

// claimsExpireAt is when the claims of ingest day are no longer read: the
// end of the last day whose records look them up, plus an hour for clock
// skew between the servers that stamp RAW and Redis.
func claimsExpireAt(day int64) int64 { return (day+ClaimHorizonDays)*86400 + 3600 }

// RetireClaims deletes the claims of ingest days up to and including
// day-ClaimHorizonDays (at most 8 days back from there, and none before the
// first call, which only sets the marker): called when the newest ingest
// day seen advances. A marker key remembers the last day
// retired, so the ClaimBuckets deletions of a day are sent once, not on
// every validator start. Safe to call repeatedly and concurrently. (The
// buckets also expire by themselves on a real Redis: claim.lua sets their
// expiry; miniredis does not expire keys on its own clock.)
func (s *Store) RetireClaims(ctx context.Context, day int64) error {
	last := day - ClaimHorizonDays
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
