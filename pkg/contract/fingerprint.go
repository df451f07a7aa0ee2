package contract

import "encoding/binary"

// Fingerprint returns the 64-bit FNV-1a hash of the content of e: its
// receipt_id, type, event time (as Unix milliseconds), partition_key and
// payload. The payload is hashed in its canonical form (canon.go: object
// keys sorted, no insignificant whitespace, strings with their escapes
// resolved, numbers by value: 1, 1.0 and 1e0 are equal; integer literals
// are compared exactly), so that formatting never changes the fingerprint.
// An absent payload, a null one and an empty object are the same content.
// schema_version, event_id, ingested_at and producer_version are not
// content: the v1 and v2 forms of one event, or a retry stamped at another
// time, have the same fingerprint. If e.Payload is not valid JSON its bytes
// are hashed as they are; of a repeated key the first member counts.
// Fingerprint does not read or set e.Fingerprint; it is safe for
// concurrent use.
func Fingerprint(e *Event) uint64 {
	fp, _, _ := digest(fingerprintHead(e), e.Payload)
	return fp
}

// digest finishes the fingerprint h of the head fields with the payload
// text (nil when absent) and reads its amount (AmountCents), in one walk
// of the payload.
func digest(h fnv64, payload []byte) (fp uint64, cents int64, priced bool) {
	if len(payload) == 0 {
		h.bytes(emptyObject)
		return uint64(h), 0, false
	}
	c := getCanon(true)
	defer c.release()
	if !c.whole(payload) {
		h.byte('!')
		h.bytes(payload)
		return uint64(h), 0, false
	}
	h.bytes(canonContent(c.out))
	return uint64(h), c.amount, c.priced
}

// emptyObject is the canonical text an absent payload is hashed as.
var emptyObject = []byte("{}")

// canonContent is the text hashed for a payload of canonical text out: a
// null payload is no payload.
func canonContent(out []byte) []byte {
	if string(out) == "null" {
		return emptyObject
	}
	return out
}

// fingerprintHead hashes the fields before the payload, each string
// length-prefixed so that no two field lists share an encoding.
func fingerprintHead(e *Event) fnv64 {
	return fingerprintHeadOf(e.ReceiptID, e.Type, e.OccurredAt.UnixMilli(), e.PartitionKey)
}

// fingerprintHeadOf is fingerprintHead from the field values, as strings or
// as bytes read in place.
func fingerprintHeadOf[S string | []byte](receiptID S, typ string, occurredMs int64, partitionKey S) fnv64 {
	h := fnv64(fnvOffset)
	hashStr(&h, receiptID)
	hashStr(&h, typ)
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(occurredMs))
	h.bytes(ms[:])
	hashStr(&h, partitionKey)
	return h
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// fnv64 is a running FNV-1a 64 hash; unlike hash/fnv it needs no
// allocation.
type fnv64 uint64

func (h *fnv64) byte(c byte) { *h = (*h ^ fnv64(c)) * fnvPrime }

// bytes hashes b, the running hash kept in a register.
func (h *fnv64) bytes(b []byte) {
	x := *h
	for _, c := range b {
		x = (x ^ fnv64(c)) * fnvPrime
	}
	*h = x
}

// hashStr hashes a length-prefixed string.
func hashStr[S string | []byte](h *fnv64, s S) {
	var n [binary.MaxVarintLen64]byte
	h.bytes(n[:binary.PutUvarint(n[:], uint64(len(s)))])
	x := *h
	for i := 0; i < len(s); i++ {
		x = (x ^ fnv64(s[i])) * fnvPrime
	}
	*h = x
}
