package contract

import (
	"bytes"
	"strings"
	"time"
	"unicode/utf8"
)

// This file is the fast path of Validate: a direct check, in Go, of the
// rules of the two event schemas (schemas/event.v1.schema.json and
// event.v2.schema.json) and of the checks Validate adds to them, made while
// the record is read once, in place, without building a map. It only ever
// says "valid": a record it cannot prove valid, for whatever reason, goes
// to the schema path (decodeRecord, checkSchema, build), which
// decides the rejection and its detail exactly as it always has. What it
// accepts, the schema path accepts with the same Event; the tests in
// fast_test.go hold the two paths to that.
//
// What the fast path proves, rule by rule (anything else falls back):
//
//   - the record is at most MaxSize bytes long (Size is never larger);
//   - one JSON object, only whitespace around it, every string valid UTF-8
//     without lone surrogates (the reader's own checks);
//   - top-level keys are contract fields written without escapes, each
//     once (so there is no duplicate, no case variant, no unknown field);
//   - schema_version is the literal 1 or 2 (const);
//   - every field of the version's "required" is present, and no field
//     outside its "properties" (additionalProperties false): v1 has no
//     occurred_at, v2 no occurred_minute;
//   - event_id and receipt_id are strings without escapes matching
//     ^[A-Za-z0-9._:-]{1,128}$ (pattern);
//   - type is one of the enum's three strings, without escapes;
//   - occurred_minute (v1) is an integer literal without fraction or
//     exponent in [15778080, 2^53] (type integer, minimum, maximum; the
//     precheck of plain literals within ±2^53);
//   - occurred_at and ingested_at are strings without escapes that
//     parseTimestamp accepts (format date-time accepts all of them), UTC
//     for occurred_at, not before 2000 and before year 9999 (the same
//     range for the v1 event time);
//   - partition_key is a string without escapes of 1–128 characters and
//     producer_version one of at most 64 (minLength, maxLength, counted in
//     code points as the library does);
//   - payload is an object nested at most fastMaxDepth levels (with the
//     record) without a repeated key at any depth (type object; the
//     reader's duplicate and depth checks);
//   - the event time and ingested_at are at most MaxFutureSkew after the
//     received time, and the event time at most MaxFutureSkew after
//     ingested_at.

// Indexes of the top-level fields in fastRecord.vals and the seen mask.
const (
	fxSchemaVersion = iota
	fxEventID
	fxReceiptID
	fxType
	fxOccurredMinute
	fxOccurredAt
	fxIngestedAt
	fxPartitionKey
	fxProducerVersion
	fxPayload
)

// Required fields of each version (schemaRequired), as seen masks.
var (
	fxRequiredV1 = requiredMask(1)
	fxRequiredV2 = requiredMask(2)
)

func requiredMask(version int) uint16 {
	var m uint16
	for _, name := range schemaRequired[version] {
		m |= 1 << fastField([]byte(name))
	}
	return m
}

// fastMaxDepth is how deep (counting the record itself) the fast path
// follows a payload; a deeper one, valid or not, goes to the schema path.
const fastMaxDepth = 32

// fastField returns the index of a top-level key, or -1 for a key that is
// not a contract field as written.
func fastField(k []byte) int {
	switch string(k) {
	case fieldSchemaVersion:
		return fxSchemaVersion
	case fieldEventID:
		return fxEventID
	case fieldReceiptID:
		return fxReceiptID
	case fieldType:
		return fxType
	case fieldOccurredMinute:
		return fxOccurredMinute
	case fieldOccurredAt:
		return fxOccurredAt
	case fieldIngestedAt:
		return fxIngestedAt
	case fieldPartitionKey:
		return fxPartitionKey
	case fieldProducerVersion:
		return fxProducerVersion
	case fieldPayload:
		return fxPayload
	}
	return -1
}

// fastRecord is what the fast path read of a record it proved valid. Its
// spans index the raw record.
type fastRecord struct {
	version  int
	seen     uint16
	vals     [10]span
	typ      string
	occurred time.Time
	ingested time.Time
	fp       uint64
	// amount and priced are AmountCents of the payload.
	amount int64
	priced bool
	// canon holds the payload's canonical text while fast runs.
	canon *canon
}

func (f *fastRecord) has(i int) bool { return f.seen&(1<<i) != 0 }

// fast checks raw on the fast path. It returns true, with fr filled, only
// for a record that the schema path accepts with the same event; false
// says nothing about the record.
func (v *Validator) fast(raw []byte, receivedAt time.Time, fr *fastRecord) bool {
	if len(raw) > v.opts.MaxSize { // Size(raw) <= len(raw)
		return false
	}
	defer func() {
		if fr.canon != nil {
			fr.canon.release()
			fr.canon = nil
		}
	}()
	if !fr.scan(raw) {
		return false
	}
	val := func(i int) []byte { s := fr.vals[i]; return raw[s.start:s.end] }

	switch sv := val(fxSchemaVersion); {
	case len(sv) == 1 && sv[0] == '1':
		fr.version = 1
		if fr.seen&fxRequiredV1 != fxRequiredV1 || fr.has(fxOccurredAt) {
			return false
		}
	case len(sv) == 1 && sv[0] == '2':
		fr.version = 2
		if fr.seen&fxRequiredV2 != fxRequiredV2 || fr.has(fxOccurredMinute) {
			return false
		}
	default:
		return false
	}
	if !isID(val(fxEventID)) || !isID(val(fxReceiptID)) {
		return false
	}
	switch string(val(fxType)) {
	case TypeSubmitted:
		fr.typ = TypeSubmitted
	case TypeDraftSaved:
		fr.typ = TypeDraftSaved
	case TypeViewed:
		fr.typ = TypeViewed
	default:
		return false
	}
	if n := utf8.RuneCount(val(fxPartitionKey)); n < partitionKeyMinLen || n > partitionKeyMaxLen {
		return false
	}
	if fr.has(fxProducerVersion) && utf8.RuneCount(val(fxProducerVersion)) > producerVersionMaxLen {
		return false
	}

	if fr.version == 1 {
		n, ok := plainInt(val(fxOccurredMinute))
		if !ok || n < minEventMinute || n >= maxEventMinute {
			return false
		}
		fr.occurred = time.Unix(n*60, 0).UTC()
	} else {
		t, err := parseTimestamp(val(fxOccurredAt), true)
		if err != nil || t.Before(minEventTime) || !t.Before(maxEventTime) {
			return false
		}
		fr.occurred = t
	}
	limit := receivedAt.Add(v.opts.MaxFutureSkew)
	fr.ingested = receivedAt.UTC()
	if fr.has(fxIngestedAt) {
		t, err := parseTimestamp(val(fxIngestedAt), false)
		if err != nil || t.Before(minEventTime) || !t.Before(maxEventTime) || t.After(limit) {
			return false
		}
		fr.ingested = t
	}
	if fr.occurred.After(limit) || fr.occurred.Sub(fr.ingested) > v.opts.MaxFutureSkew {
		return false
	}

	h := fingerprintHeadOf(val(fxReceiptID), fr.typ, fr.occurred.UnixMilli(), val(fxPartitionKey))
	if fr.has(fxPayload) {
		h.bytes(fr.canon.out) // an object: never null
		fr.amount, fr.priced = fr.canon.amount, fr.canon.priced
	} else {
		h.bytes(emptyObject)
	}
	fr.fp = uint64(h)
	return true
}

// scan reads the top-level object of raw into fr: which fields are present
// and the span of each value. It returns false for anything the fast path
// does not take: a syntax error, an escaped or unknown key, a repeated key,
// or a value of a type the schemas do not allow for its field.
func (fr *fastRecord) scan(raw []byte) bool {
	r := reader{data: raw, limit: fastMaxDepth}
	if r.peek() != '{' {
		return false
	}
	k, esc, more, err := r.member(true)
	if !more {
		return false // no fields: schema_version is missing
	}
	for ; more; k, esc, more, err = r.member(false) {
		i := fastField(raw[k.start:k.end])
		if esc || i < 0 || fr.has(i) {
			return false
		}
		fr.seen |= 1 << i
		// The value, of a type its field's schema allows.
		switch i {
		case fxPayload:
			if r.peek() != '{' {
				return false
			}
			start := r.pos
			fr.canon = getCanon(false)
			if fr.canon.read(&r) != nil {
				return false
			}
			fr.vals[i] = span{start, r.pos}
		case fxSchemaVersion, fxOccurredMinute:
			s, plain, err := r.scanNumber()
			if err != nil || !plain {
				return false
			}
			fr.vals[i] = span{s, r.pos}
		default: // the string fields, without escapes
			if r.peek() != '"' {
				return false
			}
			s, e, esc, err := r.scanString()
			if err != nil || esc {
				return false
			}
			fr.vals[i] = span{s, e}
		}
	}
	return err == nil && skipSpace(raw, r.pos) == len(raw)
}

// plainInt reads an integer literal of at most 16 digits (more is beyond
// 2^53 anyway).
func plainInt(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 16 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

// event builds the canonical event of a record fr proved valid. The four
// strings share one allocation and the payload another; neither holds on to
// raw.
func (fr *fastRecord) event(raw []byte) Event {
	val := func(i int) []byte { s := fr.vals[i]; return raw[s.start:s.end] }
	id, rc, pk, pv := val(fxEventID), val(fxReceiptID), val(fxPartitionKey), val(fxProducerVersion)
	var sb strings.Builder
	sb.Grow(len(id) + len(rc) + len(pk) + len(pv))
	sb.Write(id)
	sb.Write(rc)
	sb.Write(pk)
	sb.Write(pv)
	all := sb.String()
	cut := func(n int) string { s := all[:n]; all = all[n:]; return s }
	e := Event{
		SchemaVersion: fr.version,
		EventID:       cut(len(id)),
		ReceiptID:     cut(len(rc)),
		PartitionKey:  cut(len(pk)),
		Type:          fr.typ,
		OccurredAt:    fr.occurred,
		IngestedAt:    fr.ingested,
		Fingerprint:   fr.fp,
	}
	if len(pv) > 0 {
		e.ProducerVersion = cut(len(pv))
	}
	if fr.has(fxPayload) {
		e.Payload = bytes.Clone(val(fxPayload))
	}
	return e
}
