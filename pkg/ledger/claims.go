package ledger

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Claim asks whether eventID may pass with content fingerprint fp.
type Claim struct {
	EventID     string
	Fingerprint uint64
}

// Claims records, for every event id the validator passes, the fingerprint
// of its content: the first valid record of an id claims it, a later record
// with another fingerprint is a conflicting duplicate. Claiming the same id
// with the same fingerprint again is a no-op, so a validator that crashes
// and is redelivered the same records decides the same.
//
// It returns, for each claim in order, true when it conflicts with an
// earlier claim. Claims of one call must have distinct event ids unless
// they are meant to be judged in order (a later one sees an earlier one).
func (s *Store) Claims(ctx context.Context, claims []Claim) ([]bool, error) {
	conflict := make([]bool, len(claims))
	if len(claims) == 0 {
		return conflict, nil
	}
	// Claims of the same id inside one batch are judged in order: the first
	// one is sent to Redis, later ones compared with it here.
	first := map[string]int{}
	var send []int
	for i, c := range claims {
		if _, ok := first[c.EventID]; ok {
			continue
		}
		first[c.EventID] = i
		send = append(send, i)
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.BoolCmd, len(send))
	for k, i := range send {
		c := claims[i]
		cmds[k] = pipe.HSetNX(ctx, s.keys.Claims(c.EventID), c.EventID, strconv.FormatUint(c.Fingerprint, 16))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("ledger: claims: %w", err)
	}
	var lookup []int
	for k, i := range send {
		if !cmds[k].Val() {
			lookup = append(lookup, i)
		}
	}
	held := map[string]uint64{}
	if len(lookup) > 0 {
		pipe := s.rdb.Pipeline()
		gets := make([]*redis.StringCmd, len(lookup))
		for k, i := range lookup {
			gets[k] = pipe.HGet(ctx, s.keys.Claims(claims[i].EventID), claims[i].EventID)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, fmt.Errorf("ledger: claims lookup: %w", err)
		}
		for k, i := range lookup {
			fp, err := strconv.ParseUint(gets[k].Val(), 16, 64)
			if err != nil {
				return nil, fmt.Errorf("ledger: claim of %q is corrupt: %q", claims[i].EventID, gets[k].Val())
			}
			held[claims[i].EventID] = fp
		}
	}
	for i, c := range claims {
		fp, ok := held[c.EventID]
		if !ok {
			fp = claims[first[c.EventID]].Fingerprint
		}
		conflict[i] = fp != c.Fingerprint
	}
	return conflict, nil
}
