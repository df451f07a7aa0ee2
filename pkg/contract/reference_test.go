package contract

// The fingerprint and the amount as they were computed before the one
// canonical walk (canon.go) replaced them: the fingerprint by hashing the
// payload decoded into Go values, the amount by a lenient scan of the
// payload's top level. Kept here only as the referee of the differential
// tests (compareFastSchema, TestCanonHashMatchesFingerprint,
// TestOnePassMatchesReference): the code must give the same fingerprint,
// stored in Redis claims, and the same amount for every payload the
// contract accepts.

import (
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestOnePassMatchesReference: Fingerprint of any payload text (valid,
// broken, with repeated keys, too deep, null) equals the reference's, and
// AmountCents of every one the contract would accept (a JSON value without
// a repeated key) too. The records themselves are held to the reference
// by compareFastSchema, on every record of the package's tests.
func TestOnePassMatchesReference(t *testing.T) {
	m := newMutator(rand.New(rand.NewPCG(19, 23)), seedRecords(t))
	amounts := []string{`12`, `-0`, `1e2`, `1.5`, `"7"`, `1000000000001`, `-1000000000000`, `null`, `{}`, `4.0E1`}
	texts := []string{``, `null`, ` null`, `{}`, ` `, `"s"`, `[1,2]`, `{"a":1} x`, `{"a":"\ud800"}`, "{\"a\":\"\xff\"}",
		strings.Repeat(`[`, 256) + strings.Repeat(`]`, 256), strings.Repeat(`[`, 257) + strings.Repeat(`]`, 257)}
	for range 20000 {
		var text string
		switch m.rng.IntN(5) {
		case 0:
			text = m.anyValue(4)
		case 1:
			text = string(m.breakBytes([]byte(m.object(1 + m.rng.IntN(3)))))
		case 2:
			k := m.pick(`"a"`, `"amount_cents"`, `"amount\u005fcents"`)
			text = "{" + k + ":" + m.pick(amounts...) + `,"x":1,` + k + ":" + m.pick(amounts...) + "}"
		case 3:
			text = `{"b":` + m.anyValue(2) + `,` + m.pick(`"amount_cents"`, `"amount\u005fcents"`, `"amount_cent"`) + `:` + m.pick(amounts...) + `}`
		default:
			text = m.object(1 + m.rng.IntN(5))
		}
		texts = append(texts, text)
	}
	valid, priced := 0, 0
	for _, text := range texts {
		e := Event{ReceiptID: "r", Type: TypeViewed, OccurredAt: clock, PartitionKey: "k", Payload: []byte(text)}
		if got, want := Fingerprint(&e), refFingerprint(&e); got != want {
			t.Fatalf("Fingerprint of %q = %x, the reference %x", text, got, want)
		}
		if _, dup, err := decodeValue([]byte(text)); err != nil || dup {
			continue
		}
		valid++
		got, ok := AmountCents([]byte(text))
		want, wok := refAmountCents([]byte(text))
		if got != want || ok != wok {
			t.Fatalf("AmountCents(%q) = %d %v, the reference %d %v", text, got, ok, want, wok)
		}
		if ok {
			priced++
		}
	}
	if valid < 5000 || priced < 1000 {
		t.Errorf("too few payloads exercised: %d valid, %d priced", valid, priced)
	}
}

// FuzzOnePass: any payload text, the one walk and the reference.
func FuzzOnePass(f *testing.F) {
	for _, s := range []string{`{"amount_cents":12}`, `{"a":[{"b":"}"}],"amount_cents":-4}`, `{"amount\u005fcents":1e3}`, `{}`, `null`, `{"a":1,"a":2}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, text []byte) {
		e := Event{ReceiptID: "r", Type: TypeViewed, OccurredAt: clock, PartitionKey: "k", Payload: text}
		if got, want := Fingerprint(&e), refFingerprint(&e); got != want {
			t.Fatalf("Fingerprint of %q = %x, the reference %x", text, got, want)
		}
		if _, dup, err := decodeValue(text); err == nil && !dup {
			got, ok := AmountCents(text)
			want, wok := refAmountCents(text)
			if got != want || ok != wok {
				t.Fatalf("AmountCents(%q) = %d %v, the reference %d %v", text, got, ok, want, wok)
			}
		}
	})
}

// refFingerprint is Fingerprint as it was: decode the payload, hash the
// decoded value.
func refFingerprint(e *Event) uint64 {
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
	h := fingerprintHead(e)
	if payload == nil {
		payload = map[string]any(nil)
	}
	refValue(&h, payload)
	return uint64(h)
}

// refValue hashes v (as decoded by reader) in canonical JSON form.
func refValue(h *fnv64, v any) {
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
			refQuoted(h, k)
			h.byte(':')
			refValue(h, v[k])
		}
		h.byte('}')
	case []any:
		h.byte('[')
		for i, x := range v {
			if i > 0 {
				h.byte(',')
			}
			refValue(h, x)
		}
		h.byte(']')
	case string:
		refQuoted(h, v)
	case json.Number:
		refRaw(h, canonicalNumber(string(v)))
	case bool:
		if v {
			refRaw(h, "true")
		} else {
			refRaw(h, "false")
		}
	case nil:
		refRaw(h, "null")
	}
}

func refRaw(h *fnv64, s string) { h.bytes([]byte(s)) }

// refQuoted hashes s as a canonical JSON string.
func refQuoted(h *fnv64, s string) {
	const hexDigits = "0123456789abcdef"
	h.byte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			h.byte('\\')
			h.byte(c)
		case c < 0x20:
			refRaw(h, `\u00`)
			h.byte(hexDigits[c>>4])
			h.byte(hexDigits[c&0xf])
		default:
			h.byte(c)
		}
	}
	h.byte('"')
}

// refAmountCents is AmountCents as it was: find the member in the text,
// read its literal.
func refAmountCents(payload []byte) (int64, bool) {
	v, found := refMember(payload, AmountKey)
	if !found || len(v) == 0 {
		return 0, false
	}
	if c := v[0]; c != '-' && (c < '0' || c > '9') {
		return 0, false
	}
	n, err := strconv.ParseInt(canonicalNumber(string(v)), 10, 64)
	if err != nil || n > MaxAmountCents || n < -MaxAmountCents {
		return 0, false
	}
	return n, true
}

func refMember(obj []byte, key string) ([]byte, bool) {
	i := skipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return nil, false
	}
	i++
	for {
		i = skipSpace(obj, i)
		if i >= len(obj) || obj[i] != '"' {
			return nil, false
		}
		ks := i
		ke, esc := refSkipString(obj, i)
		if ke < 0 {
			return nil, false
		}
		var match bool
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
		ve := refSkipValue(obj, vs)
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

func refSkipString(b []byte, i int) (int, bool) {
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

func refSkipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		e, _ := refSkipString(b, i)
		return e
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				e, _ := refSkipString(b, j)
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
	default:
		j := i
		for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
			j++
		}
		return j
	}
}
