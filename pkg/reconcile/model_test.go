package reconcile_test

import (
	"bufio"
	"bytes"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/config"
	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/internal/digest"
	"github.com/receiptflow/receiptflow/pkg/reconcile"
	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// This file is a reference model of the streaming side, for tests only: it
// replays a file through the docs/spec.md §3 rules (per-partition watermark,
// dedup first, classification against the watermark before the event,
// ingest's heartbeats that advance idle partitions only, an end-of-stream
// watermark at the end) and returns what a correct pipeline publishes. It
// shares no code with the batch pass beyond the contract.

const (
	modelLateness = int64(5 * time.Minute / time.Millisecond)
	modelGrace    = int64(time.Hour / time.Millisecond)
)

type modelWindow struct {
	count, corrections, late int64
	digest                   digest.Digest
	partials                 map[int]*wire.Partial
	stores                   map[string]wire.StoreTotal
}

type streamResult struct {
	windows  []wire.Window
	late     []reconcile.LateRow
	rejected []reconcile.RejectedRow
}

// runStream replays data (NDJSON, blank lines skipped, seq = record number)
// through the stream rules with P partitions and ingest's default
// heartbeats.
func runStream(t *testing.T, data []byte, partitions int, ingestedAt time.Time) streamResult {
	t.Helper()
	return runStreamEvery(t, data, partitions, ingestedAt, config.Defaults().HeartbeatEvery)
}

// runStreamEvery is runStream with a heartbeat to every partition after
// every `every` records (none if every <= 0), carrying the largest valid
// event time so far; a heartbeat moves only a partition that got no event
// since its previous one.
func runStreamEvery(t *testing.T, data []byte, partitions int, ingestedAt time.Time, every int) streamResult {
	t.Helper()
	v, err := contract.NewValidator(contract.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if ingestedAt.IsZero() {
		ingestedAt = time.Now().UTC() // as the batch pass's default
	}
	var res streamResult
	claims := map[string]uint64{} // validator: event_id → fingerprint
	wp := map[int]int64{}         // partition watermarks
	busy := map[int]bool{}        // partitions with an event since their last heartbeat
	var progress int64            // ingest: largest valid event time so far
	sinceBeat := 0
	beat := func() {
		sinceBeat = 0
		if progress <= 0 {
			return
		}
		for p := range partitions {
			if !busy[p] {
				wp[p] = window.Advance(wp[p], progress, modelLateness)
			}
			busy[p] = false
		}
	}
	windows := map[string]*modelWindow{} // by window id
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	var seq uint64
	handle := func(ev contract.Event, err error) {
		if err != nil {
			re, ok := contract.AsReject(err)
			if !ok {
				t.Fatalf("seq %d: %v", seq, err)
			}
			res.rejected = append(res.rejected, reconcile.RejectedRow{EventID: re.EventID, Reason: re.Reason, Detail: re.Detail, Seq: seq})
			return
		}
		if fp, ok := claims[ev.EventID]; ok && fp != ev.Fingerprint {
			res.rejected = append(res.rejected, reconcile.RejectedRow{EventID: ev.EventID, Reason: contract.ReasonConflictingDuplicate, Seq: seq})
			return
		} else if ok {
			return // a retry: JetStream drops it by its Nats-Msg-Id
		}
		claims[ev.EventID] = ev.Fingerprint
		p := window.Partition(ev.PartitionKey, partitions)
		ms := window.Ms(ev.OccurredAt)
		busy[p] = true
		if ev.Counts() {
			b := window.Of(ms)
			w := windows[b.ID]
			if w == nil {
				w = &modelWindow{partials: map[int]*wire.Partial{}, stores: map[string]wire.StoreTotal{}}
				windows[b.ID] = w
			}
			part := w.partials[p]
			if part == nil {
				part = &wire.Partial{Partition: p}
				w.partials[p] = part
			}
			switch window.Classify(wp[p], b.End, modelGrace) {
			case window.TooLate:
				w.late++
				part.LateDropped++
				res.late = append(res.late, reconcile.LateRow{
					EventID: ev.EventID, WindowID: b.ID, Reason: wire.ReasonAfterGrace,
					Watermark: window.Time(wp[p]), Partition: p, Seq: seq,
				})
			case window.Correction:
				w.corrections++
				part.Corrections++
				fallthrough
			default:
				w.count++
				part.Count++
				w.digest.Add(ev.EventID)
				st := w.stores[ev.PartitionKey]
				st.Count++
				if a, ok := contract.AmountCents(ev.Payload); ok {
					st.AmountCents += a
				} else {
					st.Unpriced++
				}
				w.stores[ev.PartitionKey] = st
			}
		}
		wp[p] = window.Advance(wp[p], ms, modelLateness)
	}
	for sc.Scan() {
		line := bytes.TrimSuffix(sc.Bytes(), []byte{'\r'})
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		seq++
		ev, err := v.Validate(line, ingestedAt)
		if err == nil && ev.OccurredAt.UnixMilli() > progress {
			progress = ev.OccurredAt.UnixMilli()
		}
		handle(ev, err)
		if sinceBeat++; every > 0 && sinceBeat >= every {
			beat()
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	// End of stream: every window is final.
	for _, id := range slices.Sorted(maps.Keys(windows)) {
		w := windows[id]
		start, _ := window.ParseID(id)
		sw := wire.Window{
			WindowID:    id,
			Start:       window.Time(start),
			End:         window.Time(start + window.WidthMs),
			Count:       w.count,
			Version:     w.count + w.late + 2,
			Status:      window.StatusFinal,
			Watermark:   window.Time(window.EndOfStream),
			Corrections: w.corrections,
			LateDropped: w.late,
			Digest:      w.digest.String(),
			Breakdown:   wire.NewBreakdown(w.stores),
		}
		for _, p := range slices.Sorted(maps.Keys(w.partials)) {
			sw.Partitions = append(sw.Partitions, *w.partials[p])
		}
		res.windows = append(res.windows, sw)
	}
	return res
}
