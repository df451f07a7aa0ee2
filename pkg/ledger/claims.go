package ledger

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"

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
	fp := func(c Claim) string { return strconv.FormatUint(c.Fingerprint, 16) }
	held := make(map[string]string, len(send))
	run := func() error {
		pipe := s.rdb.Pipeline()
		cmds := make([]*redis.Cmd, len(send))
		for k, i := range send {
			c := claims[i]
			cmds[k] = claimScript.EvalSha(ctx, pipe,
				[]string{s.keys.Claims(c.EventID, c.Day), s.keys.Claims(c.EventID, c.Day-1)}, c.EventID, fp(c))
		}
		_, err := pipe.Exec(ctx)
		if err != nil {
			return err
		}
		for k, i := range send {
			held[claims[i].EventID] = fmt.Sprint(cmds[k].Val())
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

// RetireClaims deletes the claims of ingest days before day-ClaimHorizonDays+1
// down to (and including) day-ClaimHorizonDays-7: called when the newest
// ingest day seen advances. Safe to call repeatedly.
func (s *Store) RetireClaims(ctx context.Context, day int64) error {
	pipe := s.rdb.Pipeline()
	for d := day - ClaimHorizonDays - 7; d <= day-ClaimHorizonDays; d++ {
		for b := 0; b < ClaimBuckets; b++ {
			pipe.Del(ctx, s.keys.ClaimBucket(b, d))
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("ledger: retire claims: %w", err)
	}
	return nil
}
