package reconcile

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/internal/digest"
	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// WindowVerdict is the outcome of comparing one window.
type WindowVerdict string

// The verdicts of a WindowReport.
const (
	// VerdictMatch: the stream window equals the batch window exactly, and
	// no event of it was too late.
	VerdictMatch WindowVerdict = "match"
	// VerdictExplained: the stream window equals the batch window, and
	// the events the batch judged too late are exactly the stream's LATE
	// rows (same event ids, reasons and watermarks).
	VerdictExplained WindowVerdict = "explained"
	// VerdictUnexplained: at least one difference has no explanation.
	VerdictUnexplained WindowVerdict = "unexplained"
	// VerdictProvisional: the stream window is not final yet and was not
	// compared.
	VerdictProvisional WindowVerdict = "provisional"
)

// DiffKind names a kind of difference between the batch and the stream.
type DiffKind string

// The kinds of Difference. Only KindLateAfterGrace and KindRetired are
// explanations (a LATE row that matches the batch's own verdict); every
// other kind is unexplained.
const (
	// KindLateAfterGrace: the batch judged the event too late after grace
	// against the same watermark as the stream's LATE row (explained).
	KindLateAfterGrace DiffKind = "late_after_grace"
	// KindRetired: the batch judged the event past the replay horizon, and
	// the stream dropped it as retired (explained).
	KindRetired DiffKind = "retired"
	// KindLateNotInBatch: the stream routed an event to LATE that the
	// batch did not judge too late (it counted it, or never saw it).
	KindLateNotInBatch DiffKind = "late_not_in_batch"
	// KindLateWatermarkMismatch: the batch and the stream judged the event
	// too late, against different watermarks (or reasons, or windows).
	KindLateWatermarkMismatch DiffKind = "late_watermark_mismatch"
	// KindLateMissingInStream: the batch judged the event too late, the
	// stream has no LATE row for it.
	KindLateMissingInStream DiffKind = "late_missing_in_stream"
	// KindCountMismatch: the stream count is not the batch count.
	KindCountMismatch DiffKind = "count_mismatch"
	// KindCorrectionsMismatch: the stream's corrections are not the
	// batch's.
	KindCorrectionsMismatch DiffKind = "corrections_mismatch"
	// KindDigestMismatch: the stream counted a different set of event ids
	// than the batch.
	KindDigestMismatch DiffKind = "digest_mismatch"
	// KindLateDroppedMismatch: the window's late_dropped is not the number
	// of events the batch judged too late after grace.
	KindLateDroppedMismatch DiffKind = "late_dropped_mismatch"
	// KindPartitionMismatch: a partition's partial count is not the batch's
	// count of that partition.
	KindPartitionMismatch DiffKind = "partition_mismatch"
	// KindBreakdownMismatch: the window's breakdown by store (counts,
	// amounts, unpriced, as wire.NewBreakdown forms it) is not the
	// batch's.
	KindBreakdownMismatch DiffKind = "breakdown_mismatch"
	// KindMissingInStream: the batch counted (or judged too late) the event
	// in a window the stream never published.
	KindMissingInStream DiffKind = "missing_in_stream"
	// KindNotInBatch: the stream published a window the batch has no
	// counted or late event of.
	KindNotInBatch DiffKind = "not_in_batch"
)

// Difference is one difference between the batch and the stream.
type Difference struct {
	WindowID string `json:"window_id"`
	// EventID is set for differences about one event (for a count or
	// digest mismatch, when one event id accounts for it).
	EventID   string   `json:"event_id,omitempty"`
	Kind      DiffKind `json:"kind"`
	Explained bool     `json:"explained"`
	Detail    string   `json:"detail"`
	// Line is the input line (RAW sequence) where the batch read EventID.
	Line int `json:"line,omitempty"`
	// Watermark, Partition and Seq come from the LATE row of EventID.
	Watermark *time.Time `json:"watermark,omitempty"`
	Partition *int       `json:"partition,omitempty"`
	Seq       uint64     `json:"seq,omitempty"`
	// BatchWatermark is the watermark the batch judged EventID against.
	BatchWatermark *time.Time `json:"batch_watermark,omitempty"`
}

// WindowReport is the comparison of one window.
type WindowReport struct {
	WindowID string        `json:"window_id"`
	Verdict  WindowVerdict `json:"verdict"`
	// StreamStatus is the stream window's status, empty when the stream
	// has no such window.
	StreamStatus window.Status `json:"stream_status,omitempty"`
	// BatchCount is what the batch counted (on time and corrections); Late
	// the distinct event ids of the window the stream routed to LATE;
	// ExpectedCount and ExpectedDigest are what the stream must hold (the
	// batch's count and digest).
	BatchCount     int64  `json:"batch_count"`
	Late           int64  `json:"late"`
	ExpectedCount  int64  `json:"expected_count"`
	ExpectedDigest string `json:"expected_digest"`
	// BatchCorrections, BatchLateDropped and BatchRetired are the batch's
	// own verdicts on the window's events.
	BatchCorrections int64 `json:"batch_corrections"`
	BatchLateDropped int64 `json:"batch_late_dropped"`
	BatchRetired     int64 `json:"batch_retired"`
	// The stream window's fields (zero when the stream has no window).
	StreamCount        int64  `json:"stream_count"`
	StreamDigest       string `json:"stream_digest"`
	LateDropped        int64  `json:"late_dropped"`
	Corrections        int64  `json:"corrections"`
	FirstOutputVersion int64  `json:"first_output_version"`
	Version            int64  `json:"version"`
	// Duplicates are the retries the batch saw of the window's events.
	Duplicates []Duplicate `json:"duplicates"`
	// Rejected are the rejected records whose event time is in the window.
	Rejected []Rejection `json:"rejected"`
	// Differences lists every batch−stream difference, explained or not.
	Differences []Difference `json:"differences"`
}

// Summary sums up a Report.
type Summary struct {
	// Final is the number of final stream windows compared; Matched,
	// Explained and Unexplained split the compared windows (Unexplained
	// also counts batch windows the stream lacks). Provisional counts
	// non-final stream windows.
	Final       int `json:"final"`
	Matched     int `json:"matched"`
	Explained   int `json:"explained"`
	Unexplained int `json:"unexplained"`
	Provisional int `json:"provisional"`
	// LateAfterGrace is the number of differences explained by a LATE row
	// matching the batch's own too-late verdict (retired ones included).
	LateAfterGrace int `json:"late_after_grace"`
	// UnexplainedDifferences is len(Report.Unexplained).
	UnexplainedDifferences int `json:"unexplained_differences"`
	// Batch totals.
	Records     int                     `json:"records"`
	Valid       int                     `json:"valid"`
	Counted     int                     `json:"counted"`
	InWindows   int                     `json:"counted_in_windows"`
	Corrections int                     `json:"corrections"`
	BatchLate   int                     `json:"batch_late"`
	Heartbeats  int                     `json:"heartbeats"`
	Other       int                     `json:"other"`
	Duplicates  int                     `json:"duplicates"`
	Rejected    int                     `json:"rejected"`
	ByReason    map[contract.Reason]int `json:"rejected_by_reason"`
	// StreamCount is the sum of the compared stream windows' counts.
	StreamCount int64 `json:"stream_count"`
}

// Report is the parity report of one batch pass against the stream's
// windows (parity.json, parity.md).
type Report struct {
	// Holds is true iff no difference is unexplained.
	Holds   bool           `json:"holds"`
	Summary Summary        `json:"summary"`
	Windows []WindowReport `json:"windows"`
	// Unexplained lists every unexplained difference of every window.
	Unexplained []Difference `json:"unexplained"`
	// RejectedElsewhere lists the rejected records that are not in any
	// window of Windows (no readable event time, or a window nobody
	// counted in).
	RejectedElsewhere []Rejection `json:"rejected_elsewhere"`
}

// Compare judges the stream's windows and LATE rows by the batch's own
// judgments (rules in the package doc). It does not modify its arguments and
// is safe to call concurrently on the same batch.
func Compare(b *Batch, windows []wire.Window, late []LateRow) *Report {
	stream := make(map[string]*wire.Window, len(windows))
	ids := make(map[string]bool)
	for i := range windows {
		stream[windows[i].WindowID] = &windows[i]
		ids[windows[i].WindowID] = true
	}
	lateIn := make(map[string]map[string]LateRow)
	lateOrder := make(map[string][]string)
	seenLate := make(map[string]bool)
	for _, r := range late {
		if seenLate[r.EventID] {
			continue
		}
		seenLate[r.EventID] = true
		m := lateIn[r.WindowID]
		if m == nil {
			m = make(map[string]LateRow)
			lateIn[r.WindowID] = m
		}
		m[r.EventID] = r
		lateOrder[r.WindowID] = append(lateOrder[r.WindowID], r.EventID)
		ids[r.WindowID] = true
	}
	batchLate := make(map[string][]LateJudgment)
	for _, v := range b.Late {
		batchLate[v.WindowID] = append(batchLate[v.WindowID], v)
		ids[v.WindowID] = true
	}
	for id := range b.Windows {
		ids[id] = true
	}
	sorted := slices.Sorted(maps.Keys(ids))

	rep := &Report{Windows: []WindowReport{}, Unexplained: []Difference{}, RejectedElsewhere: []Rejection{}}
	for _, id := range sorted {
		c := comparison{b: b, id: id, bw: b.Windows[id], sw: stream[id],
			late: lateIn[id], lateOrder: lateOrder[id], batchLate: batchLate[id], seenLate: seenLate}
		wr := c.run()
		rep.Windows = append(rep.Windows, wr)
		s := &rep.Summary
		switch wr.Verdict {
		case VerdictProvisional:
			s.Provisional++
		case VerdictMatch:
			s.Matched++
		case VerdictExplained:
			s.Explained++
		case VerdictUnexplained:
			s.Unexplained++
		}
		if c.sw != nil && c.sw.Status == window.StatusFinal {
			s.Final++
			s.StreamCount += c.sw.Count
		}
		for _, d := range wr.Differences {
			if d.Explained {
				s.LateAfterGrace++
			} else {
				rep.Unexplained = append(rep.Unexplained, d)
			}
		}
	}
	for _, r := range b.Rejected {
		if !ids[r.WindowID] {
			rep.RejectedElsewhere = append(rep.RejectedElsewhere, r)
		}
	}
	s := &rep.Summary
	s.UnexplainedDifferences = len(rep.Unexplained)
	s.Records, s.Valid, s.Counted, s.Other = b.Records, b.Valid, b.Counted, b.Other
	s.InWindows, s.Corrections, s.BatchLate, s.Heartbeats = b.InWindows, b.Corrections, len(b.Late), b.Heartbeats
	s.Duplicates, s.Rejected, s.ByReason = b.DuplicateCount, len(b.Rejected), b.RejectedByReason()
	rep.Holds = len(rep.Unexplained) == 0
	return rep
}

// comparison compares one window.
type comparison struct {
	b         *Batch
	id        string
	bw        *WindowCount
	sw        *wire.Window
	late      map[string]LateRow
	lateOrder []string
	// batchLate are the batch's too-late verdicts of the window.
	batchLate []LateJudgment
	// seenLate holds every event id with a stream LATE row (any window).
	seenLate map[string]bool
	diffs    []Difference
}

func (c *comparison) run() WindowReport {
	wr := WindowReport{
		WindowID:    c.id,
		Duplicates:  []Duplicate{},
		Rejected:    c.b.RejectedIn(c.id),
		Differences: []Difference{},
	}
	var want digest.Digest
	if c.bw != nil {
		wr.BatchCount = c.bw.Count
		wr.BatchCorrections = c.bw.Corrections
		wr.BatchLateDropped = c.bw.LateDropped
		want = c.bw.Digest
		wr.Duplicates = append(wr.Duplicates, c.bw.Duplicates...)
	}
	for _, v := range c.batchLate {
		if v.Reason == wire.ReasonRetired {
			wr.BatchRetired++
		}
	}
	wr.Late = int64(len(c.lateOrder))
	wr.ExpectedCount = wr.BatchCount
	wr.ExpectedDigest = want.String()

	if c.sw != nil {
		wr.StreamStatus = c.sw.Status
		c.fillStream(&wr)
		if c.sw.Status != window.StatusFinal {
			// A provisional window is not compared: its differences are
			// not differences yet.
			wr.Verdict = VerdictProvisional
			return wr
		}
	}
	c.compareLate()
	switch {
	case c.sw == nil:
		c.missingInStream()
	case c.bw == nil:
		if c.sw.Count != 0 || c.sw.LateDropped != 0 {
			c.diffs = append(c.diffs, Difference{
				WindowID: c.id, Kind: KindNotInBatch,
				Detail: fmt.Sprintf("the stream published the window (count %d, late_dropped %d), the batch has no counted or late event in it",
					c.sw.Count, c.sw.LateDropped),
			})
		}
	default:
		c.compareFinal(&wr, want)
	}
	wr.Differences = append(wr.Differences, c.diffs...)
	wr.Verdict = VerdictMatch
	for _, d := range wr.Differences {
		if !d.Explained {
			wr.Verdict = VerdictUnexplained
			break
		}
		wr.Verdict = VerdictExplained
	}
	return wr
}

func (c *comparison) fillStream(wr *WindowReport) {
	wr.StreamCount = c.sw.Count
	wr.StreamDigest = c.sw.Digest
	wr.LateDropped = c.sw.LateDropped
	wr.Corrections = c.sw.Corrections
	wr.FirstOutputVersion = c.sw.FirstOutputVersion
	wr.Version = c.sw.Version
}

// compareLate holds the window's LATE rows and the batch's too-late
// verdicts to each other, event by event.
func (c *comparison) compareLate() {
	for _, eid := range c.lateOrder {
		r := c.late[eid]
		d := lateDiff(c.id, r)
		d.Line = c.lineOf(eid)
		v, ok := c.b.LateJudgmentOf(eid)
		switch {
		case !ok && r.Reason == wire.ReasonRetired && c.b.retiredRetries[eid]:
			// A retry that came once its window was past the replay
			// horizon: the stream drops it as retired when it no longer
			// holds the id; the id itself was decided before.
			d.Kind, d.Explained = KindRetired, true
			d.Detail = "a retry the stream dropped past the replay horizon; " + c.b.describe(eid)
		case !ok:
			d.Kind = KindLateNotInBatch
			d.Detail = fmt.Sprintf("routed to LATE (%s) by the stream against watermark %s, but %s",
				r.Reason, r.Watermark.UTC().Format(time.RFC3339Nano), c.b.describe(eid))
		case v.WindowID != r.WindowID || v.Reason != r.Reason || !v.Watermark.Equal(r.Watermark):
			bwm := v.Watermark
			d.BatchWatermark = &bwm
			d.Kind = KindLateWatermarkMismatch
			d.Detail = fmt.Sprintf("the stream routed it to LATE (%s, window %s) against watermark %s; the batch judged it %s for window %s against watermark %s",
				r.Reason, r.WindowID, r.Watermark.UTC().Format(time.RFC3339Nano),
				v.Reason, v.WindowID, v.Watermark.Format(time.RFC3339Nano))
		default:
			bwm := v.Watermark
			d.BatchWatermark = &bwm
			d.Explained = true
			if v.Reason == wire.ReasonRetired {
				d.Kind = KindRetired
				d.Detail = "judged past the replay horizon (retired) by the batch and the stream, against the same watermark"
			} else {
				d.Kind = KindLateAfterGrace
				d.Detail = "judged too late after grace by the batch and the stream, against the same watermark"
			}
		}
		c.diffs = append(c.diffs, d)
	}
	for _, v := range c.batchLate {
		if _, ok := c.late[v.EventID]; ok || c.seenLate[v.EventID] {
			// Its row is here, or in another window (reported there).
			continue
		}
		wm := v.Watermark
		p := v.Partition
		c.diffs = append(c.diffs, Difference{
			WindowID: c.id, EventID: v.EventID, Kind: KindLateMissingInStream, Line: c.lineOf(v.EventID),
			BatchWatermark: &wm, Partition: &p,
			Detail: fmt.Sprintf("the batch judged it too late (%s) against watermark %s (RAW seq %d); the stream has no LATE row for it",
				v.Reason, v.Watermark.Format(time.RFC3339Nano), v.Seq),
		})
	}
}

// missingInStream handles a window the batch has and the stream never
// published: every event the batch counted or judged too late after grace
// in it is unexplained.
func (c *comparison) missingInStream() {
	if c.bw == nil {
		return
	}
	for _, eid := range c.bw.IDs {
		c.diffs = append(c.diffs, Difference{
			WindowID: c.id, EventID: eid, Kind: KindMissingInStream, Line: c.lineOf(eid),
			Detail: "counted by the batch in a window the stream never published",
		})
	}
	for _, v := range c.bw.Late {
		wm := v.Watermark
		c.diffs = append(c.diffs, Difference{
			WindowID: c.id, EventID: v.EventID, Kind: KindMissingInStream, Line: c.lineOf(v.EventID), BatchWatermark: &wm,
			Detail: "judged too late after grace by the batch in a window the stream never published (its late_dropped is missing)",
		})
	}
}

func (c *comparison) compareFinal(wr *WindowReport, want digest.Digest) {
	got, derr := parseDigest(c.sw.Digest)
	// The one event id that accounts for a count or digest difference,
	// when there is one.
	culprit, how := "", ""
	if derr == nil && got != want {
		culprit, how = c.findOne(got, want)
	}
	if c.sw.LateDropped != c.bw.LateDropped {
		c.diffs = append(c.diffs, Difference{
			WindowID: c.id, Kind: KindLateDroppedMismatch,
			Detail: fmt.Sprintf("late_dropped is %d, but the batch judged %d distinct event ids of the window too late after grace",
				c.sw.LateDropped, c.bw.LateDropped),
		})
	}
	if c.sw.Corrections != c.bw.Corrections {
		c.diffs = append(c.diffs, Difference{
			WindowID: c.id, Kind: KindCorrectionsMismatch,
			Detail: fmt.Sprintf("stream corrections %d, the batch counted %d events as corrections (late within grace)",
				c.sw.Corrections, c.bw.Corrections),
		})
	}
	if c.sw.Count != wr.ExpectedCount {
		d := Difference{
			WindowID: c.id, Kind: KindCountMismatch,
			Detail: fmt.Sprintf("stream count %d, batch count %d: the stream has %s",
				c.sw.Count, wr.ExpectedCount, moreOrFewer(c.sw.Count-wr.ExpectedCount)),
		}
		if culprit != "" {
			d.EventID, d.Line = culprit, c.lineOf(culprit)
			d.Detail += "; " + how
		}
		c.diffs = append(c.diffs, d)
	}
	switch {
	case derr != nil:
		c.diffs = append(c.diffs, Difference{
			WindowID: c.id, Kind: KindDigestMismatch,
			Detail: fmt.Sprintf("stream digest unreadable: %v", derr),
		})
	case got != want:
		detail := fmt.Sprintf("stream digest %s, expected %s: the stream counted other event ids", got, want)
		if c.sw.Count == wr.ExpectedCount {
			detail = fmt.Sprintf("stream digest %s, expected %s: same count but other event ids (differences that cancel out in the count)", got, want)
		}
		d := Difference{WindowID: c.id, Kind: KindDigestMismatch, Detail: detail}
		if culprit != "" {
			d.EventID, d.Line = culprit, c.lineOf(culprit)
			d.Detail += "; " + how
		}
		c.diffs = append(c.diffs, d)
	}
	c.compareBreakdown()
	if len(c.sw.Partitions) == 0 {
		return
	}
	wantByPartition := c.bw.ByPartition
	gotByPartition := make(map[int]int64)
	for _, p := range c.sw.Partitions {
		gotByPartition[p.Partition] += p.Count
	}
	for _, p := range slices.Sorted(maps.Keys(gotByPartition)) {
		if n := gotByPartition[p]; p < 0 || p >= len(wantByPartition) {
			c.diffs = append(c.diffs, Difference{
				WindowID: c.id, Kind: KindPartitionMismatch, Partition: &p,
				Detail: fmt.Sprintf("stream partition %d (count %d) is outside the batch's %d partitions", p, n, len(wantByPartition)),
			})
		}
	}
	for p, n := range wantByPartition {
		if gotByPartition[p] != n {
			c.diffs = append(c.diffs, Difference{
				WindowID: c.id, Kind: KindPartitionMismatch, Partition: &p,
				Detail: fmt.Sprintf("partition %d: stream count %d, batch count %d", p, gotByPartition[p], n),
			})
		}
	}
}

// compareBreakdown compares the window's breakdown by store with the
// batch's own: one difference naming what differs first (the totals, the
// number of stores, a store's line, the other stores' sum).
func (c *comparison) compareBreakdown() {
	want := wire.NewBreakdown(c.bw.Stores)
	got := c.sw.Breakdown
	detail := ""
	show := func(st wire.StoreTotal) string {
		name := st.Store
		if name == wire.UnknownStore {
			name = "(unknown)"
		}
		return fmt.Sprintf("%s: %d submissions, %d cents, %d unpriced", name, st.Count, st.AmountCents, st.Unpriced)
	}
	switch {
	case got.AmountCents != want.AmountCents:
		detail = fmt.Sprintf("stream amount_cents %d, the batch summed %d", got.AmountCents, want.AmountCents)
	case got.Unpriced != want.Unpriced:
		detail = fmt.Sprintf("stream unpriced %d, the batch counted %d submissions without an amount", got.Unpriced, want.Unpriced)
	case got.StoreCount != want.StoreCount:
		detail = fmt.Sprintf("stream store_count %d, the batch counted submissions of %d stores", got.StoreCount, want.StoreCount)
	case len(got.ByStore) != len(want.ByStore):
		detail = fmt.Sprintf("stream lists %d stores, the batch's top %d lists %d", len(got.ByStore), wire.TopStores, len(want.ByStore))
	case got.OtherStores != want.OtherStores:
		detail = fmt.Sprintf("stream other stores (%s), the batch (%s)", show(got.OtherStores), show(want.OtherStores))
	default:
		for i := range want.ByStore {
			if got.ByStore[i] != want.ByStore[i] {
				detail = fmt.Sprintf("store %d of the breakdown: stream (%s), batch (%s)", i+1, show(got.ByStore[i]), show(want.ByStore[i]))
				break
			}
		}
	}
	if detail != "" {
		c.diffs = append(c.diffs, Difference{WindowID: c.id, Kind: KindBreakdownMismatch, Detail: detail})
	}
}

// findOne returns the one event id (counted by one side only, or counted
// once more by the stream) that makes digest got differ from want, or "".
func (c *comparison) findOne(got, want digest.Digest) (id, how string) {
	for _, eid := range c.bw.IDs {
		d := want
		d.Remove(eid)
		if d == got {
			return eid, "the batch counted " + eid + ", the stream did not"
		}
	}
	cands := slices.Clone(c.bw.IDs)
	for _, v := range c.bw.Late {
		cands = append(cands, v.EventID)
	}
	for _, v := range c.batchLate {
		cands = append(cands, v.EventID)
	}
	for _, dup := range c.bw.Duplicates {
		cands = append(cands, dup.EventID)
	}
	for _, eid := range cands {
		d := want
		d.Add(eid)
		if d == got {
			if _, counted := c.b.CountedIn(eid); counted {
				return eid, "the stream counted " + eid + " once more than the batch (twice)"
			}
			return eid, "the stream counted " + eid + ", " + c.b.describe(eid)
		}
	}
	return "", ""
}

func (c *comparison) lineOf(eid string) int {
	if cl, ok := c.b.claims.get(eid); ok {
		return cl.line
	}
	return 0
}

func lateDiff(wid string, r LateRow) Difference {
	wm := r.Watermark.UTC()
	p := r.Partition
	return Difference{WindowID: wid, EventID: r.EventID, Watermark: &wm, Partition: &p, Seq: r.Seq}
}

// parseDigest reads a snapshot digest; an empty one is the empty set.
func parseDigest(s string) (digest.Digest, error) {
	if s == "" {
		return digest.Digest{}, nil
	}
	return digest.Parse(s)
}

func moreOrFewer(n int64) string {
	if n > 0 {
		return fmt.Sprintf("%d more", n)
	}
	return fmt.Sprintf("%d fewer", -n)
}
