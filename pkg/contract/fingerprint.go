package contract

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"slices"
	"strconv"
)

// Fingerprint returns the 64-bit FNV-1a hash of the content of e: its
// receipt_id, type, event time (as Unix milliseconds), partition_key and
// payload. The payload is hashed in a canonical form — object keys sorted,
// no insignificant whitespace, strings with their escapes resolved, numbers
// by value (1, 1.0 and 1e0 are equal; integer literals are compared
// exactly) — so that formatting never changes the fingerprint. An absent
// payload and an empty object are the same content. schema_version,
// event_id, ingested_at and producer_version are not content: the v1 and v2
// forms of one event, or a retry stamped at another time, have the same
// fingerprint. If e.Payload is not valid JSON its bytes are hashed as they
// are. Fingerprint does not read or set e.Fingerprint; it is safe for
// concurrent use.
func Fingerprint(e *Event) uint64 {
	var payload any
	if len(e.Payload) > 0 {
		v, _, err := decodeValue(e.Payload)
		if err != nil {
			h := fingerprintHead(e)
			h.byte('!')
			h.bytes(e.Payload)
			return uint64(h)
		}
		payload = v
	}
	return fingerprint(e, payload)
}

// fingerprint is Fingerprint with the payload already decoded (nil when
// absent).
func fingerprint(e *Event, payload any) uint64 {
	h := fingerprintHead(e)
	if payload == nil {
		payload = map[string]any(nil)
	}
	h.value(payload)
	return uint64(h)
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

func (h *fnv64) raw(s string) {
	x := *h
	for i := 0; i < len(s); i++ {
		x = (x ^ fnv64(s[i])) * fnvPrime
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

// quoted hashes s as a canonical JSON string: quotes, backslash and control
// characters escaped, everything else as UTF-8.
func (h *fnv64) quoted(s string) { hashQuoted(h, s) }

// hashQuoted is quoted for a string or bytes.
func hashQuoted[S string | []byte](h *fnv64, s S) {
	const hexDigits = "0123456789abcdef"
	h.byte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			h.byte('\\')
			h.byte(c)
		case c < 0x20:
			h.raw(`\u00`)
			h.byte(hexDigits[c>>4])
			h.byte(hexDigits[c&0xf])
		default:
			h.byte(c)
		}
	}
	h.byte('"')
}

// value hashes v (as decoded by reader) in canonical JSON form.
func (h *fnv64) value(v any) {
	switch v := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		h.byte('{')
		for i, k := range keys {
			if i > 0 {
				h.byte(',')
			}
			h.quoted(k)
			h.byte(':')
			h.value(v[k])
		}
		h.byte('}')
	case []any:
		h.byte('[')
		for i, x := range v {
			if i > 0 {
				h.byte(',')
			}
			h.value(x)
		}
		h.byte(']')
	case string:
		h.quoted(v)
	case json.Number:
		h.raw(canonicalNumber(string(v)))
	case bool:
		if v {
			h.raw("true")
		} else {
			h.raw("false")
		}
	case nil:
		h.raw("null")
	}
}

// canonicalNumber is the canonical text of a JSON number literal: integer
// literals as they are (but -0 is 0); others by their float64 value, as an
// integer when it is a safe integer; literals out of float64 range as they
// are.
func canonicalNumber(s string) string {
	plain := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '.' || c == 'e' || c == 'E' {
			plain = false
			break
		}
	}
	if plain {
		if s == "-0" {
			return "0"
		}
		return s
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return s
	}
	if f == math.Trunc(f) && math.Abs(f) <= maxSafeInt {
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}
