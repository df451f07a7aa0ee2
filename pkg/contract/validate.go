package contract

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Top-level field names of an event record.
const (
	fieldSchemaVersion   = "schema_version"
	fieldEventID         = "event_id"
	fieldReceiptID       = "receipt_id"
	fieldType            = "type"
	fieldOccurredMinute  = "occurred_minute"
	fieldOccurredAt      = "occurred_at"
	fieldIngestedAt      = "ingested_at"
	fieldPartitionKey    = "partition_key"
	fieldProducerVersion = "producer_version"
	fieldPayload         = "payload"
)

// knownFields are the fields of every version, in the order of docs/spec.md §2.
var knownFields = [...]string{
	fieldSchemaVersion, fieldEventID, fieldReceiptID, fieldType, fieldOccurredMinute,
	fieldOccurredAt, fieldIngestedAt, fieldPartitionKey, fieldProducerVersion, fieldPayload,
}

func isKnownField(k string) bool {
	switch k {
	case fieldSchemaVersion, fieldEventID, fieldReceiptID, fieldType, fieldOccurredMinute,
		fieldOccurredAt, fieldIngestedAt, fieldPartitionKey, fieldProducerVersion, fieldPayload:
		return true
	}
	return false
}

// Validator checks raw records against the event contract (docs/spec.md §2)
// and turns valid ones into canonical events. It is safe for concurrent use.
type Validator struct {
	opts Config
	// schemaOnly turns the fast path off: every record goes through the
	// schema path (for the tests that hold the two paths equal).
	schemaOnly bool
}

// NewValidator returns a Validator with opts (zero fields take their
// defaults); the error is a bad option.
func NewValidator(opts Config) (*Validator, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Validator{opts: opts}, nil
}

// Config returns the options in effect (defaults filled in).
func (v *Validator) Config() Config { return v.opts }

// Validate checks one raw record and returns its canonical event, with
// OccurredAt and IngestedAt in UTC, Payload a copy of the record's payload
// text and Fingerprint set. A v1 record is upcast (occurred_minute × 60 s
// becomes OccurredAt); SchemaVersion keeps the version the record was
// written in. receivedAt is the record's received time: the time the
// broker stored it (the RAW message's JetStream timestamp) in the
// streaming pass, the time the run or ingest took it in elsewhere. It
// stands in for ingested_at when the record has none, and it bounds both
// times of the record (docs/spec.md §2): a producer clock can never move a
// watermark ahead of the broker's.
//
// A record that breaks the contract returns a *RejectError (matched by the
// reason's sentinel with errors.Is) whose Detail names the field and whose
// EventID is set whenever a well-formed event_id could be read. The checks
// run in the order of Rules (rules.go), the first failure deciding the
// reason. Sizes are as Size measures them (without surrounding whitespace
// and ingest's ingested_at stamp) against MaxSize (64 KiB by default); step
// 5 runs before the schema so that a huge exponent is never expanded (the
// JSON Schema library the tests hold step 6 to would); a producer-written
// ingested_at may carry any offset and is judged in UTC; the 5 minutes of
// step 8 are MaxFutureSkew.
//
// A record of the common valid form (top-level keys and strings without
// escapes, a payload nested at most 32 levels) is read once, in place, and
// checked against the rules of its schema directly (fast.go); any other
// record, and every one that breaks a rule, is decoded and checked on the
// schema path (schema.go), which decides the rejection. Both give the
// same result. Validate does not keep raw. It is safe for concurrent use.
func (v *Validator) Validate(raw []byte, receivedAt time.Time) (Event, error) {
	if validateHook != nil {
		validateHook(v, raw, receivedAt)
	}
	if !v.schemaOnly {
		var fr fastRecord
		if v.fast(raw, receivedAt, &fr) {
			return fr.event(raw), nil
		}
	}
	return v.validateSchema(raw, receivedAt, nil)
}

// validateHook, when set, is given every record Validate is given. Only the
// tests set it (before any Validate call), to hold the fast path to the
// schema path on every record they use.
var validateHook func(v *Validator, raw []byte, receivedAt time.Time)

// validateSchema is Validate on the schema path: decode the record into a
// map, check it against its version's schema (checkSchema), then build
// the event. am, when not nil, gets the payload's amount.
func (v *Validator) validateSchema(raw []byte, receivedAt time.Time, am *amountRead) (Event, error) {
	if len(raw) > v.opts.MaxSize { // else Size(raw) <= len(raw) is within the limit
		if size := Size(raw); size > v.opts.MaxSize {
			return Event{}, Reject(ReasonTooLarge, PeekEventID(raw),
				"record is %d bytes, more than the limit of %d", size, v.opts.MaxSize)
		}
	}
	rec, err := decodeRecord(raw)
	if err != nil {
		if _, deep := err.(*depthError); deep {
			return Event{}, Reject(ReasonInvalidField, PeekEventID(raw), "record is %v", err)
		}
		return Event{}, Reject(ReasonMalformedJSON, PeekEventID(raw), "%v", err)
	}
	f := rec.fields
	// Strings of the record share one copy of raw; clone the ones an Event
	// or a RejectError keeps, so that they do not pin the whole record.
	id, _ := f[fieldEventID].(string)
	if isID(id) {
		id = strings.Clone(id)
	} else {
		id = ""
	}
	if rej := checkKeys(&rec, id); rej != nil {
		return Event{}, rej
	}
	version, rej := schemaVersion(f, id)
	if rej != nil {
		return Event{}, rej
	}
	if version == 1 {
		if n, ok := f[fieldOccurredMinute].(json.Number); ok {
			if _, rej := safeInt(fieldOccurredMinute, n, id); rej != nil {
				return Event{}, rej
			}
		}
	}
	if findings := checkSchema(f, version); len(findings) > 0 {
		return Event{}, schemaRejection(findings, id)
	}
	return v.build(&rec, version, id, receivedAt, am)
}

// amountRead is AmountCents of an event's payload, read with its
// fingerprint.
type amountRead struct {
	cents  int64
	priced bool
}

// checkKeys rejects repeated keys and case variants of contract fields.
func checkKeys(rec *record, id string) *RejectError {
	if rec.hasDup {
		if rec.dupIn == "" {
			if rec.dupKey == fieldEventID {
				id = ""
			}
			return Reject(ReasonInvalidField, id, "key %q appears more than once", rec.dupKey)
		}
		return Reject(ReasonInvalidField, id, "key %q appears more than once inside %q", rec.dupKey, rec.dupIn)
	}
	if !rec.unknown {
		return nil
	}
	var variant, field string
	for k := range rec.fields {
		if isKnownField(k) {
			continue
		}
		for _, known := range knownFields {
			// Pick the smallest offending key so the detail is stable.
			if strings.EqualFold(k, known) && (variant == "" || k < variant) {
				variant, field = k, known
			}
		}
	}
	if variant == "" {
		return nil
	}
	if field == fieldEventID {
		id = ""
	}
	return Reject(ReasonInvalidField, id, "key %q differs from the field %q only by case", variant, field)
}

// schemaVersion reads schema_version: 1 or 2, or a rejection.
func schemaVersion(f map[string]any, id string) (int, *RejectError) {
	sv, ok := f[fieldSchemaVersion]
	if !ok {
		return 0, Reject(ReasonMissingField, id, "schema_version is required")
	}
	if n, ok := sv.(json.Number); ok && isPlainInt(string(n)) {
		if _, rej := safeInt(fieldSchemaVersion, n, id); rej != nil {
			return 0, rej
		}
		switch n {
		case "1":
			return 1, nil
		case "2":
			return 2, nil
		}
	}
	return 0, Reject(ReasonUnsupportedSchema, id, "schema_version %s is not supported (want 1 or 2)", describe(sv))
}

// safeInt reads n as an integer literal of at most 2^53 in magnitude.
func safeInt(field string, n json.Number, id string) (int64, *RejectError) {
	s := string(n)
	if !isPlainInt(s) {
		return 0, Reject(ReasonInvalidField, id, "%s %s must be an integer without fraction or exponent", field, short(s))
	}
	i, err := strconv.ParseInt(s, 10, 64)
	if err != nil || i > maxSafeInt || i < -maxSafeInt {
		return 0, Reject(ReasonInvalidField, id, "%s %s is beyond ±2^53", field, short(s))
	}
	return i, nil
}

// isPlainInt reports whether a JSON number literal has no fraction and no
// exponent.
func isPlainInt(s string) bool {
	return !strings.ContainsAny(s, ".eE")
}

// build reads a schema-valid record into an Event and applies the checks
// the schema cannot express (steps 7 and 8 of Rules).
func (v *Validator) build(rec *record, version int, id string, receivedAt time.Time, am *amountRead) (Event, error) {
	f := rec.fields
	e := Event{
		SchemaVersion: version,
		EventID:       id,
		ReceiptID:     strings.Clone(f[fieldReceiptID].(string)),
		Type:          internType(f[fieldType].(string)),
		PartitionKey:  strings.Clone(f[fieldPartitionKey].(string)),
	}
	if pv, _ := f[fieldProducerVersion].(string); pv != "" {
		e.ProducerVersion = strings.Clone(pv)
	}
	if version == 1 {
		n, rej := safeInt(fieldOccurredMinute, f[fieldOccurredMinute].(json.Number), id)
		if rej != nil {
			return Event{}, rej
		}
		e.OccurredAt = time.Unix(n*60, 0).UTC() // |n| <= 2^53: n*60 fits int64
		if n < minEventMinute || n >= maxEventMinute {
			return Event{}, Reject(ReasonBadTimestamp, id, "occurred_minute %d %s", n, outOfRange(e.OccurredAt))
		}
	} else {
		s := f[fieldOccurredAt].(string)
		t, err := parseTimestamp(s, true)
		if err != nil {
			return Event{}, Reject(ReasonBadTimestamp, id, "occurred_at %s: %v", short(s), err)
		}
		if why := outOfRange(t); why != "" {
			return Event{}, Reject(ReasonBadTimestamp, id, "occurred_at %s %s", short(s), why)
		}
		e.OccurredAt = t
	}
	e.IngestedAt = receivedAt.UTC()
	s, written := f[fieldIngestedAt].(string)
	if written {
		t, err := parseTimestamp(s, false)
		if err != nil {
			return Event{}, Reject(ReasonBadTimestamp, id, "ingested_at %s: %v", short(s), err)
		}
		if why := outOfRange(t); why != "" {
			return Event{}, Reject(ReasonBadTimestamp, id, "ingested_at %s %s", short(s), why)
		}
		e.IngestedAt = t
	}
	if rej := v.future(e.OccurredAt, e.IngestedAt, receivedAt, written, id); rej != nil {
		return Event{}, rej
	}
	if rec.payload != nil {
		e.Payload = bytes.Clone(rec.payload)
	}
	var a amountRead
	e.Fingerprint, a.cents, a.priced = digest(fingerprintHead(&e), rec.payload)
	if am != nil {
		*am = a
	}
	return e, nil
}

// future applies step 8 of Rules to an event that occurred at occurred
// and was ingested at ingested (written tells whether the record carried
// ingested_at, else ingested is receivedAt), or returns nil: the three
// bounds are checked in the order Rules lists, and the first one
// broken names the rejection.
func (v *Validator) future(occurred, ingested, receivedAt time.Time, written bool, id string) *RejectError {
	skew := v.opts.MaxFutureSkew
	limit := receivedAt.Add(skew)
	if occurred.After(limit) {
		return Reject(ReasonFutureTimestamp, id, "event time %s is %v after the received time %s (limit %v)",
			occurred.Format(time.RFC3339Nano), occurred.Sub(receivedAt), receivedAt.UTC().Format(time.RFC3339Nano), skew)
	}
	if written && ingested.After(limit) {
		return Reject(ReasonFutureTimestamp, id, "ingested_at %s is %v after the received time %s (limit %v)",
			ingested.Format(time.RFC3339Nano), ingested.Sub(receivedAt), receivedAt.UTC().Format(time.RFC3339Nano), skew)
	}
	if d := occurred.Sub(ingested); d > skew {
		return Reject(ReasonFutureTimestamp, id, "event time %s is %v after ingested_at %s (limit %v)",
			occurred.Format(time.RFC3339Nano), d, ingested.Format(time.RFC3339Nano), skew)
	}
	return nil
}

// internType returns the constant for a valid type.
func internType(t string) string {
	switch t {
	case TypeSubmitted:
		return TypeSubmitted
	case TypeDraftSaved:
		return TypeDraftSaved
	case TypeViewed:
		return TypeViewed
	}
	return strings.Clone(t)
}

// describe renders a decoded JSON value for a detail, shortened.
func describe(v any) string {
	switch v := v.(type) {
	case string:
		return short(strconv.Quote(v))
	case json.Number:
		return short(string(v))
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(v)
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	}
	return fmt.Sprintf("%T", v)
}

// short cuts s to at most 64 bytes for a detail.
func short(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && s[cut]&0xC0 == 0x80 { // keep UTF-8 sequences whole
		cut--
	}
	return s[:cut] + "…"
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = short(strconv.Quote(s))
	}
	return out
}
