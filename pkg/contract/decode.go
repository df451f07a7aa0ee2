package contract

import "encoding/json"

// This file builds the generic value the schema path checks
// (map[string]any, []any, string, json.Number, bool, nil) from a record,
// reading it with the scanner (scan.go) once. On the way it notices what
// encoding/json silently hides: repeated object keys (of which the first
// member counts) and, through the scanner, invalid UTF-8, lone UTF-16
// surrogates and nesting beyond maxDepth.

// value reads one value after whitespace and builds it.
func (r *reader) value() (any, error) {
	k, s, e, flag, err := r.token()
	if err != nil {
		return nil, err
	}
	switch k {
	case kindObject:
		return r.object(make(map[string]any), nil)
	case kindArray:
		return r.array()
	case kindString:
		return r.text(s, e, flag), nil
	case kindNumber:
		return json.Number(r.text(s, e, false)), nil
	}
	switch r.data[s] {
	case 't':
		return true, nil
	case 'f':
		return false, nil
	}
	return nil, nil
}

// text returns the string of the span data[s:e]: decoded when escaped,
// else cut from one string copy of data.
func (r *reader) text(s, e int, escaped bool) string {
	if escaped {
		return unescape(r.data[s:e])
	}
	if r.str == "" {
		r.str = string(r.data)
	}
	return r.str[s:e]
}

// object reads an object (pos at '{') into m and returns it. each, when
// not nil, is called after each member with its key, where its value
// starts and whether the key is a repeat.
func (r *reader) object(m map[string]any, each func(key string, start int, repeat bool)) (map[string]any, error) {
	k, esc, more, err := r.member(true)
	for ; more; k, esc, more, err = r.member(false) {
		key, start := r.text(k.start, k.end, esc), r.pos
		v, err := r.value()
		if err != nil {
			return nil, err
		}
		repeat := r.put(m, key, v, k.start)
		if each != nil {
			each(key, start, repeat)
		}
	}
	if err != nil {
		return nil, err
	}
	return m, nil
}

// put adds the member key: v (key at offset at) to m, unless key is a
// repeat: of a repeated key the first member counts, and the first repeat
// met is noted in r.dup. It reports a repeat.
func (r *reader) put(m map[string]any, key string, v any, at int) bool {
	if _, seen := m[key]; seen {
		if !r.hasDup {
			r.dup, r.dupAt, r.hasDup = key, at, true
		}
		return true
	}
	m[key] = v
	return false
}

// array reads an array (pos at '[').
func (r *reader) array() (any, error) {
	a := []any{}
	more, err := r.element(true)
	for ; more; more, err = r.element(false) {
		v, err := r.value()
		if err != nil {
			return nil, err
		}
		a = append(a, v)
	}
	if err != nil {
		return nil, err
	}
	return a, nil
}

// record is a decoded top-level object.
type record struct {
	fields map[string]any
	// payload is the raw text of the payload value (a sub-slice of the
	// input), nil when absent.
	payload []byte
	// dupKey is the first repeated key, dupIn the top-level field it was
	// found in ("" for the top level itself), when hasDup.
	dupKey, dupIn string
	hasDup        bool
	// unknown reports a top-level key that is not a contract field.
	unknown bool
}

// decodeRecord reads data as one JSON object. Its error is a *syntaxError
// (malformed, or not an object) or a *depthError. Repeated keys are
// reported in the record, not as an error, so that a syntax error later in
// the text still wins. Strings in the result share one copy of data.
func decodeRecord(data []byte) (record, error) {
	r := reader{data: data}
	var rec record
	if r.peek() != '{' {
		return rec, r.notObject()
	}
	var err error
	rec.fields, err = r.object(make(map[string]any, 10), func(key string, start int, repeat bool) {
		if !isKnownField(key) {
			rec.unknown = true
		}
		if r.hasDup && !rec.hasDup { // the first repeat: this key, or one inside its value
			rec.dupKey, rec.dupIn, rec.hasDup = r.dup, key, true
			if r.dupAt < start {
				rec.dupIn = ""
			}
		}
		if !repeat && key == fieldPayload {
			rec.payload = data[start:r.pos]
		}
	})
	if err != nil {
		return rec, err
	}
	return rec, r.end()
}

// notObject is decodeRecord's error for a text that does not open with
// '{': whether it is JSON at all, or JSON that is not an object.
func (r *reader) notObject() error {
	if r.pos >= len(r.data) {
		return r.fail("empty record")
	}
	if r.data[r.pos] == 0 {
		return r.fail("unexpected NUL byte")
	}
	if err := r.skip(); err != nil {
		if _, deep := err.(*depthError); !deep {
			return err
		}
		r.pos = len(r.data)
	}
	if err := r.end(); err != nil {
		return err
	}
	return &syntaxError{off: 0, msg: "record is not a JSON object"}
}

// decodeValue reads data as one JSON value of any kind. hasDup reports a
// repeated key in some object of it.
func decodeValue(data []byte) (v any, hasDup bool, err error) {
	r := reader{data: data}
	v, err = r.value()
	if err == nil {
		err = r.end()
	}
	return v, r.hasDup, err
}
