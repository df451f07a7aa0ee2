// Package ledger is the windower's durable state in Redis: the dedup ledger,
// the window partials and the partition checkpoint, changed only by the Lua
// scripts of this package, plus the validator's event-id claims.
//
// Every key of partition p carries the hash tag {p<p>}, so each script
// touches one Redis Cluster slot.
package ledger

import (
	"crypto/sha256"
	"strconv"
	"strings"
)

// Memory layout. Redis keeps a small hash (at most hash-max-listpack-entries
// fields, 128 by default, of at most hash-max-listpack-value bytes) as one
// flat listpack: a few bytes of overhead per field instead of the ~50 of a
// real hash table. Both sets of per-event state are therefore spread over
// enough hashes to stay small at the volumes the product is sized for, and
// hold a fixed-size key of the event id (IDKey) instead of the id itself:
//
//   - the validator's claims: ClaimBuckets hashes per ingest day (about 60
//     fields each at 1,000,000 event ids a day);
//   - the windower's ledger: LedgerShards hashes per window and partition
//     (about 80 fields each at 5,000 events per window and partition).
//
// A busier deployment keeps working (Redis converts a hash that outgrows
// the limit to a hash table) but pays more memory per id; raise
// hash-max-listpack-entries (docs/performance.md) rather than these
// constants, which name the keys of existing state.
const (
	// ClaimBuckets is the number of hashes one day of event-id claims is
	// spread over.
	ClaimBuckets = 16384
	// LedgerShards is the number of ledger hashes of one window in one
	// partition.
	LedgerShards = 64
)

// IDKey is the 16-byte key an event id is stored under in the claims and
// the ledger: the first 128 bits of its SHA-256. A collision would make two
// ids one; at 2^-128 per pair (about 10^-27 for a million ids) it does not
// happen, and finding one on purpose is as hard as breaking SHA-256 — a
// producer that knows an id can send that id anyway.
func IDKey(eventID string) string {
	sum := sha256.Sum256([]byte(eventID))
	return string(sum[:16])
}

// idBucket spreads IDKeys over n hashes (n ≤ 65536).
func idBucket(idKey string, n int) int {
	return (int(idKey[14])<<8 | int(idKey[15])) % n
}

// Keys builds the Redis keys of one generation.
type Keys struct {
	// Prefix is the generation's key prefix, e.g. "rf:1:".
	Prefix string
}

func (k Keys) tag(p int) string { return k.Prefix + "{p" + strconv.Itoa(p) + "}:" }

// Checkpoint is the hash of partition p's checkpoint: seq (last applied
// VALID sequence), wm (watermark ms), retired (window ends up to which
// state is retired), entries (ledger entries held), clk (the broker clock
// of docs/spec.md §3.1).
func (k Keys) Checkpoint(p int) string { return k.tag(p) + "ckpt" }

// Sources is partition p's sources hash (docs/spec.md §3.1): per source
// id its progress, whether it is busy, and when it last grew and last
// sent, in the partition's broker time.
func (k Keys) Sources(p int) string { return k.tag(p) + "src" }

// Index is the sorted set of the windows partition p holds (score: start).
func (k Keys) Index(p int) string { return k.tag(p) + "idx" }

// Partial is the hash of partition p's share of window id.
func (k Keys) Partial(p int, id string) string { return k.tag(p) + "w:" + id }

// Ledger is the common prefix of the ledger hashes of window id in
// partition p: LedgerShards hashes Ledger(p, id)+":"+n, each mapping the
// IDKey of an event id the partition counted or routed late in the window
// to "C" or "L<watermark>". LedgerShard names one of them.
func (k Keys) Ledger(p int, id string) string { return k.tag(p) + "l:" + id }

// Explain is the hash of partition p's explain record of window id
// (receiptctl explain): field <event id> -> the partial's version after
// it, for each submission counted as a correction, and field "#d" -> the
// copies the ledger dropped as duplicates, written by apply.lua with the
// count. retire.lua adds "#o" (counted on time) and "#v" (the partial's
// version) when it deletes the partial, and the publisher deletes the
// record when it prunes the window (Store.Forget). Before retirement it
// exists only where the window has a correction or a duplicate.
func (k Keys) Explain(p int, id string) string { return k.tag(p) + "x:" + id }

// LedgerShard is ledger hash n (0 ≤ n < LedgerShards) of window id in
// partition p.
func (k Keys) LedgerShard(p int, id string, n int) string {
	return k.Ledger(p, id) + ":" + strconv.Itoa(n)
}

// LedgerShardOf is the ledger shard holding an IDKey.
func LedgerShardOf(idKey string) int { return idBucket(idKey, LedgerShards) }

// Claims is the hash holding the claim of eventID for records ingested on
// day (days since the epoch, UTC).
func (k Keys) Claims(eventID string, day int64) string { return k.claimsOf(IDKey(eventID), day) }

// claimsOf is Claims for an IDKey.
func (k Keys) claimsOf(idKey string, day int64) string {
	return k.ClaimBucket(idBucket(idKey, ClaimBuckets), day)
}

// ClaimBucket is the claims hash of bucket b for day.
func (k Keys) ClaimBucket(b int, day int64) string {
	// Not fmt: a validator builds ClaimDays of these per claim.
	return k.Prefix + "{c" + strconv.Itoa(b) + "}:claims:" + strconv.FormatInt(day, 10)
}

// ClaimsRetired is the key holding the last ingest day whose claims were
// retired.
func (k Keys) ClaimsRetired() string { return k.Prefix + "claims:retired" }

// ClaimProgress is the hash of the validator partitions' claim progress:
// field p (a RAW partition number) holds the highest RAW sequence through
// which partition p has written its claims (ledger.Claimed).
func (k Keys) ClaimProgress() string { return k.Prefix + "claims:progress" }

// ClaimFence is the hash of the validator partitions' fences (fence.go):
// field p holds the largest epoch a mark of partition p carried. On Redis
// Cluster each copy of the progress has its own, in its slot
// (claimFenceOf).
func (k Keys) ClaimFence() string { return k.Prefix + "claims:fence" }

// claimFenceOf is the fence hash beside the progress key progress (one of
// ClaimProgress, ClaimProgressCopy).
func claimFenceOf(progress string) string {
	return strings.TrimSuffix(progress, "progress") + "fence"
}

// ClaimProgressCopy is copy k of the claim progress on Redis Cluster,
// one on each master (ledger.Claimed): the hash tag {cp<k>} puts it in a
// slot of that master.
func (k Keys) ClaimProgressCopy(n int) string {
	return k.Prefix + "{cp" + strconv.Itoa(n) + "}:claims:progress"
}

// keySlot is the Redis Cluster hash slot of key: CRC16 (XMODEM) of its
// hash tag (the part between the first '{' and the next '}', when not
// empty) or of the whole key, modulo 16384, as in the cluster
// specification. go-redis computes the same internally but does not
// export it.
func keySlot(key string) int {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}
