package contract

// The contract's outcome on a fixed corpus, computed once and committed
// (testdata/golden/outcomes.jsonl.gz): for every record the rejection
// (reason, detail, event id) or the accepted event with its fingerprint
// and amount; for every payload text Fingerprint's value and AmountCents.
// Fingerprints are stored in Redis claims, so a change of one of them, or of
// any accepted or rejected record, breaks every retry across a deploy:
// TestGoldenOutcomes holds the package to the file. The corpus is written
// into the file with the outcomes, so the generator below may change
// without moving the reference. Regenerate only for a deliberate change of
// the contract:
//
//	go test ./contract/ -run TestGoldenOutcomes -update-golden

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/golden/outcomes.jsonl.gz from the code as it is")

const goldenFile = "testdata/golden/outcomes.jsonl.gz"

// goldenOptions are the validators the corpus runs through.
var goldenOptions = []Config{{}, {MaxFutureSkew: time.Hour}, {MaxSize: 420}}

// goldenRow is one line of the golden file: a record (Opt, At, Raw) or a
// payload text (Payload, with Raw the text), and what the contract said.
type goldenRow struct {
	Payload bool   `json:"payload,omitempty"`
	Opt     int    `json:"opt,omitempty"`
	At      int64  `json:"at,omitempty"`
	Raw     []byte `json:"raw"`
	// A rejected record.
	Reason Reason `json:"reason,omitempty"`
	Detail string `json:"detail,omitempty"`
	ID     string `json:"id,omitempty"`
	// An accepted record (Event's fields; Payload bytes as written).
	Event *goldenEvent `json:"event,omitempty"`
	// The fingerprint (of the event, or Fingerprint of the payload text)
	// and AmountCents of its payload.
	FP     string `json:"fp,omitempty"`
	Amount int64  `json:"amount,omitempty"`
	Priced bool   `json:"priced,omitempty"`
}

type goldenEvent struct {
	SchemaVersion   int
	EventID         string
	ReceiptID       string
	Type            string
	OccurredAt      int64
	IngestedAt      int64
	PartitionKey    string
	ProducerVersion string
	Payload         []byte
}

// goldenOutcome runs one row's input through the contract.
func goldenOutcome(validators []*Validator, in goldenRow) goldenRow {
	out := goldenRow{Payload: in.Payload, Opt: in.Opt, At: in.At, Raw: in.Raw}
	if in.Payload {
		e := Event{ReceiptID: "rcpt-1", Type: TypeSubmitted, OccurredAt: clock, PartitionKey: "store-1", Payload: in.Raw}
		out.FP = fmt.Sprintf("%016x", Fingerprint(&e))
		out.Amount, out.Priced = AmountCents(in.Raw)
		return out
	}
	e, err := validators[in.Opt].Validate(in.Raw, time.Unix(0, in.At).UTC())
	if err != nil {
		r, _ := AsReject(err)
		out.Reason, out.Detail, out.ID = r.Reason, r.Detail, r.EventID
		return out
	}
	out.Event = &goldenEvent{e.SchemaVersion, e.EventID, e.ReceiptID, e.Type, e.OccurredAt.UnixNano(),
		e.IngestedAt.UnixNano(), e.PartitionKey, e.ProducerVersion, e.Payload}
	out.FP = fmt.Sprintf("%016x", e.Fingerprint)
	out.Amount, out.Priced = AmountCents(e.Payload)
	return out
}

// goldenInputs makes the corpus: the seed records, records mutated from
// them, records whose payload carries an amount in every form, and
// payload texts (valid, broken, with repeated keys, deep).
func goldenInputs(t *testing.T) []goldenRow {
	var rows []goldenRow
	at := clock.UnixNano()
	for _, rec := range seedRecords(t) {
		for opt := range goldenOptions {
			rows = append(rows, goldenRow{Opt: opt, At: at, Raw: rec})
		}
	}
	m := newMutator(rand.New(rand.NewPCG(13, 17)), seedRecords(t))
	for range 3000 {
		r := goldenRow{Opt: m.rng.IntN(len(goldenOptions)), At: at, Raw: m.record()}
		if m.rng.IntN(4) == 0 {
			r.At = clock.Add(time.Duration(m.rng.IntN(48)-24) * time.Hour).UnixNano()
		}
		rows = append(rows, r)
	}
	amounts := []string{`1299`, `-300`, `0`, `-0`, `1e2`, `100.0`, `12.5`, `"1299"`, `null`, `true`, `[1]`, `{"v":1}`,
		`1000000000000`, `1000000000001`, `-1000000000000`, `-1000000000001`, `123456789012345678901234`, `1.5e3`,
		`1E3`, `-2.5E+2`, `1e400`, `0.0`, `-0.0`, `9007199254740993`, `45e-1`, `4.5e1`}
	keys := []string{`"amount_cents"`, `"amount\u005fcents"`, `"Amount_Cents"`, `"amount_cents "`, `"\u0061mount_cents"`}
	for range 600 {
		var members []string
		for range m.rng.IntN(4) {
			members = append(members, `"`+m.pick("a", "total_cents", "nested", "z", "amount")+`":`+m.anyValue(2))
		}
		if m.rng.IntN(5) != 0 {
			members = append(members, m.pick(keys...)+m.pick(":", " : ", ":\n")+m.pick(amounts...))
		}
		if m.rng.IntN(6) == 0 {
			members = append(members, `"nested":{"amount_cents":`+m.pick(amounts...)+`}`)
		}
		m.rng.Shuffle(len(members), func(a, b int) { members[a], members[b] = members[b], members[a] })
		payload := "{" + strings.Join(members, ",") + "}"
		rows = append(rows, goldenRow{At: at, Raw: with(v2Fields(), map[string]any{"payload": raw(payload)})})
		rows = append(rows, goldenRow{Payload: true, Raw: []byte(payload)})
	}
	for range 1500 {
		var text string
		switch m.rng.IntN(6) {
		case 0:
			text = m.anyValue(4)
		case 1:
			text = string(m.breakBytes([]byte(m.object(1 + m.rng.IntN(3)))))
		case 2: // a repeated key
			k := m.pick(`"a"`, `"amount_cents"`, `"b\u0063"`)
			text = "{" + k + ":" + m.pick(amounts...) + `,"x":1,` + k + ":" + m.pick(amounts...) + "}"
		default:
			text = m.object(1 + m.rng.IntN(5))
		}
		rows = append(rows, goldenRow{Payload: true, Raw: []byte(text)})
	}
	for _, text := range []string{``, `null`, ` null `, `{}`, ` { } `, `[]`, `"s"`, `1.0`, ` `, `{"a":1} x`,
		strings.Repeat(`[`, 256) + strings.Repeat(`]`, 256), strings.Repeat(`[`, 257) + strings.Repeat(`]`, 257),
		`{"a":` + strings.Repeat(`{"b":`, 255) + `1` + strings.Repeat(`}`, 256), `{"a":"\ud800"}`, "{\"a\":\"\xff\"}"} {
		rows = append(rows, goldenRow{Payload: true, Raw: []byte(text)})
	}
	return rows
}

// TestGoldenOutcomes: every record of the golden corpus is accepted or
// rejected as when the file was written, with the same reason, detail,
// event id, event, fingerprint and amount; every payload text has the same
// Fingerprint, and, when it is a JSON value without a repeated key (what
// the contract accepts), the same AmountCents.
func TestGoldenOutcomes(t *testing.T) {
	var validators []*Validator
	for _, o := range goldenOptions {
		validators = append(validators, newValidator(t, o))
	}
	if *updateGolden {
		writeGolden(t, validators)
	}
	n, bad := 0, 0
	kinds := map[string]int{}
	for _, want := range readGolden(t) {
		n++
		got := goldenOutcome(validators, want)
		if want.Payload {
			kinds["payload"]++
			if _, dup, err := decodeValue(want.Raw); err != nil || dup {
				got.Amount, got.Priced = want.Amount, want.Priced // only a valid payload's amount is kept
			}
		} else if want.Event != nil {
			kinds["accepted"]++
			if want.Priced {
				kinds["priced"]++
			}
		} else {
			kinds[string(want.Reason)]++
		}
		gb, _ := json.Marshal(got)
		wb, _ := json.Marshal(want)
		if !bytes.Equal(gb, wb) {
			bad++
			if bad <= 10 {
				t.Errorf("row %d: %q\ngot  %s\nwant %s", n, want.Raw, gb, wb)
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d rows differ from %s", bad, n, goldenFile)
	}
	t.Logf("%d rows as in %s: %v", n, goldenFile, kinds)
	if n < 5000 || kinds["accepted"] < 500 || kinds["priced"] < 100 || kinds["payload"] < 1500 || len(kinds) < 10 {
		t.Errorf("the golden corpus is too thin: %d rows, %v", n, kinds)
	}
}

// readGolden returns the rows of the golden file.
func readGolden(t *testing.T) []goldenRow {
	t.Helper()
	f, err := os.Open(goldenFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var rows []goldenRow
	for dec := json.NewDecoder(zr); dec.More(); {
		var row goldenRow
		if err := dec.Decode(&row); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, row)
	}
	return rows
}

func writeGolden(t *testing.T, validators []*Validator) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	enc := json.NewEncoder(zw)
	for _, in := range goldenInputs(t) {
		if err := enc.Encode(goldenOutcome(validators, in)); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(goldenFile), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(goldenFile, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}
