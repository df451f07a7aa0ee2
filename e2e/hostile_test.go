package e2e

// Hostile input through the whole pipeline, one test per row of
// docs/bad-input.md. Most rows share one generated NDJSON file (hostileFile)
// that is run once per backend (embedded, and a real redis-server); each
// row's test holds the run to that row's expectations, and
// TestHostileNothingLostNothingDoubleCounted holds it to all of them at once.
// Rows that need their own run (conflicts across partitions, control
// message ids, poison messages) start one.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/boundedrun"
	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/ingest"
	"github.com/receiptflow/receiptflow/pkg/pipeline"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// hostileNow is the ingest time of the runs (stamped on records without
// ingested_at); records that carry one say 10:45.
var hostileNow = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

const hostileWindow = "2026-12-02T10"

// fnv1a32 is FNV-1a 32, written out here so that the test checks
// window.Partition against docs/spec.md §3 instead of against itself.
func fnv1a32(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}

func partitionOf(key string) int { return int(fnv1a32(key) % 8) }

// keyIn returns the first key prefix-N that falls in partition p.
func keyIn(prefix string, p int) string {
	for n := 0; ; n++ {
		if k := fmt.Sprintf("%s-%d", prefix, n); partitionOf(k) == p {
			return k
		}
	}
}

// rec is a record as a map; JSON renders it with sorted keys.
type rec map[string]any

func (r rec) with(k string, v any) rec {
	out := rec{}
	for key, val := range r {
		out[key] = val
	}
	if v == nil {
		delete(out, k)
	} else {
		out[k] = v
	}
	return out
}

func (r rec) String() string {
	b, err := json.Marshal(map[string]any(r))
	if err != nil {
		panic(err)
	}
	return string(b)
}

// ev2 is a valid v2 submission.
func ev2(id, key, at string) rec {
	return rec{"schema_version": 2, "event_id": id, "receipt_id": "rcpt-1", "type": "submitted", "occurred_at": at,
		"ingested_at": "2026-12-02T10:45:00Z", "partition_key": key, "producer_version": "pos 4"}
}

// ev1 is a valid v1 submission at minute m of 2026-12-02T10.
func ev1(id, key string, m int) rec {
	return rec{"schema_version": 1, "event_id": id, "receipt_id": "rcpt-1", "type": "submitted",
		"occurred_minute": 29936760 + m, "ingested_at": "2026-12-02T10:45:00Z", "partition_key": key}
}

// padTo returns r with a payload pad making its JSON exactly size bytes.
func padTo(r rec, size int) string {
	s := r.with("payload", map[string]any{"pad": ""}).String()
	s = r.with("payload", map[string]any{"pad": strings.Repeat("x", size-len(s))}).String()
	if len(s) != size {
		panic(fmt.Sprintf("padTo: %d bytes, want %d", len(s), size))
	}
	return s
}

// nested returns a JSON value nested n levels deep (objects or arrays).
func nested(n int, obj bool) string {
	if obj {
		return strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n)
	}
	return strings.Repeat("[", n) + "1" + strings.Repeat("]", n)
}

// want is what must become of one record.
type want struct {
	row string
	// decision is counted, rejected or duplicate (dropped by the RAW
	// Nats-Msg-Id window, a retry).
	decision string
	id       string
	reason   contract.Reason
	key      string // partition key of a counted record
	// ofRejected marks a retry of a rejected record: the batch pass,
	// which has no message ids, rejects it again.
	ofRejected bool
}

func (w want) trace() string { return w.decision + "/" + w.id + "/" + string(w.reason) }

// fixture is an NDJSON file under construction with what must become of
// each of its records.
type fixture struct {
	lines []string
	wants []want
}

func (f *fixture) blank(text string) { f.lines = append(f.lines, text) }

func (f *fixture) add(row, line string, w want) {
	w.row = row
	f.lines = append(f.lines, line)
	f.wants = append(f.wants, w)
}

func (f *fixture) counted(row string, r rec) {
	f.add(row, r.String(), want{decision: "counted", id: r["event_id"].(string), key: r["partition_key"].(string)})
}

func (f *fixture) rejected(row, line, id string, reason contract.Reason) {
	f.add(row, line, want{decision: "rejected", id: id, reason: reason})
}

// retry is a record JetStream drops by its Nats-Msg-Id (same event id
// and content as an earlier one, or the same bytes for an invalid one).
// The trace names it by the message id up to its first ':' ("x" for an
// invalid record).
func (f *fixture) retry(row, line, id string) {
	f.add(row, line, want{decision: "duplicate", id: id})
}

// retryOfRejected is a retry of a rejected record.
func (f *fixture) retryOfRejected(row, line, id string) {
	f.add(row, line, want{decision: "duplicate", id: id, ofRejected: true})
}

// hostileFile builds the shared fixture. Every counted event is in window
// 10:00–11:00 of 2026-12-02 and on time.
func hostileFile() *fixture {
	f := &fixture{}
	key := func(p int) string { return keyIn("store", p) }

	// malformed JSON
	good := ev2("mal-ok", key(0), "2026-12-02T10:01:00Z").String()
	f.rejected("malformed", `{"schema_version":2,"event_id":"mal-cut","receipt_id":"r",`, "mal-cut", contract.ReasonMalformedJSON)
	twice := ev2("mal-twice", key(0), "2026-12-02T10:02:00Z").String()
	f.rejected("malformed", twice+twice, "mal-twice", contract.ReasonMalformedJSON)
	f.rejected("malformed", good+` {"event_id":"mal-ok"}`, "mal-ok", contract.ReasonMalformedJSON)
	f.rejected("malformed", "["+good+"]", "mal-ok", contract.ReasonMalformedJSON)
	f.rejected("malformed", "\uFEFF"+good, "mal-ok", contract.ReasonMalformedJSON)
	f.rejected("malformed", good+"\u00A0", "mal-ok", contract.ReasonMalformedJSON)
	f.rejected("malformed", `{"event_id":"mal-utf8","partition_key":"`+"\xff"+`"}`, "mal-utf8", contract.ReasonMalformedJSON)
	f.rejected("malformed", `{"event_id":"mal-surrogate","partition_key":"\udc00"}`, "mal-surrogate", contract.ReasonMalformedJSON)
	f.rejected("malformed", `{"event_id":"mal-nul","partition_key":"a`+"\x00"+`b"}`, "mal-nul", contract.ReasonMalformedJSON)
	f.rejected("malformed", `{"event_id":'mal-quote'}`, "", contract.ReasonMalformedJSON)
	f.rejected("malformed", `nope`, "", contract.ReasonMalformedJSON)
	f.retryOfRejected("malformed", `nope`, "x")
	f.blank("   ")
	f.blank("\u00A0\u3000")
	f.blank("")
	// The id of the two-objects line was never claimed: its real record
	// counts.
	f.counted("malformed", ev2("mal-twice", key(0), "2026-12-02T10:03:00Z"))

	// 64 KiB + 1 byte
	f.add("too_large", padTo(ev2("big-64k", key(1), "2026-12-02T10:04:00Z"), 64<<10),
		want{decision: "counted", id: "big-64k", key: key(1)})
	unstamped := ev2("big-64k-own", key(1), "2026-12-02T10:05:00Z").with("ingested_at", nil)
	f.add("too_large", "  "+padTo(unstamped, 64<<10)+" \r", want{decision: "counted", id: "big-64k-own", key: key(1)})
	f.rejected("too_large", padTo(ev2("big-over", key(1), "2026-12-02T10:06:00Z"), 64<<10+1), "big-over", contract.ReasonTooLarge)
	f.rejected("too_large", padTo(ev2("big-2mib", key(1), "2026-12-02T10:07:00Z"), 2<<20), "big-2mib", contract.ReasonTooLarge)
	f.counted("too_large", ev2("big-after", key(1), "2026-12-02T10:08:00Z"))

	// deep nesting
	// encoding/json refuses 10,000 levels, so these are put together by hand.
	deep := func(id string, obj bool) string {
		return strings.TrimSuffix(ev2(id, key(2), "2026-12-02T10:09:00Z").String(), "}") + `,"payload":{"a":` + nested(9999, obj) + `}}`
	}
	f.rejected("deep", deep("deep-obj", true), "deep-obj", contract.ReasonInvalidField)
	f.rejected("deep", deep("deep-arr", false), "deep-arr", contract.ReasonInvalidField)
	f.rejected("deep", nested(30000, false), "", contract.ReasonMalformedJSON)
	f.counted("deep", ev2("deep-ok", key(2), "2026-12-02T10:10:00Z").with("payload", json.RawMessage(`{"a":`+nested(254, false)+`}`)))

	// duplicate or case-variant keys
	smuggle := strings.TrimSuffix(ev2("dupk-a", key(3), "2026-12-02T10:11:00Z").String(), "}")
	f.rejected("dup_keys", smuggle+`,"EVENT_ID":"dupk-b"}`, "", contract.ReasonInvalidField)
	f.rejected("dup_keys", smuggle+`,"event_id":"dupk-c"}`, "", contract.ReasonInvalidField)
	f.rejected("dup_keys", smuggle+`,"event_\u0069d":"dupk-d"}`, "", contract.ReasonInvalidField)
	f.rejected("dup_keys", smuggle+`,"payload":{"n":1,"n":2}}`, "dupk-a", contract.ReasonInvalidField)
	f.rejected("dup_keys", smuggle+`,"Type":"viewed"}`, "dupk-a", contract.ReasonInvalidField)
	// None of those ids was claimed: each counts once, with its own content.
	for _, id := range []string{"dupk-a", "dupk-b", "dupk-c", "dupk-d"} {
		f.counted("dup_keys", ev2(id, key(3), "2026-12-02T10:12:00Z").with("payload", map[string]any{"real": true}))
	}
	f.counted("dup_keys", ev2("dupk-e", key(3), "2026-12-02T10:12:00Z").with("payload", map[string]any{"event_id": "dupk-f", "EVENT_ID": "dupk-g"}))
	f.counted("dup_keys", ev2("dupk-f", key(3), "2026-12-02T10:12:00Z"))

	// integers beyond 2^53
	f.rejected("big_ints", ev2("int-sv", key(4), "2026-12-02T10:13:00Z").with("schema_version", json.RawMessage("9007199254740994")).String(), "int-sv", contract.ReasonInvalidField)
	f.rejected("big_ints", ev1("int-om", key(4), 0).with("occurred_minute", json.RawMessage("9007199254740993")).String(), "int-om", contract.ReasonInvalidField)
	f.rejected("big_ints", ev1("int-exp", key(4), 0).with("occurred_minute", json.RawMessage("2.9936775e7")).String(), "int-exp", contract.ReasonInvalidField)
	f.rejected("big_ints", ev1("int-2p64", key(4), 0).with("occurred_minute", json.RawMessage("18446744073709551616")).String(), "int-2p64", contract.ReasonInvalidField)
	big := ev2("int-pay", key(4), "2026-12-02T10:14:00Z").with("payload", json.RawMessage(`{"n":9007199254740993,"m":1e999999999}`))
	f.counted("big_ints", big)
	f.rejected("big_ints", big.with("payload", json.RawMessage(`{"n":9007199254740992,"m":1e999999999}`)).String(), "int-pay", contract.ReasonConflictingDuplicate)
	f.retry("big_ints", big.with("producer_version", "pos 5").String(), "int-pay")

	// negative, zero, year-9999 and unparsable times
	tk := key(5)
	for i, tc := range []struct {
		r      rec
		reason contract.Reason
	}{
		{ev1("", tk, 0).with("occurred_minute", -1), contract.ReasonBadTimestamp},
		{ev1("", tk, 0).with("occurred_minute", 0), contract.ReasonBadTimestamp},
		{ev1("", tk, 0).with("occurred_minute", 253402300740/60), contract.ReasonBadTimestamp},
		{ev1("", tk, 0).with("occurred_minute", "29936775"), contract.ReasonBadTimestamp},
		{ev2("", tk, "-2026-12-02T10:15:00Z"), contract.ReasonBadTimestamp},
		{ev2("", tk, "0000-01-01T00:00:00Z"), contract.ReasonBadTimestamp},
		{ev2("", tk, "1970-01-01T00:00:00Z"), contract.ReasonBadTimestamp},
		{ev2("", tk, "9999-12-31T23:59:59.999999999Z"), contract.ReasonBadTimestamp},
		{ev2("", tk, "2026-02-30T10:15:00Z"), contract.ReasonBadTimestamp},
		{ev2("", tk, "2026-12-02T11:15:00+01:00"), contract.ReasonBadTimestamp},
		{ev2("", tk, "yesterday"), contract.ReasonBadTimestamp},
		{ev2("", tk, "2026-12-02T10:15:00Z").with("ingested_at", "-0001-01-01T00:00:00Z"), contract.ReasonBadTimestamp},
		{ev2("", tk, "2026-12-02T10:15:00Z").with("ingested_at", "0000-01-01T00:00:00Z"), contract.ReasonBadTimestamp},
	} {
		id := fmt.Sprintf("time-%d", i)
		f.rejected("times", tc.r.with("event_id", id).String(), id, tc.reason)
	}
	f.counted("times", ev2("time-ok", tk, "2026-12-02T10:15:00Z"))

	// future timestamps: rejected, and the partition's watermark stays
	fk := key(6)
	f.counted("future", ev2("fut-1", fk, "2026-12-02T10:20:00Z"))
	f.rejected("future", ev2("fut-2", fk, "2026-12-02T14:00:00Z").with("ingested_at", "2026-12-02T10:21:00Z").String(), "fut-2", contract.ReasonFutureTimestamp)
	f.rejected("future", ev1("fut-3", fk, 240).with("ingested_at", "2026-12-02T10:21:00Z").String(), "fut-3", contract.ReasonFutureTimestamp)
	f.rejected("future", ev2("fut-4", fk, "2026-12-02T10:26:00.001Z").with("ingested_at", "2026-12-02T10:21:00Z").String(), "fut-4", contract.ReasonFutureTimestamp)
	// Had fut-2 moved the watermark to 13:55, fut-5 (window end 11:00)
	// would be LATE (13:55 >= 11:00 + 1h grace); it is on time.
	f.counted("future", ev2("fut-5", fk, "2026-12-02T10:10:00Z"))

	// same event_id, different payload
	ck := key(7)
	conf := ev2("conf-1", ck, "2026-12-02T10:22:00Z").with("payload", map[string]any{"total_cents": 100})
	f.counted("conflict", conf)
	f.rejected("conflict", conf.with("payload", map[string]any{"total_cents": 999}).String(), "conf-1", contract.ReasonConflictingDuplicate)
	f.retry("conflict", conf.with("ingested_at", "2026-12-02T10:50:00Z").with("producer_version", "pos 9").String(), "conf-1")
	// A retry of the conflicting record is a retry too: its rejection is
	// already on record.
	f.retryOfRejected("conflict", conf.with("payload", map[string]any{"total_cents": 999}).with("ingested_at", "2026-12-02T10:51:00Z").String(), "conf-1")
	// Another partition key in the same partition (stream order decides).
	k2 := keyIn("other", 7)
	f.rejected("conflict", conf.with("partition_key", k2).String(), "conf-1", contract.ReasonConflictingDuplicate)
	// The v1 form of the same event is a retry, not a conflict.
	f.counted("conflict", ev2("conf-2", ck, "2026-12-02T10:23:00Z"))
	f.retry("conflict", ev1("conf-2", ck, 23).String(), "conf-2")

	// ids and partition keys with NATS, Redis and Lua metacharacters
	for i, id := range []string{"evt.*", "evt.>", "evt{p1}", "{p1}", "evt 1", "évt", "evt\r\nRf-Kind: s", "redis.call('FLUSHALL')", "KEYS[1]", "*", ">"} {
		f.rejected("ids_keys", ev2(id, key(i%8), "2026-12-02T10:24:00Z").String(), "", contract.ReasonInvalidField)
	}
	for i, k := range []string{
		"store.*.>{p1}", "store.*.>{p2}", "{p0}", "rf.raw.3", "$KV.receipts-1.>", "store 1", "日本の店", "caf\u00e9", "cafe\u0301",
		"'; DROP TABLE x; --", "redis.call('FLUSHALL')", "KEYS[1]", "a\r\nb", "]]..os.exit()--",
	} {
		f.counted("ids_keys", ev2(fmt.Sprintf("pk-%d", i), k, "2026-12-02T10:25:00Z"))
	}
	f.counted("ids_keys", ev2("id.dot:colon_under-1", key(0), "2026-12-02T10:26:00Z"))
	f.counted("ids_keys", ev2("CASE-1", key(0), "2026-12-02T10:26:00Z"))
	f.counted("ids_keys", ev2("case-1", key(0), "2026-12-02T10:26:00Z"))
	return f
}

// hostileResult is one run of the shared fixture.
type hostileResult struct {
	res *boundedrun.Result
	f   *fixture
	err error
}

var (
	hostileMu   sync.Mutex
	hostileRuns = map[string]*hostileResult{}
)

// hostileRun runs the shared fixture on be once per test binary.
func hostileRun(t *testing.T, be backend) *hostileResult {
	t.Helper()
	hostileMu.Lock()
	defer hostileMu.Unlock()
	if r, ok := hostileRuns[be.name]; ok {
		if r.err != nil {
			t.Fatalf("run of the shared fixture failed: %v", r.err)
		}
		return r
	}
	f := hostileFile()
	dir := t.TempDir()
	path := filepath.Join(dir, "hostile.ndjson")
	if err := os.WriteFile(path, []byte(strings.Join(f.lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := boundedrun.Run(ctx, boundedrun.Config{Config: be.cfg(t), Events: path, Now: hostileNow, Out: filepath.Join(dir, "out")})
	r := &hostileResult{res: res, f: f, err: err}
	hostileRuns[be.name] = r
	if err != nil {
		t.Fatalf("run of the shared fixture: %v", err)
	}
	return r
}

// forEachBackend runs fn on the shared fixture's run of every backend.
func forEachBackend(t *testing.T, fn func(t *testing.T, r *hostileResult)) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) { fn(t, hostileRun(t, be)) })
	}
}

// traces renders trace rows as decision/id/reason.
func traces(res *boundedrun.Result) []string {
	var out []string
	for _, tr := range res.Trace {
		d := tr.Decision
		if d == "counted" && tr.Correction {
			d = "counted-correction"
		}
		out = append(out, d+"/"+tr.EventID+"/"+tr.Reason)
	}
	sort.Strings(out)
	return out
}

func countOf(list []string, s string) int {
	n := 0
	for _, x := range list {
		if x == s {
			n++
		}
	}
	return n
}

// checkRow holds a run to the expectations of one row: each record of the
// row ends as wanted (the trace holds it as many times as the whole file
// wants it, so ids shared between rows cannot hide a loss), and every
// counted one is in the window's partial of its partition.
func checkRow(t *testing.T, r *hostileResult, row string) {
	t.Helper()
	got := traces(r.res)
	var all []string
	for _, w := range r.f.wants {
		all = append(all, w.trace())
	}
	n := 0
	for _, w := range r.f.wants {
		if w.row != row {
			continue
		}
		n++
		if g, e := countOf(got, w.trace()), countOf(all, w.trace()); g != e {
			t.Errorf("%s: %d trace rows %q, want %d", row, g, w.trace(), e)
		}
	}
	if n == 0 {
		t.Fatalf("row %s has no records", row)
	}
	wantByPartition := map[int]int64{}
	for _, w := range r.f.wants {
		if w.decision == "counted" {
			if p := partitionOf(w.key); p != window.Partition(w.key, 8) {
				t.Fatalf("window.Partition(%q) = %d, FNV-1a 32 mod 8 = %d", w.key, window.Partition(w.key, 8), p)
			}
			wantByPartition[partitionOf(w.key)]++
		}
	}
	if len(r.res.Windows) != 1 || r.res.Windows[0].WindowID != hostileWindow {
		t.Fatalf("windows %+v, want only %s", r.res.Windows, hostileWindow)
	}
	w := r.res.Windows[0]
	gotByPartition := map[int]int64{}
	for _, p := range w.Partitions {
		gotByPartition[p.Partition] = p.Count
		if p.Corrections != 0 || p.LateDropped != 0 {
			t.Errorf("partition %d: %d corrections, %d late: every counted event here is on time", p.Partition, p.Corrections, p.LateDropped)
		}
	}
	for p := range 8 {
		if gotByPartition[p] != wantByPartition[p] {
			t.Errorf("partition %d counted %d, want %d (all partials %v)", p, gotByPartition[p], wantByPartition[p], gotByPartition)
		}
	}
}

// TestHostileNothingLostNothingDoubleCounted: every record of the shared
// fixture ends exactly once as counted, rejected with its reason, or
// dropped as a retry; blank lines are no records; the window holds exactly
// the counted events, is final, and the batch pass agrees (parity).
func TestHostileNothingLostNothingDoubleCounted(t *testing.T) {
	forEachBackend(t, func(t *testing.T, r *hostileResult) {
		var want []string
		counted, rejectedRetries := 0, 0
		for _, w := range r.f.wants {
			want = append(want, w.trace())
			if w.decision == "counted" {
				counted++
			}
			if w.ofRejected {
				rejectedRetries++
			}
		}
		sort.Strings(want)
		if got := traces(r.res); !slices.Equal(got, want) {
			t.Errorf("trace differs from the fixture's expectations:\n got %q\nwant %q", got, want)
		}
		if r.res.Ingest.Records != int64(len(r.f.wants)) {
			t.Errorf("ingest read %d records, want %d (blank lines skipped)", r.res.Ingest.Records, len(r.f.wants))
		}
		if len(r.res.Windows) != 1 || r.res.Windows[0].Count != int64(counted) || r.res.Windows[0].Status != window.StatusFinal {
			t.Errorf("windows %+v, want one final window of %d", r.res.Windows, counted)
		}
		if len(r.res.Late) != 0 {
			t.Errorf("late rows %+v", r.res.Late)
		}
		if !r.res.Report.Holds {
			t.Errorf("parity does not hold: %+v", r.res.Report.Summary)
		}
		// The batch pass reads RAW, which keeps one copy of a repeated
		// rejected record (its Nats-Msg-Id drops the retry): it rejects
		// exactly what the validator rejected, and the file's retries
		// are not in RAW at all.
		if r.res.Report.Summary.Rejected != len(r.res.Rejected) {
			t.Errorf("batch rejected %d, stream %d (the file's %d retries of rejected records are not in RAW)", r.res.Report.Summary.Rejected, len(r.res.Rejected), rejectedRetries)
		}
	})
}

// TestHostileMalformedJSON: malformed records are rejected malformed_json
// with their id when readable; a line holding two records counts neither;
// a byte-identical invalid line is dropped as a retry; blank lines, Unicode
// white space included, are no records on either path.
func TestHostileMalformedJSON(t *testing.T) {
	forEachBackend(t, func(t *testing.T, r *hostileResult) { checkRow(t, r, "malformed") })
}

// TestHostileTooLarge: exactly 64 KiB counts, also when the producer left
// ingested_at to ingest and wrapped the line in white space; 64 KiB + 1 and
// 2 MiB are too_large (the 2 MiB line, past NATS max_payload, is cut by
// ingest with its size kept) and the partition goes on.
func TestHostileTooLarge(t *testing.T) {
	forEachBackend(t, func(t *testing.T, r *hostileResult) {
		checkRow(t, r, "too_large")
		for _, rj := range r.res.Rejected {
			if rj.EventID == "big-2mib" && !strings.Contains(rj.Detail, fmt.Sprintf("record is %d bytes", 2<<20)) {
				t.Errorf("2 MiB rejection detail %q does not give the full size", rj.Detail)
			}
		}
	})
}

// TestHostileDeepNesting: payloads nested 10,000 deep are invalid_field
// (limit 256 levels), 30,000 nested arrays are malformed_json, 256 levels
// count.
func TestHostileDeepNesting(t *testing.T) {
	forEachBackend(t, func(t *testing.T, r *hostileResult) { checkRow(t, r, "deep") })
}

// TestHostileDuplicateKeys: records with a second or case-variant
// event_id are invalid_field and attributed to no id; none of the ids they
// carry is claimed, so the real records of all of them count once.
func TestHostileDuplicateKeys(t *testing.T) {
	forEachBackend(t, func(t *testing.T, r *hostileResult) { checkRow(t, r, "dup_keys") })
}

// TestHostileBigIntegers: integers beyond 2^53 where the contract reads
// them are invalid_field; in the payload they are data, and a payload that
// differs only past 2^53 is a conflicting duplicate, not a retry.
func TestHostileBigIntegers(t *testing.T) {
	forEachBackend(t, func(t *testing.T, r *hostileResult) { checkRow(t, r, "big_ints") })
}

// TestHostileTimes: negative, zero, year-9999 and unparsable times, v1 and
// v2 and ingested_at, are rejected with bad_timestamp or future_timestamp
// and create no window.
func TestHostileTimes(t *testing.T) {
	forEachBackend(t, func(t *testing.T, r *hostileResult) { checkRow(t, r, "times") })
}

// TestHostileFutureTimestamp: future records are rejected and never move
// the watermark: an event 10 minutes behind the partition's newest valid
// one, but 3h40 behind the rejected future one, is counted on time.
func TestHostileFutureTimestamp(t *testing.T) {
	forEachBackend(t, func(t *testing.T, r *hostileResult) {
		checkRow(t, r, "future")
		for _, tr := range r.res.Trace {
			if tr.EventID == "fut-5" && (tr.Decision != "counted" || tr.Correction) {
				t.Errorf("fut-5: %+v, want counted on time", tr)
			}
		}
		w := r.res.Windows[0]
		for _, p := range w.Partitions {
			if p.Partition == partitionOf(keyIn("store", 6)) && p.Corrections != 0 {
				t.Errorf("partition %d made corrections", p.Partition)
			}
		}
	})
}

// TestHostileConflictingDuplicate: the same event_id with other content is
// counted once (the first record) and every other version is rejected
// conflicting_duplicate, also under another partition key; retries (other
// ingested_at or producer_version, the v1 form) are dropped as retries.
// Across partitions too the version with the lowest RAW sequence wins
// (docs/spec.md §2), whatever order the validator's partitions claim in.
func TestHostileConflictingDuplicate(t *testing.T) {
	forEachBackend(t, func(t *testing.T, r *hostileResult) { checkRow(t, r, "conflict") })

	t.Run("across partitions", func(t *testing.T) {
		a, b := keyIn("xa", 1), keyIn("xb", 2)
		first := ev2("xconf-1", a, "2026-12-02T10:30:00Z")
		res := runLines(t, []string{
			first.String(),
			ev2("xconf-1", b, "2026-12-02T10:31:00Z").String(),
			first.String(),
			ev2("xconf-1", b, "2026-12-02T10:31:00Z").with("payload", map[string]any{"v": 3}).String(),
		}, 0)
		got := traces(res)
		counted := countOf(got, "counted/xconf-1/")
		conflicts := countOf(got, "rejected/xconf-1/conflicting_duplicate")
		if counted != 1 || conflicts != 2 || countOf(got, "duplicate/xconf-1/") != 1 || len(got) != 4 {
			t.Fatalf("trace %q: want xconf-1 counted once, two conflicts, one retry", got)
		}
		if len(res.Windows) != 1 || res.Windows[0].Count != 1 {
			t.Fatalf("windows %+v, want one count", res.Windows)
		}
		// The lowest RAW sequence is the first line, in partition a.
		for _, p := range res.Windows[0].Partitions {
			if want := map[bool]int64{true: 1, false: 0}[p.Partition == partitionOf(a)]; p.Count != want {
				t.Fatalf("partition %d counts %d, want %d: the first version (RAW's lowest sequence, partition %d) must win",
					p.Partition, p.Count, want, partitionOf(a))
			}
		}
	})
}

// TestHostileIDsAndPartitionKeys: ids with wildcards, hash-tag braces,
// spaces, Unicode, CR LF or Lua are invalid_field and name no id; such
// partition keys are counted in partition FNV-1a(key) mod 8, each key on
// its own, on miniredis and on a real redis-server; ids differing only in
// case are two events. Message ids of control messages cannot collide
// with event ids (checked in a run with a heartbeat after every record).
func TestHostileIDsAndPartitionKeys(t *testing.T) {
	forEachBackend(t, func(t *testing.T, r *hostileResult) { checkRow(t, r, "ids_keys") })

	t.Run("control message ids", func(t *testing.T) {
		// With a heartbeat after every 2 records, RAW holds: records at 1
		// and 2, heartbeats at 3..10 (one per partition, partition 2's at
		// 5), records at 11 and 12, heartbeats at 13..20, end-of-stream
		// heartbeats at 21..28 (partition 2's at 23). The records at 11
		// and 12 are named like the VALID message ids that partition 2's
		// heartbeats at RAW 5 and 23 had in the old scheme ("hb-<p>-<seq>"):
		// then the first was dropped as a duplicate of the heartbeat, and
		// the second made JetStream drop the end-of-stream heartbeat, so
		// the window never became final. All must arrive.
		k := keyIn("store", 2)
		res := runLines(t, []string{
			ev2("ctl-1", k, "2026-12-02T10:01:00Z").String(),
			ev2("ctl-2", k, "2026-12-02T10:02:00Z").String(),
			ev2("hb-2-5", k, "2026-12-02T10:03:00Z").String(),
			ev2("hb-2-23", k, "2026-12-02T10:04:00Z").String(),
		}, 2)
		if len(res.Windows) != 1 || res.Windows[0].Count != 4 || res.Windows[0].Status != window.StatusFinal {
			t.Fatalf("windows %+v, want one final window of 4", res.Windows)
		}
		if !res.Report.Holds {
			t.Fatalf("parity: %+v", res.Report.Summary)
		}
	})
}

// runLines runs lines through the embedded pipeline (heartbeat every
// hbEvery records, 0 for the default).
func runLines(t *testing.T, lines []string, hbEvery int) *boundedrun.Result {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "events.ndjson")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := boundedrun.Run(ctx, boundedrun.Config{Config: pipeline.Config{DataDir: dir}, Events: path, Now: hostileNow, HeartbeatEvery: hbEvery})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestHostilePoisonMessage: RAW messages that used to stop their partition
// for good end in REJECTED and the partition goes on: a record so close to
// NATS max_payload that its REJECTED copy (record plus headers) could not
// be published, a heartbeat whose progress is not a number, and a record
// whose ingest size header is not a number. They are published straight to
// RAW, as a misbehaving producer with RAW rights could; the bounded-delivery
// guard for records that keep failing is exercised in pkg/validator
// (TestPoisonGoesToRejectedAfterMaxDeliveries).
func TestHostilePoisonMessage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := pipeline.Start(ctx, pipeline.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	key := keyIn("store", 3)
	raw := p.Names.Subject(wire.Raw, 3)
	maxPayload := int(p.Admin.NC.MaxPayload())
	// 64 bytes under max_payload: RAW takes it (its only header is the
	// message id), its REJECTED copy with five headers would not fit.
	body := `{"event_id":"poison-huge","x":"`
	huge := stream.NewMsg(raw, "poison-huge", []byte(body+strings.Repeat("x", maxPayload-64-len(body))))
	hb := stream.NewMsg(raw, "poison-hb", nil)
	hb.Header.Set(wire.HdrHeartbeat, "soon")
	size := stream.NewMsg(raw, "poison-size", []byte(ev2("poison-size", key, "2026-12-02T10:00:00Z").String()))
	size.Header.Set(wire.HdrOrigSize, "lots")
	if _, err := p.Admin.JS.PublishMsg(ctx, huge); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Admin.JS.PublishMsg(ctx, hb); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Admin.JS.PublishMsg(ctx, size); err != nil {
		t.Fatal(err)
	}
	in := ingest.New(p.Admin.JS, ingest.Config{Partitions: 8, Validator: p.Validator, EndOfStream: true, Now: func() time.Time { return hostileNow }})
	for _, id := range []string{"after-1", "after-2"} {
		if err := in.Publish(ctx, []byte(ev2(id, key, "2026-12-02T10:05:00Z").String())); err != nil {
			t.Fatal(err)
		}
	}
	if err := in.Close(ctx); err != nil {
		t.Fatal(err)
	}
	drain, stop := context.WithTimeout(ctx, 20*time.Second)
	defer stop()
	if err := p.WaitDrained(drain, nil); err != nil {
		t.Fatalf("the pipeline did not drain (a partition is stuck on a poison message; validator restarts %v): %v", p.Crashes(), err)
	}
	rows, err := p.RejectedRows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		got = append(got, fmt.Sprintf("%d/%s/%s", r.Seq, r.EventID, r.Reason))
	}
	if want := []string{"1/poison-huge/too_large", "2//invalid_field", "3/poison-size/invalid_field"}; !slices.Equal(got, want) {
		t.Errorf("REJECTED %v, want %v", got, want)
	}
	ws, err := p.Windows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 1 || ws[0].Count != 2 || ws[0].Status != window.StatusFinal {
		t.Errorf("windows %+v, want the two records after the poison ones counted", ws)
	}
	if n := p.Crashes()[pipeline.Validator]; n != 0 {
		t.Errorf("the validator restarted %d times", n)
	}
}
