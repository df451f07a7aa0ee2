package reconcile

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/digest"
	"github.com/receiptflow/receiptflow/pkg/snapshot"
	"github.com/receiptflow/receiptflow/pkg/window"
)

// Verdict is the outcome of comparing one window.
type Verdict string

// The verdicts of a WindowReport.
const (
	// VerdictMatch: the stream window equals the batch window exactly.
	VerdictMatch Verdict = "match"
	// VerdictExplained: the windows differ, and every difference is an
	// event the stream routed to LATE after grace.
	VerdictExplained Verdict = "explained"
	// VerdictUnexplained: at least one difference has no explanation.
	VerdictUnexplained Verdict = "unexplained"
	// VerdictProvisional: the stream window is not final yet and was not
	// compared.
	VerdictProvisional Verdict = "provisional"
)

// DiffKind names a kind of difference between the batch and the stream.
type DiffKind string

// The kinds of Difference. Only KindLateAfterGrace is an explanation; every
// other kind is unexplained.
const (
	// KindLateAfterGrace: the batch counted the event, the stream routed it
	// to LATE after grace (explained).
	KindLateAfterGrace DiffKind = "late_after_grace"
	// KindLateNotInBatch: the stream routed an event to LATE for a window
	// the batch did not count it in.
	KindLateNotInBatch DiffKind = "late_not_in_batch"
	// KindCountMismatch: the stream count is not the batch count minus the
	// late events.
	KindCountMismatch DiffKind = "count_mismatch"
	// KindDigestMismatch: the stream counted a different set of event ids
	// than the batch minus the late events.
	KindDigestMismatch DiffKind = "digest_mismatch"
	// KindLateDroppedMismatch: the window's late_dropped is not the number
	// of distinct late events of the window.
	KindLateDroppedMismatch DiffKind = "late_dropped_mismatch"
	// KindPartitionMismatch: a partition's partial count is not the batch's
	// count of that partition minus its late events.
	KindPartitionMismatch DiffKind = "partition_mismatch"
	// KindMissingInStream: the batch counted the event in a window the
	// stream never published.
	KindMissingInStream DiffKind = "missing_in_stream"
)

// Difference is one difference between the batch and the stream.
type Difference struct {
	WindowID string `json:"window_id"`
	// EventID is set for differences about one event.
	EventID   string   `json:"event_id,omitempty"`
	Kind      DiffKind `json:"kind"`
	Explained bool     `json:"explained"`
	Detail    string   `json:"detail"`
	// Line is the input line where the batch counted EventID, if it did.
	Line int `json:"line,omitempty"`
	// Watermark, Partition and Seq come from the LATE row of EventID.
	Watermark *time.Time `json:"watermark,omitempty"`
	Partition *int       `json:"partition,omitempty"`
	Seq       uint64     `json:"seq,omitempty"`
}

// WindowReport is the comparison of one window.
type WindowReport struct {
	WindowID string  `json:"window_id"`
	Verdict  Verdict `json:"verdict"`
	// StreamStatus is the stream window's status, empty when the stream
	// has no such window.
	StreamStatus window.Status `json:"stream_status,omitempty"`
	// BatchCount is what the batch counted; Late the distinct event ids of
	// the window the stream routed to LATE; ExpectedCount and
	// ExpectedDigest describe the batch's ids minus the late ones, which is
	// what the stream must hold.
	BatchCount     int64  `json:"batch_count"`
	Late           int64  `json:"late"`
	ExpectedCount  int64  `json:"expected_count"`
	ExpectedDigest string `json:"expected_digest"`
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
	// LateAfterGrace is the number of differences explained by LATE.
	LateAfterGrace int `json:"late_after_grace"`
	// UnexplainedDifferences is len(Report.Unexplained).
	UnexplainedDifferences int `json:"unexplained_differences"`
	// Batch totals.
	Records    int                     `json:"records"`
	Valid      int                     `json:"valid"`
	Counted    int                     `json:"counted"`
	Other      int                     `json:"other"`
	Duplicates int                     `json:"duplicates"`
	Rejected   int                     `json:"rejected"`
	ByReason   map[contract.Reason]int `json:"rejected_by_reason"`
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

// Compare compares the batch with the stream's windows and late rows (SPEC
// section 8). For every final stream window, with B the event ids the batch
// counted in it and L the distinct ids of its late rows: every id of L must
// be in B, the window's late_dropped must be |L|, and its count and digest
// must be those of B \ L. Batch windows the stream lacks are unexplained
// unless every batch id of them is late; non-final stream windows are
// listed as provisional and not compared. Compare does not modify its
// arguments.
func Compare(b *Batch, windows []snapshot.Window, late []LateRow) *Report {
	stream := make(map[string]*snapshot.Window, len(windows))
	ids := make(map[string]bool)
	for i := range windows {
		stream[windows[i].WindowID] = &windows[i]
		ids[windows[i].WindowID] = true
	}
	lateIn := make(map[string]map[string]LateRow)
	lateOrder := make(map[string][]string)
	for _, r := range late {
		m := lateIn[r.WindowID]
		if m == nil {
			m = make(map[string]LateRow)
			lateIn[r.WindowID] = m
		}
		if _, dup := m[r.EventID]; dup {
			continue
		}
		m[r.EventID] = r
		lateOrder[r.WindowID] = append(lateOrder[r.WindowID], r.EventID)
		ids[r.WindowID] = true
	}
	for id := range b.Windows {
		ids[id] = true
	}
	sorted := make([]string, 0, len(ids))
	for id := range ids {
		sorted = append(sorted, id)
	}
	slices.Sort(sorted)

	rep := &Report{Windows: []WindowReport{}, Unexplained: []Difference{}, RejectedElsewhere: []Rejection{}}
	for _, id := range sorted {
		c := comparison{b: b, id: id, bw: b.Windows[id], sw: stream[id],
			late: lateIn[id], lateOrder: lateOrder[id]}
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
	s.Duplicates, s.Rejected, s.ByReason = b.DuplicateCount, len(b.Rejected), b.RejectedByReason()
	rep.Holds = len(rep.Unexplained) == 0
	return rep
}

// comparison compares one window.
type comparison struct {
	b         *Batch
	id        string
	bw        *WindowCount
	sw        *snapshot.Window
	late      map[string]LateRow
	lateOrder []string
	diffs     []Difference
	// afterGrace counts the late rows that late_dropped must count (all
	// but those of a retired window).
	afterGrace int64
	// retired are late rows with reason retired for ids the batch counted.
	retired []LateRow
}

func (c *comparison) run() WindowReport {
	wr := WindowReport{
		WindowID:    c.id,
		Duplicates:  []Duplicate{},
		Rejected:    c.b.RejectedIn(c.id),
		Differences: []Difference{},
	}
	var batchIDs []string
	var want digest.Digest
	if c.bw != nil {
		batchIDs = c.bw.IDs
		wr.BatchCount = c.bw.Count
		want = c.bw.Digest
		wr.Duplicates = append(wr.Duplicates, c.bw.Duplicates...)
	}
	inBatch := make(map[string]int, len(batchIDs))
	for i, id := range batchIDs {
		inBatch[id] = i
	}
	wr.Late = int64(len(c.lateOrder))

	// Late events: explained when the batch counted them here.
	wantByPartition := make([]int64, c.b.Partitions)
	if c.bw != nil {
		copy(wantByPartition, c.bw.ByPartition)
	}
	lateInBatch := 0
	for _, eid := range c.lateOrder {
		r := c.late[eid]
		if r.Reason != ReasonRetired {
			c.afterGrace++
		}
		d := lateDiff(c.id, r)
		if _, ok := inBatch[eid]; ok && r.Reason == ReasonRetired {
			// Dropped past the replay horizon: the stream may have counted
			// an earlier record of the id before its window was retired, so
			// whether it is missing is settled by the count and digest.
			c.retired = append(c.retired, r)
			continue
		}
		if _, ok := inBatch[eid]; ok {
			lateInBatch++
			want.Remove(eid)
			if r.Partition >= 0 && r.Partition < len(wantByPartition) {
				wantByPartition[r.Partition]--
			}
			d.Kind, d.Explained = KindLateAfterGrace, true
			d.Line = c.lineOf(eid)
			d.Detail = "counted by the batch; routed to LATE after grace by the stream"
		} else {
			d.Kind = KindLateNotInBatch
			d.Detail = "routed to LATE for this window, but " + c.b.describe(eid)
		}
		c.diffs = append(c.diffs, d)
	}
	wr.ExpectedCount = wr.BatchCount - int64(lateInBatch)
	if c.sw != nil && c.sw.Status == window.StatusFinal && len(c.retired) > 0 {
		want = c.settleRetired(want, wantByPartition, &wr)
	}
	wr.ExpectedDigest = want.String()

	switch {
	case c.sw == nil:
		c.missingInStream(batchIDs)
	case c.sw.Status != window.StatusFinal:
		wr.StreamStatus = c.sw.Status
		c.fillStream(&wr)
		wr.Verdict = VerdictProvisional
		// A provisional window is not compared: its differences are not
		// differences yet.
		wr.Differences = []Difference{}
		return wr
	default:
		wr.StreamStatus = c.sw.Status
		c.fillStream(&wr)
		c.compareFinal(&wr, want, wantByPartition)
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

// missingInStream handles a window the batch (or a late row) has and the
// stream never published: explained only if every batch id is late.
func (c *comparison) missingInStream(batchIDs []string) {
	for _, eid := range batchIDs {
		if _, ok := c.late[eid]; ok {
			continue
		}
		c.diffs = append(c.diffs, Difference{
			WindowID: c.id, EventID: eid, Kind: KindMissingInStream, Line: c.lineOf(eid),
			Detail: "counted by the batch in a window the stream never published",
		})
	}
}

func (c *comparison) compareFinal(wr *WindowReport, want digest.Digest, wantByPartition []int64) {
	if c.sw.LateDropped != c.afterGrace {
		c.diffs = append(c.diffs, Difference{
			WindowID: c.id, Kind: KindLateDroppedMismatch,
			Detail: fmt.Sprintf("late_dropped is %d, but %d distinct event ids of the window are in LATE after grace",
				c.sw.LateDropped, c.afterGrace),
		})
	}
	if c.sw.Count != wr.ExpectedCount {
		c.diffs = append(c.diffs, Difference{
			WindowID: c.id, Kind: KindCountMismatch,
			Detail: fmt.Sprintf("stream count %d, expected %d (batch %d − late %d): the stream has %s",
				c.sw.Count, wr.ExpectedCount, wr.BatchCount, wr.BatchCount-wr.ExpectedCount,
				moreOrFewer(c.sw.Count-wr.ExpectedCount)),
		})
	}
	got, err := parseDigest(c.sw.Digest)
	switch {
	case err != nil:
		c.diffs = append(c.diffs, Difference{
			WindowID: c.id, Kind: KindDigestMismatch,
			Detail: fmt.Sprintf("stream digest unreadable: %v", err),
		})
	case got != want:
		detail := fmt.Sprintf("stream digest %s, expected %s: the stream counted other event ids", got, want)
		if c.sw.Count == wr.ExpectedCount {
			detail = fmt.Sprintf("stream digest %s, expected %s: same count but other event ids (differences that cancel out in the count)", got, want)
		}
		c.diffs = append(c.diffs, Difference{WindowID: c.id, Kind: KindDigestMismatch, Detail: detail})
	}
	if len(c.sw.Partitions) == 0 {
		return
	}
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
				Detail: fmt.Sprintf("partition %d: stream count %d, expected %d", p, gotByPartition[p], n),
			})
		}
	}
}

func (c *comparison) lineOf(eid string) int {
	if cl, ok := c.b.claims[eid]; ok {
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

// maxRetiredCombinations bounds the search of settleRetired.
const maxRetiredCombinations = 200000

// settleRetired decides which ids dropped past the replay horizon the stream
// never counted: the count difference says how many, the digest which ones
// (searching the subsets of that size, within maxRetiredCombinations). Found
// ids are explained differences, removed from want; the other retired rows
// were retries of ids counted before their window was retired.
func (c *comparison) settleRetired(want digest.Digest, wantByPartition []int64, wr *WindowReport) digest.Digest {
	k := int(wr.ExpectedCount - c.sw.Count)
	got, err := parseDigest(c.sw.Digest)
	if err != nil || k < 0 || k > len(c.retired) {
		return want
	}
	var found []int
	pick := make([]int, 0, k)
	tries := 0
	var search func(from int, d digest.Digest) bool
	search = func(from int, d digest.Digest) bool {
		if len(pick) == k {
			tries++
			if d == got {
				found = append([]int(nil), pick...)
				return true
			}
			return false
		}
		for i := from; i < len(c.retired) && tries < maxRetiredCombinations; i++ {
			nd := d
			nd.Remove(c.retired[i].EventID)
			pick = append(pick, i)
			if search(i+1, nd) {
				return true
			}
			pick = pick[:len(pick)-1]
		}
		return false
	}
	if !search(0, want) {
		return want
	}
	chosen := map[int]bool{}
	for _, i := range found {
		chosen[i] = true
		r := c.retired[i]
		want.Remove(r.EventID)
		if r.Partition >= 0 && r.Partition < len(wantByPartition) {
			wantByPartition[r.Partition]--
		}
		d := lateDiff(c.id, r)
		d.Kind, d.Explained, d.Line = KindLateAfterGrace, true, c.lineOf(r.EventID)
		d.Detail = "counted by the batch; dropped by the stream because its window was past the replay horizon (retired)"
		c.diffs = append(c.diffs, d)
	}
	wr.ExpectedCount -= int64(len(found))
	return want
}
