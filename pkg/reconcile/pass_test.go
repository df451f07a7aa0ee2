package reconcile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/traffic"
	"github.com/receiptflow/receiptflow/pkg/window"
)

// countSequential is the batch pass as one loop, the way Count worked
// before it went parallel: each line read, validated and applied with Add
// before the next. It is the reference the parallel pass is held to.
func countSequential(r io.Reader, opts Config) (*Batch, error) {
	b, err := NewBatch(opts)
	if err != nil {
		return nil, err
	}
	b.file = true
	maxLine := max(maxLineBytes, b.validator.Config().MaxSize+1)
	j := b.newJudge(maxLine)
	lines := newLineReader(r, maxLine)
	for n := 1; ; n++ {
		line, size, cut, err := lines.next()
		if err == io.EOF {
			b.endOfFile()
			return b, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reconcile: read line %d: %w", n, err)
		}
		if len(bytes.TrimSpace(line)) == 0 && !cut {
			continue
		}
		d := judgedRecord{fileLine: n}
		if cut {
			j.tooLong(&d, n, line, size)
		} else if id := j.record(&d, n, line, b.ingestedAt); id != nil {
			d.setID(string(id))
		}
		if err := b.alone(&d); err != nil {
			return nil, err
		}
		if err := b.apply(&d); err != nil {
			return nil, err
		}
	}
}

// countWith is Count with a given number of workers.
func countWith(r io.Reader, opts Config, workers int) (*Batch, error) {
	b, err := NewBatch(opts)
	if err != nil {
		return nil, err
	}
	b.file = true
	maxLine := max(maxLineBytes, b.validator.Config().MaxSize+1)
	if err := b.countLines(r, maxLine, workers); err != nil {
		return nil, err
	}
	b.endOfFile()
	return b, nil
}

// hostileStream is generated traffic with every fault (retries, conflicts,
// every rejection reason, late events) and, spliced in, what a file can
// hold beyond records: blank and white-space lines (NBSP too), CR LF
// endings, records the fast path leaves to the schema path (escapes), a
// line longer than the pass reads, and no newline at the end.
func hostileStream(t testing.TB, events int) []byte {
	t.Helper()
	o := traffic.DefaultConfig()
	o.Seed, o.Events, o.Hours = 9, events, 12
	o.DupRate, o.LateRate, o.InvalidRate = 0.05, 0.02, 0.03
	var buf bytes.Buffer
	st, err := traffic.Write(&buf, o)
	if err != nil {
		t.Fatal(err)
	}
	if st.Duplicates == 0 || st.Invalid[contract.ReasonConflictingDuplicate] == 0 {
		t.Fatalf("generated stream without retries or conflicts: %+v", st)
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	extra := []string{
		"", "   ", "\t", "\u00a0", " \r",
		`{"schema_version":2,"event_\u0069d":"esc-1","receipt_id":"r","type":"submitted","occurred_at":"2026-12-02T05:00:00Z","ingested_at":"2026-12-02T06:00:00Z","partition_key":"caf\u00e9","producer_version":"p"}`,
		`{"schema_version":2,"event_id":"esc-1","receipt_id":"r","type":"submitted","occurred_at":"2026-12-02T05:00:00Z","ingested_at":"2026-12-02T07:00:00Z","partition_key":"café","producer_version":"q"}`,
		`{"schema_version":2,"event_id":"esc-1","receipt_id":"r2","type":"submitted","occurred_at":"2026-12-02T05:00:00Z","ingested_at":"2026-12-02T07:00:00Z","partition_key":"café","producer_version":"q"}`,
		`{"schema_version":1,"event_id":"deep-1","receipt_id":"r","type":"viewed","occurred_minute":29936200,"ingested_at":"2026-12-02T06:00:00Z","partition_key":"s","payload":{"a":` +
			strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}}`,
		`{"event_id":"broken-1","occurred_at":"2026-12-02T03:04:05Z"`,
	}
	huge := `{"schema_version":2,"event_id":"huge-1","occurred_at":"2026-12-02T03:04:05Z","payload":"` + strings.Repeat("x", maxLineBytes+10) + `"}`
	var out strings.Builder
	for i, l := range lines {
		out.WriteString(l)
		if i%97 == 0 {
			out.WriteString("\r")
		}
		out.WriteString("\n")
		if i%211 == 0 {
			out.WriteString(extra[(i/211)%len(extra)] + "\n")
		}
		if i == len(lines)/2 {
			out.WriteString(huge + "\n")
		}
	}
	out.WriteString(lines[3]) // a retry, without a final newline
	return []byte(out.String())
}

// sameBatch describes how two batches differ, "" when they do not.
func sameBatch(a, b *Batch) string {
	a2, b2 := *a, *b
	a2.judge, b2.judge = nil, nil // the Add path's scratch
	// The claims in claim order (where their ids are kept and their index
	// depend on how the records came and the table's seed).
	if len(a.claims.list) != len(b.claims.list) {
		return "claims differ"
	}
	for i := range a.claims.list {
		ca, cb := a.claims.list[i], b.claims.list[i]
		if a.claims.id(&ca) != b.claims.id(&cb) || ca.fingerprint != cb.fingerprint || ca.line != cb.line || ca.window != cb.window {
			return fmt.Sprintf("claim %d differs", i)
		}
	}
	a2.claims, b2.claims = nil, nil
	a2.block, b2.block = 0, 0
	// How the records came (a file or one by one) is not the result.
	a2.file, b2.file = false, false
	if reflect.DeepEqual(&a2, &b2) {
		return ""
	}
	switch {
	case a.Records != b.Records || a.Valid != b.Valid || a.Counted != b.Counted || a.InWindows != b.InWindows || a.Other != b.Other || a.DuplicateCount != b.DuplicateCount:
		return fmt.Sprintf("totals %d/%d/%d/%d/%d vs %d/%d/%d/%d/%d", a.Records, a.Valid, a.Counted, a.Other, a.DuplicateCount,
			b.Records, b.Valid, b.Counted, b.Other, b.DuplicateCount)
	case !reflect.DeepEqual(a.Rejected, b.Rejected):
		for i := range min(len(a.Rejected), len(b.Rejected)) {
			if a.Rejected[i] != b.Rejected[i] {
				return fmt.Sprintf("rejection %d: %+v vs %+v", i, a.Rejected[i], b.Rejected[i])
			}
		}
		return fmt.Sprintf("%d vs %d rejections", len(a.Rejected), len(b.Rejected))
	case !reflect.DeepEqual(a.Duplicates, b.Duplicates):
		return "duplicates differ"
	case !reflect.DeepEqual(a.Windows, b.Windows):
		return "windows differ"
	case !reflect.DeepEqual(a.Late, b.Late):
		return "late verdicts differ"
	case !reflect.DeepEqual(a.wm, b.wm):
		return fmt.Sprintf("watermarks %v vs %v", a.wm, b.wm)
	}
	return "batches differ"
}

// TestCountParallelIsSequential: the parallel pass (any number of
// workers) builds exactly the batch of the sequential one — counts,
// digests, ids in file order, rejections with their lines, duplicates,
// claims — over generated traffic with every fault.
func TestCountParallelIsSequential(t *testing.T) {
	data := hostileStream(t, 30000)
	v, err := contract.NewValidator(contract.Config{MaxFutureSkew: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	opts := Config{Validator: v, DefaultIngestedAt: time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC), Partitions: 5}
	want, err := countSequential(bytes.NewReader(data), opts)
	if err != nil {
		t.Fatal(err)
	}
	reasons := want.RejectedByReason()
	if want.DuplicateCount == 0 || reasons[contract.ReasonConflictingDuplicate] == 0 ||
		reasons[contract.ReasonTooLarge] == 0 || len(reasons) != 9 || len(want.Windows) < 12 {
		t.Fatalf("the stream does not exercise the pass: %d duplicates, rejected %v, %d windows",
			want.DuplicateCount, reasons, len(want.Windows))
	}
	for _, workers := range []int{1, 2, 3, 8} {
		got, err := countWith(bytes.NewReader(data), opts, workers)
		if err != nil {
			t.Fatal(err)
		}
		if d := sameBatch(got, want); d != "" {
			t.Errorf("%d workers: %s", workers, d)
		}
	}
	// Count itself (with and without a size hint), and through a reader
	// that hands out a few bytes at a time.
	for _, hint := range []int{0, 10, 40000} {
		o := opts
		o.RecordsHint = hint
		got, err := Count(bytes.NewReader(data), o)
		if err != nil {
			t.Fatal(err)
		}
		if d := sameBatch(got, want); d != "" {
			t.Errorf("Count, hint %d: %s", hint, d)
		}
	}
	got, err := countWith(&dribble{data: data}, opts, 2)
	if err != nil {
		t.Fatal(err)
	}
	if d := sameBatch(got, want); d != "" {
		t.Errorf("dribbled input: %s", d)
	}
}

// dribble reads out data up to 7,777 bytes at a time.
type dribble struct {
	data []byte
	err  error // returned once data is out (io.EOF when nil)
}

func (d *dribble) Read(p []byte) (int, error) {
	if len(d.data) == 0 {
		if d.err != nil {
			return 0, d.err
		}
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), 7777)], d.data)
	d.data = d.data[n:]
	return n, nil
}

// TestCountReadError: a read error stops both passes with the same error,
// naming the line it broke.
func TestCountReadError(t *testing.T) {
	data := hostileStream(t, 3000)
	cut := bytes.LastIndexByte(data[:len(data)/2], '\n') + 5
	boom := errors.New("disk on fire")
	_, want := countSequential(&dribble{data: bytes.Clone(data[:cut]), err: boom}, Config{})
	_, got := countWith(&dribble{data: bytes.Clone(data[:cut]), err: boom}, Config{}, 3)
	if want == nil || got == nil || got.Error() != want.Error() || !errors.Is(got, boom) {
		t.Fatalf("read error: parallel %v, sequential %v", got, want)
	}
}

// TestAddMatchesCount: feeding lines one by one with Add gives the batch
// Count gives for a file without heartbeats.
func TestAddMatchesCount(t *testing.T) {
	var buf bytes.Buffer
	o := traffic.DefaultConfig()
	o.Seed, o.Events, o.InvalidRate, o.DupRate = 5, 5000, 0.05, 0.05
	if _, err := traffic.Write(&buf, o); err != nil {
		t.Fatal(err)
	}
	at := time.Now().UTC()
	want, err := Count(bytes.NewReader(buf.Bytes()), Config{HeartbeatEvery: -1, DefaultIngestedAt: at})
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewBatch(Config{HeartbeatEvery: -1, DefaultIngestedAt: at})
	if err != nil {
		t.Fatal(err)
	}
	for i, line := range strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n") {
		if err := b.Add(i+1, []byte(line), at); err != nil {
			t.Fatal(err)
		}
	}
	if d := sameBatch(b, want); d != "" {
		t.Error(d)
	}
}

// TestJudgePartition: the cached partition is window.Partition, past the
// cache's bound too.
func TestJudgePartition(t *testing.T) {
	j := newJudge(nil, 8, 0)
	for i := range 2 * maxCachedKeys {
		for range 2 {
			key := fmt.Sprintf("store-%d", i)
			if got, want := j.partition([]byte(key), []byte("e")), window.Partition(key, 8); got != want {
				t.Fatalf("partition(%q) = %d, want %d", key, got, want)
			}
		}
	}
	if len(j.parts) > maxCachedKeys {
		t.Errorf("cache holds %d keys", len(j.parts))
	}
	// A hot key is routed by event id, never cached.
	j.hot = window.HotKeys{"store-hot": 4}
	seen := map[int]bool{}
	for i := range 200 {
		id := fmt.Sprintf("e-%d", i)
		got := j.partition([]byte("store-hot"), []byte(id))
		if want := window.Route("store-hot", id, 8, j.hot); got != want {
			t.Fatalf("hot partition of %s = %d, want %d", id, got, want)
		}
		seen[got] = true
	}
	if len(seen) != 4 || j.parts["store-hot"] != 0 {
		t.Fatalf("hot key spread over %d partitions, cached %v", len(seen), j.parts["store-hot"])
	}
}

// BenchmarkCount is the batch pass over 200,000 generated records of about
// 400 bytes (the bench's mix: 256 stores, 20% v1, 25% non-counting, 10%
// disorder), in records per second.
func BenchmarkCount(b *testing.B) {
	o := traffic.DefaultConfig()
	o.Events, o.Stores, o.HotShare = 200000, 256, 0
	o.DupRate, o.LateRate, o.InvalidRate = 0, 0, 0
	var buf bytes.Buffer
	st, err := traffic.Write(&buf, o)
	if err != nil {
		b.Fatal(err)
	}
	at := time.Date(2026, 12, 31, 0, 0, 0, 0, time.UTC)
	v, err := contract.NewValidator(contract.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(buf.Len()))
	b.ReportAllocs()
	cpu0 := processCPU(b)
	for b.Loop() {
		bt, err := Count(bytes.NewReader(buf.Bytes()), Config{Validator: v, DefaultIngestedAt: at})
		if err != nil || bt.Counted != st.Submissions {
			b.Fatalf("counted %d of %d: %v", bt.Counted, st.Submissions, err)
		}
	}
	records := float64(o.Events) * float64(b.N)
	b.ReportMetric(records/b.Elapsed().Seconds(), "records/s")
	// CPU time over records (every goroutine, GC included): steadier than
	// wall time on a shared host.
	b.ReportMetric(float64(processCPU(b)-cpu0)/records, "cpu-ns/record")
}

// processCPU is the user and system CPU time of the process so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
