package reconcile_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/config"
	"github.com/receiptflow/receiptflow/pkg/internal/digest"
	"github.com/receiptflow/receiptflow/pkg/reconcile"
	"github.com/receiptflow/receiptflow/pkg/traffic"
	"github.com/receiptflow/receiptflow/pkg/window"
)

// v2 renders a valid schema v2 record. occurred is "HH:MM" on 2026-12-02.
func v2(id, receipt, typ, occurred, key string) string {
	return fmt.Sprintf(`{"schema_version":2,"event_id":%q,"receipt_id":%q,"type":%q,`+
		`"occurred_at":"2026-12-02T%s:00Z","ingested_at":"2026-12-02T23:00:00Z",`+
		`"partition_key":%q,"producer_version":"test-1"}`, id, receipt, typ, occurred, key)
}

// big renders a valid-looking record of exactly size bytes (or the
// smallest such record).
func big(id string, size int) string {
	rec := func(pad string) string {
		return fmt.Sprintf(`{"schema_version":2,"event_id":%q,"receipt_id":"r-big","type":"submitted",`+
			`"occurred_at":"2026-12-02T10:00:00Z","ingested_at":"2026-12-02T23:00:00Z",`+
			`"partition_key":"store-a","producer_version":"test-1","payload":{"pad":%q}}`, id, pad)
	}
	return rec(strings.Repeat("x", max(0, size-len(rec("")))))
}

func count(t *testing.T, input string) *reconcile.Batch {
	t.Helper()
	b, err := reconcile.Count(strings.NewReader(input), reconcile.Config{})
	if err != nil {
		t.Fatalf("Count: %v", err)
	}
	return b
}

// windowCounts returns "window=count" for every batch window.
func windowCounts(b *reconcile.Batch) []string {
	var out []string
	for _, id := range b.WindowIDs() {
		out = append(out, fmt.Sprintf("%s=%d", id, b.Windows[id].Count))
	}
	return out
}

func rejections(b *reconcile.Batch) []string {
	var out []string
	for _, r := range b.Rejected {
		out = append(out, fmt.Sprintf("%d:%s:%s", r.Line, r.EventID, r.Reason))
	}
	return out
}

func TestCount(t *testing.T) {
	tests := []struct {
		name       string
		lines      []string
		windows    []string
		rejected   []string
		duplicates int
		other      int
	}{
		{
			name:    "one submission per window",
			lines:   []string{v2("a", "r1", "submitted", "10:05", "s"), v2("b", "r2", "submitted", "11:59", "s")},
			windows: []string{"2026-12-02T10=1", "2026-12-02T11=1"},
		},
		{
			name:       "retry counts once",
			lines:      []string{v2("a", "r1", "submitted", "10:05", "s"), v2("a", "r1", "submitted", "10:05", "s"), v2("a", "r1", "submitted", "10:05", "s")},
			windows:    []string{"2026-12-02T10=1"},
			duplicates: 2,
		},
		{
			name: "retry with another ingested_at and producer_version is a retry",
			lines: []string{
				v2("a", "r1", "submitted", "10:05", "s"),
				strings.Replace(strings.Replace(v2("a", "r1", "submitted", "10:05", "s"), "23:00:00Z", "23:30:00Z", 1), "test-1", "test-2", 1),
			},
			windows:    []string{"2026-12-02T10=1"},
			duplicates: 1,
		},
		{
			name:     "conflicting duplicate: the first record claims the id",
			lines:    []string{v2("a", "r1", "submitted", "10:05", "s"), v2("a", "r2", "submitted", "11:05", "s")},
			windows:  []string{"2026-12-02T10=1"},
			rejected: []string{"2:a:conflicting_duplicate"},
		},
		{
			name:     "conflicting duplicate the other way round",
			lines:    []string{v2("a", "r2", "submitted", "11:05", "s"), v2("a", "r1", "submitted", "10:05", "s")},
			windows:  []string{"2026-12-02T11=1"},
			rejected: []string{"2:a:conflicting_duplicate"},
		},
		{
			name: "a retry after a conflict is still a retry of the first",
			lines: []string{
				v2("a", "r1", "submitted", "10:05", "s"),
				v2("a", "r2", "submitted", "10:05", "s"),
				v2("a", "r1", "submitted", "10:05", "s"),
			},
			windows:    []string{"2026-12-02T10=1"},
			rejected:   []string{"2:a:conflicting_duplicate"},
			duplicates: 1,
		},
		{
			name: "other types never count, and claim their id",
			lines: []string{
				v2("a", "r1", "draft_saved", "10:05", "s"),
				v2("b", "r1", "viewed", "10:06", "s"),
				v2("a", "r1", "submitted", "10:07", "s"),
				v2("b", "r1", "viewed", "10:06", "s"),
			},
			rejected:   []string{"3:a:conflicting_duplicate"},
			duplicates: 1,
			other:      2,
		},
		{
			name:    "window bounds are half-open",
			lines:   []string{v2("a", "r", "submitted", "10:00", "s"), v2("b", "r", "submitted", "10:59", "s"), v2("c", "r", "submitted", "11:00", "s")},
			windows: []string{"2026-12-02T10=2", "2026-12-02T11=1"},
		},
		{
			name:    "blank lines and CRLF are skipped, line numbers count them",
			lines:   []string{"", v2("a", "r", "submitted", "10:00", "s") + "\r", "   \t", "\r", `{"event_id":"x"` + "\r"},
			windows: []string{"2026-12-02T10=1"},
			// The broken record is line 5.
			rejected: []string{"5:x:malformed_json"},
		},
		{
			name: "every rejection reason",
			lines: []string{
				`not json`,
				strings.Replace(v2("b", "r", "submitted", "10:00", "s"), `"schema_version":2`, `"schema_version":3`, 1),
				strings.Replace(v2("c", "r", "submitted", "10:00", "s"), `"receipt_id":"r",`, ``, 1),
				v2("d", "bad receipt", "submitted", "10:00", "s"),
				v2("e", "r", "refunded", "10:00", "s"),
				v2("f", "r", "submitted", "25:00", "s"),
				strings.Replace(v2("g", "r", "submitted", "10:00", "s"), "T23:00:00Z", "T09:00:00Z", 1),
				big("h", 70<<10),
			},
			rejected: []string{
				"1::malformed_json", "2:b:unsupported_schema", "3:c:missing_field", "4:d:invalid_field",
				"5:e:unknown_type", "6:f:bad_timestamp", "7:g:future_timestamp", "8:h:too_large",
			},
		},
		{
			name:    "last line without newline",
			lines:   []string{v2("a", "r", "submitted", "10:00", "s"), v2("b", "r", "submitted", "10:00", "s") + "<nonl>"},
			windows: []string{"2026-12-02T10=2"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			input := strings.Join(tc.lines, "\n") + "\n"
			input = strings.TrimSuffix(input, "<nonl>\n")
			b := count(t, input)
			if got := windowCounts(b); !slices.Equal(got, tc.windows) {
				t.Errorf("windows = %v, want %v", got, tc.windows)
			}
			if got := rejections(b); !slices.Equal(got, tc.rejected) {
				t.Errorf("rejected = %v, want %v", got, tc.rejected)
			}
			if b.DuplicateCount != tc.duplicates || len(b.Duplicates) != tc.duplicates {
				t.Errorf("duplicates = %d (%d listed), want %d", b.DuplicateCount, len(b.Duplicates), tc.duplicates)
			}
			if b.Other != tc.other {
				t.Errorf("other = %d, want %d", b.Other, tc.other)
			}
			if b.Valid+len(b.Rejected) != b.Records {
				t.Errorf("valid %d + rejected %d != records %d", b.Valid, len(b.Rejected), b.Records)
			}
		})
	}
}

// TestCountDigest checks the digest against digest.Digest over the ids.
func TestCountDigest(t *testing.T) {
	b := count(t, v2("a", "r", "submitted", "10:00", "s")+"\n"+v2("b", "r", "submitted", "10:30", "t")+"\n")
	var want digest.Digest
	want.Add("a")
	want.Add("b")
	w := b.Windows["2026-12-02T10"]
	if w.Digest != want || !slices.Equal(w.IDs, []string{"a", "b"}) {
		t.Fatalf("window = %+v, want digest %s of a, b", w, want)
	}
	var sum int64
	for _, n := range w.ByPartition {
		sum += n
	}
	if sum != 2 || len(w.ByPartition) != config.Defaults().Partitions {
		t.Fatalf("ByPartition = %v", w.ByPartition)
	}
}

// TestCountLongLines feeds records of 64 KiB + 1, 1 MiB, 2 MiB and 9 MiB
// (past what the pass keeps) between valid ones: each is rejected too_large
// with its id, the pass goes on, and line numbers stay right.
func TestCountLongLines(t *testing.T) {
	lines := []string{
		v2("a", "r", "submitted", "10:00", "s"),
		big("exactly-max", 64<<10),
		big("max-plus-1", 64<<10+1),
		big("one-mib", 1<<20),
		v2("b", "r", "submitted", "10:01", "s"),
		big("two-mib", 2<<20),
		big("nine-mib", 9<<20),
		v2("c", "r", "submitted", "10:02", "s"),
	}
	if n := len(lines[1]); n != 64<<10 {
		t.Fatalf("fixture: len = %d", n)
	}
	b := count(t, strings.Join(lines, "\n"))
	want := []string{"3:max-plus-1:too_large", "4:one-mib:too_large", "6:two-mib:too_large", "7:nine-mib:too_large"}
	if got := rejections(b); !slices.Equal(got, want) {
		t.Fatalf("rejected = %v, want %v", got, want)
	}
	if got := windowCounts(b); !slices.Equal(got, []string{"2026-12-02T10=4"}) {
		t.Fatalf("windows = %v", got)
	}
	if !strings.Contains(b.Rejected[3].Detail, fmt.Sprint(len(lines[6]))) {
		t.Errorf("detail %q does not give the size %d", b.Rejected[3].Detail, len(lines[6]))
	}
}

// TestCountRejectedWindow places rejected records with a readable event
// time into their window.
func TestCountRejectedWindow(t *testing.T) {
	b := count(t, strings.Join([]string{
		v2("a", "r", "submitted", "10:00", "s"),
		strings.Replace(v2("g", "r", "submitted", "10:20", "s"), "T23:00:00Z", "T09:00:00Z", 1),
		`{"schema_version":1,"event_id":"h","occurred_minute":29936772,"type":"nope"}`,
		v2("a", "r2", "submitted", "11:40", "s"),
		`garbage`,
	}, "\n"))
	got := map[string][]int{}
	for _, id := range []string{"2026-12-02T10", "2026-12-02T11", ""} {
		for _, r := range b.RejectedIn(id) {
			got[id] = append(got[id], r.Line)
		}
	}
	if !slices.Equal(got["2026-12-02T10"], []int{2, 3}) || !slices.Equal(got["2026-12-02T11"], []int{4}) || len(got[""]) != 0 {
		t.Fatalf("rejected by window = %v", got)
	}
	if b.Rejected[3].WindowID != "" {
		t.Fatalf("garbage got window %q", b.Rejected[3].WindowID)
	}
}

// TestCountDefaultIngestedAt: a record without ingested_at is judged
// against Config.DefaultIngestedAt.
func TestCountDefaultIngestedAt(t *testing.T) {
	rec := strings.Replace(v2("a", "r", "submitted", "10:00", "s"), `"ingested_at":"2026-12-02T23:00:00Z",`, ``, 1)
	for _, tc := range []struct {
		at   time.Time
		want int
	}{
		{time.Date(2026, 12, 2, 10, 1, 0, 0, time.UTC), 1},
		{time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC), 0},
	} {
		b, err := reconcile.Count(strings.NewReader(rec), reconcile.Config{DefaultIngestedAt: tc.at})
		if err != nil {
			t.Fatal(err)
		}
		if b.Counted != tc.want {
			t.Errorf("ingested %s: counted %d, want %d (rejected %v)", tc.at, b.Counted, tc.want, rejections(b))
		}
	}
}

type failingReader struct{ n int }

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n > 0 {
		r.n--
		return copy(p, v2("a", "r", "submitted", "10:00", "s")+"\n"), nil
	}
	return 0, fmt.Errorf("disk on fire")
}

func TestCountReadError(t *testing.T) {
	_, err := reconcile.Count(&failingReader{n: 2}, reconcile.Config{})
	if err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("err = %v", err)
	}
	if _, err := reconcile.Count(strings.NewReader(""), reconcile.Config{Partitions: -1}); err == nil {
		t.Fatal("negative partitions accepted")
	}
}

// TestCountShuffled: without conflicting duplicates, and with a grace so
// long that nothing is too late, the counts and digests do not depend on
// the order of the lines (lateness does: it follows RAW order).
func TestCountShuffled(t *testing.T) {
	o := traffic.DefaultConfig()
	o.Seed, o.Events, o.InvalidRate = 7, 3000, 0
	var buf bytes.Buffer
	st, err := traffic.Write(&buf, o)
	if err != nil {
		t.Fatal(err)
	}
	want := summaryWindows(t, buf.Bytes())
	if len(want) < 20 {
		t.Fatalf("only %d windows", len(want))
	}
	b, err := reconcile.Count(strings.NewReader(buf.String()), reconcile.Config{Grace: noLateness})
	if err != nil {
		t.Fatal(err)
	}
	if b.Counted != st.Submissions {
		t.Fatalf("counted %d, generated %d submissions", b.Counted, st.Submissions)
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 3 {
		r.Shuffle(len(lines), func(a, b int) { lines[a], lines[b] = lines[b], lines[a] })
		got := summaryWindows(t, []byte(strings.Join(lines, "\n")))
		if !slices.Equal(got, want) {
			t.Fatalf("shuffle %d: windows differ\n got %v\nwant %v", i, got, want)
		}
	}
}

// noLateness is a grace period no test input reaches the end of.
const noLateness = 100000 * time.Hour

// summaryWindows returns "window count digest" for every window: what is
// independent of the order of the lines.
func summaryWindows(t *testing.T, data []byte) []string {
	t.Helper()
	b, err := reconcile.Count(bytes.NewReader(data), reconcile.Config{Grace: noLateness})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, w := range b.Summary().Windows {
		out = append(out, fmt.Sprintf("%s %d %s %v", w.WindowID, w.Count, w.Digest, w.Partitions))
	}
	return out
}

// TestCountHeartbeatsAdvanceIdlePartitionsOnly: docs/spec.md §3 in the batch
// pass. store-a lags three hours behind store-b, and both get an event
// between every two heartbeats (one every 2 records): store-a's events are
// judged by its own watermark and all count, whatever the heartbeat period.
// store-c goes idle after one event; a heartbeat moves it to the source's
// progress, so its next old event is too late, against that watermark.
func TestCountHeartbeatsAdvanceIdlePartitionsOnly(t *testing.T) {
	if window.Partition("store-a", 8) == window.Partition("store-b", 8) || window.Partition("store-c", 8) == window.Partition("store-b", 8) ||
		window.Partition("store-a", 8) == window.Partition("store-c", 8) {
		t.Fatal("the stores share a partition")
	}
	var in strings.Builder
	in.WriteString(v2("a-0", "r", "submitted", "10:00", "store-a") + "\n")
	in.WriteString(v2("c-1", "r", "submitted", "10:00", "store-c") + "\n")
	for i := range 40 {
		in.WriteString(v2(fmt.Sprintf("b-%d", i), "r", "submitted", fmt.Sprintf("13:%02d", i), "store-b") + "\n")
		in.WriteString(v2(fmt.Sprintf("a-%d", i+1), "r", "submitted", fmt.Sprintf("10:%02d", i+1), "store-a") + "\n")
	}
	in.WriteString(v2("c-2", "r", "submitted", "10:05", "store-c") + "\n")
	for _, every := range []int{2, 4, 1000} {
		b, err := reconcile.Count(strings.NewReader(in.String()), reconcile.Config{HeartbeatEvery: every, EndOfStream: true})
		if err != nil {
			t.Fatal(err)
		}
		var late []string
		for _, l := range b.Late {
			late = append(late, l.EventID+"@"+l.Watermark.Format("15:04"))
		}
		// c-2 is judged against the progress of the last heartbeat before
		// it minus lateness: after record 82 (b-39, 13:39) every 2 records,
		// after record 80 (b-38) every 4; with no heartbeat before the end
		// store-c never moved and c-2 is on time.
		want := map[int][]string{2: {"c-2@13:34"}, 4: {"c-2@13:33"}, 1000: nil}[every]
		if !slices.Equal(late, want) {
			t.Errorf("heartbeat every %d: too late %v, want %v", every, late, want)
		}
		if w := b.Windows["2026-12-02T10"]; w == nil || w.ByPartition[window.Partition("store-a", 8)] != 41 {
			t.Errorf("heartbeat every %d: window 10 = %+v, want store-a's 41 events counted", every, w)
		}
	}
}

// TestCountSkipsByteOrderMark: a UTF-8 BOM at the start of a file is
// skipped (docs/spec.md §2): the first record counts.
func TestCountSkipsByteOrderMark(t *testing.T) {
	in := "\xEF\xBB\xBF" + v2("bom-1", "r", "submitted", "10:00", "store-a") + "\n" + v2("bom-2", "r", "submitted", "10:01", "store-a") + "\n"
	b := count(t, in)
	if b.InWindows != 2 || len(b.Rejected) != 0 {
		t.Fatalf("counted %d, rejected %v", b.InWindows, rejections(b))
	}
}
