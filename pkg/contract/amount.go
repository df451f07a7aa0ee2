package contract

import (
	"encoding/json"
	"strconv"
)

// AmountKey is the payload member a submission's amount is read from.
const AmountKey = "amount_cents"

// MaxAmountCents bounds the magnitude of an amount that is summed: a
// larger one (or one that is not an integer) leaves the submission
// unpriced. 10^12 cents keeps the sums of a batch exact in the apply
// script's doubles, and Redis's int64 sums exact for any window.
const MaxAmountCents = 1_000_000_000_000

// AmountCents reads payload.amount_cents of a valid event's payload (the
// text the contract accepted: a JSON object without repeated keys, or
// empty). It reports ok only for a number whose value is an integer of at
// most MaxAmountCents in magnitude, read as the content fingerprint reads
// numbers (1e2 and 100 are the same amount, as they are the same content).
// Anything else — absent, a string, a fraction, too large — is not an
// error of the event, whose payload is the producer's own (docs/spec.md
// §2): the submission counts, and is counted as unpriced in the window's
// breakdown (docs/contract.md, "Amounts").
func AmountCents(payload []byte) (cents int64, ok bool) {
	v, found := topLevelMember(payload, AmountKey)
	if !found || len(v) == 0 {
		return 0, false
	}
	if c := v[0]; c != '-' && (c < '0' || c > '9') {
		return 0, false // not a number
	}
	n, err := strconv.ParseInt(canonicalNumber(string(v)), 10, 64)
	if err != nil || n > MaxAmountCents || n < -MaxAmountCents {
		return 0, false
	}
	return n, true
}

// topLevelMember returns the raw text of the value of key in the JSON
// object obj, which must be valid JSON (the contract checked it). Keys are
// compared decoded, so an escaped spelling of key matches too.
func topLevelMember(obj []byte, key string) ([]byte, bool) {
	i := skipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return nil, false
	}
	i++
	for {
		i = skipSpace(obj, i)
		if i >= len(obj) || obj[i] != '"' {
			return nil, false // '}' or not an object
		}
		ks := i
		ke, esc := skipString(obj, i)
		if ke < 0 {
			return nil, false
		}
		match := false
		if esc {
			var k string
			match = json.Unmarshal(obj[ks:ke], &k) == nil && k == key
		} else {
			match = string(obj[ks+1:ke-1]) == key
		}
		i = skipSpace(obj, ke)
		if i >= len(obj) || obj[i] != ':' {
			return nil, false
		}
		vs := skipSpace(obj, i+1)
		ve := skipValue(obj, vs)
		if ve < 0 {
			return nil, false
		}
		if match {
			return obj[vs:ve], true
		}
		i = skipSpace(obj, ve)
		if i >= len(obj) || obj[i] != ',' {
			return nil, false
		}
		i++
	}
}

// skipString returns the index after the string starting at b[i] (a
// quote), and whether it holds an escape; -1 if it does not end.
func skipString(b []byte, i int) (int, bool) {
	esc := false
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			esc = true
			j++
		case '"':
			return j + 1, esc
		}
	}
	return -1, esc
}

// skipValue returns the index after the JSON value starting at b[i], or -1.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		e, _ := skipString(b, i)
		return e
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				e, _ := skipString(b, j)
				if e < 0 {
					return -1
				}
				j = e - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	default: // number, true, false, null
		j := i
		for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
			j++
		}
		return j
	}
}
