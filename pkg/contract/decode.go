package contract

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/bits"
	"unicode/utf8"
)

// This file is a small strict JSON reader made for records. It reads a
// record once, builds the generic value the schema path checks
// (map[string]any, []any, string, json.Number, bool, nil), and on the way
// notices what encoding/json silently hides: duplicate object keys, invalid
// UTF-8 and lone UTF-16 surrogates (both rejected: RFC 8259 section 8 asks
// for UTF-8 text and I-JSON forbids unpaired surrogates). The same reader can
// skip a value without building it, for StampIngestedAt and PeekEventID.

// maxDepth bounds the nesting of objects and arrays in one record. A
// 64 KiB record could otherwise nest tens of thousands of levels.
const maxDepth = 256

// syntaxError is a record that is not a JSON text this contract accepts.
type syntaxError struct {
	off int
	msg string
}

func (e *syntaxError) Error() string { return fmt.Sprintf("%s at byte %d", e.msg, e.off) }

// depthError is a record nested deeper than maxDepth. The text may be
// well-formed JSON, so it is an invalid field rather than malformed JSON.
type depthError struct{ off int }

func (e *depthError) Error() string {
	return fmt.Sprintf("nested deeper than %d levels at byte %d", maxDepth, e.off)
}

// reader reads one JSON text from data.
type reader struct {
	data []byte
	// str is a string copy of data, made once per built value, that strings
	// without escapes are cut from: one allocation instead of one per string.
	str   string
	pos   int
	depth int
	// dup is the first duplicate key met below the top level (the top level
	// is checked by decodeRecord itself), when hasDup.
	dup    string
	hasDup bool
}

func (r *reader) fail(format string, args ...any) error {
	return &syntaxError{off: r.pos, msg: fmt.Sprintf(format, args...)}
}

// ws skips JSON whitespace.
func (r *reader) ws() {
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

// readString reads a string value (pos at its opening quote).
func (r *reader) readString() (string, error) {
	s, e, esc, err := r.scanString()
	if err != nil {
		return "", err
	}
	if !esc {
		if r.str == "" {
			r.str = string(r.data)
		}
		return r.str[s:e], nil
	}
	return unescape(r.data[s:e]), nil
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
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
	default:
		r.pos = i
		return 0, false, r.fail("invalid number")
	}
	plain = true
	if i < len(d) && d[i] == '.' {
		plain = false
		i++
		j := i
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
		if i == j {
			r.pos = i
			return 0, false, r.fail("invalid number: no digits after '.'")
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		plain = false
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		j := i
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
		if i == j {
			r.pos = i
			return 0, false, r.fail("invalid number: no digits in exponent")
		}
	}
	r.pos = i
	return start, plain, nil
}

// literal consumes the literal word at pos.
func (r *reader) literal(word string) error {
	if len(r.data)-r.pos < len(word) || string(r.data[r.pos:r.pos+len(word)]) != word {
		return r.fail("invalid literal, want %s", word)
	}
	r.pos += len(word)
	return nil
}

// value reads one value after whitespace. With build it returns the value,
// otherwise it only checks it and returns nil.
func (r *reader) value(build bool) (any, error) {
	switch r.peek() {
	case '{':
		return r.object(build)
	case '[':
		return r.array(build)
	case '"':
		if !build {
			_, _, _, err := r.scanString()
			return nil, err
		}
		return r.readString()
	case 't':
		return true, r.literal("true")
	case 'f':
		return false, r.literal("false")
	case 'n':
		return nil, r.literal("null")
	case 0:
		if r.pos >= len(r.data) {
			return nil, r.fail("unexpected end of input, want a value")
		}
		return nil, r.fail("unexpected NUL byte")
	default:
		c := r.data[r.pos]
		if c == '-' || (c >= '0' && c <= '9') {
			s, _, err := r.scanNumber()
			if err != nil || !build {
				return nil, err
			}
			if r.str == "" {
				r.str = string(r.data)
			}
			return json.Number(r.str[s:r.pos]), nil
		}
		if c >= utf8.RuneSelf {
			return nil, r.fail("unexpected non-ASCII byte, want a value")
		}
		return nil, r.fail("unexpected %q, want a value", c)
	}
}

func (r *reader) enter() error {
	r.depth++
	if r.depth > maxDepth {
		return &depthError{off: r.pos}
	}
	return nil
}

// object reads an object (pos at '{').
func (r *reader) object(build bool) (any, error) {
	if err := r.enter(); err != nil {
		return nil, err
	}
	r.pos++
	var m map[string]any
	if build {
		m = make(map[string]any)
	}
	if r.peek() == '}' {
		r.pos++
		r.depth--
		if build {
			return m, nil
		}
		return nil, nil
	}
	for {
		if r.peek() != '"' {
			return nil, r.fail("want a string key")
		}
		var key string
		var err error
		if build {
			key, err = r.readString()
		} else {
			_, _, _, err = r.scanString()
		}
		if err != nil {
			return nil, err
		}
		if err := r.expect(':', "':' after key"); err != nil {
			return nil, err
		}
		v, err := r.value(build)
		if err != nil {
			return nil, err
		}
		if build {
			if _, seen := m[key]; seen {
				if !r.hasDup {
					r.dup, r.hasDup = key, true
				}
			} else {
				m[key] = v
			}
		}
		switch r.peek() {
		case ',':
			r.pos++
		case '}':
			r.pos++
			r.depth--
			if build {
				return m, nil
			}
			return nil, nil
		default:
			return nil, r.fail("want ',' or '}' in object")
		}
	}
}

// array reads an array (pos at '[').
func (r *reader) array(build bool) (any, error) {
	if err := r.enter(); err != nil {
		return nil, err
	}
	r.pos++
	var a []any
	if build {
		a = []any{}
	}
	if r.peek() == ']' {
		r.pos++
		r.depth--
		if build {
			return a, nil
		}
		return nil, nil
	}
	for {
		v, err := r.value(build)
		if err != nil {
			return nil, err
		}
		if build {
			a = append(a, v)
		}
		switch r.peek() {
		case ',':
			r.pos++
		case ']':
			r.pos++
			r.depth--
			if build {
				return a, nil
			}
			return nil, nil
		default:
			return nil, r.fail("want ',' or ']' in array")
		}
	}
}

// end checks that only whitespace follows the value.
func (r *reader) end() error {
	if r.peek() != 0 || r.pos < len(r.data) {
		return r.fail("unexpected data after the top-level value")
	}
	return nil
}

// record is a decoded top-level object.
type record struct {
	fields map[string]any
	// payload is the raw text of the payload value (a sub-slice of the
	// input), nil when absent.
	payload []byte
	// dupKey is the first repeated key, dupIn the top-level field it was
	// found in ("" for the top level itself), when hasDup.
	dupKey, dupIn string
	hasDup        bool
	// unknown reports a top-level key that is not a contract field.
	unknown bool
}

// decodeRecord reads data as one JSON object. Its error is a *syntaxError
// (malformed, or not an object) or a *depthError. Duplicate keys are
// reported in the record, not as an error, so that a syntax error later in
// the text still wins. Strings in the result share one copy of data.
func decodeRecord(data []byte) (record, error) {
	r := reader{data: data}
	var rec record
	switch r.peek() {
	case '{':
	case 0:
		if r.pos >= len(data) {
			return rec, r.fail("empty record")
		}
		return rec, r.fail("unexpected NUL byte")
	default:
		// Say whether this is JSON at all or JSON that is not an object.
		if _, err := r.value(false); err != nil {
			if _, deep := err.(*depthError); !deep {
				return rec, err
			}
			r.pos = len(data)
		}
		if err := r.end(); err != nil {
			return rec, err
		}
		return rec, &syntaxError{off: 0, msg: "record is not a JSON object"}
	}
	r.pos++
	r.depth = 1
	rec.fields = make(map[string]any, 10)
	if r.peek() == '}' {
		r.pos++
		return rec, r.end()
	}
	for {
		if r.peek() != '"' {
			return rec, r.fail("want a string key")
		}
		key, err := r.readString()
		if err != nil {
			return rec, err
		}
		if !isKnownField(key) {
			rec.unknown = true
		}
		if err := r.expect(':', "':' after key"); err != nil {
			return rec, err
		}
		r.ws()
		start := r.pos
		v, err := r.value(true)
		if err != nil {
			return rec, err
		}
		if r.hasDup && !rec.hasDup {
			rec.dupKey, rec.dupIn, rec.hasDup = r.dup, key, true
		}
		if _, seen := rec.fields[key]; seen {
			if !rec.hasDup {
				rec.dupKey, rec.dupIn, rec.hasDup = key, "", true
			}
		} else {
			rec.fields[key] = v
			if key == "payload" {
				rec.payload = data[start:r.pos]
			}
		}
		switch r.peek() {
		case ',':
			r.pos++
		case '}':
			r.pos++
			return rec, r.end()
		default:
			return rec, r.fail("want ',' or '}' in object")
		}
	}
}

// decodeValue reads data as one JSON value of any kind. hasDup reports a
// repeated key in some object of it.
func decodeValue(data []byte) (v any, hasDup bool, err error) {
	r := reader{data: data}
	v, err = r.value(true)
	if err == nil {
		err = r.end()
	}
	return v, r.hasDup, err
}

// topLevel walks the keys of the top-level object in data without building
// values. fn gets each decoded key (only valid during the call) and the span
// of its value; it returns false to stop the walk early. The error is nil
// only when the walk stopped early or the whole text is a well-formed object.
func topLevel(data []byte, fn func(key []byte, valStart, valEnd int) bool) error {
	r := reader{data: data}
	if err := r.expect('{', "'{'"); err != nil {
		return err
	}
	r.depth = 1
	if r.peek() == '}' {
		r.pos++
		return r.end()
	}
	for {
		if r.peek() != '"' {
			return r.fail("want a string key")
		}
		s, e, esc, err := r.scanString()
		if err != nil {
			return err
		}
		key := data[s:e]
		if esc {
			key = []byte(unescape(key))
		}
		if err := r.expect(':', "':' after key"); err != nil {
			return err
		}
		r.ws()
		start := r.pos
		if _, err := r.value(false); err != nil {
			return err
		}
		if !fn(key, start, r.pos) {
			return nil
		}
		switch r.peek() {
		case ',':
			r.pos++
		case '}':
			r.pos++
			return r.end()
		default:
			return r.fail("want ',' or '}' in object")
		}
	}
}
