package contract

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/receiptflow/receiptflow/schemas"
)

func TestDecodeRecord(t *testing.T) {
	rec, err := decodeRecord([]byte(` {"a":"x\"y","b":[1,-0.5e+3,true,false,null],"payload":{"k":{}} , "c":"\ud83d\ude00"} `))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"a":       `x"y`,
		"b":       []any{json.Number("1"), json.Number("-0.5e+3"), true, false, nil},
		"payload": map[string]any{"k": map[string]any{}},
		"c":       "😀",
	}
	if !reflect.DeepEqual(rec.fields, want) {
		t.Errorf("fields %#v, want %#v", rec.fields, want)
	}
	if string(rec.payload) != `{"k":{}}` {
		t.Errorf("payload span %q", rec.payload)
	}
	if rec.hasDup {
		t.Errorf("duplicate %q reported", rec.dupKey)
	}

	rec, err = decodeRecord([]byte(`{"a":1,"payload":{"x":{"y":1,"y":2}},"a":2}`))
	if err != nil {
		t.Fatal(err)
	}
	if !rec.hasDup || rec.dupKey != "y" || rec.dupIn != "payload" {
		t.Errorf("first duplicate %q in %q, want y in payload", rec.dupKey, rec.dupIn)
	}
	rec, err = decodeRecord([]byte(`{"":1,"":2}`))
	if err != nil || !rec.hasDup || rec.dupKey != "" || rec.dupIn != "" {
		t.Errorf("empty key twice: %+v, %v", rec, err)
	}
}

// checkAgainstStd holds decodeValue against encoding/json on data.
func checkAgainstStd(t *testing.T, data []byte) {
	got, dup, err := decodeValue(data)
	stdValid := json.Valid(data)
	if err != nil {
		var se *syntaxError
		var de *depthError
		switch {
		case errors.As(err, &de):
			// Deep nesting is refused by design.
		case errors.As(err, &se):
			// Refused on purpose although encoding/json takes it.
			if stdValid && utf8.Valid(data) && !strings.Contains(se.msg, "surrogate") {
				t.Fatalf("decodeValue(%q) = %v, but encoding/json accepts it", data, err)
			}
		default:
			t.Fatalf("decodeValue(%q): unexpected error type %T", data, err)
		}
		return
	}
	if !stdValid {
		t.Fatalf("decodeValue(%q) accepted what encoding/json refuses", data)
	}
	if dup {
		return // encoding/json keeps the last of repeated keys; no comparison
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var want any
	if err := dec.Decode(&want); err != nil {
		t.Fatalf("encoding/json: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decodeValue(%q)\n got %#v\nwant %#v", data, got, want)
	}
}

var decodeSeeds = []string{
	``, ` `, `{}`, `[]`, `""`, `0`, `-0`, `1.5e-3`, `-`, `01`, `1.`, `.5`, `1e`, `1e+`, `true`, `tru`, `nul`, `null `,
	`{"a":1}`, `{"a":1,}`, `{"a" 1}`, `{"a":1 "b":2}`, `[1,]`, `[,1]`, `[1 2]`, `{"a":[{"b":[]}]}`,
	`"\u00e9\n\t\\\/\""`, `"\ud83d\ude00"`, `"\ud83d"`, `"\ude00"`, `"\ud83dx"`, `"\u12"`, `"\q"`, "\"\x01\"",
	"\"\xff\"", "\"\xc3\xa9\"", "\"\xed\xa0\x80\"", `{"a":1,"a":2}`, `{"a":{"b":1,"b":1}}`, `[1]x`, "\x00", `{"\u0000":1}`,
	strings.Repeat("[", 300) + strings.Repeat("]", 300),
}

func TestDecodeAgainstStd(t *testing.T) {
	for _, s := range decodeSeeds {
		checkAgainstStd(t, []byte(s))
	}
	err := fs.WalkDir(schemas.FS, "examples", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := schemas.FS.ReadFile(p)
			checkAgainstStd(t, b)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// FuzzDecode compares the record reader with encoding/json:
// go test -fuzz FuzzDecode ./contract/
func FuzzDecode(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkAgainstStd(t, data)
		// The walkers never panic and agree with the reader on validity.
		_, _, derr := decodeValue(data)
		_, isObj := func() (any, bool) { v, _, _ := decodeValue(data); m, ok := v.(map[string]any); return m, ok }()
		werr := topLevel(data, func([]byte, int, int) bool { return true })
		if (derr == nil && isObj) != (werr == nil) {
			t.Fatalf("topLevel(%q) = %v, decodeValue = %v", data, werr, derr)
		}
		PeekEventID(data)
		if out, ok := StampIngestedAt(data, clock); ok {
			if _, _, err := decodeValue(out); err != nil {
				t.Fatalf("StampIngestedAt(%q) = %q, not valid: %v", data, out, err)
			}
		}
	})
}

// FuzzValidate checks that Validate never panics and that what it accepts
// is consistent.
func FuzzValidate(f *testing.F) {
	err := fs.WalkDir(schemas.FS, "examples", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := schemas.FS.ReadFile(p)
			f.Add(b)
		}
		return err
	})
	if err != nil {
		f.Fatal(err)
	}
	v := newValidator(f, Config{})
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := v.Validate(data, clock)
		if err != nil {
			if _, ok := AsReject(err); !ok {
				t.Fatalf("Validate(%q): %v is not a *RejectError", data, err)
			}
			return
		}
		if !isID(e.EventID) || !isID(e.ReceiptID) || e.OccurredAt.Before(minEventTime) ||
			e.Fingerprint != Fingerprint(&e) {
			t.Fatalf("Validate(%q) accepted %+v", data, e)
		}
	})
}
