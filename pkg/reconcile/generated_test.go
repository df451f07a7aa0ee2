package reconcile_test

import (
	"bytes"
	"maps"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/reconcile"
	"github.com/receiptflow/receiptflow/pkg/traffic"
)

// TestGeneratedParity runs generated traffic with every fault through the
// batch pass and the reference stream model: the batch counts exactly what
// the generator says it wrote and judges exactly its after-grace events too
// late, the stream routes exactly those to LATE (for any partition count),
// and parity holds.
func TestGeneratedParity(t *testing.T) {
	o := traffic.DefaultConfig()
	o.Seed, o.Events, o.Hours = 42, 20000, 12
	o.LateRate, o.InvalidRate = 0.02, 0.02
	var buf bytes.Buffer
	st, err := traffic.Write(&buf, o)
	if err != nil {
		t.Fatal(err)
	}
	b, err := reconcile.Count(bytes.NewReader(buf.Bytes()), reconcile.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if b.Records != st.Records || b.Counted != st.Submissions || b.InWindows != st.Submissions-st.LateAfterGrace || len(b.Late) != st.LateAfterGrace || b.Other != st.Other ||
		b.DuplicateCount != st.Duplicates || len(b.Rejected) != st.InvalidTotal() {
		t.Fatalf("batch records %d counted %d other %d duplicates %d rejected %d; generated %+v",
			b.Records, b.Counted, b.Other, b.DuplicateCount, len(b.Rejected), st)
	}
	byReason := b.RejectedByReason()
	if !maps.Equal(byReason, st.Invalid) {
		t.Fatalf("rejected by reason %v, generated %v", byReason, st.Invalid)
	}
	if len(byReason) != 9 {
		t.Fatalf("only %d rejection reasons generated: %v", len(byReason), byReason)
	}
	got, gotLate := map[string]int{}, map[string]int{}
	for id, w := range b.Windows {
		got[id] = int(w.Count + w.LateDropped)
		if w.LateDropped > 0 {
			gotLate[id] = int(w.LateDropped)
		}
	}
	if !maps.Equal(got, st.SubmissionsByWindow) {
		t.Fatalf("batch windows %v, generated %v", got, st.SubmissionsByWindow)
	}
	if !maps.Equal(gotLate, st.LateAfterGraceByWindow) {
		t.Fatalf("batch too late by window %v, generated %v", gotLate, st.LateAfterGraceByWindow)
	}

	for _, partitions := range []int{1, 3, 8} {
		res := runStream(t, buf.Bytes(), partitions, time.Time{})
		lateBy := map[string]int{}
		for _, l := range res.late {
			lateBy[l.WindowID]++
		}
		if len(res.late) != st.LateAfterGrace || !maps.Equal(lateBy, st.LateAfterGraceByWindow) {
			t.Errorf("P=%d: %d LATE rows by window %v, generated %d: %v",
				partitions, len(res.late), lateBy, st.LateAfterGrace, st.LateAfterGraceByWindow)
		}
		var corrections, counted int64
		for _, w := range res.windows {
			corrections += w.Corrections
			counted += w.Count
		}
		if counted != int64(st.Submissions-st.LateAfterGrace) {
			t.Errorf("P=%d: stream counted %d, want %d", partitions, counted, st.Submissions-st.LateAfterGrace)
		}
		if corrections == 0 {
			t.Errorf("P=%d: no corrections in generated traffic", partitions)
		}
		conflicts := 0
		for _, r := range res.rejected {
			if r.Reason == contract.ReasonConflictingDuplicate {
				conflicts++
			}
		}
		if conflicts != st.Invalid[contract.ReasonConflictingDuplicate] {
			t.Errorf("P=%d: stream rejected %d conflicts, generated %d", partitions, conflicts, st.Invalid[contract.ReasonConflictingDuplicate])
		}

		pb, err := reconcile.Count(bytes.NewReader(buf.Bytes()), reconcile.Config{Partitions: partitions})
		if err != nil {
			t.Fatal(err)
		}
		rep := reconcile.Compare(pb, res.windows, res.late)
		if !rep.Holds {
			t.Fatalf("P=%d: parity fails: %+v", partitions, rep.Unexplained[:min(5, len(rep.Unexplained))])
		}
		if rep.Summary.LateAfterGrace != st.LateAfterGrace {
			t.Errorf("P=%d: %d explained late differences, want %d", partitions, rep.Summary.LateAfterGrace, st.LateAfterGrace)
		}
	}
}
