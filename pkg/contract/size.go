package contract

import (
	"bytes"
	"time"
)

// Size returns the size of raw as the contract measures it against
// Config.MaxSize: the bytes of the record as its producer wrote it, that is
// without the JSON whitespace around the object and without an ingested_at
// stamp in the exact form StampIngestedAt writes (right after the opening
// brace, RFC 3339 UTC with nanoseconds and trailing zeros dropped). Ingest
// trims each line and stamps it before it publishes, and the batch pass reads
// the file as written; measuring this way makes both see the same size, so a
// record of exactly 64 KiB is accepted on both paths. A producer that writes
// such a stamp itself gains at most 47 bytes, the same on both paths. Safe
// for concurrent use.
func Size(raw []byte) int {
	raw = bytes.Trim(raw, " \t\r\n")
	return len(raw) - stampLen(raw)
}

// stampKey is what StampIngestedAt inserts first, with the opening brace.
const stampKey = `{"ingested_at":"`

// stampLen returns the length of the ingested_at stamp that opens the object
// raw (from the key's opening quote through the comma after the value, if
// more fields follow), or 0 when raw does not open with one in ingest's exact
// form.
func stampLen(raw []byte) int {
	if !bytes.HasPrefix(raw, []byte(stampKey)) {
		return 0
	}
	rest := raw[len(stampKey):]
	// The longest form is 2006-01-02T15:04:05.999999999Z, 30 bytes.
	end := bytes.IndexByte(rest[:min(len(rest), 31)], '"')
	if end < 0 || end+1 >= len(rest) {
		return 0
	}
	ts := string(rest[:end])
	t, err := parseTimestamp(ts, true)
	if err != nil || t.Format(time.RFC3339Nano) != ts {
		return 0
	}
	n := len(stampKey) - 1 + end + 1 // without the brace, with the closing quote
	switch rest[end+1] {
	case ',':
		return n + 1
	case '}':
		return n
	}
	return 0
}
