package contract

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestStampIngestedAt(t *testing.T) {
	at := time.Date(2026, 12, 2, 13, 0, 0, 120000000, time.FixedZone("CET", 3600))
	const stamp = `"ingested_at":"2026-12-02T12:00:00.12Z"`
	tests := []struct {
		name, in, want string // want "" means unchanged and false
	}{
		{"object", `{"event_id":"evt-1"}`, `{` + stamp + `,"event_id":"evt-1"}`},
		{"empty object", `{}`, `{` + stamp + `}`},
		{"empty object with space", "{ \n}", `{` + stamp + " \n}"},
		{"leading space", " \n{\"a\":1} ", " \n{" + stamp + ",\"a\":1} "},
		{"only nested ingested_at", `{"payload":{"ingested_at":"x"}}`, `{` + stamp + `,"payload":{"ingested_at":"x"}}`},
		{"case variant is not the field", `{"Ingested_At":"x"}`, `{` + stamp + `,"Ingested_At":"x"}`},
		{"present", `{"a":1,"ingested_at":"2026-12-02T10:00:00Z"}`, ""},
		{"present as null", `{"ingested_at":null}`, ""},
		{"present escaped", `{"ingested\u005fat":"2026-12-02T10:00:00Z"}`, ""},
		{"malformed", `{"a":1`, ""},
		{"trailing data", `{"a":1}{}`, ""},
		{"array", `[{"a":1}]`, ""},
		{"empty", ``, ""},
		{"invalid UTF-8", "{\"a\":\"\xff\"}", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := []byte(tt.in)
			got, ok := StampIngestedAt(in, at)
			if tt.want == "" {
				if ok || !bytes.Equal(got, in) || (len(in) > 0 && &got[0] != &in[0]) {
					t.Errorf("StampIngestedAt(%s) = %s, %v; want raw itself, false", in, got, ok)
				}
				return
			}
			if !ok || string(got) != tt.want {
				t.Errorf("StampIngestedAt(%s) = %s, %v; want %s, true", in, got, ok, tt.want)
			}
			if string(in) != tt.in {
				t.Errorf("input modified: %s", in)
			}
		})
	}
}

func TestStampThenValidate(t *testing.T) {
	v := newValidator(t, Config{})
	at := time.Date(2026, 12, 2, 10, 16, 0, 987654321, time.UTC)
	rec := with(v1Fields(), nil)
	stamped, ok := StampIngestedAt(rec, at)
	if !ok {
		t.Fatal("not stamped")
	}
	e, err := v.Validate(stamped, clock)
	if err != nil {
		t.Fatal(err)
	}
	if !e.IngestedAt.Equal(at) {
		t.Errorf("IngestedAt %v, want the stamp %v and not the default", e.IngestedAt, at)
	}
	// A replay keeps the first stamp.
	again, ok := StampIngestedAt(stamped, at.Add(time.Hour))
	if ok || !bytes.Equal(again, stamped) {
		t.Errorf("second stamp changed the record: %s", again)
	}
	// Stamping does not change the fingerprint.
	plain, err := v.Validate(rec, clock)
	if err != nil {
		t.Fatal(err)
	}
	if plain.Fingerprint != e.Fingerprint {
		t.Error("stamping changed the fingerprint")
	}
}

func TestStampIngestedAtAllocs(t *testing.T) {
	rec := with(v2Fields(), map[string]any{"ingested_at": "2026-12-02T10:00:00Z"})
	if n := testing.AllocsPerRun(100, func() { StampIngestedAt(rec, clock) }); n != 0 {
		t.Errorf("StampIngestedAt of a stamped record allocates %v times, want 0", n)
	}
	plain := with(v2Fields(), nil)
	if n := testing.AllocsPerRun(100, func() { StampIngestedAt(plain, clock) }); n != 1 {
		t.Errorf("StampIngestedAt allocates %v times, want 1 (the copy)", n)
	}
}

func TestPeekEventID(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"event_id":"evt-1","type":"submitted"}`, "evt-1"},
		{`{"type":"x","event_id":"evt-1"}`, "evt-1"},
		{`{"event_id":"evt\u002d1"}`, "evt-1"},
		{`{"event_id":"evt-1","type":`, "evt-1"},                // breaks after the id
		{`{"type":"x",,"event_id" : "evt-1"}`, "evt-1"},         // breaks before: byte search
		{`[{"event_id":"evt-1"}]`, "evt-1"},                     // not an object: byte search
		{`{"payload":{"event_id":"evt-9"}}`, ""},                // only nested, in a valid object
		{`{"event_id":"evt 1"}`, ""},                            // not an id
		{`{"event_id":7}`, ""},                                  // not a string
		{`{"event_id":"` + strings.Repeat("e", 129) + `"}`, ""}, // too long
		{`{"event_id":"evt-1`, ""},                              // unterminated: no closing quote
		{``, ""},
		{`garbage`, ""},
	}
	for _, tt := range tests {
		if got := PeekEventID([]byte(tt.in)); got != tt.want {
			t.Errorf("PeekEventID(%s) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
