package demo

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/contract"
)

// recorder is a Sink that keeps every line, or fails with fail when set.
type recorder struct {
	mu    sync.Mutex
	lines [][]byte
	fail  error
}

func (r *recorder) Publish(_ context.Context, line []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return r.fail
	}
	r.lines = append(r.lines, slices.Clone(line))
	return nil
}

func (r *recorder) snapshot() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.lines)
}

var fixedNow = time.Date(2026, 12, 3, 10, 30, 0, 0, time.UTC)

const backfillLines = 180 // one hour of backfill, one line every 20s

// injected is what the feed sent on the tick of one case: the tick's own
// submission, then the case's lines.
type injected struct {
	tick  []byte
	lines [][]byte
}

// runCases runs the feed with a one-hour backfill and a case on every tick
// until every seed case has been injected once; it returns every line and
// what each case's tick sent.
func runCases(t *testing.T, seed uint64) ([][]byte, map[string]injected) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := &recorder{}
	perCase := map[string]injected{}
	mark := backfillLines
	var order []string
	err := Run(ctx, rec, Config{
		Backfill: time.Hour, Every: time.Millisecond, CaseEvery: time.Nanosecond, IdleEvery: -1,
		Seed: seed, Now: func() time.Time { return fixedNow },
		OnCase: func(name string) {
			lines := rec.snapshot()
			perCase[name] = injected{tick: lines[mark], lines: lines[mark+1:]}
			mark = len(lines)
			order = append(order, name)
			if len(order) == len(Cases) {
				cancel()
			}
		},
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !slices.Equal(order, Cases) {
		t.Fatalf("cases injected %v, want %v", order, Cases)
	}
	return rec.snapshot(), perCase
}

// TestFeedBackfillAndCases: the backfill is one valid submission every 20s
// of event time over the backfill period, in event-time order; then each
// seed case sends what its name promises, and the validator gives the
// reason docs/spec.md §2 names for it.
func TestFeedBackfillAndCases(t *testing.T) {
	v, err := contract.NewValidator(contract.Config{})
	if err != nil {
		t.Fatal(err)
	}
	lines, perCase := runCases(t, 7)
	var prev time.Time
	for i, l := range lines[:backfillLines] {
		ev, err := v.Validate(l, fixedNow)
		if err != nil {
			t.Fatalf("backfill line %d rejected: %v\n%s", i, err, l)
		}
		if ev.Type != contract.TypeSubmitted {
			t.Fatalf("backfill line %d has type %s", i, ev.Type)
		}
		if want := fixedNow.Add(-time.Hour + time.Duration(i)*20*time.Second); !ev.OccurredAt.Equal(want) {
			t.Fatalf("backfill line %d occurred at %s, want %s", i, ev.OccurredAt, want)
		}
		if !prev.IsZero() && !ev.OccurredAt.After(prev) {
			t.Fatalf("backfill out of order at line %d", i)
		}
		prev = ev.OccurredAt
	}

	reason := func(l []byte) contract.Reason {
		_, err := v.Validate(l, fixedNow)
		var re *contract.RejectError
		if errors.As(err, &re) {
			return re.Reason
		}
		if err != nil {
			t.Fatalf("non-contract error %v", err)
		}
		return ""
	}
	one := func(name string) []byte {
		t.Helper()
		if n := len(perCase[name].lines); n != 1 {
			t.Fatalf("case %s sent %d lines, want 1", name, n)
		}
		return perCase[name].lines[0]
	}
	occurred := func(l []byte) time.Time {
		t.Helper()
		ev, err := v.Validate(l, fixedNow)
		if err != nil {
			t.Fatalf("%s: %v", l, err)
		}
		return ev.OccurredAt
	}

	// retry repeats the line before it byte for byte.
	if got, want := one("retry"), perCase["retry"].tick; string(got) != string(want) {
		t.Errorf("retry sent %s, not the line before it %s", got, want)
	}
	if got := occurred(one("out_of_order")); !got.Equal(fixedNow.Add(-3 * time.Minute)) {
		t.Errorf("out_of_order occurred at %s", got)
	}
	if got := occurred(one("correction")); !got.Equal(time.Date(2026, 12, 3, 9, 50, 0, 0, time.UTC)) {
		t.Errorf("correction occurred at %s, want 10 minutes before this hour", got)
	}
	if got := occurred(one("too_late")); !got.Equal(fixedNow.Add(-150 * time.Minute)) {
		t.Errorf("too_late occurred at %s", got)
	}
	if r := reason(one("unsupported_schema")); r != contract.ReasonUnsupportedSchema {
		t.Errorf("unsupported_schema case rejected as %q", r)
	}
	if r := reason(one("malformed_json")); r != contract.ReasonMalformedJSON {
		t.Errorf("malformed_json case rejected as %q", r)
	}
	v1, err := v.Validate(one("v1_event"), fixedNow)
	if err != nil || v1.SchemaVersion != 1 {
		t.Errorf("v1_event: %+v, %v", v1, err)
	}
	other := perCase["other_types"].lines
	if len(other) != 2 {
		t.Fatalf("other_types sent %d lines, want 2", len(other))
	}
	for i, want := range []string{contract.TypeDraftSaved, contract.TypeViewed} {
		if ev, err := v.Validate(other[i], fixedNow); err != nil || ev.Type != want {
			t.Errorf("other_types line %d: type %q, %v; want %s", i, ev.Type, err, want)
		}
	}
	// conflicting_duplicate reuses the event id of the line before it with
	// a changed receipt id.
	dup, err := v.Validate(one("conflicting_duplicate"), fixedNow)
	if err != nil {
		t.Fatal(err)
	}
	before, err := v.Validate(perCase["conflicting_duplicate"].tick, fixedNow)
	if err != nil || before.EventID != dup.EventID || dup.ReceiptID != before.ReceiptID+"-changed" {
		t.Errorf("conflicting_duplicate %s/%s after %s/%s (%v)", dup.EventID, dup.ReceiptID, before.EventID, before.ReceiptID, err)
	}
}

// TestFeedIsSeeded: the same seed gives the same backfill; another seed
// gives other event ids.
func TestFeedIsSeeded(t *testing.T) {
	a, _ := runCases(t, 1)
	b, _ := runCases(t, 1)
	c, _ := runCases(t, 2)
	for i := range backfillLines {
		if string(a[i]) != string(b[i]) {
			t.Fatalf("seed 1 gave two backfills; line %d:\n%s\n%s", i, a[i], b[i])
		}
		if string(a[i]) == string(c[i]) {
			t.Fatalf("seeds 1 and 2 gave the same line %d: %s", i, a[i])
		}
	}
}

// TestFeedStopsOnSinkError: a sink error ends the feed with that error.
func TestFeedStopsOnSinkError(t *testing.T) {
	boom := errors.New("sink down")
	rec := &recorder{fail: boom}
	err := Run(context.Background(), rec, Config{Backfill: time.Hour, IdleEvery: -1, Now: func() time.Time { return fixedNow }})
	if !errors.Is(err, boom) {
		t.Fatalf("Run = %v, want the sink's error", err)
	}
}

// TestFeedSendsNothingAfterItsEnd: once ctx ends the feed sends nothing
// more, even when its ticker is ready at the same moment (select picks
// either; CI once saw a tenth case after the test had cancelled on the
// ninth).
func TestFeedSendsNothingAfterItsEnd(t *testing.T) {
	for range 20 {
		ctx, cancel := context.WithCancel(context.Background())
		rec := &recorder{}
		var cases []string
		err := Run(ctx, rec, Config{
			Backfill: time.Minute, Every: time.Nanosecond, CaseEvery: time.Nanosecond, IdleEvery: -1,
			Seed: 1, Now: func() time.Time { return fixedNow },
			OnCase: func(name string) {
				cases = append(cases, name)
				cancel()
			},
		})
		cancel()
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		if len(cases) != 1 {
			t.Fatalf("cases injected after the end: %v", cases)
		}
	}
}
