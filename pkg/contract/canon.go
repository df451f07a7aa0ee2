package contract

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"strconv"
	"sync"
)

// This file is the one canonical form of a payload and the one writer of
// it, driven by the scanner (scan.go). The fingerprint hashes its text
// (fingerprint.go), and the walk that writes it checks the value strictly
// (the scanner's rules, repeated keys, depth) and picks the amount out of
// the object's top level (amount.go) on the way: the fast path, the schema
// path, Fingerprint and AmountCents all read a payload through canon.read.
//
// The canonical form: object members sorted by their decoded keys (as
// slices.Sort sorts strings), no insignificant whitespace, strings with
// their escapes resolved and written by appendQuoted, numbers by
// canonicalNumber, true, false and null as they are.

// canon writes a JSON value in canonical form, straight from its text and
// in one pass of the scanner. Its buffers are reused through canonPool.
type canon struct {
	out  []byte // the canonical text
	ents []canonEntry
	keys []byte // decoded keys that held escapes
	tmp  []byte // a decoded string value

	// keepFirst keeps the first of repeated keys (as the reader's decoded
	// map does); otherwise a repeated key fails the walk.
	keepFirst bool
	// top is the depth of the read value; amount and priced are
	// AmountCents of its AmountKey member, hasAmount whether it has one.
	top       int
	amount    int64
	priced    bool
	hasAmount bool
}

// canonEntry is one member of an object being written. It holds offsets,
// not slices, so that sorting entries moves no pointers.
type canonEntry struct {
	// prefix is the decoded key's first 8 bytes, big-endian, padded with
	// zeros: keys whose prefixes differ sort as their prefixes do (a zero
	// byte sorts first, as a key's end does), so most comparisons read no
	// key.
	prefix uint64
	// key is the decoded key: data[keyStart:keyEnd] of the record, or
	// keys[keyStart:keyEnd] when it held escapes (escaped).
	keyStart, keyEnd int32
	escaped          bool
	// start and end place the value's canonical text in out.
	start, end int32
}

// keyPrefix is canonEntry.prefix of key k.
func keyPrefix(k []byte) uint64 {
	if len(k) >= 8 {
		return binary.BigEndian.Uint64(k)
	}
	var p uint64
	for i, b := range k {
		p |= uint64(b) << (56 - 8*i)
	}
	return p
}

// key returns the decoded key of e, a member of an object of data.
func (c *canon) key(data []byte, e *canonEntry) []byte {
	if e.escaped {
		return c.keys[e.keyStart:e.keyEnd]
	}
	return data[e.keyStart:e.keyEnd]
}

var canonPool = sync.Pool{New: func() any { return new(canon) }}

// errRepeatedKey fails a canonical walk without keepFirst.
var errRepeatedKey = errors.New("repeated key")

// getCanon returns an empty canon from the pool with the given
// repeated-key rule.
func getCanon(keepFirst bool) *canon {
	c := canonPool.Get().(*canon)
	c.out, c.ents, c.keys, c.tmp = c.out[:0], c.ents[:0], c.keys[:0], c.tmp[:0]
	c.keepFirst = keepFirst
	return c
}

// release puts c back into canonPool, unless its buffers grew large.
func (c *canon) release() {
	if cap(c.out) > 64<<10 || cap(c.ents) > 1024 || cap(c.keys) > 64<<10 || cap(c.tmp) > 64<<10 {
		return
	}
	canonPool.Put(c)
}

// read writes the canonical text of the value at r's position (after
// optional whitespace) to c.out and reads its amount, leaving r after the
// value. The error is the scanner's (syntax, depth beyond r's limit) or
// errRepeatedKey.
func (c *canon) read(r *reader) error {
	c.top, c.amount, c.priced, c.hasAmount = r.depth+1, 0, false, false
	return c.value(r)
}

// whole reads data as one value with only whitespace around it, nested at
// most maxDepth levels.
func (c *canon) whole(data []byte) bool {
	r := reader{data: data}
	return c.read(&r) == nil && r.end() == nil
}

// value is read below the top.
func (c *canon) value(r *reader) error {
	switch b := r.peek(); {
	case b == '{':
		return c.object(r)
	case b == '[':
		return c.array(r)
	case b == '"':
		s, e, esc, err := r.scanString()
		if err != nil {
			return err
		}
		if esc {
			c.tmp = appendUnescaped(c.tmp[:0], r.data[s:e])
			c.out = appendQuoted(c.out, c.tmp)
		} else {
			// Without escapes the text holds no quote, backslash or control
			// character: it is its own canonical form.
			c.out = append(c.out, r.data[s-1:e+1]...)
		}
		return nil
	case b == '-' || b >= '0' && b <= '9':
		s, plain, err := r.scanNumber()
		if err != nil {
			return err
		}
		switch num := r.data[s:r.pos]; {
		case !plain:
			c.out = append(c.out, canonicalNumber(string(num))...)
		case len(num) == 2 && num[0] == '-' && num[1] == '0':
			c.out = append(c.out, '0')
		default:
			c.out = append(c.out, num...)
		}
		return nil
	}
	_, s, e, _, err := r.token() // true, false, null, or not a value
	if err != nil {
		return err
	}
	c.out = append(c.out, r.data[s:e]...)
	return nil
}

// object writes the object at r's position, its members sorted by key.
func (c *canon) object(r *reader) error {
	data := r.data
	at, base := len(c.out), len(c.ents)
	k, esc, more, err := r.member(true)
	for ; more; k, esc, more, err = r.member(false) {
		ent := canonEntry{keyStart: int32(k.start), keyEnd: int32(k.end), escaped: esc}
		if esc {
			ent.keyStart = int32(len(c.keys))
			c.keys = appendUnescaped(c.keys, data[k.start:k.end])
			ent.keyEnd = int32(len(c.keys))
		}
		ent.prefix = keyPrefix(c.key(data, &ent))
		ent.start = int32(len(c.out))
		if err := c.value(r); err != nil {
			return err
		}
		ent.end = int32(len(c.out))
		if r.depth == c.top && !c.hasAmount && string(c.key(data, &ent)) == AmountKey {
			c.hasAmount = true
			c.amount, c.priced = amountOf(c.out[ent.start:ent.end])
		}
		c.ents = append(c.ents, ent)
	}
	if err != nil {
		return err
	}
	ents, ok := c.sortEntries(data, c.ents[base:])
	if !ok {
		return errRepeatedKey
	}
	// Write the members in key order after the values, then move the
	// object down over them.
	from := len(c.out)
	c.out = append(c.out, '{')
	for i, ent := range ents {
		if i > 0 {
			c.out = append(c.out, ',')
		}
		c.out = appendQuoted(c.out, c.key(data, &ent))
		c.out = append(c.out, ':')
		c.out = append(c.out, c.out[ent.start:ent.end]...)
	}
	c.out = append(c.out, '}')
	c.out = c.out[:at+copy(c.out[at:], c.out[from:])]
	c.ents = c.ents[:base]
	return nil
}

// array writes the array at r's position.
func (c *canon) array(r *reader) error {
	c.out = append(c.out, '[')
	more, err := r.element(true)
	for n := 0; more; more, err = r.element(false) {
		if n > 0 {
			c.out = append(c.out, ',')
		}
		n++
		if err := c.value(r); err != nil {
			return err
		}
	}
	if err != nil {
		return err
	}
	c.out = append(c.out, ']')
	return nil
}

// appendQuoted appends s as a canonical JSON string: quote, backslash and
// control characters escaped (the latter as \u00XX), everything else as is.
func appendQuoted(out, s []byte) []byte {
	const hexDigits = "0123456789abcdef"
	out = append(out, '"')
	for _, c := range s {
		switch {
		case c == '"' || c == '\\':
			out = append(out, '\\', c)
		case c < 0x20:
			out = append(out, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		default:
			out = append(out, c)
		}
	}
	return append(out, '"')
}

// sortEntries sorts the members of an object of data by key, as
// slices.Sort sorts strings, keeping members of one key in text order. It
// returns the members to write: all of them, or with keepFirst the first
// of each key; false for a repeated key without keepFirst.
func (c *canon) sortEntries(data []byte, ents []canonEntry) ([]canonEntry, bool) {
	less := func(a, b *canonEntry) int {
		if a.prefix != b.prefix {
			if a.prefix < b.prefix {
				return -1
			}
			return 1
		}
		return bytes.Compare(c.key(data, a), c.key(data, b))
	}
	if len(ents) > 12 {
		slices.SortStableFunc(ents, func(a, b canonEntry) int { return less(&a, &b) })
	} else {
		for i := 1; i < len(ents); i++ {
			for j := i; j > 0 && less(&ents[j-1], &ents[j]) > 0; j-- {
				ents[j-1], ents[j] = ents[j], ents[j-1]
			}
		}
	}
	kept := ents[:min(len(ents), 1)]
	for i := 1; i < len(ents); i++ {
		if last := &kept[len(kept)-1]; last.prefix == ents[i].prefix && bytes.Equal(c.key(data, last), c.key(data, &ents[i])) {
			if !c.keepFirst {
				return nil, false
			}
			continue
		}
		kept = append(kept, ents[i])
	}
	return kept, true
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
