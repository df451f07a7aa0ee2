package frontdoor

import (
	"bytes"
	"encoding/json"
	"errors"
	"mime"
)

// Content types of a request body.
const (
	TypeNDJSON = "application/x-ndjson"
	TypeJSON   = "application/json"
)

// errUnsupportedType: the body is of another content type (415).
var errUnsupportedType = errors.New("content type must be " + TypeNDJSON + " or " + TypeJSON)

// errBadBody is a body that is none of the accepted forms (400).
type errBadBody string

func (e errBadBody) Error() string { return string(e) }

// mediaType returns the media type of a Content-Type value; an empty one
// is sniffed from the body (NATS requests need not say): a body that is
// one JSON value is JSON, anything else NDJSON.
func mediaType(contentType string, body []byte) (string, error) {
	if contentType == "" {
		if json.Valid(body) {
			return TypeJSON, nil
		}
		return TypeNDJSON, nil
	}
	if contentType == TypeNDJSON || contentType == TypeJSON {
		return contentType, nil
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil || (mt != TypeNDJSON && mt != TypeJSON) {
		return "", errUnsupportedType
	}
	return mt, nil
}

// split cuts a body of media type mt into its records, in order. NDJSON:
// one record per line that is not blank, whatever it holds (a malformed
// line is a record the contract rejects). JSON: one object, or an array
// whose every element is a record (an element that is not an object is
// rejected by the contract like any malformed record). A body that is
// empty, or JSON that does not parse, is errBadBody.
func split(mt string, body []byte) ([][]byte, error) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return nil, errBadBody("empty body")
	}
	if mt == TypeNDJSON {
		var recs [][]byte
		for line := range bytes.SplitSeq(trimmed, []byte("\n")) {
			if len(bytes.TrimSpace(line)) > 0 {
				recs = append(recs, line)
			}
		}
		return recs, nil
	}
	if !json.Valid(trimmed) {
		return nil, errBadBody("the body is not valid JSON (send " + TypeNDJSON + " to have each line judged on its own)")
	}
	switch trimmed[0] {
	case '{':
		return [][]byte{trimmed}, nil
	case '[':
		var elems []json.RawMessage
		if err := json.Unmarshal(trimmed, &elems); err != nil {
			return nil, errBadBody("the JSON array does not parse: " + err.Error())
		}
		if len(elems) == 0 {
			return nil, errBadBody("an empty JSON array")
		}
		recs := make([][]byte, len(elems))
		for i, e := range elems {
			recs[i] = e
		}
		return recs, nil
	}
	return nil, errBadBody("the body is JSON but neither an object nor an array of objects")
}
