//go:build goexperiment.jsonv2

package contract

import (
	"bytes"
	"encoding/json/jsontext"
	"testing"
)

// BenchmarkReader compares the hand-written scanner (scan.go, as the fast
// path drives it) with encoding/json/jsontext (Go 1.26, GOEXPERIMENT=jsonv2)
// on the records of bench_test.go:
//
//   - skip: check that the record is one JSON value and nothing else,
//     without building it and without looking for repeated keys
//     (reader.skip against Decoder.ReadValue with duplicates allowed);
//   - fields: what the fast path reads, the top-level members with the
//     span of each value, every string checked, repeated keys found at
//     every depth (fastRecord.scan, which also writes the payload's
//     canonical text for the fingerprint, against a Decoder walk of the
//     top-level members with ReadToken and ReadValue, duplicates rejected).
//
// Run: GOEXPERIMENT=jsonv2 go test -run '^$' -bench BenchmarkReader ./contract/
func BenchmarkReader(b *testing.B) {
	recs := []struct {
		name string
		raw  []byte
	}{{"v2", benchV2}, {"v1", benchV1}}
	for _, rec := range recs {
		b.Run("skip/scanner/"+rec.name, func(b *testing.B) {
			b.SetBytes(int64(len(rec.raw)))
			b.ReportAllocs()
			for b.Loop() {
				r := reader{data: rec.raw}
				if err := r.skip(); err != nil {
					b.Fatal(err)
				}
				if err := r.end(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("skip/jsontext/"+rec.name, func(b *testing.B) {
			b.SetBytes(int64(len(rec.raw)))
			b.ReportAllocs()
			var br bytes.Reader
			dec := jsontext.NewDecoder(&br, jsontext.AllowDuplicateNames(true))
			for b.Loop() {
				br.Reset(rec.raw)
				dec.Reset(&br, jsontext.AllowDuplicateNames(true))
				if _, err := dec.ReadValue(); err != nil {
					b.Fatal(err)
				}
				if dec.PeekKind() != 0 { // 0: the end of the input
					b.Fatal("data after the record")
				}
			}
		})
		b.Run("fields/scanner/"+rec.name, func(b *testing.B) {
			b.SetBytes(int64(len(rec.raw)))
			b.ReportAllocs()
			for b.Loop() {
				var fr fastRecord
				ok := fr.scan(rec.raw)
				if fr.canon != nil {
					fr.canon.release()
				}
				if !ok {
					b.Fatal("scan failed")
				}
			}
		})
		b.Run("fields/jsontext/"+rec.name, func(b *testing.B) {
			b.SetBytes(int64(len(rec.raw)))
			b.ReportAllocs()
			var br bytes.Reader
			dec := jsontext.NewDecoder(&br)
			for b.Loop() {
				br.Reset(rec.raw)
				dec.Reset(&br)
				var fr fastRecord
				if !jsontextFields(dec, rec.raw, &fr) {
					b.Fatal("walk failed")
				}
			}
		})
	}
}

// jsontextFields reads the top-level members of one record with dec, as
// fastRecord.scan does: which contract fields are present and the span of
// each value in raw (a string's span includes its quotes here).
func jsontextFields(dec *jsontext.Decoder, raw []byte, fr *fastRecord) bool {
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return false
	}
	for dec.PeekKind() != '}' {
		name, err := dec.ReadValue()
		if err != nil || name.Kind() != '"' {
			return false
		}
		i := fastField(name[1 : len(name)-1])
		if i < 0 || fr.has(i) {
			return false
		}
		fr.seen |= 1 << i
		val, err := dec.ReadValue()
		if err != nil {
			return false
		}
		end := int(dec.InputOffset())
		fr.vals[i] = span{end - len(val), end}
	}
	if _, err := dec.ReadToken(); err != nil {
		return false
	}
	return dec.PeekKind() == 0
}
