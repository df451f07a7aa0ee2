package schemas

import (
	"encoding/json"
	"io/fs"
	"path"
	"slices"
	"strings"
	"testing"
)

// schemaDoc is the part of a schema file these tests read.
type schemaDoc struct {
	Schema     string                     `json:"$schema"`
	ID         string                     `json:"$id"`
	Type       string                     `json:"type"`
	Required   []string                   `json:"required"`
	Additional *bool                      `json:"additionalProperties"`
	Properties map[string]json.RawMessage `json:"properties"`
}

func loadSchema(t *testing.T, name string) schemaDoc {
	t.Helper()
	b, err := fs.ReadFile(FS, name)
	if err != nil {
		t.Fatalf("FS lacks %s: %v", name, err)
	}
	var s schemaDoc
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("%s is not JSON: %v", name, err)
	}
	return s
}

func examples(t *testing.T, dir string) []string {
	t.Helper()
	names, err := fs.Glob(FS, path.Join("examples", dir, "*.json"))
	if err != nil || len(names) == 0 {
		t.Fatalf("no examples under examples/%s (%v)", dir, err)
	}
	return names
}

func object(t *testing.T, name string) map[string]json.RawMessage {
	t.Helper()
	b, err := fs.ReadFile(FS, name)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return m
}

// TestSchemasAreDraft2020Closed: each named schema is a draft 2020-12
// object schema whose $id names its file, that closes the record
// (additionalProperties false) and declares every required field.
func TestSchemasAreDraft2020Closed(t *testing.T) {
	for _, name := range []string{EventV1, EventV2, Snapshot} {
		s := loadSchema(t, name)
		if s.Schema != "https://json-schema.org/draft/2020-12/schema" {
			t.Errorf("%s: $schema %q", name, s.Schema)
		}
		if !strings.HasSuffix(s.ID, "/"+name) {
			t.Errorf("%s: $id %q does not name the file", name, s.ID)
		}
		if s.Type != "object" || s.Additional == nil || *s.Additional {
			t.Errorf("%s: type %q, additionalProperties %v; want a closed object", name, s.Type, s.Additional)
		}
		if len(s.Required) == 0 {
			t.Errorf("%s: no required fields", name)
		}
		for _, r := range s.Required {
			if _, ok := s.Properties[r]; !ok {
				t.Errorf("%s: required %q is not a property", name, r)
			}
		}
	}
	v1, v2 := loadSchema(t, EventV1), loadSchema(t, EventV2)
	if !slices.Contains(v1.Required, "occurred_minute") || slices.Contains(v1.Required, "occurred_at") {
		t.Errorf("v1 must require occurred_minute, not occurred_at: %v", v1.Required)
	}
	if !slices.Contains(v2.Required, "occurred_at") || slices.Contains(v2.Required, "occurred_minute") {
		t.Errorf("v2 must require occurred_at, not occurred_minute: %v", v2.Required)
	}
}

// TestValidExamplesFitTheirSchema: each valid example is named for its
// schema version (v1-, v2-), carries that schema_version, has every field
// the schema requires and none it does not declare.
func TestValidExamplesFitTheirSchema(t *testing.T) {
	schemas := map[string]schemaDoc{"1": loadSchema(t, EventV1), "2": loadSchema(t, EventV2)}
	seen := map[string]int{}
	for _, name := range examples(t, "valid") {
		m := object(t, name)
		ver := string(m["schema_version"])
		s, ok := schemas[ver]
		if !ok {
			t.Errorf("%s: schema_version %s", name, ver)
			continue
		}
		if !strings.HasPrefix(path.Base(name), "v"+ver+"-") {
			t.Errorf("%s: schema_version %s does not match the file name", name, ver)
		}
		seen[ver]++
		for _, r := range s.Required {
			if _, ok := m[r]; !ok {
				t.Errorf("%s: lacks required %q", name, r)
			}
		}
		for k := range m {
			if _, ok := s.Properties[k]; !ok {
				t.Errorf("%s: field %q is not in the v%s schema", name, k, ver)
			}
		}
	}
	if seen["1"] == 0 || seen["2"] == 0 {
		t.Errorf("valid examples per version: %v; want both", seen)
	}
}

// TestInvalidExamplesNameAReason: each invalid example's name starts with
// the rejection reason it must get (docs/spec.md §2), then "--".
func TestInvalidExamplesNameAReason(t *testing.T) {
	reasons := []string{"malformed_json", "too_large", "missing_field", "invalid_field", "unsupported_schema",
		"unknown_type", "bad_timestamp", "future_timestamp"}
	for _, name := range examples(t, "invalid") {
		reason, _, ok := strings.Cut(path.Base(name), "--")
		if !ok || !slices.Contains(reasons, reason) {
			t.Errorf("%s: does not start with a rejection reason and --", name)
		}
	}
}

// TestSnapshotExamples: each snapshot example has every field of the
// snapshot schema and no other, and its status is the start of its name.
func TestSnapshotExamples(t *testing.T) {
	s := loadSchema(t, Snapshot)
	for _, name := range examples(t, "snapshot") {
		m := object(t, name)
		for _, r := range s.Required {
			if _, ok := m[r]; !ok {
				t.Errorf("%s: lacks %q", name, r)
			}
		}
		for k := range m {
			if _, ok := s.Properties[k]; !ok {
				t.Errorf("%s: field %q is not in the snapshot schema", name, k)
			}
		}
		var status string
		if err := json.Unmarshal(m["status"], &status); err != nil || !strings.HasPrefix(path.Base(name), status+"-") && path.Base(name) != status+".json" {
			t.Errorf("%s: status %s does not match the name", name, m["status"])
		}
	}
}
