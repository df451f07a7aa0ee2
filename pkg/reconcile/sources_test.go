package reconcile_test

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/reconcile"
	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// This file holds the batch pass to docs/spec.md §3.1, the watermark of a
// partition written by several sources, on RAW snapshots built record by
// record: with one source the rule is §3's (a model of it below), with
// several an in-order source is never made late by another, and a referee
// fed a stream that applied the one-source rule to them fails.

const (
	srcLateness = int64(window.DefaultLateness / time.Millisecond)
	srcGrace    = int64(window.DefaultGrace / time.Millisecond)
)

// hm is 2026-12-02 at hh:mm UTC.
func hm(s string) time.Time {
	t, err := time.Parse("2006-01-02 15:04", "2026-12-02 "+s)
	if err != nil {
		panic(err)
	}
	return t
}

// eventLine is a valid event record: id, type, store and event time.
func eventLine(id, typ, store string, at time.Time) []byte {
	ts := at.UTC().Format(time.RFC3339Nano)
	return fmt.Appendf(nil, `{"schema_version":2,"event_id":%q,"receipt_id":"r","type":%q,"occurred_at":%q,"ingested_at":%q,"partition_key":%q,"producer_version":"t"}`,
		id, typ, ts, ts, store)
}

// rawFeed builds a RAW snapshot: each message gets the next sequence and
// the feed's broker time, which moves on by a millisecond per message
// and by wait.
type rawFeed struct {
	recs []reconcile.Record
	at   time.Time
}

func newFeed(at time.Time) *rawFeed { return &rawFeed{at: at} }

func (f *rawFeed) add(r reconcile.Record) {
	f.at = f.at.Add(time.Millisecond)
	r.Seq, r.Received = uint64(len(f.recs)+1), f.at
	f.recs = append(f.recs, r)
}

func (f *rawFeed) wait(d time.Duration) { f.at = f.at.Add(d) }

// event adds a record of source src.
func (f *rawFeed) event(src string, data []byte) {
	f.add(reconcile.Record{Source: src, Data: data})
}

// beat adds a heartbeat of source src with progress at to partition p.
func (f *rawFeed) beat(src string, p int, at time.Time, leave bool) {
	f.add(reconcile.Record{Source: src, Heartbeat: true, Partition: p, Progress: window.Ms(at), Leave: leave})
}

// beatAll adds a heartbeat to every one of n partitions.
func (f *rawFeed) beatAll(src string, n int, at time.Time, leave bool) {
	for p := range n {
		f.beat(src, p, at, leave)
	}
}

// eos adds the end-of-stream heartbeat of source src to every partition.
func (f *rawFeed) eos(src string, n int) {
	for p := range n {
		f.add(reconcile.Record{Source: src, Heartbeat: true, Partition: p, Progress: window.EndOfStream, Leave: true})
	}
}

// legacy is recs as RAW written before sources: no ids, no leave.
func legacy(recs []reconcile.Record) []reconcile.Record {
	out := slices.Clone(recs)
	for i := range out {
		out[i].Source, out[i].Leave = wire.SourceLegacy, false
	}
	return out
}

func addAll(t *testing.T, opts reconcile.Config, recs []reconcile.Record) *reconcile.Batch {
	t.Helper()
	b, err := reconcile.NewBatch(opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if err := b.AddRecord(r); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// clockOf formats a watermark or progress (ms) as hh:mm, EOS as "eos".
func clockOf(ms int64) string {
	if ms >= window.EndOfStream-srcLateness {
		return "eos"
	}
	return window.Time(ms).Format("15:04")
}

// sourcesOf describes the sources of partition p: "id=hh:mm" each, with
// "(idle)" after those not live.
func sourcesOf(b *reconcile.Batch, p int) string {
	var out []string
	for _, s := range b.Sources(p) {
		d := s.ID + "=" + clockOf(s.Progress)
		if !s.Live {
			d += "(idle)"
		}
		out = append(out, d)
	}
	return strings.Join(out, " ")
}

// oldRule is the one-source rule of docs/spec.md §3, as the batch pass
// applied it before sources: per partition W_p and whether the partition
// got an event since its last heartbeat. It keeps W after every message
// and its verdict on every new submission (too late and retired ones with
// the watermark they were judged against).
type oldRule struct {
	v        *contract.Validator
	horizon  int64
	wm       []int64
	busy     []bool
	claims   map[string]uint64
	verdicts map[string]string
}

func newOldRule(t *testing.T, partitions int, horizon time.Duration) *oldRule {
	v, err := contract.NewValidator(contract.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return &oldRule{v: v, horizon: horizon.Milliseconds(), wm: make([]int64, partitions), busy: make([]bool, partitions),
		claims: map[string]uint64{}, verdicts: map[string]string{}}
}

func (m *oldRule) add(r reconcile.Record) {
	if r.Heartbeat {
		if p := r.Partition; p >= 0 && p < len(m.wm) {
			if !m.busy[p] || r.Progress >= window.EndOfStream {
				m.wm[p] = window.Advance(m.wm[p], r.Progress, srcLateness)
			}
			m.busy[p] = false
		}
		return
	}
	if r.Size > len(r.Data) {
		return
	}
	ev, err := m.v.Validate(r.Data, r.Received)
	if err != nil {
		return
	}
	p, ms := window.Partition(ev.PartitionKey, len(m.wm)), window.Ms(ev.OccurredAt)
	wp := m.wm[p]
	if fp, ok := m.claims[ev.EventID]; ok {
		if fp == ev.Fingerprint { // a retry; a conflicting copy is rejected
			m.wm[p] = window.Advance(wp, ms, srcLateness)
			m.busy[p] = m.busy[p] || !ev.Counts()
		}
		return
	}
	m.claims[ev.EventID] = ev.Fingerprint
	m.wm[p] = window.Advance(wp, ms, srcLateness)
	if !ev.Counts() {
		m.busy[p] = true
		return
	}
	end := window.StartMs(ms) + window.WidthMs
	if m.horizon > 0 && wp >= end+srcGrace+m.horizon {
		m.verdicts[ev.EventID] = fmt.Sprintf("retired@%d", wp)
		return
	}
	m.busy[p] = true
	m.verdicts[ev.EventID] = window.Classify(wp, end, srcGrace).String()
	if m.verdicts[ev.EventID] == window.TooLate.String() {
		m.verdicts[ev.EventID] += fmt.Sprintf("@%d", wp)
	}
}

// verdictsOf is what the batch made of each submission, in oldRule's
// terms.
func verdictsOf(b *reconcile.Batch) map[string]string {
	out := map[string]string{}
	for _, w := range b.Windows {
		for _, id := range w.IDs {
			out[id] = window.OnTime.String()
		}
		for _, id := range w.CorrectionIDs {
			out[id] = window.Correction.String()
		}
	}
	for _, l := range b.Late {
		class := "retired"
		if l.Reason == wire.ReasonAfterGrace {
			class = window.TooLate.String()
		}
		out[l.EventID] = fmt.Sprintf("%s@%d", class, window.Ms(l.Watermark))
	}
	return out
}

// randomSingleSource is a RAW snapshot of one source (the legacy one)
// over partitions: submissions and other events of six stores, in rough
// order with some far behind, retries, conflicting copies, invalid and
// cut records, heartbeats to one or every partition (a few out of
// range), an end of stream now and then, and broker time moving by
// milliseconds with pauses of up to half an hour (so the source is idle
// for a while), under a day in all.
func randomSingleSource(rng *rand.Rand, partitions, n int) []reconcile.Record {
	f := newFeed(hm("18:00"))
	front := hm("10:00")
	var sent [][]byte
	var progress time.Time
	types := []string{"submitted", "submitted", "submitted", "viewed", "draft_saved"}
	for i := range n {
		f.wait(time.Duration(rng.IntN(500)) * time.Millisecond)
		if rng.IntN(20) == 0 {
			f.wait(time.Duration(1+rng.IntN(30)) * time.Minute)
		}
		switch k := rng.IntN(100); {
		case k < 8 && len(sent) > 0:
			f.event("", sent[rng.IntN(len(sent))])
		case k < 10 && len(sent) > 0:
			f.event("", bytes.Replace(sent[rng.IntN(len(sent))], []byte(`"receipt_id":"r"`), []byte(`"receipt_id":"r2"`), 1))
		case k < 12:
			f.event("", []byte(`{"schema_version":2}`))
		case k < 14:
			line := eventLine(fmt.Sprintf("cut-%d", i), "submitted", "s0", front)
			f.add(reconcile.Record{Data: line[:20], Size: len(line)})
		case k < 22:
			if !progress.IsZero() {
				f.beat("", rng.IntN(partitions+1), progress, false)
			}
		case k < 25:
			if !progress.IsZero() {
				f.beatAll("", partitions, progress, false)
			}
		case k < 26 && i > n*9/10:
			f.eos("", partitions)
		default:
			front = front.Add(time.Duration(rng.IntN(90)) * time.Second)
			at := front
			if rng.IntN(7) == 0 {
				at = at.Add(-time.Duration(rng.IntN(240)) * time.Minute)
			}
			line := eventLine(fmt.Sprintf("e-%d", i), types[rng.IntN(len(types))], fmt.Sprintf("s%d", rng.IntN(6)), at)
			sent = append(sent, line)
			f.event("", line)
			if at.After(progress) {
				progress = at
			}
		}
	}
	return f.recs
}

// TestSourcesOneSourceIsTheOldRule: for random one-source RAW snapshots
// the rule of §3.1 gives the one-source rule's W_p after every message
// and its verdict on every submission.
func TestSourcesOneSourceIsTheOldRule(t *testing.T) {
	const partitions = 4
	seen := map[string]int{} // what the snapshots exercised, over all seeds
	for seed := range 200 {
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		recs := randomSingleSource(rng, partitions, 300)
		horizon := time.Duration(seed%2) * 30 * time.Minute
		b, err := reconcile.NewBatch(reconcile.Config{Partitions: partitions, Horizon: horizon, DefaultIngestedAt: hm("18:00")})
		if err != nil {
			t.Fatal(err)
		}
		m := newOldRule(t, partitions, horizon)
		for _, r := range recs {
			if err := b.AddRecord(r); err != nil {
				t.Fatal(err)
			}
			m.add(r)
			if got := b.Watermark(); !slices.Equal(got, m.wm) {
				t.Fatalf("seed %d, RAW seq %d: W %v, the one-source rule's %v", seed, r.Seq, got, m.wm)
			}
			for p := range partitions {
				if s := b.Sources(p); len(s) == 1 && !s[0].Live {
					seen["idle"]++
				}
			}
		}
		for _, v := range m.verdicts {
			seen[strings.Split(v, "@")[0]]++
		}
		seen["retry"] += b.DuplicateCount
		seen[string(contract.ReasonConflictingDuplicate)] += b.RejectedByReason()[contract.ReasonConflictingDuplicate]
		if got := verdictsOf(b); !maps.Equal(got, m.verdicts) {
			t.Fatalf("seed %d: verdicts %v, the one-source rule's %v", seed, got, m.verdicts)
		}
		for p := range partitions {
			if s := b.Sources(p); len(s) > 1 || len(s) == 1 && s[0].ID != wire.SourceLegacy {
				t.Fatalf("seed %d: partition %d has sources %+v", seed, p, s)
			}
		}
	}
	for _, k := range []string{"on_time", "correction", "too_late", "retired", "retry", "idle", string(contract.ReasonConflictingDuplicate)} {
		if seen[k] == 0 {
			t.Errorf("no snapshot exercised %s: %v", k, seen)
		}
	}
	t.Logf("exercised %v", seen)
}

// issueFeed is the issue's snapshot: source B sends store-b's 60
// submissions of 10:00–10:59 in order; after the 30th, source A sends
// 2,500 of store-a at 12:00–12:59 with a heartbeat to every partition
// after every 1,000; then B sends its last 30 and leaves.
func issueFeed(t *testing.T, partitions int) (*rawFeed, int) {
	t.Helper()
	pa, pb := window.Partition("store-a", partitions), window.Partition("store-b", partitions)
	if pa == pb {
		t.Fatal("store-a and store-b share a partition")
	}
	f := newFeed(hm("13:00"))
	b := func(from, to int) {
		for i := from; i < to; i++ {
			f.event("B", eventLine(fmt.Sprintf("b-%02d", i), "submitted", "store-b", hm("10:00").Add(time.Duration(i)*time.Minute)))
		}
	}
	b(0, 30)
	for i := range 2500 {
		at := hm("12:00").Add(time.Duration(i) * time.Hour / 2500)
		f.event("A", eventLine(fmt.Sprintf("a-%04d", i), "submitted", "store-a", at))
		if (i+1)%1000 == 0 {
			f.beatAll("A", partitions, at, false)
		}
	}
	b(30, 60)
	f.beatAll("B", partitions, hm("10:59"), true)
	return f, pb
}

// TestSourcesIssueScenario: B's in-order events all count under §3.1,
// where A's heartbeats made half of them late under the one-source rule;
// the end of stream then makes the window final with all 60.
func TestSourcesIssueScenario(t *testing.T) {
	const partitions, w10 = 8, "2026-12-02T10"
	f, pb := issueFeed(t, partitions)
	opts := reconcile.Config{Partitions: partitions, DefaultIngestedAt: hm("13:00")}
	end := window.Ms(hm("11:00"))

	b := addAll(t, opts, f.recs)
	if w := b.Windows[w10]; w == nil || w.Count != 60 || w.LateDropped != 0 || w.Corrections != 0 {
		t.Fatalf("window %s: %+v, want 60 counted, none late", w10, w)
	}
	if wp := b.Watermark()[pb]; wp != window.Ms(hm("10:54")) {
		t.Errorf("W of store-b's partition is %s, want 10:54", clockOf(wp))
	}
	if got := sourcesOf(b, pb); got != "A=12:47" {
		t.Errorf("store-b's partition knows %q after B left, want A only", got)
	}

	old := addAll(t, opts, legacy(f.recs))
	if w := old.Windows[w10]; w == nil || w.Count != 30 || w.LateDropped != 30 {
		t.Fatalf("one-source rule: window %s: %+v, want 30 counted, 30 late", w10, w)
	}

	f.eos("A", partitions)
	b = addAll(t, opts, f.recs)
	if wp := slices.Min(b.Watermark()); wp < end+srcGrace {
		t.Fatalf("after the end of stream W is %s, window %s is not final", clockOf(wp), w10)
	}
	if w := b.Windows[w10]; w.Count != 60 || w.LateDropped != 0 {
		t.Fatalf("final window %s: %+v, want 60 counted", w10, w)
	}
}

// TestSourcesIdleLeaveForget walks one partition through §3.1's life of
// a source: a quiet source stops holding W_p after --source-idle of
// broker time and holds it again once its progress grows; a leaving
// source is removed; one quiet for a day is forgotten and is new when it
// sends again; the end of stream closes whatever else is live.
func TestSourcesIdleLeaveForget(t *testing.T) {
	const store = "store-a"
	p := window.Partition(store, 8)
	type step struct {
		name string
		do   func(f *rawFeed)
		// w is W_p after the step (hh:mm or "eos"), sources Sources(p).
		w, sources string
	}
	n := 0
	ev := func(src, at string) func(f *rawFeed) {
		return func(f *rawFeed) {
			n++
			f.event(src, eventLine(fmt.Sprintf("%s-%d", src, n), "submitted", store, hm(at)))
		}
	}
	then := func(d time.Duration, do func(f *rawFeed)) func(f *rawFeed) {
		return func(f *rawFeed) { f.wait(d); do(f) }
	}
	steps := []step{
		{"X sends", ev("X", "10:00"), "09:55", "X=10:00"},
		{"Y sends", ev("Y", "10:10"), "09:55", "X=10:00 Y=10:10"},
		{"the slower source holds W", ev("X", "10:20"), "10:05", "X=10:20 Y=10:10"},
		// Y grew at 13:00:00.002; each message is a millisecond on.
		{"Y quiet, a millisecond short of idle", then(2*time.Minute-3*time.Millisecond, ev("X", "10:30")), "10:05", "X=10:30 Y=10:10"},
		{"Y idle after 2m of broker time", ev("X", "10:40"), "10:35", "X=10:40 Y=10:10(idle)"},
		{"Y grows again: live, holding W where it is", ev("Y", "10:15"), "10:35", "X=10:40 Y=10:15"},
		{"X cannot pass Y", ev("X", "10:55"), "10:35", "X=10:55 Y=10:15"},
		{"Y's heartbeat after an event does not count", func(f *rawFeed) { f.beat("Y", p, hm("10:50"), false) }, "10:35", "X=10:55 Y=10:15"},
		{"Y's next heartbeat counts", func(f *rawFeed) { f.beat("Y", p, hm("10:50"), false) }, "10:45", "X=10:55 Y=10:50"},
		{"Y leaves", func(f *rawFeed) { f.beat("Y", p, hm("10:52"), true) }, "10:47", "X=10:55"},
		{"W follows X alone", ev("X", "10:58"), "10:53", "X=10:58"},
		{"Y is new when it sends again", then(time.Hour, ev("Y", "10:59")), "10:54", "X=10:58(idle) Y=10:59"},
		{"X forgotten after a day without growing", then(23*time.Hour, ev("Y", "11:00")), "10:55", "Y=11:00"},
		{"X is new when it sends again", func(f *rawFeed) { f.beat("X", p, hm("10:58"), false) }, "10:55", "Y=11:00 X=10:58"},
		{"the end of stream closes what is live", func(f *rawFeed) {
			f.add(reconcile.Record{Source: "X", Heartbeat: true, Partition: p, Progress: window.EndOfStream})
		}, "eos", "Y=11:00 X=eos"},
	}
	f := newFeed(hm("13:00"))
	b, err := reconcile.NewBatch(reconcile.Config{DefaultIngestedAt: hm("13:00")})
	if err != nil {
		t.Fatal(err)
	}
	fed := 0
	for _, s := range steps {
		s.do(f)
		for _, r := range f.recs[fed:] {
			if err := b.AddRecord(r); err != nil {
				t.Fatal(err)
			}
		}
		fed = len(f.recs)
		if w, srcs := clockOf(b.Watermark()[p]), sourcesOf(b, p); w != s.w || srcs != s.sources {
			t.Fatalf("%s: W %s, sources %q; want W %s, sources %q", s.name, w, srcs, s.w, s.sources)
		}
	}
	if len(b.Late) != 0 || b.InWindows != n {
		t.Fatalf("%d of %d counted, late %+v", b.InWindows, n, b.Late)
	}
	// Y's last message was its event of 11:00, X's its end of stream.
	yLast, xLast := window.Ms(f.recs[len(f.recs)-3].Received), window.Ms(f.recs[len(f.recs)-1].Received)
	want := []reconcile.SourceState{
		{ID: "Y", Progress: window.Ms(hm("11:00")), Grew: yLast, LastSeen: yLast, Live: true},
		{ID: "X", Progress: window.EndOfStream, Grew: xLast, LastSeen: xLast, Live: true},
	}
	if got := b.Sources(p); !slices.Equal(got, want) {
		t.Fatalf("Sources: %+v, want %+v", got, want)
	}

	// A longer --source-idle keeps Y live through the two minutes.
	b = addAll(t, reconcile.Config{DefaultIngestedAt: hm("13:00"), SourceIdle: 10 * time.Minute}, f.recs[:5])
	if w, srcs := clockOf(b.Watermark()[p]), sourcesOf(b, p); w != "10:05" || srcs != "X=10:40 Y=10:10" {
		t.Fatalf("--source-idle 10m: W %s, sources %q; want 10:05 with Y live", w, srcs)
	}
}

// TestSourcesBusy: what makes a source busy in a partition (step 4), seen
// from a second source Z's first message there, followed by Z's heartbeat:
// a retry and an event dropped past the replay horizon leave Z free, so
// the heartbeat raises its progress; a new submission (on time, or too
// late after grace) and an event of a type that never counts (even a
// retry of one) make it busy, so the heartbeat does not.
func TestSourcesBusy(t *testing.T) {
	const store = "store-a"
	p := window.Partition(store, 8)
	tests := []struct {
		name string
		line []byte
		// progress is Z's progress after its heartbeat of 14:40.
		progress string
		late     string
	}{
		{"retry of a counted event", eventLine("x-1", "submitted", store, hm("14:20")), "14:40", ""},
		{"retired", eventLine("z-1", "submitted", store, hm("11:30")), "14:40", wire.ReasonRetired},
		{"too late after grace", eventLine("z-1", "submitted", store, hm("12:30")), "12:30", wire.ReasonAfterGrace},
		{"on time", eventLine("z-1", "submitted", store, hm("14:30")), "14:30", ""},
		{"never counts", eventLine("z-1", "viewed", store, hm("14:25")), "14:25", ""},
		{"retry of an event that never counts", eventLine("x-2", "viewed", store, hm("14:21")), "14:21", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFeed(hm("15:00"))
			f.event("X", eventLine("x-1", "submitted", store, hm("14:20")))
			f.event("X", eventLine("x-2", "viewed", store, hm("14:21")))
			f.event("Z", tc.line)
			f.beat("Z", p, hm("14:40"), false)
			b := addAll(t, reconcile.Config{DefaultIngestedAt: hm("15:00"), Horizon: 30 * time.Minute}, f.recs)
			srcs := b.Sources(p)
			if len(srcs) != 2 || srcs[1].ID != "Z" || clockOf(srcs[1].Progress) != tc.progress {
				t.Fatalf("sources %q, want Z at %s", sourcesOf(b, p), tc.progress)
			}
			late := ""
			if len(b.Late) > 0 {
				late = b.Late[0].Reason
			}
			if late != tc.late || b.Watermark()[p] != window.Ms(hm("14:16")) {
				t.Fatalf("late %q, W %s; want late %q, W 14:16", late, clockOf(b.Watermark()[p]), tc.late)
			}
		})
	}
}

// TestSourcesForgottenWhileBusy pins step 6: a source's own messages never
// make it forget itself, so one source keeps its busy flag however long
// its progress stands still, as the one-source rule does; a message of
// another source forgets it once its progress has not grown for a day,
// and its next heartbeat is a new source's and counts.
func TestSourcesForgottenWhileBusy(t *testing.T) {
	const store = "store-a"
	p := window.Partition(store, 8)
	f := newFeed(hm("15:00"))
	f.event("", eventLine("e-1", "submitted", store, hm("14:00")))
	f.wait(24 * time.Hour)
	f.event("", eventLine("e-2", "submitted", store, hm("13:50")))
	f.beat("", p, hm("14:30"), false)
	b := addAll(t, reconcile.Config{DefaultIngestedAt: hm("15:00")}, f.recs)
	m := newOldRule(t, 8, 0)
	for _, r := range f.recs {
		m.add(r)
	}
	if w, old := clockOf(b.Watermark()[p]), clockOf(m.wm[p]); w != "13:55" || old != "13:55" {
		t.Fatalf("one source: W %s, one-source rule %s; want 13:55 (its busy flag holds the heartbeat back)", w, old)
	}

	g := newFeed(hm("15:00"))
	g.event("a", eventLine("e-1", "submitted", store, hm("14:00")))
	g.wait(24 * time.Hour)
	g.event("b", eventLine("e-2", "submitted", store, hm("15:10"))) // forgets a
	g.beat("a", p, hm("14:30"), false)                              // a is new: it counts
	b = addAll(t, reconcile.Config{DefaultIngestedAt: hm("15:00")}, g.recs)
	var progress string
	for _, st := range b.Sources(p) {
		if st.ID == "a" {
			progress = clockOf(st.Progress)
		}
	}
	if progress != "14:30" {
		t.Fatalf("a's progress %q, want 14:30 (the heartbeat of a forgotten source counts)", progress)
	}
}

// published is what a stream that agrees with b publishes: its windows,
// with the status the smallest W gives them, and its LATE rows.
func published(b *reconcile.Batch) ([]wire.Window, []reconcile.LateRow) {
	global := slices.Min(b.Watermark())
	var ws []wire.Window
	for _, id := range b.WindowIDs() {
		w := b.Windows[id]
		sw := wire.Window{
			WindowID: id, Start: w.Start, End: w.End, Count: w.Count, Version: 1,
			Status:      window.StatusOf(global, window.Ms(w.End), srcGrace),
			Watermark:   window.Time(global),
			Corrections: w.Corrections, LateDropped: w.LateDropped,
			Digest: w.Digest.String(), Breakdown: wire.NewBreakdown(w.Stores),
		}
		for p, n := range w.ByPartition {
			if n > 0 {
				sw.Partitions = append(sw.Partitions, wire.Partial{Partition: p, Count: n})
			}
		}
		ws = append(ws, sw)
	}
	var late []reconcile.LateRow
	for _, l := range b.Late {
		late = append(late, reconcile.LateRow{EventID: l.EventID, WindowID: l.WindowID, Reason: l.Reason,
			Watermark: l.Watermark, Partition: l.Partition, Seq: l.Seq})
	}
	return ws, late
}

// TestRefereeFailsOnTheOneSourceStream: a stream that replayed the issue's
// two sources as one (window 10 at 30, the other 30 LATE after grace)
// fails parity, naming B's events; the stream that applied §3.1 holds.
func TestRefereeFailsOnTheOneSourceStream(t *testing.T) {
	const partitions, w10 = 8, "2026-12-02T10"
	f, _ := issueFeed(t, partitions)
	f.eos("A", partitions)
	opts := reconcile.Config{Partitions: partitions, DefaultIngestedAt: hm("13:00")}
	b := addAll(t, opts, f.recs)

	ws, late := published(addAll(t, opts, legacy(f.recs)))
	if w := ws[slices.IndexFunc(ws, func(w wire.Window) bool { return w.WindowID == w10 })]; w.Count != 30 || w.LateDropped != 30 ||
		w.Status != window.StatusFinal || len(late) != 30 {
		t.Fatalf("the one-source stream: %+v with %d LATE rows, want 30 counted, 30 LATE", w, len(late))
	}
	rep := reconcile.Compare(b, ws, late)
	mustFailNaming(t, rep, "b-45", nil)
	kinds := map[reconcile.DiffKind]int{}
	for _, d := range rep.Unexplained {
		kinds[d.Kind]++
	}
	if kinds[reconcile.KindLateNotInBatch] != 30 || kinds[reconcile.KindCountMismatch] != 1 || kinds[reconcile.KindLateDroppedMismatch] != 1 {
		t.Fatalf("unexplained differences by kind: %v", kinds)
	}

	ws, late = published(b)
	if rep := reconcile.Compare(b, ws, late); !rep.Holds || rep.Summary.Final != 2 {
		t.Fatalf("the §3.1 stream: holds %v over %d final windows: %+v", rep.Holds, rep.Summary.Final, rep.Unexplained)
	}
}

// rawMsg is a RAW message as RecordOf reads it.
type rawMsg struct {
	jetstream.Msg
	subject string
	h       nats.Header
	at      time.Time
}

func (m rawMsg) Metadata() (*jetstream.MsgMetadata, error) {
	return &jetstream.MsgMetadata{Sequence: jetstream.SequencePair{Stream: 9}, Timestamp: m.at}, nil
}
func (m rawMsg) Data() []byte         { return nil }
func (m rawMsg) Headers() nats.Header { return m.h }
func (m rawMsg) Subject() string      { return m.subject }

// TestRecordOfSource: RecordOf reads the source id of every RAW message
// and the leave mark of a heartbeat; without a source header the message
// is the legacy source's.
func TestRecordOfSource(t *testing.T) {
	at := hm("13:00")
	tests := []struct {
		name   string
		h      nats.Header
		source string
		beat   bool
		leave  bool
	}{
		{"record of a source", nats.Header{wire.HdrSource: {"host:/in.ndjson"}}, "host:/in.ndjson", false, false},
		{"legacy record", nats.Header{}, wire.SourceLegacy, false, false},
		{"heartbeat", nats.Header{wire.HdrSource: {"h:8080"}, wire.HdrHeartbeat: {"1000"}}, "h:8080", true, false},
		{"leaving heartbeat", nats.Header{wire.HdrSource: {"h:8080"}, wire.HdrHeartbeat: {"1000"}, wire.HdrLeave: {"1"}}, "h:8080", true, true},
		{"legacy heartbeat", nats.Header{wire.HdrHeartbeat: {"1000"}}, wire.SourceLegacy, true, false},
	}
	for _, tc := range tests {
		r, err := reconcile.RecordOf(rawMsg{subject: wire.For("").Subject(wire.Raw, 3), h: tc.h, at: at})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if r.Source != tc.source || r.Heartbeat != tc.beat || r.Leave != tc.leave || r.Partition != 3 || !r.Received.Equal(at) {
			t.Errorf("%s: %+v", tc.name, r)
		}
	}
}
