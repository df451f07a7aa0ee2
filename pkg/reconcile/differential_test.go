package reconcile_test

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/reconcile"
	"github.com/receiptflow/receiptflow/pkg/traffic"
	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// This file holds the batch pass to what it decided before it was made
// fast: testdata/differential.golden has, for each input below, a SHA-256
// of every part of the result (totals, windows with their ids in order,
// digests, stores, LATE verdicts, rejections with their details, retries,
// the per-id lookups, and parity reports against a clean and a corrupted
// stream), written by the pass as it was. Any change to any of them fails
// the test, naming the input and the part.

// diffDump, when set, is a directory the differential test writes every
// part into (input/part), for diff -r against a dump of another commit.
var diffDump = flag.String("diffdump", "", "write the differential test's parts into this directory")

// diffAt is the fixed receive time of the differential inputs.
var diffAt = time.Date(2026, 12, 31, 0, 0, 0, 0, time.UTC)

// diffInput is one input of the differential test: a file counted with
// Count, or (raw) its records fed to AddRecord with heartbeats between them.
type diffInput struct {
	name string
	data []byte
	opts reconcile.Config
	raw  bool
}

// boundaries puts one store's watermark exactly on each rule's edge: at a
// window's end (a correction), at its end plus grace (too late), at its
// end plus grace plus the horizon (retired), with a retry of the retired
// event, an event that never counts and a conflicting copy.
const boundaries = `{"schema_version":2,"event_id":"b1","receipt_id":"r","type":"submitted","occurred_at":"2026-12-02T10:05:00Z","ingested_at":"2026-12-02T12:00:00Z","partition_key":"store-a","producer_version":"t"}
{"schema_version":2,"event_id":"b2","receipt_id":"r","type":"submitted","occurred_at":"2026-12-02T09:30:00Z","ingested_at":"2026-12-02T12:00:00Z","partition_key":"store-a","producer_version":"t"}
{"schema_version":2,"event_id":"b3","receipt_id":"r","type":"submitted","occurred_at":"2026-12-02T11:05:00Z","ingested_at":"2026-12-02T12:00:00Z","partition_key":"store-a","producer_version":"t"}
{"schema_version":2,"event_id":"b4","receipt_id":"r","type":"submitted","occurred_at":"2026-12-02T09:10:00Z","ingested_at":"2026-12-02T12:00:00Z","partition_key":"store-a","producer_version":"t"}
{"schema_version":2,"event_id":"b5","receipt_id":"r","type":"submitted","occurred_at":"2026-12-02T10:20:00Z","ingested_at":"2026-12-02T12:00:00Z","partition_key":"store-a","producer_version":"t"}
{"schema_version":2,"event_id":"b6","receipt_id":"r","type":"submitted","occurred_at":"2026-12-02T11:35:00Z","ingested_at":"2026-12-02T12:00:00Z","partition_key":"store-a","producer_version":"t"}
{"schema_version":2,"event_id":"b7","receipt_id":"r","type":"submitted","occurred_at":"2026-12-02T09:45:00Z","ingested_at":"2026-12-02T12:00:00Z","partition_key":"store-a","producer_version":"t"}
{"schema_version":2,"event_id":"b7","receipt_id":"r","type":"submitted","occurred_at":"2026-12-02T09:45:00Z","ingested_at":"2026-12-02T12:00:00Z","partition_key":"store-a","producer_version":"t"}
{"schema_version":2,"event_id":"b8","receipt_id":"r","type":"viewed","occurred_at":"2026-12-02T09:00:00Z","ingested_at":"2026-12-02T12:00:00Z","partition_key":"store-a","producer_version":"t"}
{"schema_version":2,"event_id":"b2","receipt_id":"r2","type":"submitted","occurred_at":"2026-12-02T09:30:00Z","ingested_at":"2026-12-02T12:00:00Z","partition_key":"store-a","producer_version":"t"}
`

func diffInputs(t *testing.T) []diffInput {
	t.Helper()
	generate := func(o traffic.Config) []byte {
		var buf bytes.Buffer
		if _, err := traffic.Write(&buf, o); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	seed, _ := readSeed(t)
	ref := traffic.DefaultConfig()
	ref.Seed, ref.Events, ref.Hours = 11, 6000, 8
	ref.LateRate, ref.InvalidRate = 0.03, 0.01
	// Hot keys, retries, conflicts, every rejection, late within and after
	// grace (and past a short horizon), disorder, over 30 hours.
	hot := traffic.DefaultConfig()
	hot.Seed, hot.Events, hot.Hours = 7, 40000, 30
	hot.HotShare, hot.DupRate, hot.LateRate, hot.InvalidRate = 0.4, 0.08, 0.04, 0.03
	hotData := generate(hot)
	hotOpts := reconcile.Config{
		DefaultIngestedAt: diffAt, HotKeys: window.HotKeys{"store-0": 4}, Horizon: 30 * time.Minute,
		EndOfStream: true, HeartbeatEvery: 250,
	}
	v, err := contract.NewValidator(contract.Config{MaxFutureSkew: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return []diffInput{
		{name: "boundaries", data: []byte(boundaries), opts: reconcile.Config{
			DefaultIngestedAt: diffAt, Horizon: 30 * time.Minute, EndOfStream: true,
		}},
		{name: "seed", data: seed, opts: reconcile.Config{DefaultIngestedAt: diffAt, EndOfStream: true}},
		{name: "seed-no-eos", data: seed, opts: reconcile.Config{DefaultIngestedAt: diffAt}},
		{name: "referee", data: generate(ref), opts: reconcile.Config{DefaultIngestedAt: diffAt}},
		{name: "hostile", data: reconcile.HostileStream(t, 30000), opts: reconcile.Config{
			Validator: v, DefaultIngestedAt: time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC), Partitions: 5,
		}},
		{name: "hot", data: hotData, opts: hotOpts},
		{name: "hot-raw", data: hotData, opts: hotOpts, raw: true},
	}
}

// addRaw feeds data to a new batch record by record as a RAW stream
// holds it: every record with its sequence, a heartbeat to each partition
// with the largest event time so far after every 300 records, every 97th
// record cut short as ingest cuts an oversized one.
func addRaw(t *testing.T, data []byte, opts reconcile.Config) *reconcile.Batch {
	t.Helper()
	b, err := reconcile.NewBatch(opts)
	if err != nil {
		t.Fatal(err)
	}
	var seq uint64
	var progress int64
	add := func(r reconcile.Record) {
		seq++
		r.Seq, r.Received = seq, diffAt
		if err := b.AddRecord(r); err != nil {
			t.Fatal(err)
		}
	}
	for i, line := range bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
		var rec struct {
			OccurredAt time.Time `json:"occurred_at"`
		}
		if json.Unmarshal(line, &rec) == nil && rec.OccurredAt.UnixMilli() > progress {
			progress = rec.OccurredAt.UnixMilli()
		}
		r := reconcile.Record{Data: line}
		if i%97 == 96 {
			r.Data, r.Size = line[:len(line)/2], len(line)
		}
		add(r)
		if i%300 == 299 {
			for p := range 8 {
				add(reconcile.Record{Heartbeat: true, Partition: p, Progress: progress})
			}
		}
	}
	return b
}

// pass runs the batch pass over the input, as RAW records or as a file.
func (in diffInput) pass(t *testing.T) *reconcile.Batch {
	t.Helper()
	if in.raw {
		return addRaw(t, in.data, in.opts)
	}
	b, err := reconcile.Count(bytes.NewReader(in.data), in.opts)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestBatchMatchesItsPast: over every input, each part of the batch pass's
// result hashes to what the pass produced before it was made fast.
func TestBatchMatchesItsPast(t *testing.T) {
	const path = "testdata/differential.golden"
	var got []string
	for _, in := range diffInputs(t) {
		b := in.pass(t)
		parts := renderBatch(t, b, in.data)
		for _, k := range slices.Sorted(maps.Keys(parts)) {
			if *diffDump != "" {
				dir := filepath.Join(*diffDump, in.name)
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, k), parts[k], 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got = append(got, fmt.Sprintf("%s %s %x %d", in.name, k, sha256.Sum256(parts[k]), len(parts[k])))
		}
	}
	if *update {
		if err := os.WriteFile(path, []byte(strings.Join(got, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	want := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
	if slices.Equal(got, want) {
		return
	}
	for _, g := range got {
		if !slices.Contains(want, g) {
			f := strings.Fields(g)
			t.Errorf("input %s: %s differs from what the pass produced before (-diffdump writes the parts out)", f[0], f[1])
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d parts, golden has %d", len(got), len(want))
	}
}

// renderBatch writes every part of b's result as bytes, in a fixed order.
func renderBatch(t *testing.T, b *reconcile.Batch, data []byte) map[string][]byte {
	t.Helper()
	parts := map[string][]byte{}
	put := func(name string, write func(w *bytes.Buffer)) {
		var buf bytes.Buffer
		write(&buf)
		parts[name] = buf.Bytes()
	}
	jsonLines := func(w *bytes.Buffer, v any) {
		enc, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(enc)
		w.WriteByte('\n')
	}
	put("batch.json", func(w *bytes.Buffer) {
		if err := b.WriteJSON(w); err != nil {
			t.Fatal(err)
		}
	})
	put("totals", func(w *bytes.Buffer) {
		fmt.Fprintf(w, "partitions %d records %d valid %d counted %d in windows %d corrections %d heartbeats %d other %d duplicates %d watermarks %v\n",
			b.Partitions, b.Records, b.Valid, b.Counted, b.InWindows, b.Corrections, b.Heartbeats, b.Other, b.DuplicateCount, b.Watermark())
	})
	put("windows", func(w *bytes.Buffer) {
		ids := b.WindowIDs()
		if len(ids) != len(b.Windows) {
			t.Fatalf("%d window ids for %d windows", len(ids), len(b.Windows))
		}
		for _, id := range ids {
			wc := b.Windows[id]
			fmt.Fprintf(w, "%s %s %s count %d corrections %d late %d digest %s by partition %v\n",
				wc.ID, wc.Start.Format(time.RFC3339Nano), wc.End.Format(time.RFC3339Nano), wc.Count, wc.Corrections, wc.LateDropped,
				wc.Digest.String(), wc.ByPartition)
			fmt.Fprintf(w, "ids %s\n", strings.Join(wc.IDs, " "))
			jsonLines(w, wire.NewBreakdown(wc.Stores))
			jsonLines(w, wc.Stores)
			jsonLines(w, wc.Late)
			jsonLines(w, wc.Duplicates)
			jsonLines(w, b.RejectedIn(id))
		}
	})
	put("late", func(w *bytes.Buffer) { jsonLines(w, b.Late) })
	put("rejected", func(w *bytes.Buffer) {
		jsonLines(w, b.Rejected)
		jsonLines(w, b.RejectedByReason())
	})
	put("duplicates", func(w *bytes.Buffer) { jsonLines(w, b.Duplicates) })

	// What the batch answers about each event id of the input (and one it
	// never saw).
	var ids []string
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 1<<20), 32<<20)
	for sc.Scan() {
		if id := contract.PeekEventID(sc.Bytes()); id != "" && !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	ids = append(ids, "never-seen")
	put("lookups", func(w *bytes.Buffer) {
		for _, id := range ids {
			win, counted := b.CountedIn(id)
			lv, late := b.LateJudgmentOf(id)
			fmt.Fprintf(w, "%s %s %v %v %+v\n", id, win, counted, late, lv)
		}
	})

	// Parity against the reference stream model, clean and corrupted so
	// that the explanations read the batch's claims: the stream lost one
	// counted event, counted once more an event the batch judged too late
	// or a retry, and has LATE rows for events the batch counted, never
	// counted (other types, rejected) or never saw.
	res := runStream(t, data, b.Partitions, diffAt)
	broken := slices.Clone(res.windows)
	brokenLate := slices.Clone(res.late)
	lost := false
	for i := range broken {
		bw := b.Windows[broken[i].WindowID]
		switch {
		case bw == nil || len(bw.IDs) < 2:
		case !lost:
			lost = true
			broken[i].Count--
			broken[i].Digest = removeID(broken[i].Digest, bw.IDs[1])
			brokenLate = append(brokenLate, reconcile.LateRow{EventID: bw.IDs[0], WindowID: bw.ID,
				Reason: wire.ReasonAfterGrace, Watermark: bw.End, Seq: 1})
		case len(bw.Late) > 0:
			broken[i].Count++
			broken[i].Digest = addID(broken[i].Digest, bw.Late[0].EventID)
		case len(bw.Duplicates) > 0:
			broken[i].Count++
			broken[i].Digest = addID(broken[i].Digest, bw.Duplicates[0].EventID)
		}
	}
	if len(broken) > 0 {
		n := 0
		for _, id := range ids {
			_, counted := b.CountedIn(id)
			if _, late := b.LateJudgmentOf(id); counted || late || n == 6 {
				continue
			}
			n++
			brokenLate = append(brokenLate, reconcile.LateRow{EventID: id, WindowID: broken[0].WindowID,
				Reason: wire.ReasonRetired, Watermark: broken[0].End, Seq: 2})
		}
	}
	for name, rep := range map[string]*reconcile.Report{
		"parity-clean":  reconcile.Compare(b, res.windows, res.late),
		"parity-broken": reconcile.Compare(b, broken, brokenLate),
	} {
		put(name, func(w *bytes.Buffer) {
			if err := rep.WriteJSON(w); err != nil {
				t.Fatal(err)
			}
			if err := rep.WriteMarkdown(w); err != nil {
				t.Fatal(err)
			}
		})
	}
	return parts
}

// TestDifferentialInputsExerciseThePass: the inputs hold what the pass
// decides on: retries, conflicts, every rejection reason, both too-late
// reasons, corrections, hot keys, heartbeats, and lines past the limit.
func TestDifferentialInputsExerciseThePass(t *testing.T) {
	reasons := map[contract.Reason]bool{}
	late := map[string]bool{}
	var dups, corrections, heartbeats int
	for _, in := range diffInputs(t) {
		b := in.pass(t)
		for r := range b.RejectedByReason() {
			reasons[r] = true
		}
		for _, l := range b.Late {
			late[l.Reason] = true
		}
		dups += b.DuplicateCount
		corrections += b.Corrections
		heartbeats += b.Heartbeats
	}
	if len(reasons) != 9 || !reasons[contract.ReasonConflictingDuplicate] || !reasons[contract.ReasonTooLarge] ||
		!late[wire.ReasonAfterGrace] || !late[wire.ReasonRetired] || dups == 0 || corrections == 0 || heartbeats == 0 {
		t.Fatalf("rejections %v, late %v, %d retries, %d corrections, %d heartbeats", reasons, late, dups, corrections, heartbeats)
	}
	if _, err := os.Stat(filepath.Join("testdata", "differential.golden")); err != nil {
		t.Fatal(err)
	}
}
