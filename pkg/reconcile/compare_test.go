package reconcile_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/config"
	"github.com/receiptflow/receiptflow/pkg/internal/digest"
	"github.com/receiptflow/receiptflow/pkg/reconcile"
	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

func removeID(s, id string) string {
	d, err := digest.Parse(s)
	if err != nil {
		panic(err)
	}
	d.Remove(id)
	return d.String()
}

func addID(s, id string) string {
	d, err := digest.Parse(s)
	if err != nil {
		panic(err)
	}
	d.Add(id)
	return d.String()
}

// editWindow applies f to the stream window id.
func editWindow(ws []wire.Window, id string, f func(*wire.Window)) []wire.Window {
	ws = slices.Clone(ws)
	for i := range ws {
		if ws[i].WindowID == id {
			f(&ws[i])
		}
	}
	return ws
}

func dropWindow(ws []wire.Window, id string) []wire.Window {
	return slices.DeleteFunc(slices.Clone(ws), func(w wire.Window) bool { return w.WindowID == id })
}

// lateOnly is a small input where window 09 holds only an event that is too
// late: store-a reaches 12:00 first, then sends 09:30.
const lateOnly = `{"schema_version":2,"event_id":"x1","receipt_id":"r","type":"submitted","occurred_at":"2026-12-02T12:00:00Z","ingested_at":"2026-12-02T12:00:05Z","partition_key":"store-a","producer_version":"t"}
{"schema_version":2,"event_id":"x2","receipt_id":"r","type":"submitted","occurred_at":"2026-12-02T09:30:00Z","ingested_at":"2026-12-02T12:00:06Z","partition_key":"store-a","producer_version":"t"}
`

func TestCompare(t *testing.T) {
	seed, _ := readSeed(t)
	const (
		w10, w11, w12, w13 = "2026-12-02T10", "2026-12-02T11", "2026-12-02T12", "2026-12-02T13"
	)
	type edit func(ws []wire.Window, late []reconcile.LateRow) ([]wire.Window, []reconcile.LateRow)
	tests := []struct {
		name  string
		input string
		edit  edit
		holds bool
		// verdicts per window, in window order.
		verdicts []reconcile.WindowVerdict
		// unexplained lists "window kind event_id" of every unexplained
		// difference.
		unexplained []string
	}{
		{
			name:     "clean run: late events explain the differences",
			holds:    true,
			verdicts: []reconcile.WindowVerdict{"explained", "explained", "match", "match"},
		},
		{
			name: "a LATE row is missing",
			edit: func(ws []wire.Window, late []reconcile.LateRow) ([]wire.Window, []reconcile.LateRow) {
				return ws, late[1:]
			},
			verdicts: []reconcile.WindowVerdict{"unexplained", "explained", "match", "match"},
			// The batch judged evt-seed-22 too late itself.
			unexplained: []string{w10 + " late_missing_in_stream evt-seed-22"},
		},
		{
			name: "the stream lost an event",
			edit: func(ws []wire.Window, late []reconcile.LateRow) ([]wire.Window, []reconcile.LateRow) {
				return editWindow(ws, w12, func(w *wire.Window) { *w = withoutID(*w, "evt-seed-17", "store-b") }), late
			},
			verdicts:    []reconcile.WindowVerdict{"explained", "explained", "unexplained", "match"},
			unexplained: []string{w12 + " count_mismatch evt-seed-17", w12 + " digest_mismatch evt-seed-17", w12 + " partition_mismatch "},
		},
		{
			name: "the stream counted an event twice",
			edit: func(ws []wire.Window, late []reconcile.LateRow) ([]wire.Window, []reconcile.LateRow) {
				return editWindow(ws, w13, func(w *wire.Window) {
					w.Count++
					w.Digest = addID(w.Digest, "evt-seed-30")
				}), late
			},
			verdicts:    []reconcile.WindowVerdict{"explained", "explained", "match", "unexplained"},
			unexplained: []string{w13 + " count_mismatch evt-seed-30", w13 + " digest_mismatch evt-seed-30"},
		},
		{
			name: "two wrong ids cancel out in the count but not in the digest",
			edit: func(ws []wire.Window, late []reconcile.LateRow) ([]wire.Window, []reconcile.LateRow) {
				return editWindow(ws, w13, func(w *wire.Window) {
					// Lost evt-seed-21, counted a foreign id of the same partition instead.
					w.Digest = addID(removeID(w.Digest, "evt-seed-21"), "evt-foreign-1")
				}), late
			},
			verdicts:    []reconcile.WindowVerdict{"explained", "explained", "match", "unexplained"},
			unexplained: []string{w13 + " digest_mismatch "},
		},
		{
			name: "a LATE row for an event the batch never counted",
			edit: func(ws []wire.Window, late []reconcile.LateRow) ([]wire.Window, []reconcile.LateRow) {
				ws = editWindow(ws, w13, func(w *wire.Window) { w.LateDropped++; w.Version++ })
				return ws, append(slices.Clone(late), reconcile.LateRow{
					EventID: "evt-seed-26", WindowID: w13, Reason: wire.ReasonAfterGrace,
					Watermark: time.Date(2026, 12, 2, 15, 0, 0, 0, time.UTC), Partition: 0, Seq: 29,
				})
			},
			verdicts:    []reconcile.WindowVerdict{"explained", "explained", "match", "unexplained"},
			unexplained: []string{w13 + " late_not_in_batch evt-seed-26", w13 + " late_dropped_mismatch "},
		},
		{
			name: "a LATE row names the wrong window",
			edit: func(ws []wire.Window, late []reconcile.LateRow) ([]wire.Window, []reconcile.LateRow) {
				late = slices.Clone(late)
				late[1].WindowID = w12 // evt-seed-25 belongs to 11
				ws = editWindow(ws, w12, func(w *wire.Window) { w.LateDropped++ })
				ws = editWindow(ws, w11, func(w *wire.Window) { w.LateDropped-- })
				return ws, late
			},
			verdicts: []reconcile.WindowVerdict{"explained", "unexplained", "unexplained", "match"},
			unexplained: []string{
				w11 + " late_dropped_mismatch ",
				w12 + " late_watermark_mismatch evt-seed-25", w12 + " late_dropped_mismatch ",
			},
		},
		{
			name: "late_dropped off by one",
			edit: func(ws []wire.Window, late []reconcile.LateRow) ([]wire.Window, []reconcile.LateRow) {
				return editWindow(ws, w11, func(w *wire.Window) { w.LateDropped = 2 }), late
			},
			verdicts:    []reconcile.WindowVerdict{"explained", "unexplained", "match", "match"},
			unexplained: []string{w11 + " late_dropped_mismatch "},
		},
		{
			name: "partials moved between partitions",
			edit: func(ws []wire.Window, late []reconcile.LateRow) ([]wire.Window, []reconcile.LateRow) {
				return editWindow(ws, w12, func(w *wire.Window) {
					w.Partitions = slices.Clone(w.Partitions)
					w.Partitions[0].Count++
					w.Partitions[1].Count--
				}), late
			},
			verdicts:    []reconcile.WindowVerdict{"explained", "explained", "unexplained", "match"},
			unexplained: []string{w12 + " partition_mismatch ", w12 + " partition_mismatch "},
		},
		{
			name: "the stream never published a window",
			edit: func(ws []wire.Window, late []reconcile.LateRow) ([]wire.Window, []reconcile.LateRow) {
				return dropWindow(ws, w13), late
			},
			verdicts: []reconcile.WindowVerdict{"explained", "explained", "match", "unexplained"},
			unexplained: []string{
				w13 + " missing_in_stream evt-seed-21", w13 + " missing_in_stream evt-seed-29",
				w13 + " missing_in_stream evt-seed-30",
			},
		},
		{
			name: "a final window the batch does not know: a confirmed zero holds",
			edit: func(ws []wire.Window, late []reconcile.LateRow) ([]wire.Window, []reconcile.LateRow) {
				return append(slices.Clone(ws), wire.Window{WindowID: "2026-12-02T14", Status: window.StatusFinal, Version: 2}), late
			},
			holds:    true,
			verdicts: []reconcile.WindowVerdict{"explained", "explained", "match", "match", "match"},
		},
		{
			name: "a final window the batch does not know, with counts",
			edit: func(ws []wire.Window, late []reconcile.LateRow) ([]wire.Window, []reconcile.LateRow) {
				var d digest.Digest
				d.Add("evt-ghost")
				return append(slices.Clone(ws), wire.Window{WindowID: "2026-12-02T14", Status: window.StatusFinal,
					Count: 1, Version: 3, Digest: d.String()}), late
			},
			verdicts:    []reconcile.WindowVerdict{"explained", "explained", "match", "match", "unexplained"},
			unexplained: []string{"2026-12-02T14 not_in_batch "},
		},
		{
			name: "a provisional window is not compared",
			edit: func(ws []wire.Window, late []reconcile.LateRow) ([]wire.Window, []reconcile.LateRow) {
				return editWindow(ws, w13, func(w *wire.Window) {
					w.Status = window.StatusInGrace
					w.Count = 1
				}), late
			},
			holds:    true,
			verdicts: []reconcile.WindowVerdict{"explained", "explained", "match", "provisional"},
		},
		{
			name:  "a window only late events fell into",
			input: lateOnly,
			holds: true,
			// 09 holds x2 (late, stream window with count 0), 12 holds x1.
			verdicts: []reconcile.WindowVerdict{"explained", "match"},
		},
		{
			name:  "a window only late events fell into, never published",
			input: lateOnly,
			edit: func(ws []wire.Window, late []reconcile.LateRow) ([]wire.Window, []reconcile.LateRow) {
				return dropWindow(ws, "2026-12-02T09"), late
			},
			// docs/spec.md §8: a window the stream never published is an
			// unexplained difference, LATE rows or not.
			verdicts:    []reconcile.WindowVerdict{"unexplained", "match"},
			unexplained: []string{"2026-12-02T09 missing_in_stream x2"},
		},
		{
			name:  "a window only late events fell into, never published and without LATE rows",
			input: lateOnly,
			edit: func(ws []wire.Window, late []reconcile.LateRow) ([]wire.Window, []reconcile.LateRow) {
				return dropWindow(ws, "2026-12-02T09"), nil
			},
			verdicts:    []reconcile.WindowVerdict{"unexplained", "match"},
			unexplained: []string{"2026-12-02T09 late_missing_in_stream x2", "2026-12-02T09 missing_in_stream x2"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			input := seed
			if tc.input != "" {
				input = []byte(tc.input)
			}
			b, err := reconcile.Count(bytes.NewReader(input), reconcile.Config{})
			if err != nil {
				t.Fatal(err)
			}
			res := runStream(t, input, config.Defaults().Partitions, time.Time{})
			ws, late := res.windows, res.late
			if tc.edit != nil {
				ws, late = tc.edit(ws, late)
			}
			rep := reconcile.Compare(b, ws, late)
			if rep.Holds != tc.holds {
				t.Errorf("Holds = %v, want %v", rep.Holds, tc.holds)
			}
			var verdicts []reconcile.WindowVerdict
			for _, w := range rep.Windows {
				verdicts = append(verdicts, w.Verdict)
			}
			if !slices.Equal(verdicts, tc.verdicts) {
				t.Errorf("verdicts = %v, want %v", verdicts, tc.verdicts)
			}
			var unexplained []string
			for _, d := range rep.Unexplained {
				unexplained = append(unexplained, fmt.Sprintf("%s %s %s", d.WindowID, d.Kind, d.EventID))
			}
			if !slices.Equal(unexplained, tc.unexplained) {
				t.Errorf("unexplained =\n  %q\nwant\n  %q", unexplained, tc.unexplained)
			}
			if rep.Summary.UnexplainedDifferences != len(rep.Unexplained) {
				t.Errorf("summary says %d unexplained, %d listed", rep.Summary.UnexplainedDifferences, len(rep.Unexplained))
			}
			checkRenders(t, rep)
		})
	}
}

// checkRenders writes both forms and checks that they agree with Holds and
// name every unexplained difference.
func checkRenders(t *testing.T, rep *reconcile.Report) {
	t.Helper()
	var js, md bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back reconcile.Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatalf("parity.json does not read back: %v", err)
	}
	if back.Holds != rep.Holds || len(back.Unexplained) != len(rep.Unexplained) || len(back.Windows) != len(rep.Windows) {
		t.Errorf("parity.json round trip differs")
	}
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	text := md.String()
	if rep.Holds != strings.Contains(text, "**Parity holds.**") {
		t.Errorf("parity.md headline disagrees with Holds=%v", rep.Holds)
	}
	section := text[strings.Index(text, "## Unexplained differences"):]
	for _, d := range rep.Unexplained {
		if !strings.Contains(section, string(d.Kind)) || (d.EventID != "" && !strings.Contains(section, d.EventID)) {
			t.Errorf("parity.md does not list %s %s %s", d.WindowID, d.Kind, d.EventID)
		}
	}
}

// TestCompareLateDetails: an explained difference carries the LATE row's
// watermark, partition and seq, the batch's own watermark, and the batch
// line.
func TestCompareLateDetails(t *testing.T) {
	seed, _ := readSeed(t)
	b, err := reconcile.Count(bytes.NewReader(seed), reconcile.Config{})
	if err != nil {
		t.Fatal(err)
	}
	res := runStream(t, seed, config.Defaults().Partitions, time.Time{})
	rep := reconcile.Compare(b, res.windows, res.late)
	d := rep.Windows[0].Differences
	if len(d) != 1 {
		t.Fatalf("differences of 10: %+v", d)
	}
	wm := time.Date(2026, 12, 2, 13, 5, 0, 0, time.UTC)
	if d[0].EventID != "evt-seed-22" || d[0].Kind != reconcile.KindLateAfterGrace || !d[0].Explained ||
		d[0].Watermark == nil || !d[0].Watermark.Equal(wm) || d[0].BatchWatermark == nil || !d[0].BatchWatermark.Equal(wm) ||
		d[0].Partition == nil || *d[0].Partition != 0 ||
		d[0].Seq != 24 || d[0].Line != 24 {
		t.Fatalf("difference = %+v", d[0])
	}
	w := rep.Windows[0]
	if w.BatchCount != 7 || w.Late != 1 || w.ExpectedCount != 7 || w.StreamCount != 7 ||
		w.ExpectedDigest != w.StreamDigest || w.Corrections != 2 || w.BatchCorrections != 2 || w.BatchLateDropped != 1 ||
		len(w.Duplicates) != 3 || len(w.Rejected) != 2 {
		t.Fatalf("window 10 = %+v", w)
	}
	if rep.Summary.LateAfterGrace != 2 || rep.Summary.Final != 4 || rep.Summary.StreamCount != 18 {
		t.Fatalf("summary = %+v", rep.Summary)
	}
	// The rejections without a window in the report: the future event
	// (window 14), the bad timestamp and the malformed line.
	var elsewhere []int
	for _, r := range rep.RejectedElsewhere {
		elsewhere = append(elsewhere, r.Line)
	}
	if !slices.Equal(elsewhere, []int{16, 29, 31}) {
		t.Fatalf("rejected elsewhere = %v", elsewhere)
	}
}

// TestCompareEmpty: nothing on either side holds; Compare never returns nil
// slices in JSON.
func TestCompareEmpty(t *testing.T) {
	b, err := reconcile.Count(strings.NewReader(""), reconcile.Config{})
	if err != nil {
		t.Fatal(err)
	}
	rep := reconcile.Compare(b, nil, nil)
	if !rep.Holds {
		t.Fatal("empty does not hold")
	}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(js.String(), "null") {
		t.Fatalf("parity.json has null: %s", js.String())
	}
}
