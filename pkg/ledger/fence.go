package ledger

import (
	"errors"
	"fmt"
	"maps"

	"github.com/redis/go-redis/v9"
)

// Fencing (docs/architecture.md, "Fencing"). Each partition step of a
// fenced store carries its owner's epoch (the revision of the lease write
// that gave it the partition; a later owner has a larger one), and the
// script that makes the step checks it against the partition's fence, in
// the same atomic call: the largest epoch any step of the partition
// carried. A smaller epoch is refused (FENCED, ErrFenced) before anything
// is written; a larger one raises the fence. Epoch 0 is not fenced: the
// step neither reads nor writes the fence (static --instance/--instances).
//
// Where the fence is kept:
//   - a windower partition: field "fence" of its checkpoint hash
//     (Keys.Checkpoint), in the partition's hash slot; apply.lua,
//     retire.lua and the published mark check it;
//   - a validator partition (a RAW partition): field <p> of the claim
//     fence hash beside each copy of the claim progress (Keys.ClaimFence,
//     one slot with the copy); progress.lua checks it when it marks.
//
// The validator's claims are not fenced: a claim is a fact about a RAW
// record (its id, content and sequence), the lowest sequence holds an id
// whatever order the claims come in, and the successor claims the same
// records itself, so a stale instance's claims leave the state the
// successor's alone would (see docs/architecture.md).

// ErrFenced means a later owner holds the partition: the step carried a
// smaller epoch than the partition's fence, and nothing was written.
var ErrFenced = errors.New("ledger: fenced: a later owner holds the partition")

// fenced wraps a FENCED script reply as ErrFenced.
func fenced(err error) error {
	if redis.HasErrorPrefix(err, "FENCED") {
		return fmt.Errorf("%w: %v", ErrFenced, err)
	}
	return err
}

// Fence returns a store over the same client and keys whose partition
// steps (Apply, Retire, MarkPublished, ClaimThrough, MarkClaimed) carry
// epochs[p], the fencing token of each partition the caller owns (absent
// or 0: not fenced). The map is copied. s itself is unchanged; the two
// share what they know of a cluster's slot map.
func (s *Store) Fence(epochs map[int]uint64) *Store {
	f := *s
	f.epochs = maps.Clone(epochs)
	return &f
}

// fenceLua is the fence check every fenced script starts with (the one
// copy: fenced prepends it). fence(key, field, epoch) returns nil when the
// step may go on, after raising the fence in field of hash key to epoch
// when that is larger; the FENCED error reply when the fence is above
// epoch; nil without touching anything for epoch 0 (not fenced).
const fenceLua = `local function fence(key, field, epoch)
  local e = tonumber(epoch) or 0
  if e <= 0 then return nil end
  local f = tonumber(redis.call('HGET', key, field)) or 0
  if f > e then
    return redis.error_reply('FENCED epoch ' .. epoch .. ' is below the fence ' .. string.format('%d', f))
  end
  if e > f then redis.call('HSET', key, field, epoch) end
  return nil
end
`

// fencedScript is a script whose source may call fence (fenceLua).
func fencedScript(src string) *redis.Script { return redis.NewScript(fenceLua + src) }

// epoch is partition p's fencing token (0: not fenced).
func (s *Store) epoch(p int) uint64 { return s.epochs[p] }
