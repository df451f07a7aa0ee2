package contract_test

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/internal/digest"
	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
	"github.com/receiptflow/receiptflow/schemas"
)

// clock is the fixed ingest time the examples are judged at.
var clock = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

// schemaOnlyMisses are the invalid examples that the raw JSON Schema of their
// version accepts: their rule is one a schema cannot express, so only
// Validate catches them. Every other invalid example must fail the schema
// of both versions (or not parse at all).
var schemaOnlyMisses = map[string]string{
	"malformed_json--invalid-utf8.json":            "encoding/json replaces invalid UTF-8 instead of failing",
	"malformed_json--lone-surrogate.json":          "encoding/json replaces an unpaired surrogate instead of failing",
	"invalid_field--duplicate-event_id.json":       "a decoded object keeps one of the repeated keys",
	"invalid_field--duplicate-key-in-payload.json": "a decoded object keeps one of the repeated keys",
	"invalid_field--occurred_minute-exponent.json": "2.9936775e7 is an integer to JSON Schema",
	"bad_timestamp--non-utc-offset.json":           "date-time allows any offset",
	"bad_timestamp--before-2000.json":              "date-time has no minimum",
	"future_timestamp--v1.json":                    "the schema does not compare two fields",
	"future_timestamp--v2.json":                    "the schema does not compare two fields",
	"bad_timestamp--year-9999.json":                "date-time has no maximum",
}

// compiled returns the raw compiled schemas: v1, v2, snapshot.
func compiled(t *testing.T) (v1, v2, snap *jsonschema.Schema) {
	t.Helper()
	s, err := contract.CompileSchemas(schemas.EventV1, schemas.EventV2, schemas.Snapshot)
	if err != nil {
		t.Fatalf("compile schemas: %v", err)
	}
	return s[0], s[1], s[2]
}

// examples returns the example files under dir of schemas.FS.
func examples(t *testing.T, dir string) []string {
	t.Helper()
	var names []string
	err := fs.WalkDir(schemas.FS, path.Join("examples", dir), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			if path.Ext(p) != ".json" {
				t.Errorf("%s: examples are .json files", p)
			}
			names = append(names, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(names) == 0 {
		t.Fatalf("no examples under examples/%s", dir)
	}
	return names
}

func read(t *testing.T, name string) []byte {
	t.Helper()
	b, err := schemas.FS.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestExamplesValid(t *testing.T) {
	v1, v2, _ := compiled(t)
	v, err := contract.NewValidator(contract.Config{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{} // "v1 submitted", ...
	for _, name := range examples(t, "valid") {
		t.Run(path.Base(name), func(t *testing.T) {
			rec := read(t, name)
			e, err := v.Validate(rec, clock)
			if err != nil {
				t.Fatalf("Validate: %v", err)
			}
			seen[map[int]string{1: "v1 ", 2: "v2 "}[e.SchemaVersion]+e.Type] = true
			doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(rec))
			if err != nil {
				t.Fatalf("raw parse: %v", err)
			}
			sch := map[int]*jsonschema.Schema{1: v1, 2: v2}[e.SchemaVersion]
			if err := sch.Validate(doc); err != nil {
				t.Errorf("raw schema v%d: %v", e.SchemaVersion, err)
			}
			if e.Fingerprint != contract.Fingerprint(&e) {
				t.Errorf("Fingerprint %x, Fingerprint(&e) %x", e.Fingerprint, contract.Fingerprint(&e))
			}
		})
	}
	for _, ver := range []string{"v1 ", "v2 "} {
		for _, typ := range []string{contract.TypeSubmitted, contract.TypeDraftSaved, contract.TypeViewed} {
			if !seen[ver+typ] {
				t.Errorf("no valid example of %s%s", ver, typ)
			}
		}
	}
}

func TestExamplesInvalid(t *testing.T) {
	v1, v2, _ := compiled(t)
	v, err := contract.NewValidator(contract.Config{})
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[contract.Reason]int{}
	for _, name := range examples(t, "invalid") {
		base := path.Base(name)
		t.Run(base, func(t *testing.T) {
			prefix, _, ok := strings.Cut(base, "--")
			if !ok {
				t.Fatalf("name %s: want <reason>--<name>.json", base)
			}
			want := contract.Reason(prefix)
			if !errorsIsReason(want) {
				t.Fatalf("name %s: %q is not a reason", base, prefix)
			}
			reasons[want]++
			rec := read(t, name)
			_, err := v.Validate(rec, clock)
			r, ok := contract.AsReject(err)
			if !ok {
				t.Fatalf("Validate: %v, want %s", err, want)
			}
			if r.Reason != want {
				t.Errorf("Validate: %s (%s), want %s", r.Reason, r.Detail, want)
			}

			// The raw schemas on their own.
			doc, perr := jsonschema.UnmarshalJSON(bytes.NewReader(rec))
			_, isObject := doc.(map[string]any)
			if perr != nil || !isObject {
				if want != contract.ReasonMalformedJSON {
					t.Errorf("raw parse failed (%v) for a %s example", perr, want)
				}
				return
			}
			e1, e2 := v1.Validate(doc), v2.Validate(doc)
			if why, miss := schemaOnlyMisses[base]; miss {
				if e1 != nil && e2 != nil {
					t.Errorf("listed as passing its schema (%s), but both schemas reject it:\nv1: %v\nv2: %v", why, e1, e2)
				}
				return
			}
			if e1 == nil || e2 == nil {
				t.Errorf("a raw schema accepts it (v1: %v, v2: %v); fix the schema or list it in schemaOnlyMisses", e1, e2)
			}
		})
	}
	// Every reason one record can show has an example; too_large is built
	// in code (TestValidateTooLarge) and conflicting_duplicate takes two
	// records and the ledger.
	for _, r := range []contract.Reason{
		contract.ReasonMalformedJSON, contract.ReasonMissingField, contract.ReasonInvalidField,
		contract.ReasonUnsupportedSchema, contract.ReasonUnknownType, contract.ReasonBadTimestamp,
		contract.ReasonFutureTimestamp,
	} {
		if reasons[r] == 0 {
			t.Errorf("no invalid example of %s", r)
		}
	}
	for base := range schemaOnlyMisses {
		if _, err := schemas.FS.ReadFile("examples/invalid/" + base); err != nil {
			t.Errorf("schemaOnlyMisses names a missing example %s", base)
		}
	}
}

// errorsIsReason reports whether r is one of the contract's reasons.
func errorsIsReason(r contract.Reason) bool {
	switch r {
	case contract.ReasonMalformedJSON, contract.ReasonTooLarge, contract.ReasonMissingField,
		contract.ReasonInvalidField, contract.ReasonUnsupportedSchema, contract.ReasonUnknownType,
		contract.ReasonBadTimestamp, contract.ReasonFutureTimestamp, contract.ReasonConflictingDuplicate:
		return true
	}
	return false
}

func TestExamplesSnapshot(t *testing.T) {
	_, _, snap := compiled(t)
	for _, name := range examples(t, "snapshot") {
		t.Run(path.Base(name), func(t *testing.T) {
			rec := read(t, name)
			doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(rec))
			if err != nil {
				t.Fatal(err)
			}
			if err := snap.Validate(doc); err != nil {
				t.Fatalf("snapshot schema: %v", err)
			}
			// The Go type reads every field and writes back a valid value.
			var w wire.Window
			dec := json.NewDecoder(bytes.NewReader(rec))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&w); err != nil {
				t.Fatalf("decode into wire.Window: %v", err)
			}
			checkSnapshot(t, snap, w)
		})
	}
}

// TestSnapshotSchemaMatchesType holds the snapshot schema against what
// wire.Window encodes.
func TestSnapshotSchemaMatchesType(t *testing.T) {
	_, _, snap := compiled(t)
	var d digest.Digest
	d.Add("evt-1")
	start := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	w := wire.Window{
		WindowID:           window.ID(start.UnixMilli()),
		Start:              start,
		End:                start.Add(window.Width),
		Count:              3,
		Version:            5,
		Status:             window.StatusInGrace,
		Watermark:          start.Add(65 * time.Minute),
		UpdatedAt:          time.Date(2026, 12, 2, 11, 6, 0, 123456789, time.UTC),
		FirstOutputVersion: 4,
		Corrections:        1,
		LateDropped:        0,
		Digest:             d.String(),
		Partitions:         []wire.Partial{{Partition: 1, Count: 3, Corrections: 1, Version: 3}},
		Generation:         "g1",
		Breakdown: wire.NewBreakdown(map[string]wire.StoreTotal{
			"store-a": {Count: 2, AmountCents: 2500}, "store-b": {Count: 1, Unpriced: 1}}),
	}
	checkSnapshot(t, snap, w)

	w.Partitions = nil // encodes as null
	b, _ := json.Marshal(w)
	doc, _ := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err := snap.Validate(doc); err == nil {
		t.Error("a snapshot with partitions null passed the schema; publishers must write []")
	}
}

func checkSnapshot(t *testing.T, snap *jsonschema.Schema, w wire.Window) {
	t.Helper()
	b, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if err := snap.Validate(doc); err != nil {
		t.Errorf("wire.Window %s fails the schema: %v", b, err)
	}
}
