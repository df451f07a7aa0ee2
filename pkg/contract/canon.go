package contract

import (
	"bytes"
	"math"
	"slices"
	"strconv"
	"sync"
)

// This file is the one canonical form of a payload and the one walk that
// writes it. The fingerprint hashes its text (fingerprint.go), and the
// walk that writes it checks the value strictly (the reader's string,
// number and literal rules, repeated keys, depth) and picks the amount out
// of the object's top level (amount.go) on the way: the fast path, the
// schema path, Fingerprint and AmountCents all read a payload through
// canon.walk.
//
// The canonical form: object members sorted by their decoded keys (as
// slices.Sort sorts strings), no insignificant whitespace, strings with
// their escapes resolved and written by appendQuoted, numbers by
// canonicalNumber, true, false and null as they are.

// canon writes a JSON value in canonical form, straight from its text and
// in one pass. Its buffers are reused through canonPool.
type canon struct {
	out  []byte // the canonical text
	ents []canonEntry
	keys []byte // decoded keys that held escapes
	tmp  []byte // a decoded string value

	// maxDepth bounds the nesting (the record is depth 1); a deeper
	// object or array fails the walk.
	maxDepth int
	// keepFirst keeps the first of repeated keys (as the reader's decoded
	// map does); otherwise a repeated key fails the walk.
	keepFirst bool
	// top is the depth of the walked value; amount and priced are
	// AmountCents of its AmountKey member, hasAmount whether it has one.
	top       int
	amount    int64
	priced    bool
	hasAmount bool
}

// canonEntry is one member of an object being written. It holds offsets,
// not slices, so that sorting entries moves no pointers.
type canonEntry struct {
	// key is the decoded key: data[keyStart:keyEnd] of the record, or
	// keys[keyStart:keyEnd] when it held escapes (escaped).
	keyStart, keyEnd int32
	escaped          bool
	// start and end place the value's canonical text in out.
	start, end int32
}

// key returns the decoded key of e, a member of an object of data.
func (c *canon) key(data []byte, e *canonEntry) []byte {
	if e.escaped {
		return c.keys[e.keyStart:e.keyEnd]
	}
	return data[e.keyStart:e.keyEnd]
}

var canonPool = sync.Pool{New: func() any { return new(canon) }}

// getCanon returns an empty canon from the pool with the given depth
// bound and repeated-key rule.
func getCanon(maxDepth int, keepFirst bool) *canon {
	c := canonPool.Get().(*canon)
	c.out, c.ents, c.keys, c.tmp = c.out[:0], c.ents[:0], c.keys[:0], c.tmp[:0]
	c.maxDepth, c.keepFirst = maxDepth, keepFirst
	return c
}

// release puts c back into canonPool, unless its buffers grew large.
func (c *canon) release() {
	if cap(c.out) > 64<<10 || cap(c.ents) > 1024 || cap(c.keys) > 64<<10 || cap(c.tmp) > 64<<10 {
		return
	}
	canonPool.Put(c)
}

// walk writes the canonical text of the value at data[pos:] (after
// optional whitespace) to c.out and reads its amount; depth is its nesting
// depth if it is an object or array. It returns the offset after the
// value, and false for a syntax error, a repeated key (unless keepFirst)
// or nesting beyond maxDepth.
func (c *canon) walk(data []byte, pos, depth int) (int, bool) {
	c.top, c.amount, c.priced, c.hasAmount = depth, 0, false, false
	return c.value(data, pos, depth)
}

// whole walks data as one value with only whitespace around it (depth 1).
func (c *canon) whole(data []byte) bool {
	end, ok := c.walk(data, 0, 1)
	if !ok {
		return false
	}
	r := reader{data: data, pos: end}
	return r.end() == nil
}

// value is walk below the top.
func (c *canon) value(data []byte, pos, depth int) (int, bool) {
	r := reader{data: data, pos: pos}
	switch r.peek() {
	case '{':
		if depth > c.maxDepth {
			return 0, false
		}
		r.pos++
		if r.peek() == '}' {
			c.out = append(c.out, '{', '}')
			return r.pos + 1, true
		}
		at, base := len(c.out), len(c.ents)
		for {
			if r.peek() != '"' {
				return 0, false
			}
			s, e, esc, err := r.scanString()
			if err != nil {
				return 0, false
			}
			ent := canonEntry{keyStart: int32(s), keyEnd: int32(e), escaped: esc}
			if esc {
				ent.keyStart = int32(len(c.keys))
				c.keys = appendUnescaped(c.keys, data[s:e])
				ent.keyEnd = int32(len(c.keys))
			}
			if r.peek() != ':' {
				return 0, false
			}
			ent.start = int32(len(c.out))
			end, ok := c.value(data, r.pos+1, depth+1)
			if !ok {
				return 0, false
			}
			r.pos = end
			ent.end = int32(len(c.out))
			if depth == c.top && !c.hasAmount && string(c.key(data, &ent)) == AmountKey {
				c.hasAmount = true
				c.amount, c.priced = amountOf(c.out[ent.start:ent.end])
			}
			c.ents = append(c.ents, ent)
			if b := r.peek(); b == ',' {
				r.pos++
				continue
			} else if b != '}' {
				return 0, false
			}
			r.pos++
			break
		}
		ents := c.sortEntries(data, c.ents[base:])
		if ents == nil {
			return 0, false
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
		return r.pos, true
	case '[':
		if depth > c.maxDepth {
			return 0, false
		}
		r.pos++
		c.out = append(c.out, '[')
		if r.peek() == ']' {
			c.out = append(c.out, ']')
			return r.pos + 1, true
		}
		for i := 0; ; i++ {
			if i > 0 {
				c.out = append(c.out, ',')
			}
			end, ok := c.value(data, r.pos, depth+1)
			if !ok {
				return 0, false
			}
			r.pos = end
			switch r.peek() {
			case ',':
				r.pos++
			case ']':
				c.out = append(c.out, ']')
				return r.pos + 1, true
			default:
				return 0, false
			}
		}
	case '"':
		s, e, esc, err := r.scanString()
		if err != nil {
			return 0, false
		}
		if esc {
			c.tmp = appendUnescaped(c.tmp[:0], data[s:e])
			c.out = appendQuoted(c.out, c.tmp)
		} else {
			// Without escapes the text holds no quote, backslash or control
			// character: it is its own canonical form.
			c.out = append(c.out, data[s-1:e+1]...)
		}
		return r.pos, true
	case 't':
		if r.literal("true") != nil {
			return 0, false
		}
		c.out = append(c.out, "true"...)
		return r.pos, true
	case 'f':
		if r.literal("false") != nil {
			return 0, false
		}
		c.out = append(c.out, "false"...)
		return r.pos, true
	case 'n':
		if r.literal("null") != nil {
			return 0, false
		}
		c.out = append(c.out, "null"...)
		return r.pos, true
	default:
		b := r.peek()
		if b != '-' && (b < '0' || b > '9') {
			return 0, false
		}
		s, plain, err := r.scanNumber()
		if err != nil {
			return 0, false
		}
		num := data[s:r.pos]
		switch {
		case !plain:
			c.out = append(c.out, canonicalNumber(string(num))...)
		case len(num) == 2 && num[0] == '-' && num[1] == '0':
			c.out = append(c.out, '0')
		default:
			c.out = append(c.out, num...)
		}
		return r.pos, true
	}
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
// of each key; nil for a repeated key without keepFirst.
func (c *canon) sortEntries(data []byte, ents []canonEntry) []canonEntry {
	less := func(a, b *canonEntry) int { return bytes.Compare(c.key(data, a), c.key(data, b)) }
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
		if bytes.Equal(c.key(data, &kept[len(kept)-1]), c.key(data, &ents[i])) {
			if !c.keepFirst {
				return nil
			}
			continue
		}
		kept = append(kept, ents[i])
	}
	return kept
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
