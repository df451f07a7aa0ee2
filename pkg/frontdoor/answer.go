package frontdoor

import (
	"strconv"
	"unicode/utf8"
)

// AppendJSON appends a as JSON, as encoding/json writes it, without
// reflection: every request is answered with one.
func (a *Answer) AppendJSON(b []byte) []byte {
	b = append(b, `{"results":[`...)
	for i := range a.Results {
		r := &a.Results[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '{')
		if r.EventID != "" {
			b = append(b, `"event_id":`...)
			b = appendJSONString(b, r.EventID)
			b = append(b, ',')
		}
		b = append(b, `"status":`...)
		b = appendJSONString(b, r.Status)
		if r.Reason != "" {
			b = append(b, `,"reason":`...)
			b = appendJSONString(b, r.Reason)
		}
		b = append(b, `,"seq":`...)
		b = strconv.AppendUint(b, r.Seq, 10)
		b = append(b, '}')
	}
	b = append(b, `],"stored":`...)
	b = strconv.AppendInt(b, int64(a.Stored), 10)
	b = append(b, `,"duplicates":`...)
	b = strconv.AppendInt(b, int64(a.Duplicates), 10)
	b = append(b, `,"invalid":`...)
	b = strconv.AppendInt(b, int64(a.Invalid), 10)
	if a.Error != "" {
		b = append(b, `,"error":`...)
		b = appendJSONString(b, a.Error)
	}
	return append(b, '}')
}

// appendJSONString appends s as a JSON string the way encoding/json does:
// quotes, backslashes and control characters escaped, <, > and & as
// \u003c, \u003e and \u0026, U+2028 and U+2029 escaped, and bytes that
// are not UTF-8 as U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
