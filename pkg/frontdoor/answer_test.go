package frontdoor

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"
)

// TestAppendJSONIsEncodingJSON: answers of every shape, with strings
// holding quotes, control characters, HTML characters, line separators
// and bytes that are not UTF-8, encode exactly as encoding/json encodes
// them.
func TestAppendJSONIsEncodingJSON(t *testing.T) {
	alphabet := []string{"a", "Z", "0", "\"", "\\", "\n", "\r", "\t", "\b", "\f", "\x00", "\x1f", "\x7f", "<", ">", "&",
		"é", "€", "\u2028", "\u2029", "\xff", "\xc3", "😀", " ", "/"}
	str := func(r *rand.Rand) string {
		var s string
		for range r.IntN(12) {
			s += alphabet[r.IntN(len(alphabet))]
		}
		return s
	}
	r := rand.New(rand.NewPCG(1, 2))
	answers := []*Answer{{Results: []Result{}}, {Results: []Result{}, Error: "x"}}
	for range 2000 {
		a := &Answer{Results: []Result{}, Stored: r.IntN(5), Duplicates: r.IntN(3), Invalid: r.IntN(3)}
		if r.IntN(3) == 0 {
			a.Error = str(r)
		}
		for range r.IntN(4) {
			a.Results = append(a.Results, Result{EventID: str(r), Status: str(r), Reason: str(r), Seq: r.Uint64() >> r.IntN(64)})
		}
		answers = append(answers, a)
	}
	for _, a := range answers {
		want, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		if got := a.AppendJSON(nil); !bytes.Equal(got, want) {
			t.Fatalf("AppendJSON:\n%s\nencoding/json:\n%s", got, want)
		}
	}
}
