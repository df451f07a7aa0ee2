package contract

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/receiptflow/receiptflow/schemas"
)

// This file is step 6 of Rules: the two event schemas
// (schemas/event.v1.schema.json and event.v2.schema.json) checked in Go, for the records the fast path does not take. It finds every
// violation the JSON Schema library would report, maps each to a reason
// and a detail, and reports the lowest by reasonRank. The library itself is
// only the conformance oracle of the tests (schema_test.go): they hold
// this code to it on every record the package's tests use, and the tables
// below to the schema files.

// The tables below are read from the embedded schema files, the source of
// truth (schemas.FS), when the package loads: the required fields of each
// version, the id pattern and the length limits. isID and the fast path
// implement the pattern; TestSchemaTablesMatchFiles holds the rest of this
// file (property names, types, enums) to the same files.
var (
	schemaFiles = [3]schemaFile{1: loadSchema(schemas.EventV1), 2: loadSchema(schemas.EventV2)}
	// idPattern is the pattern of event_id and receipt_id.
	idPattern = sameInBoth(func(f schemaFile) string { return f.Properties[fieldEventID].Pattern })
	// Length limits of the schemas, in code points.
	partitionKeyMinLen    = sameInBoth(func(f schemaFile) int { return f.Properties[fieldPartitionKey].MinLength })
	partitionKeyMaxLen    = sameInBoth(func(f schemaFile) int { return f.Properties[fieldPartitionKey].MaxLength })
	producerVersionMaxLen = schemaFiles[2].Properties[fieldProducerVersion].MaxLength
	// schemaRequired is the "required" list of each version's schema.
	schemaRequired = [3][]string{1: schemaFiles[1].Required, 2: schemaFiles[2].Required}
)

// isIDPattern is the pattern isID and the fast path implement by hand.
const isIDPattern = "^[A-Za-z0-9._:-]{1,128}$"

func init() {
	if idPattern != isIDPattern || schemaFiles[1].Properties[fieldReceiptID].Pattern != idPattern ||
		schemaFiles[2].Properties[fieldReceiptID].Pattern != idPattern {
		panic("contract: the schemas' id pattern " + idPattern + " is not the one isID implements")
	}
}

// sameInBoth returns get of the version 2 schema, which must equal get of
// the version 1 schema.
func sameInBoth[T comparable](get func(schemaFile) T) T {
	v := get(schemaFiles[2])
	if get(schemaFiles[1]) != v {
		panic(fmt.Sprintf("contract: the event schemas disagree (%v against %v)", get(schemaFiles[1]), v))
	}
	return v
}

// schemaFile is what this package reads of an event schema file.
type schemaFile struct {
	Required   []string `json:"required"`
	Properties map[string]struct {
		Pattern   string `json:"pattern"`
		MinLength int    `json:"minLength"`
		MaxLength int    `json:"maxLength"`
	} `json:"properties"`
}

// loadSchema reads the embedded schema file name; a file that does not
// read is a build defect (the tests read the same files).
func loadSchema(name string) schemaFile {
	b, err := schemas.FS.ReadFile(name)
	if err != nil {
		panic("contract: " + err.Error())
	}
	var f schemaFile
	if err := json.Unmarshal(b, &f); err != nil {
		panic("contract: " + name + ": " + err.Error())
	}
	if len(f.Required) == 0 || len(f.Properties) == 0 {
		panic("contract: " + name + " has no required fields or properties")
	}
	return f
}

// inSchema reports whether field is one of the "properties" of version's
// schema (additionalProperties is false in both).
func inSchema(version int, field string) bool {
	switch field {
	case fieldOccurredMinute:
		return version == 1
	case fieldOccurredAt:
		return version == 2
	}
	return isKnownField(field)
}

// schemaFinding is one schema violation mapped to a reason.
type schemaFinding struct {
	reason Reason
	field  string // the JSON pointer of the value: "/" for the record
	detail string
}

// finding builds the finding of the property name ("" for the record).
func finding(r Reason, name, format string, args ...any) schemaFinding {
	return schemaFinding{reason: r, field: "/" + name, detail: fmt.Sprintf(format, args...)}
}

// checkSchema returns the violations of version's schema in the decoded
// record f, in no particular order; none for a record the schema accepts.
func checkSchema(f map[string]any, version int) []schemaFinding {
	var out []schemaFinding
	var missing []string
	for _, name := range schemaRequired[version] {
		if _, ok := f[name]; !ok {
			missing = append(missing, name)
		}
	}
	if missing != nil {
		slices.Sort(missing)
		out = append(out, finding(ReasonMissingField, "", "missing required field %s", strings.Join(missing, ", ")))
	}
	var unknown []string
	for name, value := range f {
		if !inSchema(version, name) {
			unknown = append(unknown, name)
			continue
		}
		if fd, bad := checkField(name, value); bad {
			out = append(out, fd)
		}
	}
	if unknown != nil {
		slices.Sort(unknown)
		out = append(out, finding(ReasonInvalidField, "", "unknown field %s", strings.Join(quoteAll(unknown), ", ")))
	}
	return out
}

// checkField checks one property of the schemas; bad reports a violation.
func checkField(name string, value any) (fd schemaFinding, bad bool) {
	s, isString := value.(string)
	switch name {
	case fieldSchemaVersion:
		// const: schemaVersion has already read 1 or 2 from it.
	case fieldEventID, fieldReceiptID:
		if !isString {
			return wrongType(name, "string", value)
		}
		if !isID(s) {
			return finding(ReasonInvalidField, name, "%s %s does not match %s", name, short(strconv.Quote(s)), idPattern), true
		}
	case fieldType:
		switch value {
		case TypeSubmitted, TypeDraftSaved, TypeViewed:
		default:
			return finding(ReasonUnknownType, name, "type %s is not one of %s, %s, %s",
				describe(value), TypeSubmitted, TypeDraftSaved, TypeViewed), true
		}
	case fieldOccurredAt, fieldIngestedAt:
		if !isString {
			return finding(ReasonBadTimestamp, name, "%s must be an RFC 3339 date-time string, got %s", name, describe(value)), true
		}
		if !isDateTime(s) {
			return finding(ReasonBadTimestamp, name, "%s %s is not an RFC 3339 date-time", name, describe(value)), true
		}
	case fieldOccurredMinute:
		n, isNum := value.(json.Number)
		if !isNum {
			return finding(ReasonBadTimestamp, name, "occurred_minute must be an integer number of minutes, got %s", describe(value)), true
		}
		i, err := strconv.ParseInt(string(n), 10, 64)
		if err != nil { // step 5 lets only plain integers within ±2^53 through
			return finding(ReasonInvalidField, name, "occurred_minute %s must be an integer", describe(value)), true
		}
		if i < minEventMinute {
			return finding(ReasonBadTimestamp, name, "occurred_minute %s is before %s", describe(value), minEventTime.Format(time.RFC3339)), true
		}
		if i > maxSafeInt {
			return finding(ReasonInvalidField, name, "occurred_minute %s is beyond 2^53", describe(value)), true
		}
	case fieldPartitionKey, fieldProducerVersion:
		if !isString {
			return wrongType(name, "string", value)
		}
		n := utf8.RuneCountInString(s)
		if name == fieldPartitionKey && n < partitionKeyMinLen {
			return finding(ReasonInvalidField, name, "%s is %d characters, want at least %d", name, n, partitionKeyMinLen), true
		}
		limit := partitionKeyMaxLen
		if name == fieldProducerVersion {
			limit = producerVersionMaxLen
		}
		if n > limit {
			return finding(ReasonInvalidField, name, "%s is %d characters, want at most %d", name, n, limit), true
		}
	case fieldPayload:
		if _, ok := value.(map[string]any); !ok {
			return wrongType(name, "object", value)
		}
	}
	return schemaFinding{}, false
}

// wrongType is the finding of a property whose value is not of type want.
func wrongType(name, want string, value any) (schemaFinding, bool) {
	return finding(ReasonInvalidField, name, "%s must be %s, got %s", name, want, jsonType(value)), true
}

// jsonType names the JSON type of a decoded value as the schemas do.
func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case json.Number:
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return "invalid"
}

// schemaRejection picks one of the findings (at least one): the lowest
// reason by reasonRank, then field, then detail, so that the choice does
// not depend on map order.
func schemaRejection(findings []schemaFinding, id string) *RejectError {
	best := slices.MinFunc(findings, func(a, b schemaFinding) int {
		return cmp.Or(
			cmp.Compare(reasonRank[a.reason], reasonRank[b.reason]),
			cmp.Compare(a.field, b.field),
			cmp.Compare(a.detail, b.detail),
		)
	})
	return Reject(best.reason, id, "%s", best.detail)
}

// isDateTime reports whether s passes format "date-time" as the schemas
// assert it (RFC 3339 section 5.6, a leap second allowed at 23:59 UTC).
// It is more lenient than parseTimestamp, which step 7 applies after it.
func isDateTime(s string) bool {
	if len(s) < 20 || (s[10] != 'T' && s[10] != 't') {
		return false
	}
	if _, err := time.Parse("2006-01-02", s[:10]); err != nil {
		return false
	}
	t := s[11:]
	if len(t) < 9 || t[2] != ':' || t[5] != ':' {
		return false
	}
	hms, ok := nonNegatives(t[:8], 3)
	if !ok {
		return false
	}
	h, m, sec := hms[0], hms[1], hms[2]
	if h > 23 || m > 59 || sec > 60 {
		return false
	}
	t = t[8:]
	if rest, frac := strings.CutPrefix(t, "."); frac {
		digits := 0
		for digits < len(rest) && rest[digits] >= '0' && rest[digits] <= '9' {
			digits++
		}
		if digits == 0 {
			return false
		}
		t = rest[digits:]
	}
	if t != "Z" && t != "z" {
		if len(t) != 6 || (t[0] != '+' && t[0] != '-') || t[3] != ':' {
			return false
		}
		off, ok := nonNegatives(t[1:], 2)
		if !ok || off[0] > 23 || off[1] > 59 {
			return false
		}
		// The time in UTC decides whether a leap second is allowed.
		mins := h*60 + m
		if t[0] == '+' {
			mins -= off[0]*60 + off[1]
		} else {
			mins += off[0]*60 + off[1]
		}
		if mins < 0 {
			mins += 24 * 60
		}
		h, m = mins/60, mins%60
	}
	return sec < 60 || (h == 23 && m == 59)
}

// nonNegatives reads n (at most 3) colon-separated integers, as
// strings.SplitN(s, ":", n) splits them and strconv.Atoi reads them, none
// negative.
func nonNegatives(s string, n int) (out [3]int, ok bool) {
	var buf [3]string
	parts := buf[:0]
	for range n - 1 {
		p, rest, found := strings.Cut(s, ":")
		if !found {
			return out, false
		}
		parts, s = append(parts, p), rest
	}
	parts = append(parts, s)
	for i, p := range parts {
		v, err := strconv.Atoi(p)
		if err != nil || v < 0 {
			return out, false
		}
		out[i] = v
	}
	return out, true
}
