package reconcile_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/config"
	"github.com/receiptflow/receiptflow/pkg/reconcile"
	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

const (
	seedFile     = "../../e2e/testdata/seed.ndjson"
	seedExpected = "../../e2e/testdata/seed.expected.json"
)

// seedExpectation is the hand-computed expectation of the seed fixture.
type seedExpectation struct {
	Windows []struct {
		WindowID    string        `json:"window_id"`
		Count       int64         `json:"count"`
		Corrections int64         `json:"corrections"`
		LateDropped int64         `json:"late_dropped"`
		Status      window.Status `json:"status"`
		Version     int64         `json:"version"`
	} `json:"windows"`
	Late []struct {
		EventID  string `json:"event_id"`
		WindowID string `json:"window_id"`
	} `json:"late"`
	Rejected []struct {
		EventID string `json:"event_id"`
		Reason  string `json:"reason"`
	} `json:"rejected"`
}

func readSeed(t *testing.T) ([]byte, seedExpectation) {
	t.Helper()
	data, err := os.ReadFile(seedFile)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(seedExpected)
	if err != nil {
		t.Fatal(err)
	}
	var exp seedExpectation
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&exp); err != nil {
		t.Fatalf("%s: %v", seedExpected, err)
	}
	return data, exp
}

// TestSeedBatch holds the batch pass over the seed fixture to the
// hand-written expectation: the batch's own windows (count, corrections,
// late_dropped) and its own too-late verdicts are the expected ones, with
// the same rejections in the same order.
func TestSeedBatch(t *testing.T) {
	data, exp := readSeed(t)
	b, err := reconcile.Count(bytes.NewReader(data), reconcile.Config{EndOfStream: true})
	if err != nil {
		t.Fatal(err)
	}
	var gotLate, wantLate []string
	for _, l := range b.Late {
		gotLate = append(gotLate, l.EventID+"@"+l.WindowID+":"+l.Reason)
	}
	for _, l := range exp.Late {
		wantLate = append(wantLate, l.EventID+"@"+l.WindowID+":"+wire.ReasonAfterGrace)
	}
	if !slices.Equal(gotLate, wantLate) {
		t.Errorf("batch too late = %v, want %v", gotLate, wantLate)
	}
	var got, want []string
	for _, id := range b.WindowIDs() {
		w := b.Windows[id]
		got = append(got, fmt.Sprintf("%s count %d corrections %d late %d", id, w.Count, w.Corrections, w.LateDropped))
	}
	for _, w := range exp.Windows {
		want = append(want, fmt.Sprintf("%s count %d corrections %d late %d", w.WindowID, w.Count, w.Corrections, w.LateDropped))
	}
	if !slices.Equal(got, want) {
		t.Errorf("batch windows =\n  %v\nwant\n  %v", got, want)
	}
	var gotRej, wantRej []string
	for _, r := range b.Rejected {
		gotRej = append(gotRej, r.EventID+":"+string(r.Reason))
	}
	for _, r := range exp.Rejected {
		wantRej = append(wantRej, r.EventID+":"+r.Reason)
	}
	if !slices.Equal(gotRej, wantRej) {
		t.Errorf("rejected = %v, want %v", gotRej, wantRej)
	}
	if b.Records != 35 || b.DuplicateCount != 3 || b.Other != 4 || b.Counted != 20 || b.InWindows != 18 || b.Corrections != 4 {
		t.Errorf("records %d duplicates %d other %d submissions %d counted in windows %d corrections %d, want 35 3 4 20 18 4",
			b.Records, b.DuplicateCount, b.Other, b.Counted, b.InWindows, b.Corrections)
	}
}

// TestSeedStreamModel checks the hand-written expectation against the
// test-only reference model of the stream, so that a slip in the hand
// computation cannot hide.
func TestSeedStreamModel(t *testing.T) {
	data, exp := readSeed(t)
	res := runStream(t, data, config.Defaults().Partitions, time.Time{})
	if len(res.windows) != len(exp.Windows) {
		t.Fatalf("model has %d windows, expectation %d", len(res.windows), len(exp.Windows))
	}
	for i, w := range exp.Windows {
		g := res.windows[i]
		if g.WindowID != w.WindowID || g.Count != w.Count || g.Corrections != w.Corrections ||
			g.LateDropped != w.LateDropped || g.Status != w.Status || g.Version != w.Version {
			t.Errorf("window %d: model %s count %d corrections %d late %d %s v%d, expectation %+v",
				i, g.WindowID, g.Count, g.Corrections, g.LateDropped, g.Status, g.Version, w)
		}
	}
	var gotLate, wantLate []string
	for _, l := range res.late {
		gotLate = append(gotLate, l.EventID+"@"+l.WindowID)
	}
	for _, l := range exp.Late {
		wantLate = append(wantLate, l.EventID+"@"+l.WindowID)
	}
	if !slices.Equal(gotLate, wantLate) {
		t.Errorf("late = %v, want %v", gotLate, wantLate)
	}
	var gotRej, wantRej []string
	for _, r := range res.rejected {
		gotRej = append(gotRej, r.EventID+":"+string(r.Reason))
	}
	for _, r := range exp.Rejected {
		wantRej = append(wantRej, r.EventID+":"+r.Reason)
	}
	if !slices.Equal(gotRej, wantRej) {
		t.Errorf("rejected = %v, want %v", gotRej, wantRej)
	}
}

// TestSeedParityGolden compares the batch with the model's stream output
// and holds parity.md / parity.json to golden files, for a clean run and
// for one that lost an event in the stream.
func TestSeedParityGolden(t *testing.T) {
	data, _ := readSeed(t)
	b, err := reconcile.Count(bytes.NewReader(data), reconcile.Config{})
	if err != nil {
		t.Fatal(err)
	}
	res := runStream(t, data, config.Defaults().Partitions, time.Time{})
	for i := range res.windows {
		// The model does not track emits; give the golden a plausible value.
		res.windows[i].FirstOutputVersion = 2
	}

	clean := reconcile.Compare(b, res.windows, res.late)
	if !clean.Holds {
		t.Errorf("clean seed run does not hold: %+v", clean.Unexplained)
	}
	golden(t, "seed.parity.md", func(w *bytes.Buffer) error { return clean.WriteMarkdown(w) })
	golden(t, "seed.parity.json", func(w *bytes.Buffer) error { return clean.WriteJSON(w) })

	// The stream lost evt-seed-17 from window 12 and has no LATE row for it.
	broken := slices.Clone(res.windows)
	for i := range broken {
		if broken[i].WindowID == "2026-12-02T12" {
			broken[i] = withoutID(broken[i], "evt-seed-17", "store-b")
		}
	}
	failed := reconcile.Compare(b, broken, res.late)
	if failed.Holds {
		t.Error("lost event not detected")
	}
	golden(t, "seed_lost_event.parity.md", func(w *bytes.Buffer) error { return failed.WriteMarkdown(w) })
}

// withoutID returns w as if the stream had not counted event id of
// partition key.
func withoutID(w wire.Window, id, key string) wire.Window {
	w.Count--
	w.Version--
	w.Digest = removeID(w.Digest, id)
	p := window.Partition(key, config.Defaults().Partitions)
	w.Partitions = slices.Clone(w.Partitions)
	for i := range w.Partitions {
		if w.Partitions[i].Partition == p {
			w.Partitions[i].Count--
		}
	}
	return w
}

func golden(t *testing.T, name string, write func(*bytes.Buffer) error) {
	t.Helper()
	var buf bytes.Buffer
	if err := write(&buf); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Errorf("%s differs from the golden file (go test -update rewrites it):\n%s", path, buf.String())
	}
}
