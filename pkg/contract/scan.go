package contract

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math/bits"
	"unicode/utf8"
)

// This file is the one scanner of JSON text in the package: every walk of
// a record or a payload (the value builder of decode.go, the fast path's
// scan, the canonical writer of canon.go, skip and topLevel for
// StampIngestedAt and PeekEventID) reads objects and arrays with a
// reader's member and element, and values with token (or scanString and
// scanNumber where the walk knows what it wants). The scanner is
// strict: besides RFC 8259 syntax it refuses invalid UTF-8 and lone UTF-16
// surrogates in strings (RFC 8259 section 8, I-JSON) and nesting deeper
// than its limit. Of a repeated key the first member counts for every
// walker: the value builder keeps it and notes the repeat (reader.put),
// the canonical writer keeps it or refuses the text (canon.sortEntries),
// the fast path refuses the record.

// maxDepth bounds the nesting of objects and arrays in one record. A
// 64 KiB record could otherwise nest tens of thousands of levels.
const maxDepth = 256

// syntaxError is a record that is not a JSON text this contract accepts.
type syntaxError struct {
	off int
	msg string
}

func (e *syntaxError) Error() string { return fmt.Sprintf("%s at byte %d", e.msg, e.off) }

// depthError is a text nested deeper than its limit. The text may be
// well-formed JSON, so it is an invalid field rather than malformed JSON.
type depthError struct{ off, limit int }

func (e *depthError) Error() string {
	return fmt.Sprintf("nested deeper than %d levels at byte %d", e.limit, e.off)
}

// reader reads one JSON text from data.
type reader struct {
	data []byte
	// str is a string copy of data, made once per built value, that strings
	// without escapes are cut from: one allocation instead of one per string.
	str   string
	pos   int
	depth int
	// limit bounds depth; zero means maxDepth.
	limit int
	// dup is the first repeated key met while building values (decode.go),
	// at offset dupAt, when hasDup.
	dup    string
	dupAt  int
	hasDup bool
}

// tokenKind is the kind of a value, as token reads it.
type tokenKind uint8

const (
	kindString tokenKind = iota
	kindNumber
	kindLiteral // true, false or null
	kindObject
	kindArray
)

// fail returns a *syntaxError at pos. It is kept out of line: errors are
// the cold path, and the scanner's loops stay small.
//
//go:noinline
func (r *reader) fail(format string, args ...any) error {
	return &syntaxError{off: r.pos, msg: fmt.Sprintf(format, args...)}
}

// skipSpace returns the offset of the first byte at or after p in b that is
// not JSON whitespace.
func skipSpace(b []byte, p int) int {
	for p < len(b) {
		switch b[p] {
		case ' ', '\t', '\n', '\r':
			p++
		default:
			return p
		}
	}
	return p
}

// ws skips JSON whitespace.
func (r *reader) ws() {
	// Compact JSON has none: one comparison for the common case.
	if r.pos < len(r.data) && r.data[r.pos] > ' ' {
		return
	}
	for r.pos < len(r.data) {
		switch r.data[r.pos] {
		case ' ', '\t', '\n', '\r':
			r.pos++
		default:
			return
		}
	}
}

// peek returns the byte at pos after whitespace, or 0 at the end.
func (r *reader) peek() byte {
	r.ws()
	if r.pos >= len(r.data) {
		return 0
	}
	return r.data[r.pos]
}

// expect consumes byte c after whitespace.
func (r *reader) expect(c byte, what string) error {
	if r.peek() != c {
		if r.pos >= len(r.data) {
			return r.fail("unexpected end of input, want %s", what)
		}
		return r.fail("unexpected %q, want %s", r.data[r.pos], what)
	}
	r.pos++
	return nil
}

// token reads the value after whitespace: a string (start and end span its
// raw contents, flag tells it holds escapes), a number (the span of its
// literal, flag tells an integer literal: no fraction, no exponent) or a
// literal (its span), consumed; or an object or an array, left at its
// opening byte for member or element.
func (r *reader) token() (k tokenKind, start, end int, flag bool, err error) {
	switch c := r.peek(); c {
	case '{':
		return kindObject, r.pos, r.pos, false, nil
	case '[':
		return kindArray, r.pos, r.pos, false, nil
	case '"':
		start, end, flag, err = r.scanString()
		return kindString, start, end, flag, err
	case 't':
		start, err = r.literal("true")
	case 'f':
		start, err = r.literal("false")
	case 'n':
		start, err = r.literal("null")
	default:
		if c != '-' && (c < '0' || c > '9') {
			return 0, 0, 0, false, r.notValue()
		}
		start, flag, err = r.scanNumber()
		return kindNumber, start, r.pos, flag, err
	}
	return kindLiteral, start, r.pos, false, err
}

// notValue is the error for the byte at pos, which starts no value.
func (r *reader) notValue() error {
	if r.pos >= len(r.data) {
		return r.fail("unexpected end of input, want a value")
	}
	switch c := r.data[r.pos]; {
	case c == 0:
		return r.fail("unexpected NUL byte")
	case c >= utf8.RuneSelf:
		return r.fail("unexpected non-ASCII byte, want a value")
	default:
		return r.fail("unexpected %q, want a value", c)
	}
}

// span is a range of the text: a key's or a string's raw contents, a
// number's literal, or a value's text.
type span struct{ start, end int }

// deeper enters one more level of nesting and reports whether it is
// beyond the limit.
func (r *reader) deeper() bool {
	r.depth++
	return r.depth > maxDepth || r.limit > 0 && r.depth > r.limit
}

// tooDeep is the error for nesting beyond the limit at pos.
//
//go:noinline
func (r *reader) tooDeep() error {
	return &depthError{off: r.pos, limit: cmp.Or(r.limit, maxDepth)}
}

// member reads up to the value of an object's next member: with first the
// object's '{' at pos (entering it), else the ',' after the previous
// member; then the key and its ':'. It returns the span of the key's raw
// contents and whether it holds escapes; more is false, with the object
// left, after its closing '}'.
func (r *reader) member(first bool) (key span, escaped, more bool, err error) {
	if first {
		if r.deeper() {
			return span{}, false, false, r.tooDeep()
		}
		r.pos++
	}
	switch c := r.peek(); {
	case c == '}':
		r.pos++
		r.depth--
		return span{}, false, false, nil
	case first:
	case c == ',':
		r.pos++
	default:
		return span{}, false, false, r.notNext('}')
	}
	if r.peek() != '"' {
		return span{}, false, false, r.fail("want a string key")
	}
	s, e, esc, err := r.scanString()
	if err != nil {
		return span{}, false, false, err
	}
	if r.peek() != ':' {
		return span{}, false, false, r.expect(':', "':' after key")
	}
	r.pos++
	r.ws()
	return span{s, e}, esc, true, nil
}

// element reads up to an array's next element: with first the array's '['
// at pos (entering it), else the ',' after the previous element. more is
// false, with the array left, after its closing ']'.
func (r *reader) element(first bool) (more bool, err error) {
	if first {
		if r.deeper() {
			return false, r.tooDeep()
		}
		r.pos++
	}
	switch c := r.peek(); {
	case c == ']':
		r.pos++
		r.depth--
		return false, nil
	case first:
		return true, nil
	case c == ',':
		r.pos++
		return true, nil
	}
	return false, r.notNext(']')
}

// notNext is the error for a byte after a member (closing '}') or an
// element (closing ']') that neither separates nor closes.
func (r *reader) notNext(closing byte) error {
	if closing == '}' {
		return r.fail("want ',' or '}' in object")
	}
	return r.fail("want ',' or ']' in array")
}

// end checks that only whitespace follows the value.
func (r *reader) end() error {
	if r.peek() != 0 || r.pos < len(r.data) {
		return r.fail("unexpected data after the top-level value")
	}
	return nil
}

// skip reads one value after whitespace without building it and without
// looking for repeated keys.
func (r *reader) skip() error {
	switch c := r.peek(); {
	case c == '{':
		_, _, more, err := r.member(true)
		for ; more; _, _, more, err = r.member(false) {
			if err := r.skip(); err != nil {
				return err
			}
		}
		return err
	case c == '[':
		more, err := r.element(true)
		for ; more; more, err = r.element(false) {
			if err := r.skip(); err != nil {
				return err
			}
		}
		return err
	case c == '"':
		_, _, _, err := r.scanString()
		return err
	case c == '-' || c >= '0' && c <= '9':
		_, _, err := r.scanNumber()
		return err
	}
	_, _, _, _, err := r.token() // true, false, null, or not a value
	return err
}

// topLevel walks the members of the top-level object in data, skipping
// their values. fn gets each decoded key (only valid during the call) and
// the span of its value; it returns false to stop the walk early. The
// error is nil only when the walk stopped early or the whole text is a
// well-formed object.
func topLevel(data []byte, fn func(key []byte, valStart, valEnd int) bool) error {
	r := reader{data: data}
	if r.peek() != '{' {
		return r.expect('{', "'{'")
	}
	k, esc, more, err := r.member(true)
	for ; more; k, esc, more, err = r.member(false) {
		key := data[k.start:k.end]
		if esc {
			key = appendUnescaped(nil, key)
		}
		start := r.pos
		if err := r.skip(); err != nil {
			return err
		}
		if !fn(key, start, r.pos) {
			return nil
		}
	}
	if err != nil {
		return err
	}
	return r.end()
}

// scanString reads the string whose opening quote is at pos. It returns the
// span of the raw contents (between the quotes) and whether it holds escapes.
func (r *reader) scanString() (start, end int, escaped bool, err error) {
	r.pos++ // opening quote
	start = r.pos
	d := r.data
	for r.pos < len(d) {
		// Skip plain bytes (printable ASCII but quote and backslash) 8 at a
		// time, then right to the first byte that is not.
		if r.pos+8 <= len(d) {
			m := special8(binary.LittleEndian.Uint64(d[r.pos:]))
			if m == 0 {
				r.pos += 8
				continue
			}
			r.pos += bits.TrailingZeros64(m) >> 3
		}
		c := d[r.pos]
		switch {
		case c == '"':
			end = r.pos
			r.pos++
			return start, end, escaped, nil
		case c == '\\':
			escaped = true
			if err := r.scanEscape(); err != nil {
				return 0, 0, false, err
			}
		case c < 0x20:
			return 0, 0, false, r.fail("control character %#02x in string", c)
		case c < utf8.RuneSelf:
			r.pos++
		default:
			rn, size := utf8.DecodeRune(d[r.pos:])
			if rn == utf8.RuneError && size == 1 {
				return 0, 0, false, r.fail("invalid UTF-8 in string")
			}
			r.pos += size
		}
	}
	return 0, 0, false, r.fail("unterminated string")
}

// special8 finds the bytes of x (8 bytes of a string, little-endian) that
// are not plain: a quote, a backslash, a control character or a byte of a
// multi-byte UTF-8 sequence. It returns 0 when all are plain; otherwise the
// lowest set bit is the high bit of the first byte that is not (bits above
// it may be set for plain bytes: a borrow only moves up).
func special8(x uint64) uint64 {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	q := x ^ (ones * '"')
	b := x ^ (ones * '\\')
	m := (q - ones) &^ q      // a zero byte in q: a quote
	m |= (b - ones) &^ b      // a backslash
	m |= (x - ones*0x20) &^ x // a byte below 0x20
	return (m | x) & highs    // x: a byte from 0x80
}

// scanEscape checks the escape sequence whose backslash is at pos.
func (r *reader) scanEscape() error {
	d := r.data
	if r.pos+1 >= len(d) {
		return r.fail("unterminated string")
	}
	switch d[r.pos+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		r.pos += 2
		return nil
	case 'u':
	default:
		return r.fail("invalid escape \\%c in string", d[r.pos+1])
	}
	cp, ok := hex4(d[r.pos+2:])
	if !ok {
		return r.fail("invalid \\u escape in string")
	}
	switch {
	case cp >= 0xDC00 && cp <= 0xDFFF:
		return r.fail("unpaired surrogate \\u%04X in string", cp)
	case cp >= 0xD800 && cp <= 0xDBFF:
		// A high surrogate must be followed by an escaped low surrogate.
		rest := d[r.pos+6:]
		if len(rest) < 6 || rest[0] != '\\' || rest[1] != 'u' {
			return r.fail("unpaired surrogate \\u%04X in string", cp)
		}
		lo, ok := hex4(rest[2:])
		if !ok || lo < 0xDC00 || lo > 0xDFFF {
			return r.fail("unpaired surrogate \\u%04X in string", cp)
		}
		r.pos += 12
	default:
		r.pos += 6
	}
	return nil
}

// hex4 reads four hex digits.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var v rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			v = v<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return v, true
}

// unescape decodes the raw contents of a string already checked by
// scanString.
func unescape(raw []byte) string {
	return string(appendUnescaped(make([]byte, 0, len(raw)), raw))
}

// appendUnescaped appends the decoded raw contents of a string already
// checked by scanString to out.
func appendUnescaped(out, raw []byte) []byte {
	for i := 0; i < len(raw); {
		c := raw[i]
		if c != '\\' {
			out = append(out, c)
			i++
			continue
		}
		switch raw[i+1] {
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			cp, _ := hex4(raw[i+2:])
			if cp >= 0xD800 && cp <= 0xDBFF {
				lo, _ := hex4(raw[i+8:])
				cp = 0x10000 + (cp-0xD800)<<10 + (lo - 0xDC00)
				i += 6
			}
			out = utf8.AppendRune(out, cp)
			i += 6
			continue
		default: // '"', '\\', '/'
			out = append(out, raw[i+1])
		}
		i += 2
	}
	return out
}

// scanNumber reads a number at pos. plain reports an integer literal (no
// fraction, no exponent).
func (r *reader) scanNumber() (start int, plain bool, err error) {
	d := r.data
	start = r.pos
	i := r.pos
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && d[i] >= '1' && d[i] <= '9':
		i = digits(d, i)
	default:
		r.pos = i
		return 0, false, r.fail("invalid number")
	}
	plain = true
	if i < len(d) && d[i] == '.' {
		plain = false
		j := digits(d, i+1)
		if j == i+1 {
			r.pos = j
			return 0, false, r.fail("invalid number: no digits after '.'")
		}
		i = j
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		plain = false
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		j := digits(d, i)
		if j == i {
			r.pos = j
			return 0, false, r.fail("invalid number: no digits in exponent")
		}
		i = j
	}
	r.pos = i
	return start, plain, nil
}

// digits returns the offset of the first byte at or after i in d that is
// not an ASCII digit.
func digits(d []byte, i int) int {
	for i < len(d) && d[i] >= '0' && d[i] <= '9' {
		i++
	}
	return i
}

// literal consumes the literal word at pos and returns where it started.
func (r *reader) literal(word string) (int, error) {
	start := r.pos
	if len(r.data)-r.pos < len(word) || string(r.data[r.pos:r.pos+len(word)]) != word {
		return 0, r.fail("invalid literal, want %s", word)
	}
	r.pos += len(word)
	return start, nil
}
