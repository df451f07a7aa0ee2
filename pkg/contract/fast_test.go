package contract

// The fast path (fast.go) must decide exactly as the schema path: the same
// Event for a valid record, the same Reason, Detail and EventID for a
// rejected one. Three tests hold it to that:
//
//   - TestMain collects every record any test of this package gives to
//     Validate (the validate, hostile, examples, stamp and decode tests)
//     and, after they pass, runs each again through both paths;
//   - TestFastPathMutations runs tens of thousands of records mutated at
//     random (fields removed, repeated, renamed, of the wrong type; long,
//     empty, escaped and Unicode strings; numbers with fractions and
//     exponents; odd timestamps; nested payloads; broken bytes);
//   - FuzzFastPath does the same under `go test -fuzz`.

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/schemas"
)

// corpusRecord is one record a test gave to Validate.
type corpusRecord struct {
	v   *Validator
	raw []byte
	at  time.Time
}

var corpus struct {
	sync.Mutex
	recs []corpusRecord
	seen map[string]bool
}

func TestMain(m *testing.M) {
	flag.Parse()
	if flag.Lookup("test.bench").Value.String() != "" || flag.Lookup("test.fuzz").Value.String() != "" {
		os.Exit(m.Run()) // no collecting while benchmarks measure or the fuzzer runs
	}
	corpus.seen = map[string]bool{}
	validateHook = func(v *Validator, raw []byte, at time.Time) {
		corpus.Lock()
		defer corpus.Unlock()
		key := fmt.Sprintf("%p|%d|%s", v, at.UnixNano(), raw)
		if !corpus.seen[key] {
			corpus.seen[key] = true
			corpus.recs = append(corpus.recs, corpusRecord{v: v, raw: bytes.Clone(raw), at: at})
		}
	}
	code := m.Run()
	validateHook = nil
	if code == 0 {
		code = checkCorpus()
	}
	os.Exit(code)
}

// checkCorpus runs every collected record through both paths, and its
// step 6 through schema.go and the JSON Schema library (compareOracle).
func checkCorpus() int {
	fast, bad, oracleBad := 0, 0, 0
	for _, r := range corpus.recs {
		took, diff := compareFastSchema(r.v, r.raw, r.at)
		if took {
			fast++
		}
		if diff != "" {
			bad++
			if bad <= 10 {
				fmt.Fprintf(os.Stderr, "fast path differs from the schema path: %s\nrecord: %.400q\n", diff, r.raw)
			}
		}
		if diff := compareOracle(r.raw); diff != "" {
			oracleBad++
			if oracleBad <= 10 {
				fmt.Fprintf(os.Stderr, "schema path differs from the JSON Schema library: %s\nrecord: %.400q\n", diff, r.raw)
			}
		}
	}
	if oracleBad > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: the schema path differs from the library on %d of the %d records of the package's tests\n", oracleBad, len(corpus.recs))
		return 1
	}
	if bad > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: fast path differs on %d of the %d records of the package's tests\n", bad, len(corpus.recs))
		return 1
	}
	if testing.Verbose() {
		fmt.Printf("fast path equivalence: %d records of the package's tests, %d on the fast path, all as the schema path\n",
			len(corpus.recs), fast)
	}
	return 0
}

var schemaOnly sync.Map // *Validator → its schema-only twin

func schemaTwin(v *Validator) *Validator {
	if s, ok := schemaOnly.Load(v); ok {
		return s.(*Validator)
	}
	s := *v
	s.schemaOnly = true
	schemaOnly.Store(v, &s)
	return &s
}

// compareFastSchema validates raw with v (fast path on) and with its
// schema-only twin and describes any difference ("" when there is none),
// also for Check. took reports whether the fast path decided the record.
func compareFastSchema(v *Validator, raw []byte, at time.Time) (took bool, diff string) {
	var fr fastRecord
	took = v.fast(raw, at, &fr)
	e1, err1 := v.Validate(raw, at)
	e2, err2 := schemaTwin(v).Validate(raw, at)
	if d := sameResult(e1, err1, e2, err2); d != "" {
		return took, "Validate: " + d
	}
	var c Checked
	err3 := v.Check(raw, at, &c)
	if err1 != nil {
		if !reflect.DeepEqual(err1, err3) {
			return took, fmt.Sprintf("Check: %v, Validate: %v", err3, err1)
		}
		return took, ""
	}
	if err3 != nil || string(c.EventID) != e1.EventID || string(c.PartitionKey) != e1.PartitionKey ||
		c.Type != e1.Type || c.OccurredAt != e1.OccurredAt || c.Fingerprint != e1.Fingerprint {
		return took, fmt.Sprintf("Check: %+v, %v; Validate: %+v", c, err3, e1)
	}
	// The one walk against the code it replaced (reference_test.go).
	if fp := refFingerprint(&e1); e1.Fingerprint != fp || Fingerprint(&e1) != fp {
		return took, fmt.Sprintf("fingerprint %x (Fingerprint %x), the reference %x", e1.Fingerprint, Fingerprint(&e1), fp)
	}
	cents, priced := refAmountCents(e1.Payload)
	if c.AmountCents != cents || c.Priced != priced {
		return took, fmt.Sprintf("Check's amount %d %v, the reference %d %v", c.AmountCents, c.Priced, cents, priced)
	}
	if a, ok := AmountCents(e1.Payload); a != cents || ok != priced {
		return took, fmt.Sprintf("AmountCents %d %v, the reference %d %v", a, ok, cents, priced)
	}
	return took, ""
}

func sameResult(e1 Event, err1 error, e2 Event, err2 error) string {
	if (err1 == nil) != (err2 == nil) {
		return fmt.Sprintf("fast %v, schema %v", err1, err2)
	}
	if err1 != nil {
		r1, ok1 := AsReject(err1)
		r2, ok2 := AsReject(err2)
		if !ok1 || !ok2 || *r1 != *r2 {
			return fmt.Sprintf("fast %#v, schema %#v", err1, err2)
		}
		if !reflect.DeepEqual(e1, Event{}) || !reflect.DeepEqual(e2, Event{}) {
			return "a rejection came with an event"
		}
		return ""
	}
	if !reflect.DeepEqual(e1, e2) {
		return fmt.Sprintf("events differ:\nfast   %+v\nschema %+v", e1, e2)
	}
	return ""
}

// seedRecords are the records the mutation and fuzz tests start from: the
// schemas' examples, the benchmark records, the decode fuzz corpus and a
// few of the unit tests' records.
func seedRecords(t testing.TB) [][]byte {
	t.Helper()
	var recs [][]byte
	err := fs.WalkDir(schemas.FS, "examples", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.Contains(p, "snapshot") {
			return err
		}
		b, err := schemas.FS.ReadFile(p)
		recs = append(recs, bytes.TrimSpace(b))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	recs = append(recs, benchV1, benchV2, benchBad, with(v1Fields(), nil), with(v2Fields(), nil),
		with(v2Fields(), map[string]any{"payload": raw(`{"a":[1,-2.5e-3,true,false,null,"x\u00e9\n",{}],"b":{"c":[]},"-0":-0}`)}))
	files, _ := filepath.Glob("testdata/fuzz/*/*")
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			if q, ok := strings.CutPrefix(line, "[]byte("); ok {
				if s, err := strconv.Unquote(strings.TrimSuffix(q, ")")); err == nil {
					recs = append(recs, []byte(s))
				}
			}
		}
	}
	return recs
}

// TestFastPathSeeds: the seed records, through both paths; the valid
// examples and the benchmark records take the fast path.
func TestFastPathSeeds(t *testing.T) {
	v := newValidator(t, Config{})
	for _, rec := range seedRecords(t) {
		if _, diff := compareFastSchema(v, rec, clock); diff != "" {
			t.Errorf("%s\nrecord: %s", diff, rec)
		}
	}
	for _, rec := range [][]byte{benchV1, benchV2, with(v1Fields(), nil), with(v2Fields(), nil)} {
		var fr fastRecord
		if !v.fast(rec, clock, &fr) {
			t.Errorf("fast path did not take %s", rec)
		}
	}
	valid, err := fs.Glob(schemas.FS, "examples/valid/*.json")
	if err != nil || len(valid) == 0 {
		t.Fatalf("examples: %v %v", valid, err)
	}
	for _, name := range valid {
		b, _ := schemas.FS.ReadFile(name)
		var fr fastRecord
		if !v.fast(b, clock, &fr) {
			t.Errorf("fast path did not take the valid example %s", name)
		}
	}
}

// TestFastPathMutations holds the fast path to the schema path on records
// mutated at random from the seeds (fixed seed, so failures reproduce).
func TestFastPathMutations(t *testing.T) {
	n := 30000
	if testing.Short() {
		n = 3000
	}
	validators := []*Validator{
		newValidator(t, Config{}),
		newValidator(t, Config{MaxFutureSkew: time.Hour}),
		newValidator(t, Config{MaxSize: 420}),
	}
	seeds := seedRecords(t)
	m := newMutator(rand.New(rand.NewPCG(7, 11)), seeds)
	fast, rejected := 0, 0
	reasons := map[Reason]int{}
	for i := 0; i < n; i++ {
		rec := m.record()
		v := validators[m.rng.IntN(len(validators))]
		at := clock
		if m.rng.IntN(4) == 0 {
			at = clock.Add(time.Duration(m.rng.IntN(48)-24) * time.Hour)
		}
		took, diff := compareFastSchema(v, rec, at)
		if diff != "" {
			t.Fatalf("record %d: %s\nrecord: %s", i, diff, rec)
		}
		if took {
			fast++
		} else if _, err := v.Validate(rec, at); err != nil {
			rejected++
			r, _ := AsReject(err)
			reasons[r.Reason]++
		}
	}
	t.Logf("%d mutated records: %d on the fast path, %d rejected %v", n, fast, rejected, reasons)
	if fast < n/20 || rejected < n/4 || len(reasons) < 8 {
		t.Errorf("the mutations do not exercise both paths: %d fast, %d rejected by %d reasons", fast, rejected, len(reasons))
	}
}

// FuzzFastPath: any record, both paths, the same result.
func FuzzFastPath(f *testing.F) {
	for _, rec := range seedRecords(f) {
		f.Add(rec)
	}
	v := newValidator(f, Config{})
	f.Fuzz(func(t *testing.T, rec []byte) {
		if _, diff := compareFastSchema(v, rec, clock); diff != "" {
			t.Fatalf("%s\nrecord: %q", diff, rec)
		}
	})
}

// field is one top-level member of a record being mutated: its key and
// its value as JSON text, both as written.
type field struct{ key, val string }

// mutator makes records from seeds by random edits.
type mutator struct {
	rng   *rand.Rand
	seeds [][]field
	raws  [][]byte
}

func newMutator(rng *rand.Rand, seeds [][]byte) *mutator {
	m := &mutator{rng: rng, raws: seeds}
	for _, s := range seeds {
		var fs []field
		err := topLevel(s, func(key []byte, start, end int) bool {
			fs = append(fs, field{key: strconv.Quote(string(key)), val: string(s[start:end])})
			return true
		})
		if err == nil && len(fs) > 3 {
			m.seeds = append(m.seeds, fs)
		}
	}
	return m
}

func (m *mutator) pick(ss ...string) string { return ss[m.rng.IntN(len(ss))] }

// record returns one mutated record.
func (m *mutator) record() []byte {
	if m.rng.IntN(20) == 0 { // a seed's bytes, broken
		return m.breakBytes(bytes.Clone(m.raws[m.rng.IntN(len(m.raws))]))
	}
	base := m.seeds[m.rng.IntN(len(m.seeds))]
	fs := append([]field(nil), base...)
	edits := m.rng.IntN(4) // 0 edits: a seed as it is, re-serialized
	for range edits {
		fs = m.edit(fs)
	}
	out := m.serialize(fs)
	if m.rng.IntN(25) == 0 {
		out = m.breakBytes(out)
	}
	return out
}

var knownKeys = knownFields[:]

func (m *mutator) edit(fs []field) []field {
	i := m.rng.IntN(len(fs))
	switch m.rng.IntN(10) {
	case 0: // remove a field
		return append(fs[:i], fs[i+1:]...)
	case 1: // add a field: known, unknown, a case variant or a repeat
		var k string
		switch m.rng.IntN(4) {
		case 0:
			k = strconv.Quote(m.pick(knownKeys...))
		case 1:
			k = strconv.Quote(m.pick("amount", "x", "", "event_id ", "payload2", "ü"))
		case 2:
			k = strconv.Quote(m.pick("EVENT_ID", "Type", "ſchema_version", "Payload", "partition_Key", "OCCURRED_AT"))
		default:
			k = fs[i].key
		}
		return append(fs, field{key: k, val: m.value(strings.Trim(k, `"`))})
	case 2: // shuffle the fields
		m.rng.Shuffle(len(fs), func(a, b int) { fs[a], fs[b] = fs[b], fs[a] })
	case 3: // write a key with an escape
		k := strings.Trim(fs[i].key, `"`)
		if k != "" {
			j := m.rng.IntN(len(k))
			fs[i].key = `"` + k[:j] + fmt.Sprintf(`\u%04x`, k[j]) + k[j+1:] + `"`
		}
	default: // another value
		fs[i].val = m.value(strings.Trim(fs[i].key, `"`))
	}
	return fs
}

// serialize writes fs as an object, sometimes with white space around the
// tokens.
func (m *mutator) serialize(fs []field) []byte {
	ws := func() string {
		if m.rng.IntN(8) == 0 {
			return m.pick(" ", "\t", "\n", "\r\n ", "  ")
		}
		return ""
	}
	var b strings.Builder
	b.WriteString(ws() + "{")
	for i, f := range fs {
		if i > 0 {
			b.WriteString(ws() + ",")
		}
		b.WriteString(ws() + f.key + ws() + ":" + ws() + f.val + ws())
	}
	b.WriteString("}" + ws())
	return []byte(b.String())
}

// breakBytes truncates, flips, inserts or deletes a byte.
func (m *mutator) breakBytes(b []byte) []byte {
	if len(b) == 0 {
		return []byte(m.pick("{", "}", "[]", "x", "\xff"))
	}
	i := m.rng.IntN(len(b))
	switch m.rng.IntN(4) {
	case 0:
		return b[:i]
	case 1:
		b[i] ^= byte(1 << m.rng.IntN(8))
		return b
	case 2:
		ins := []byte(m.pick(`"`, `\`, "{", "}", "[", "]", ",", ":", "\x00", "\xff", "\xc3", "é", " ", "0", "e"))
		return append(b[:i], append(ins, b[i:]...)...)
	default:
		return append(b[:i], b[i+1:]...)
	}
}

// value returns a JSON value for field k: mostly of the field's kind
// (often valid, often at an edge), sometimes anything.
func (m *mutator) value(k string) string {
	if m.rng.IntN(5) == 0 {
		return m.anyValue(3)
	}
	switch k {
	case fieldSchemaVersion:
		return m.pick("1", "2", "1", "2", "0", "3", "-1", "1.0", "2e0", "-0", `"2"`, "null", "9007199254740993", "1e999999999", "20")
	case fieldEventID, fieldReceiptID:
		return m.idValue()
	case fieldType:
		return m.pick(`"submitted"`, `"draft_saved"`, `"viewed"`, `"submitted"`, `"SUBMITTED"`, `""`, `"sub\u006ditted"`, `"deleted"`, "1", "null", `"submitted "`)
	case fieldOccurredMinute:
		return m.pick("29936775", "29936880", "29936885", "29936886", "15778080", "15778079", "0", "-5", "29936775.0",
			"2.9936775e7", "9007199254740992", "9007199254740993", "-9007199254740993", "18446744073709551616",
			strings.Repeat("9", 40), "1e999999999", `"29936775"`, "null", "true", strconv.Itoa(29936775+m.rng.IntN(400)-200))
	case fieldOccurredAt, fieldIngestedAt:
		return m.timeValue(k == fieldOccurredAt)
	case fieldPartitionKey:
		return m.textValue(128)
	case fieldProducerVersion:
		return m.textValue(64)
	case fieldPayload:
		if m.rng.IntN(6) == 0 {
			return m.pick("[]", "null", `"{}"`, "1", "{}", `{"a":1,"a":2}`, `{"x":[{"k":1,"k":1}]}`,
				`{"a":`+strings.Repeat("[", 40)+strings.Repeat("]", 40)+`}`, `{"a":`+strings.Repeat(`{"b":`, 31)+"1"+strings.Repeat("}", 31)+`}`)
		}
		return m.object(1 + m.rng.IntN(4))
	}
	return m.anyValue(2)
}

func (m *mutator) idValue() string {
	switch m.rng.IntN(6) {
	case 0:
		return strconv.Quote(m.pick("", "evt/1", "évt", "evt 1", "{p1}", "evt.*", strings.Repeat("e", 129), "a\r\nb", `evt"x`))
	case 1:
		return `"` + strings.Repeat("e", 127+m.rng.IntN(3)) + `"`
	case 2:
		return m.pick(`"evt\u002d1"`, `"\u0065vt"`, "7", "null", `["evt-1"]`)
	}
	const alpha = "abcXYZ019._:-"
	n := 1 + m.rng.IntN(20)
	b := make([]byte, n)
	for i := range b {
		b[i] = alpha[m.rng.IntN(len(alpha))]
	}
	return `"` + string(b) + `"`
}

// timeValue returns a date-time near the test clock, often valid, often
// just past a limit.
func (m *mutator) timeValue(occurred bool) string {
	base := clock.Add(time.Duration(m.rng.IntN(7200)-5400) * time.Second)
	if !occurred {
		base = clock.Add(time.Duration(m.rng.IntN(7200)-3600) * time.Second)
	}
	switch m.rng.IntN(8) {
	case 0:
		return strconv.Quote(m.pick("2026-12-02 10:15:00Z", "2026-12-02T10:15:00", "2026-12-02T11:15:00+01:00",
			"2026-12-02T10:15:00-00:00", "2026-12-02T10:15:00+00:00", "2026-12-02t10:15:00z", "2026-02-29T10:15:00Z",
			"2024-02-29T10:15:00Z", "2026-12-31T23:59:60Z", "2026-12-02T24:00:00Z", "1999-12-31T23:59:59.999999999Z",
			"2000-01-01T00:00:00Z", "0000-01-01T00:00:00Z", "9999-12-31T23:59:59Z", "10000-01-01T00:00:00Z",
			"2026-12-02T10:15:00.Z", "2026-12-02T10:15:00.1234567891234Z", "２０２６-12-02T10:15:00Z", "", "now",
			"2026-12-02T10:15:00+5:00", "2026-12-02T+1:15:00Z", "2026-12-02T10:15:00+24:00"))
	case 1:
		return m.pick("1796206500", "null", "0", `["2026-12-02T10:15:00Z"]`, `"2026-12-02T10:15:00\u005a"`)
	case 2:
		return strconv.Quote(base.In(time.FixedZone("", (m.rng.IntN(48)-24)*1800)).Format(time.RFC3339Nano))
	case 3:
		return strconv.Quote(clock.Add(5*time.Minute + time.Duration(m.rng.IntN(3)-1)*time.Millisecond).Format(time.RFC3339Nano))
	}
	return strconv.Quote(base.Add(time.Duration(m.rng.IntN(1000)) * time.Millisecond).Format("2006-01-02T15:04:05.000Z07:00"))
}

// textValue returns free text around a length limit, with Unicode and
// escapes.
func (m *mutator) textValue(limit int) string {
	switch m.rng.IntN(7) {
	case 0:
		return `"` + strings.Repeat(m.pick("x", "ü", "✓", "😀"), limit-1+m.rng.IntN(3)) + `"`
	case 1:
		return m.pick(`""`, `"a\nb"`, `"caf\u00e9"`, `"\ud83d\ude00"`, `"Zürich ✓"`, `"cafe\u0301"`, "17", "null", `"\t"`, `"a`+"\x7f"+`b"`)
	case 2:
		return m.pick(`"a`+"\x00"+`b"`, `"`+"\xc3"+`"`, `"\ud800"`, `"store.*.>{p1}"`)
	}
	return strconv.Quote(fmt.Sprintf("store-%d", m.rng.IntN(300)))
}

// anyValue returns any JSON value, nested at most depth levels.
func (m *mutator) anyValue(depth int) string {
	k := m.rng.IntN(10)
	if depth <= 0 && k >= 8 {
		k = m.rng.IntN(8)
	}
	switch k {
	case 0:
		return m.pick("true", "false", "null")
	case 1, 2:
		return m.pick("0", "-0", "1", "-1", "1.0", "1e0", "1E+2", "-2.5e-3", "1299", "1.299e3", "0.1",
			"9007199254740993", "123456789012345678901234567890", "1e999", "-1e-999", "5e-324", "1.7976931348623157e308")
	case 3, 4:
		return m.pick(`""`, `"x"`, `"a\"b"`, `"\\"`, `"\/"`, `"\b\f\n\r\t"`, `"\u0000"`, `"\u00e9"`, `"é"`, `"\ud83d\ude00"`,
			`"😀"`, `"<&>"`, `"\u2028"`, `"`+strings.Repeat("p", 300)+`"`)
	case 5, 6, 7:
		return m.idValue()
	case 8:
		n := m.rng.IntN(4)
		parts := make([]string, n)
		for i := range parts {
			parts[i] = m.anyValue(depth - 1)
		}
		return "[" + strings.Join(parts, m.pick(",", " , ")) + "]"
	default:
		return m.object(depth - 1)
	}
}

// object returns a JSON object of random members, sometimes with a
// repeated or escaped key.
func (m *mutator) object(depth int) string {
	n := m.rng.IntN(6)
	parts := make([]string, 0, n+1)
	keys := []string{"a", "b", "total_cents", "currency", "lines", "Ä", "a\\u0062", "ab", "", "event_id", "\\u00e9", "é", "b\\\"", "A"}
	for range n {
		parts = append(parts, `"`+m.pick(keys...)+`":`+m.anyValue(max(depth, 0)))
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// TestCanonHashMatchesFingerprint: the hash of a payload's canonical text,
// written in one pass over its text, equals the fingerprint's hash of the
// decoded payload, for every payload
// the mutator makes that decodes without a repeated key.
func TestCanonHashMatchesFingerprint(t *testing.T) {
	m := newMutator(rand.New(rand.NewPCG(3, 5)), seedRecords(t))
	checked := 0
	for i := 0; i < 20000; i++ {
		text := []byte(m.object(1 + m.rng.IntN(5)))
		if m.rng.IntN(3) == 0 {
			text = []byte(m.anyValue(4))
		}
		val, dup, err := decodeValue(text)
		c := getCanon(false)
		r := reader{data: text, depth: 1, limit: fastMaxDepth}
		ok := c.read(&r) == nil
		end := r.pos
		var h fnv64 = fnvOffset
		h.bytes(c.out)
		c.release()
		var se *syntaxError
		switch {
		case err != nil && errors.As(err, &se), dup:
			if ok && end == len(text) {
				t.Fatalf("canon accepted %s (decode: %v, dup %v)", text, err, dup)
			}
			continue
		case err != nil:
			continue
		}
		if !ok || end != len(text) {
			t.Fatalf("canon refused %s", text)
		}
		want := fnv64(fnvOffset)
		refValue(&want, val)
		if h != want {
			t.Fatalf("canon hash %x, fingerprint hash %x of %s", h, want, text)
		}
		checked++
	}
	if checked < 10000 {
		t.Errorf("only %d payloads checked", checked)
	}
}

// TestFastPathAllocs: a typical valid record costs two allocations on the
// fast path (the strings and the payload of the event) and none in Check.
func TestFastPathAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under the race detector")
	}
	hook := validateHook // TestMain's collector allocates
	validateHook = nil
	defer func() { validateHook = hook }()
	v := newValidator(t, Config{})
	for _, rec := range [][]byte{benchV1, benchV2} {
		if n := testing.AllocsPerRun(100, func() { v.Validate(rec, clock) }); n > 2 {
			t.Errorf("Validate: %v allocations, want at most 2", n)
		}
		var c Checked
		if n := testing.AllocsPerRun(100, func() { v.Check(rec, clock, &c) }); n > 0 {
			t.Errorf("Check: %v allocations, want none", n)
		}
	}
}

// TestFastPathForced: the schema-only twin never takes the fast path (the
// switch the equivalence tests rely on).
func TestFastPathForced(t *testing.T) {
	v := newValidator(t, Config{})
	s := schemaTwin(v)
	e1, err1 := v.Validate(benchV2, clock)
	e2, err2 := s.Validate(benchV2, clock)
	if d := sameResult(e1, err1, e2, err2); d != "" {
		t.Fatal(d)
	}
	hook := validateHook
	validateHook = nil
	defer func() { validateHook = hook }()
	if testing.AllocsPerRun(10, func() { s.Validate(benchV2, clock) }) < 10 {
		t.Error("the schema-only validator seems to take the fast path")
	}
}

// TestCanonKeyOrderPastThePrefix: keys are ordered by their first 8 bytes
// first (canonEntry.prefix) and by the rest only when those agree; the
// order must still be the byte order of the decoded keys, and a repeated
// key must still be found, whatever the keys' lengths, zero bytes and
// escapes.
func TestCanonKeyOrderPastThePrefix(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"amount_cents_b":2,"amount_cents_a":1,"amount_cents":0}`, `{"amount_cents":0,"amount_cents_a":1,"amount_cents_b":2}`},
		{`{"ab":1,"a":2,"":3,"abcdefgh":4,"abcdefg":5}`, `{"":3,"a":2,"ab":1,"abcdefg":5,"abcdefgh":4}`},
		{`{"a\u0000b":1,"a":2,"a\u0000":3,"a\u0001":4}`, `{"a":2,"a\u0000":3,"a\u0000b":1,"a\u0001":4}`},
		{`{"\u0061bcdefghz":1,"abcdefgha":2}`, `{"abcdefgha":2,"abcdefghz":1}`},
		{`{"zé":1,"z\u00e9a":2,"zz":3,"é":4}`, `{"zz":3,"zé":1,"zéa":2,"é":4}`},
		{`{"k":{"yyyyyyyy2":1,"yyyyyyyy1":2},"j":[{"b":1,"a":2}]}`, `{"j":[{"a":2,"b":1}],"k":{"yyyyyyyy1":2,"yyyyyyyy2":1}}`},
	} {
		c := getCanon(false)
		r := reader{data: []byte(tc.in), depth: 1, limit: fastMaxDepth}
		err := c.read(&r)
		got := string(c.out)
		c.release()
		if err != nil || got != tc.want {
			t.Errorf("canon of %s = %s (%v), want %s", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{
		`{"abcdefghij":1,"abcdefghik":2,"abcdefghij":3}`,
		`{"a":1,"b":2,"\u0061":3}`,
		`{"abcdefgh\u0069":1,"abcdefghi":2}`,
	} {
		c := getCanon(false)
		r := reader{data: []byte(in), depth: 1, limit: fastMaxDepth}
		err := c.read(&r)
		c.release()
		if !errors.Is(err, errRepeatedKey) {
			t.Errorf("canon of %s: %v, want a repeated key", in, err)
		}
	}
}
