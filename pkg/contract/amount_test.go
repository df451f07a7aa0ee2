package contract

import (
	"encoding/json"
	"testing"
)

func TestAmountCents(t *testing.T) {
	cases := []struct {
		payload string
		want    int64
		ok      bool
	}{
		{``, 0, false},
		{`{}`, 0, false},
		{`{"amount_cents":1299}`, 1299, true},
		{` { "currency" : "EUR" , "amount_cents" : 450 } `, 450, true},
		{`{"amount_cents":-300}`, -300, true},
		{`{"amount_cents":0}`, 0, true},
		{`{"amount_cents":-0}`, 0, true},
		{`{"amount_cents":1e2}`, 100, true},
		{`{"amount_cents":100.0}`, 100, true},
		{`{"amount_cents":12.5}`, 0, false},
		{`{"amount_cents":"1299"}`, 0, false},
		{`{"amount_cents":null}`, 0, false},
		{`{"amount_cents":true}`, 0, false},
		{`{"amount_cents":[1]}`, 0, false},
		{`{"amount_cents":{"v":1}}`, 0, false},
		{`{"amount_cents":1000000000000}`, 1_000_000_000_000, true},
		{`{"amount_cents":1000000000001}`, 0, false},
		{`{"amount_cents":-1000000000001}`, 0, false},
		{`{"amount_cents":123456789012345678901234}`, 0, false},
		{`{"Amount_Cents":5}`, 0, false}, // keys are exact, unlike encoding/json
		{`{"amount\u005fcents":7}`, 7, true},
		{`{"nested":{"amount_cents":9},"amount_cents":3}`, 3, true},
		{`{"nested":{"amount_cents":9}}`, 0, false},
		{`{"s":"a \"amount_cents\": 8 }","items":[1,{"amount_cents":2}],"amount_cents":11}`, 11, true},
		{`{"total_cents":1299,"currency":"EUR"}`, 0, false},
	}
	for _, c := range cases {
		if !json.Valid([]byte(c.payload)) && c.payload != "" {
			t.Fatalf("case %q is not valid JSON", c.payload)
		}
		got, ok := AmountCents([]byte(c.payload))
		if got != c.want || ok != c.ok {
			t.Errorf("AmountCents(%s) = %d, %v; want %d, %v", c.payload, got, ok, c.want, c.ok)
		}
	}
}

// The scanner must agree with encoding/json (exact key match) on any valid
// object: fuzzed against it.
func FuzzAmountCents(f *testing.F) {
	for _, s := range []string{`{"amount_cents":12}`, `{"a":[{"b":"}"}],"amount_cents":-4}`, `{"amount\u005fcents":1e3}`, `{}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var m map[string]json.RawMessage
		if json.Unmarshal([]byte(s), &m) != nil || m == nil {
			return
		}
		raw, has := m[AmountKey]
		got, ok := AmountCents([]byte(s))
		if !has && ok {
			t.Fatalf("%s: amount %d read from a payload without %s", s, got, AmountKey)
		}
		if has {
			var n json.Number
			isNum := json.Unmarshal(raw, &n) == nil
			if ok && !isNum {
				t.Fatalf("%s: amount %d read from a non-number %s", s, got, raw)
			}
		}
	})
}
