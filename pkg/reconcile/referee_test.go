package reconcile_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/config"
	"github.com/receiptflow/receiptflow/pkg/reconcile"
	"github.com/receiptflow/receiptflow/pkg/traffic"
	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// This file holds the referee to docs/spec.md §8: parity must FAIL, naming
// the event id, whenever the stream's result is wrong — it loses an event,
// counts one twice, misjudges one as late, never publishes a window, or
// judges a late event against another watermark — and hold on a correct
// stream.

// refereeInput is one raw snapshot and the correct stream result for it.
type refereeInput struct {
	name string
	data []byte
}

func refereeInputs(t *testing.T) []refereeInput {
	t.Helper()
	seed, _ := readSeed(t)
	o := traffic.DefaultConfig()
	o.Seed, o.Events, o.Hours = 11, 6000, 8
	o.LateRate, o.InvalidRate = 0.03, 0.01
	var buf bytes.Buffer
	if _, err := traffic.Write(&buf, o); err != nil {
		t.Fatal(err)
	}
	return []refereeInput{{"seed", seed}, {"generated", buf.Bytes()}}
}

// partitionOf is the partition of the first record of event id in data.
func partitionOf(t *testing.T, data []byte, id string) int {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for sc.Scan() {
		var rec struct {
			EventID      string `json:"event_id"`
			PartitionKey string `json:"partition_key"`
		}
		if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.EventID == id {
			return window.Partition(rec.PartitionKey, config.Defaults().Partitions)
		}
	}
	t.Fatalf("no record of %s", id)
	return -1
}

// onTime picks a final stream window with at least two counted events and
// one event id counted in it on time or as a correction, that the stream
// has no LATE row for.
func onTime(t *testing.T, b *reconcile.Batch, ws []wire.Window, late []reconcile.LateRow) (string, string) {
	t.Helper()
	isLate := map[string]bool{}
	for _, r := range late {
		isLate[r.EventID] = true
	}
	for _, w := range ws {
		bw := b.Windows[w.WindowID]
		if w.Status != window.StatusFinal || w.Count < 2 || bw == nil {
			continue
		}
		for _, id := range bw.IDs {
			if !isLate[id] {
				return w.WindowID, id
			}
		}
	}
	t.Fatal("no window with an on-time event")
	return "", ""
}

// addToPartition changes the partial count of partition p of w by n.
func addToPartition(w *wire.Window, p int, n int64) {
	w.Partitions = slices.Clone(w.Partitions)
	for i := range w.Partitions {
		if w.Partitions[i].Partition == p {
			w.Partitions[i].Count += n
			return
		}
	}
	w.Partitions = append(w.Partitions, wire.Partial{Partition: p, Count: n})
}

// mustFailNaming asserts that parity fails and that an unexplained
// difference names event id (and, if wm is set, that watermark).
func mustFailNaming(t *testing.T, rep *reconcile.Report, id string, wm *time.Time) {
	t.Helper()
	if rep.Holds {
		t.Fatalf("parity holds; the corruption of %s went unnoticed", id)
	}
	for _, d := range rep.Unexplained {
		if d.EventID != id {
			continue
		}
		if wm == nil {
			return
		}
		if d.Watermark != nil && d.Watermark.Equal(*wm) {
			return
		}
	}
	var got []string
	for _, d := range rep.Unexplained {
		got = append(got, string(d.Kind)+" "+d.EventID)
	}
	t.Fatalf("parity fails, but no unexplained difference names %s (watermark %v): %v", id, wm, got)
}

// TestParityFailsOnACorruptStream: five ways a stream can be wrong, each
// caught with the event id named.
func TestParityFailsOnACorruptStream(t *testing.T) {
	for _, in := range refereeInputs(t) {
		t.Run(in.name, func(t *testing.T) {
			b, err := reconcile.Count(bytes.NewReader(in.data), reconcile.Config{})
			if err != nil {
				t.Fatal(err)
			}
			res := runStream(t, in.data, config.Defaults().Partitions, time.Time{})
			if rep := reconcile.Compare(b, res.windows, res.late); !rep.Holds {
				t.Fatalf("the correct stream does not hold: %+v", rep.Unexplained[:min(3, len(rep.Unexplained))])
			}
			if len(res.late) == 0 {
				t.Fatal("no late events in the input")
			}
			wid, id := onTime(t, b, res.windows, res.late)
			p := partitionOf(t, in.data, id)

			t.Run("drop one counted event", func(t *testing.T) {
				ws := editWindow(res.windows, wid, func(w *wire.Window) {
					w.Count--
					w.Version++
					w.Digest = removeID(w.Digest, id)
					addToPartition(w, p, -1)
				})
				mustFailNaming(t, reconcile.Compare(b, ws, res.late), id, nil)
			})
			t.Run("count one twice", func(t *testing.T) {
				ws := editWindow(res.windows, wid, func(w *wire.Window) {
					w.Count++
					w.Version++
					w.Digest = addID(w.Digest, id)
					addToPartition(w, p, 1)
				})
				mustFailNaming(t, reconcile.Compare(b, ws, res.late), id, nil)
			})
			t.Run("route one on-time event to LATE", func(t *testing.T) {
				// Consistent in itself: the count, digest, partial and
				// late_dropped all say the stream judged it late.
				ws := editWindow(res.windows, wid, func(w *wire.Window) {
					w.Count--
					w.LateDropped++
					w.Version++
					w.Digest = removeID(w.Digest, id)
					addToPartition(w, p, -1)
				})
				start, _ := window.ParseID(wid)
				wm := window.Time(start + window.WidthMs + int64(time.Hour/time.Millisecond))
				late := append(slices.Clone(res.late), reconcile.LateRow{
					EventID: id, WindowID: wid, Reason: wire.ReasonAfterGrace, Watermark: wm, Partition: p, Seq: 1,
				})
				mustFailNaming(t, reconcile.Compare(b, ws, late), id, nil)
			})
			t.Run("file one event under another store", func(t *testing.T) {
				// Count, digest and partials all right: only the
				// breakdown moved one submission between stores.
				ws := editWindow(res.windows, wid, func(w *wire.Window) {
					moveOneBetweenStores(t, w)
				})
				mustFailKind(t, reconcile.Compare(b, ws, res.late), wid, reconcile.KindBreakdownMismatch)
			})
			t.Run("sum one amount twice", func(t *testing.T) {
				ws := editWindow(res.windows, wid, func(w *wire.Window) {
					w.AmountCents += max(w.ByStore[0].AmountCents, 1)
				})
				mustFailKind(t, reconcile.Compare(b, ws, res.late), wid, reconcile.KindBreakdownMismatch)
			})
			t.Run("never publish one window", func(t *testing.T) {
				mustFailNaming(t, reconcile.Compare(b, dropWindow(res.windows, wid), res.late), id, nil)
			})
			t.Run("never publish one window, its ids dropped as retired", func(t *testing.T) {
				late := slices.Clone(res.late)
				for _, eid := range b.Windows[wid].IDs {
					late = append(late, reconcile.LateRow{EventID: eid, WindowID: wid, Reason: wire.ReasonRetired,
						Watermark: window.Time(window.EndOfStream), Partition: partitionOf(t, in.data, eid), Seq: 1})
				}
				mustFailNaming(t, reconcile.Compare(b, dropWindow(res.windows, wid), late), id, nil)
			})
			t.Run("change one LATE row's watermark", func(t *testing.T) {
				late := slices.Clone(res.late)
				late[0].Watermark = late[0].Watermark.Add(time.Minute)
				wm := late[0].Watermark
				mustFailNaming(t, reconcile.Compare(b, res.windows, late), late[0].EventID, &wm)
			})
		})
	}
}

// TestParityHoldsForAnyHeartbeatPeriod: the batch pass and the stream
// model agree whatever ingest's heartbeat period (from one heartbeat per
// record on), since both apply the idle-partition rule of docs/spec.md §3 in
// the same RAW order.
func TestParityHoldsForAnyHeartbeatPeriod(t *testing.T) {
	o := traffic.DefaultConfig()
	o.Seed, o.Events, o.Hours = 3, 4000, 6
	o.LateRate = 0.03
	var buf bytes.Buffer
	if _, err := traffic.Write(&buf, o); err != nil {
		t.Fatal(err)
	}
	for _, every := range []int{1, 3, 100, 1000} {
		b, err := reconcile.Count(bytes.NewReader(buf.Bytes()), reconcile.Config{HeartbeatEvery: every})
		if err != nil {
			t.Fatal(err)
		}
		res := runStreamEvery(t, buf.Bytes(), config.Defaults().Partitions, time.Time{}, every)
		if rep := reconcile.Compare(b, res.windows, res.late); !rep.Holds {
			t.Errorf("heartbeat every %d: parity fails: %+v", every, rep.Unexplained[:min(3, len(rep.Unexplained))])
		}
	}
}

// TestRefereeJudgesRetiredItself: with a replay horizon the batch judges an
// event past grace + horizon retired, against its own watermark: a stream
// that dropped it as retired holds; one that routed it to LATE after grace
// (and published its window), or dropped it against another watermark,
// fails naming it.
func TestRefereeJudgesRetiredItself(t *testing.T) {
	const input = `{"schema_version":2,"event_id":"x1","receipt_id":"r","type":"submitted","occurred_at":"2026-12-02T15:00:00Z","ingested_at":"2026-12-02T15:00:05Z","partition_key":"store-a","producer_version":"t"}
{"schema_version":2,"event_id":"x2","receipt_id":"r","type":"submitted","occurred_at":"2026-12-02T10:30:00Z","ingested_at":"2026-12-02T15:00:06Z","partition_key":"store-a","producer_version":"t"}
`
	b, err := reconcile.Count(bytes.NewReader([]byte(input)), reconcile.Config{Horizon: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	v, ok := b.LateJudgmentOf("x2")
	wm := time.Date(2026, 12, 2, 14, 55, 0, 0, time.UTC)
	if !ok || v.Reason != wire.ReasonRetired || !v.Watermark.Equal(wm) || b.Windows["2026-12-02T10"] != nil {
		t.Fatalf("x2: %+v (%v), window 10 %+v", v, ok, b.Windows["2026-12-02T10"])
	}
	// The model has no horizon: it routes x2 to LATE after grace.
	res := runStream(t, []byte(input), config.Defaults().Partitions, time.Time{})
	retired := slices.Clone(res.late)
	retired[0].Reason = wire.ReasonRetired
	dropped := dropWindow(res.windows, "2026-12-02T10")
	if rep := reconcile.Compare(b, dropped, retired); !rep.Holds {
		t.Fatalf("a stream that dropped x2 as retired does not hold: %+v", rep.Unexplained)
	}
	mustFailNaming(t, reconcile.Compare(b, res.windows, res.late), "x2", &wm)
	other := slices.Clone(retired)
	other[0].Watermark = wm.Add(time.Hour)
	owm := other[0].Watermark
	mustFailNaming(t, reconcile.Compare(b, dropped, other), "x2", &owm)
}

// moveOneBetweenStores moves one submission of w's busiest store to its
// second (or to a new store when it has one), keeping every total.
func moveOneBetweenStores(t *testing.T, w *wire.Window) {
	t.Helper()
	by := map[string]wire.StoreTotal{}
	for _, st := range w.ByStore {
		by[st.Store] = st
	}
	if len(w.ByStore) == 0 || w.OtherStores.Count != 0 {
		t.Fatalf("window %s: want a fully listed breakdown, got %+v", w.WindowID, w.Breakdown)
	}
	from := w.ByStore[0]
	to := "store-moved-to"
	if len(w.ByStore) > 1 {
		to = w.ByStore[1].Store
	}
	f := by[from.Store]
	f.Count--
	f.Unpriced-- // keeps the window's unpriced total when the input is unpriced
	if from.Unpriced == 0 {
		f.Unpriced++
	}
	by[from.Store] = f
	wire.AddStore(by, wire.StoreTotal{Store: to, Count: 1, Unpriced: from.Unpriced - f.Unpriced})
	amount := w.AmountCents
	w.Breakdown = wire.NewBreakdown(by)
	w.AmountCents = amount
}

// mustFailKind requires rep to fail with an unexplained difference of kind
// in window wid.
func mustFailKind(t *testing.T, rep *reconcile.Report, wid string, kind reconcile.DiffKind) {
	t.Helper()
	if rep.Holds {
		t.Fatalf("parity holds; want a %s in %s", kind, wid)
	}
	for _, d := range rep.Unexplained {
		if d.WindowID == wid && d.Kind == kind {
			return
		}
	}
	t.Fatalf("no unexplained %s in %s: %+v", kind, wid, rep.Unexplained)
}
