package contract

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"

	"github.com/receiptflow/receiptflow/schemas"
)

// The JSON Schema library is the conformance oracle of schema.go: the
// schemas in schemas/ are the source of truth, and the tests here hold the
// Go check of step 6 to what the library reports for them, on every record
// the package's tests validate (checkCorpus) and on the edge cases below.

// eventSchemas compiles the two event schemas once per process.
var eventSchemas = sync.OnceValues(func() ([]*jsonschema.Schema, error) {
	return compileSchemas(schemas.EventV1, schemas.EventV2)
})

// compileSchemas compiles the named schemas of the schemas package
// (draft 2020-12, format asserted).
func compileSchemas(names ...string) ([]*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	ids := make([]string, len(names))
	for i, name := range names {
		data, err := schemas.FS.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("contract: read schema %s: %w", name, err)
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("contract: parse schema %s: %w", name, err)
		}
		obj, _ := doc.(map[string]any)
		id, _ := obj["$id"].(string)
		if id == "" {
			return nil, fmt.Errorf("contract: schema %s has no $id", name)
		}
		if err := c.AddResource(id, doc); err != nil {
			return nil, fmt.Errorf("contract: add schema %s: %w", name, err)
		}
		ids[i] = id
	}
	out := make([]*jsonschema.Schema, len(names))
	for i, id := range ids {
		s, err := c.Compile(id)
		if err != nil {
			return nil, fmt.Errorf("contract: compile schema %s: %w", names[i], err)
		}
		out[i] = s
	}
	return out, nil
}

// libraryClassify maps one leaf error of the library to a reason and a
// detail, as the schema path did when it ran the library.
func libraryClassify(e *jsonschema.ValidationError, f map[string]any) schemaFinding {
	field := ""
	if len(e.InstanceLocation) > 0 {
		field = e.InstanceLocation[0]
	}
	path := "/" + strings.Join(e.InstanceLocation, "/")
	where := field
	if len(e.InstanceLocation) != 1 {
		where = path
	}
	value := f[field]
	find := func(r Reason, format string, args ...any) schemaFinding {
		return schemaFinding{reason: r, field: path, detail: fmt.Sprintf(format, args...)}
	}
	switch k := e.ErrorKind.(type) {
	case *kind.Required:
		missing := slices.Sorted(slices.Values(k.Missing))
		return find(ReasonMissingField, "missing required field %s", strings.Join(missing, ", "))
	case *kind.AdditionalProperties:
		props := slices.Sorted(slices.Values(k.Properties))
		return find(ReasonInvalidField, "unknown field %s", strings.Join(quoteAll(props), ", "))
	}
	if len(e.InstanceLocation) == 1 {
		switch field {
		case fieldType:
			switch e.ErrorKind.(type) {
			case *kind.Enum, *kind.Type:
				return find(ReasonUnknownType, "type %s is not one of %s, %s, %s",
					describe(value), TypeSubmitted, TypeDraftSaved, TypeViewed)
			}
		case fieldOccurredAt, fieldIngestedAt:
			switch e.ErrorKind.(type) {
			case *kind.Format:
				return find(ReasonBadTimestamp, "%s %s is not an RFC 3339 date-time", field, describe(value))
			case *kind.Type:
				return find(ReasonBadTimestamp, "%s must be an RFC 3339 date-time string, got %s", field, describe(value))
			}
		case fieldOccurredMinute:
			switch e.ErrorKind.(type) {
			case *kind.Type:
				if _, isNum := value.(json.Number); isNum {
					return find(ReasonInvalidField, "occurred_minute %s must be an integer", describe(value))
				}
				return find(ReasonBadTimestamp, "occurred_minute must be an integer number of minutes, got %s", describe(value))
			case *kind.Minimum:
				return find(ReasonBadTimestamp, "occurred_minute %s is before %s", describe(value), minEventTime.Format(time.RFC3339))
			case *kind.Maximum:
				return find(ReasonInvalidField, "occurred_minute %s is beyond 2^53", describe(value))
			}
		}
	}
	switch k := e.ErrorKind.(type) {
	case *kind.Pattern:
		return find(ReasonInvalidField, "%s %s does not match %s", where, short(strconv.Quote(k.Got)), k.Want)
	case *kind.MinLength:
		return find(ReasonInvalidField, "%s is %d characters, want at least %d", where, k.Got, k.Want)
	case *kind.MaxLength:
		return find(ReasonInvalidField, "%s is %d characters, want at most %d", where, k.Got, k.Want)
	case *kind.Type:
		return find(ReasonInvalidField, "%s must be %s, got %s", where, strings.Join(k.Want, " or "), k.Got)
	}
	return find(ReasonInvalidField, "%v", e)
}

// libraryFindings returns the library's findings for the decoded record f
// against version's schema: nil when it accepts f.
func libraryFindings(f map[string]any, version int) ([]schemaFinding, error) {
	s, err := eventSchemas()
	if err != nil {
		return nil, err
	}
	verr := s[version-1].Validate(f)
	if verr == nil {
		return nil, nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(verr, &ve) {
		return nil, verr
	}
	var out []schemaFinding
	var walk func(*jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			out = append(out, libraryClassify(e, f))
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	return out, nil
}

func sortFindings(fs []schemaFinding) []schemaFinding {
	fs = slices.Clone(fs)
	slices.SortFunc(fs, func(a, b schemaFinding) int {
		return strings.Compare(a.field+"\x00"+a.detail, b.field+"\x00"+b.detail)
	})
	return fs
}

// compareOracle runs step 6 on raw, if the record gets that far, with
// checkSchema and with the library, and describes any difference between
// the two sets of findings ("" when there is none).
func compareOracle(raw []byte) string {
	rec, err := decodeRecord(raw)
	if err != nil {
		return ""
	}
	f := rec.fields
	if checkKeys(&rec, "") != nil {
		return ""
	}
	version, rej := schemaVersion(f, "")
	if rej != nil {
		return ""
	}
	if n, ok := f[fieldOccurredMinute].(json.Number); ok && version == 1 {
		if _, rej := safeInt(fieldOccurredMinute, n, ""); rej != nil {
			return ""
		}
	}
	want, err := libraryFindings(f, version)
	if err != nil {
		return fmt.Sprintf("library: %v", err)
	}
	got := checkSchema(f, version)
	if w, g := sortFindings(want), sortFindings(got); !slices.Equal(w, g) {
		return fmt.Sprintf("checkSchema found %+v, the library %+v", g, w)
	}
	return ""
}

// TestSchemaTablesMatchFiles holds the tables of schema.go to the schema
// files: required fields, properties, the id pattern and the limits.
func TestSchemaTablesMatchFiles(t *testing.T) {
	for version, name := range map[int]string{1: schemas.EventV1, 2: schemas.EventV2} {
		data, err := schemas.FS.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Required             []string `json:"required"`
			AdditionalProperties *bool    `json:"additionalProperties"`
			Properties           map[string]struct {
				Pattern   string       `json:"pattern"`
				MinLength *int         `json:"minLength"`
				MaxLength *int         `json:"maxLength"`
				Minimum   *json.Number `json:"minimum"`
				Maximum   *json.Number `json:"maximum"`
			} `json:"properties"`
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		if err := dec.Decode(&doc); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !slices.Equal(doc.Required, schemaRequired[version]) {
			t.Errorf("%s: required %v, schema.go has %v", name, doc.Required, schemaRequired[version])
		}
		if doc.AdditionalProperties == nil || *doc.AdditionalProperties {
			t.Errorf("%s: additionalProperties is not false", name)
		}
		for _, field := range knownFields {
			if _, ok := doc.Properties[field]; ok != inSchema(version, field) {
				t.Errorf("%s: property %s present %v, inSchema says %v", name, field, ok, !ok)
			}
		}
		if len(doc.Properties) != len(knownFields)-1 {
			t.Errorf("%s: %d properties, want %d", name, len(doc.Properties), len(knownFields)-1)
		}
		p := doc.Properties
		for _, field := range []string{fieldEventID, fieldReceiptID} {
			if p[field].Pattern != idPattern {
				t.Errorf("%s: %s pattern %q, schema.go has %q", name, field, p[field].Pattern, idPattern)
			}
		}
		eq := func(what string, got *int, want int) {
			if got == nil || *got != want {
				t.Errorf("%s: %s is %v, schema.go has %d", name, what, got, want)
			}
		}
		eq("partition_key minLength", p[fieldPartitionKey].MinLength, partitionKeyMinLen)
		eq("partition_key maxLength", p[fieldPartitionKey].MaxLength, partitionKeyMaxLen)
		eq("producer_version maxLength", p[fieldProducerVersion].MaxLength, producerVersionMaxLen)
		if version == 1 {
			om := p[fieldOccurredMinute]
			if om.Minimum == nil || om.Minimum.String() != strconv.Itoa(minEventMinute) ||
				om.Maximum == nil || om.Maximum.String() != strconv.Itoa(maxSafeInt) {
				t.Errorf("%s: occurred_minute range %v..%v, schema.go has %d..%d", name, om.Minimum, om.Maximum, minEventMinute, maxSafeInt)
			}
		}
	}
}

// TestIsDateTimeMatchesLibrary holds isDateTime to the library's format
// "date-time" on the edge cases of RFC 3339 and of the library's reader.
func TestIsDateTimeMatchesLibrary(t *testing.T) {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	if err := c.AddResource("dt.json", map[string]any{"type": "string", "format": "date-time"}); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("dt.json")
	if err != nil {
		t.Fatal(err)
	}
	cases := []string{
		"2026-12-02T10:15:42Z", "2026-12-02t10:15:42z", "2026-12-02T10:15:42.123456789Z",
		"2026-12-02T10:15:42.Z", "2026-12-02T10:15:42+01:00", "2026-12-02T10:15:42-23:59",
		"2026-12-02T10:15:42+24:00", "2026-12-02T10:15:42+01:60", "2026-12-02T10:15:42+0100",
		"2026-12-02 10:15:42Z", "2026-12-02T24:00:00Z", "2026-12-02T23:60:00Z",
		"2026-12-31T23:59:60Z", "2026-12-31T23:59:61Z", "2026-12-31T22:59:60Z",
		"2026-12-31T22:59:60-01:00", "2026-12-31T23:59:60+00:01", "2027-01-01T00:29:60+00:30",
		"2026-02-29T10:00:00Z", "2024-02-29T10:00:00Z", "2026-02-30T10:00:00Z", "2026-13-01T10:00:00Z",
		"2026-12-02T+1:15:42Z", "2026-12-02T-1:15:42Z", "2026-12-02T1:15:042Z", "2026-12-02T::::::::Z",
		"2026-12-02T10:15:42+-1:00", "2026-12-02T10:15:42++1:00", "2026-12-02T10:15:42+01:+1",
		"2026-12-02T10:15:42.1x", "2026-12-02T10:15:42.٣Z", "0000-01-01T00:00:00Z", "99999-12-02T10:15:42Z",
		"2026-1-02T10:15:42Z", "+026-12-02T10:15:42Z", "2026-12-02T10:15:42", "2026-12-02T10:15:42ZZ",
		"2026-12-02T10:15:42.5+00:00", "2026-12-02T10:15:4", "",
	}
	for _, s := range cases {
		want := sch.Validate(s) == nil
		if got := isDateTime(s); got != want {
			t.Errorf("isDateTime(%q) = %v, the library says %v", s, got, want)
		}
	}
}
