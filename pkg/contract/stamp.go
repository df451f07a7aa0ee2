package contract

import (
	"bytes"
	"time"
)

// StampIngestedAt returns a copy of raw with "ingested_at":"<t>" (t in UTC,
// RFC 3339 with nanoseconds, trailing zeros dropped) inserted right after
// the opening brace, and true, when raw is a well-formed JSON object without
// a top-level ingested_at. Otherwise — the field is present, or raw is not a
// well-formed JSON object — it returns raw itself and false: a stamp is
// never changed, so a replayed record keeps its first ingest time. It walks
// the text once without decoding values (no allocation unless it stamps or
// a key holds escapes). raw is not modified; safe for concurrent use.
func StampIngestedAt(raw []byte, t time.Time) ([]byte, bool) {
	found := false
	keys := 0
	err := topLevel(raw, func(key []byte, _, _ int) bool {
		keys++
		if string(key) == "ingested_at" {
			found = true
			return false
		}
		return true
	})
	if found || err != nil {
		return raw, false
	}
	brace := skipSpace(raw, 0) // topLevel checked that a brace opens raw
	out := make([]byte, 0, len(raw)+48)
	out = append(out, raw[:brace+1]...)
	out = append(out, `"ingested_at":"`...)
	out = t.UTC().AppendFormat(out, time.RFC3339Nano)
	out = append(out, '"')
	if keys > 0 {
		out = append(out, ',')
	}
	out = append(out, raw[brace+1:]...)
	return out, true
}

// PeekEventID returns the top-level event_id of raw, a record that may be
// invalid in any way, or "" when none can be read. It first walks the
// object; when the text breaks before an event_id is met it falls back to
// the first `"event_id": "..."` in the bytes. Only a value of the id form
// (1–128 characters of [A-Za-z0-9._:-]) is returned, so the result is safe
// to put in a rejection row. Safe for concurrent use.
func PeekEventID(raw []byte) string {
	id, seen := "", false
	err := topLevel(raw, func(key []byte, start, end int) bool {
		if string(key) != "event_id" {
			return true
		}
		seen = true
		if raw[start] == '"' {
			id = unescape(raw[start+1 : end-1])
		}
		return false
	})
	if seen || err == nil {
		if isID(id) {
			return id
		}
		return ""
	}
	return scanEventID(raw)
}

// scanEventID finds `"event_id"`, optional spaces, ':', optional spaces and
// a quoted id in raw, without parsing anything else.
func scanEventID(raw []byte) string {
	const key = `"event_id"`
	for off := 0; ; {
		i := bytes.Index(raw[off:], []byte(key))
		if i < 0 {
			return ""
		}
		p := off + i + len(key)
		off = p
		p = skipSpace(raw, p)
		if p >= len(raw) || raw[p] != ':' {
			continue
		}
		p = skipSpace(raw, p+1)
		if p >= len(raw) || raw[p] != '"' {
			continue
		}
		end := bytes.IndexByte(raw[p+1:], '"')
		if end < 0 {
			return ""
		}
		if id := string(raw[p+1 : p+1+end]); isID(id) {
			return id
		}
		return ""
	}
}

// isID reports whether s is 1–128 characters of [A-Za-z0-9._:-], the form
// of event_id and receipt_id.
func isID[S string | []byte](s S) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9',
			c == '.', c == '_', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}
