// Package ledger is the windower's durable state in Redis: the dedup ledger,
// the window partials and the partition checkpoint, changed only by the Lua
// scripts of this package, plus the validator's event-id claims.
//
// Every key of partition p carries the hash tag {p<p>}, so each script
// touches one Redis Cluster slot.
package ledger

import (
	"fmt"
	"hash/fnv"
	"strconv"
)

// ClaimBuckets is the number of hashes one day of event-id claims is
// spread over.
const ClaimBuckets = 256

// Keys builds the Redis keys of one generation.
type Keys struct {
	// Prefix is the generation's key prefix, e.g. "rf:1:".
	Prefix string
}

func (k Keys) tag(p int) string { return k.Prefix + "{p" + strconv.Itoa(p) + "}:" }

// Checkpoint is the hash of partition p's checkpoint: seq (last applied
// VALID sequence), wm (watermark ms), retired (window ends up to which
// state is retired), entries (ledger entries held).
func (k Keys) Checkpoint(p int) string { return k.tag(p) + "ckpt" }

// Index is the sorted set of the windows partition p holds (score: start).
func (k Keys) Index(p int) string { return k.tag(p) + "idx" }

// Partial is the hash of partition p's share of window id.
func (k Keys) Partial(p int, id string) string { return k.tag(p) + "w:" + id }

// Ledger is the hash of event ids partition p has counted or routed late in
// window id.
func (k Keys) Ledger(p int, id string) string { return k.tag(p) + "l:" + id }

// Claims is the hash holding the claims of eventID's bucket for records
// ingested on day (days since the epoch, UTC).
func (k Keys) Claims(eventID string, day int64) string {
	h := fnv.New32a()
	h.Write([]byte(eventID))
	return k.ClaimBucket(int(h.Sum32()%ClaimBuckets), day)
}

// ClaimBucket is the claims hash of bucket b for day.
func (k Keys) ClaimBucket(b int, day int64) string {
	return fmt.Sprintf("%s{c%d}:claims:%d", k.Prefix, b, day)
}
