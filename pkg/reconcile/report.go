package reconcile

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/receiptflow/receiptflow/pkg/contract"
)

// markdownListLimit caps the items listed per window and per section in
// parity.md; parity.json always lists everything.
const markdownListLimit = 100

// WriteJSON writes the report as indented JSON (parity.json). It returns
// the first write error.
func (r *Report) WriteJSON(w io.Writer) error {
	return writeIndented(w, r)
}

// WriteMarkdown writes the report for people (parity.md): a summary line,
// a table of every window, the differences and extras per window, and every
// unexplained difference. It returns the first write error.
func (r *Report) WriteMarkdown(w io.Writer) error {
	bw := bufio.NewWriter(w)
	p := func(format string, args ...any) { fmt.Fprintf(bw, format, args...) }
	s := r.Summary

	p("# Parity report\n\n")
	verdict := "**Parity holds.**"
	if !r.Holds {
		verdict = "**Parity FAILS.**"
	}
	p("%s %d final windows compared: %d match, %d explained, %d unexplained; %d provisional. "+
		"%d differences explained by LATE rows matching the batch's own verdicts, %d unexplained.\n\n",
		verdict, s.Final, s.Matched, s.Explained, s.Unexplained, s.Provisional,
		s.LateAfterGrace, s.UnexplainedDifferences)
	p("Batch pass: %d records, %d valid, %d counted, %d never count, %d duplicates, %d rejected%s.\n\n",
		s.Records, s.Valid, s.Counted, s.Other, s.Duplicates, s.Rejected, reasonList(s.ByReason))
	p("Batch verdicts: %d counted in their windows (%d as corrections), %d judged too late, over %d heartbeats replayed.\n\n",
		s.InWindows, s.Corrections, s.BatchLate, s.Heartbeats)

	p("| window | stream status | batch | late | expected | stream | digest | late_dropped | corrections | first output version | version | retries | rejected | verdict |\n")
	p("|---|---|--:|--:|--:|--:|---|--:|--:|--:|--:|--:|--:|---|\n")
	for _, wr := range r.Windows {
		status, stream, dig, dropped, corr, fov, ver := "—", "—", "—", "—", "—", "—", "—"
		if wr.StreamStatus != "" {
			status = string(wr.StreamStatus)
			stream = fmt.Sprint(wr.StreamCount)
			dropped = fmt.Sprint(wr.LateDropped)
			corr = fmt.Sprint(wr.Corrections)
			fov = fmt.Sprint(wr.FirstOutputVersion)
			ver = fmt.Sprint(wr.Version)
			if wr.Verdict != VerdictProvisional {
				dig = "ok"
				if slices.ContainsFunc(wr.Differences, func(d Difference) bool { return d.Kind == KindDigestMismatch }) {
					dig = "differs"
				}
			}
		}
		p("| %s | %s | %d | %d | %d | %s | %s | %s | %s | %s | %s | %d | %d | %s |\n",
			wr.WindowID, status, wr.BatchCount, wr.Late, wr.ExpectedCount, stream, dig,
			dropped, corr, fov, ver, len(wr.Duplicates), len(wr.Rejected), wr.Verdict)
	}

	p("\n## Windows\n")
	for _, wr := range r.Windows {
		if len(wr.Differences) == 0 && len(wr.Duplicates) == 0 && len(wr.Rejected) == 0 {
			continue
		}
		p("\n### %s — %s\n\n", wr.WindowID, wr.Verdict)
		if wr.StreamStatus != "" {
			p("Stream: count %d, version %d, first output version %d, corrections %d, late_dropped %d, digest %s.\n\n",
				wr.StreamCount, wr.Version, wr.FirstOutputVersion, wr.Corrections, wr.LateDropped, orDash(wr.StreamDigest))
		}
		list(bw, wr.Differences, func(d Difference) string { return diffLine(d) })
		list(bw, wr.Duplicates, func(d Duplicate) string {
			return fmt.Sprintf("retry `%s` on line %d (first on line %d), not counted again", d.EventID, d.Line, d.FirstLine)
		})
		list(bw, wr.Rejected, func(x Rejection) string {
			return fmt.Sprintf("rejected line %d %s: %s — %s", x.Line, code(x.EventID), x.Reason, cell(x.Detail))
		})
	}

	if len(r.RejectedElsewhere) > 0 {
		p("\n### Rejected records outside these windows\n\n")
		list(bw, r.RejectedElsewhere, func(x Rejection) string {
			return fmt.Sprintf("rejected line %d %s: %s — %s", x.Line, code(x.EventID), x.Reason, cell(x.Detail))
		})
	}

	p("\n## Unexplained differences\n\n")
	if len(r.Unexplained) == 0 {
		p("None.\n")
	} else {
		list(bw, r.Unexplained, func(d Difference) string { return d.WindowID + ": " + diffLine(d) })
	}
	return bw.Flush()
}

// list writes one bullet per item, at most markdownListLimit of them.
func list[T any](w io.Writer, items []T, line func(T) string) {
	for i, it := range items {
		if i == markdownListLimit {
			fmt.Fprintf(w, "- … and %d more (see parity.json)\n", len(items)-i)
			break
		}
		fmt.Fprintf(w, "- %s\n", line(it))
	}
	if len(items) > 0 {
		fmt.Fprintln(w)
	}
}

func diffLine(d Difference) string {
	var b strings.Builder
	b.WriteString(string(d.Kind))
	if d.EventID != "" {
		b.WriteString(" " + code(d.EventID))
	}
	if !d.Explained {
		b.WriteString(" (unexplained)")
	}
	b.WriteString(": " + cell(d.Detail))
	var at []string
	if d.Line > 0 {
		at = append(at, fmt.Sprintf("batch line %d", d.Line))
	}
	if d.Watermark != nil {
		at = append(at, "watermark "+d.Watermark.Format(time.RFC3339Nano))
	}
	if d.BatchWatermark != nil && (d.Watermark == nil || !d.BatchWatermark.Equal(*d.Watermark)) {
		at = append(at, "batch watermark "+d.BatchWatermark.Format(time.RFC3339Nano))
	}
	if d.Partition != nil && d.EventID != "" {
		at = append(at, fmt.Sprintf("partition %d", *d.Partition))
	}
	if d.Seq > 0 {
		at = append(at, fmt.Sprintf("seq %d", d.Seq))
	}
	if len(at) > 0 {
		b.WriteString(" [" + strings.Join(at, ", ") + "]")
	}
	return b.String()
}

func reasonList(m map[contract.Reason]int) string {
	if len(m) == 0 {
		return ""
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, string(k))
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[contract.Reason(k)])
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// cell makes free text safe inside a markdown line or table cell.
func cell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.Join(strings.Fields(s), " ")
}

func code(s string) string {
	if s == "" {
		return "(no event_id)"
	}
	return "`" + strings.ReplaceAll(s, "`", "'") + "`"
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

func writeIndented(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("reconcile: encode: %w", err)
	}
	b = append(b, '\n')
	if _, err := w.Write(b); err != nil {
		return fmt.Errorf("reconcile: write: %w", err)
	}
	return nil
}

// BatchWindow is one window of batch.json.
type BatchWindow struct {
	WindowID string    `json:"window_id"`
	Start    time.Time `json:"start"`
	End      time.Time `json:"end"`
	Count    int64     `json:"count"`
	Digest   string    `json:"digest"`
	// Corrections and LateDropped are the batch's own verdicts.
	Corrections int64 `json:"corrections"`
	LateDropped int64 `json:"late_dropped"`
	// Partitions holds the non-zero counts per partition.
	Partitions []PartitionCount `json:"partitions"`
	Duplicates int              `json:"duplicates"`
	Rejected   int              `json:"rejected"`
}

// PartitionCount is one partition's count of a window.
type PartitionCount struct {
	Partition int   `json:"partition"`
	Count     int64 `json:"count"`
}

// BatchSummary is the content of batch.json: the batch pass's totals and
// every window it counted, in time order.
type BatchSummary struct {
	Partitions int                     `json:"partitions"`
	Records    int                     `json:"records"`
	Valid      int                     `json:"valid"`
	Counted    int                     `json:"counted"`
	InWindows  int                     `json:"counted_in_windows"`
	Other      int                     `json:"other"`
	Duplicates int                     `json:"duplicates"`
	Rejected   int                     `json:"rejected"`
	ByReason   map[contract.Reason]int `json:"rejected_by_reason"`
	Windows    []BatchWindow           `json:"windows"`
	// Late lists every submission the batch judged too late.
	Late []LateJudgment `json:"late"`
}

// Summary returns the batch's totals and per-window counts and digests.
func (b *Batch) Summary() BatchSummary {
	s := BatchSummary{
		Partitions: b.Partitions, Records: b.Records, Valid: b.Valid, Counted: b.Counted, InWindows: b.InWindows, Late: b.Late,
		Other: b.Other, Duplicates: b.DuplicateCount, Rejected: len(b.Rejected),
		ByReason: b.RejectedByReason(), Windows: []BatchWindow{},
	}
	for _, id := range b.WindowIDs() {
		w := b.Windows[id]
		bw := BatchWindow{
			WindowID: id, Start: w.Start, End: w.End, Count: w.Count, Digest: w.Digest.String(),
			Corrections: w.Corrections, LateDropped: w.LateDropped,
			Partitions: []PartitionCount{}, Duplicates: len(w.Duplicates), Rejected: len(b.rejectedIn[id]),
		}
		for p, n := range w.ByPartition {
			if n != 0 {
				bw.Partitions = append(bw.Partitions, PartitionCount{Partition: p, Count: n})
			}
		}
		s.Windows = append(s.Windows, bw)
	}
	return s
}

// WriteJSON writes b.Summary() as indented JSON (batch.json). It returns
// the first write error.
func (b *Batch) WriteJSON(w io.Writer) error {
	return writeIndented(w, b.Summary())
}
