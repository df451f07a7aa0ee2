package boundedrun

import (
	"sort"
	"sync"

	"github.com/receiptflow/receiptflow/pkg/ledger"
	"github.com/receiptflow/receiptflow/pkg/reconcile"
	"github.com/receiptflow/receiptflow/pkg/windower"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// TraceRow is one line of trace.ndjson: what happened to one message.
type TraceRow struct {
	Seq       uint64 `json:"seq"`
	Partition int    `json:"partition"`
	EventID   string `json:"event_id,omitempty"`
	// Decision is counted, duplicate, late, rejected, ignored (a valid
	// event of a type that never counts) or dropped_retired.
	Decision   string `json:"decision"`
	Correction bool   `json:"correction,omitempty"`
	Reason     string `json:"reason,omitempty"`
	// Layer says which dedup layer dropped a duplicate: jetstream (the
	// Nats-Msg-Id window) or ledger (the Redis ledger).
	Layer    string `json:"layer,omitempty"`
	WindowID string `json:"window,omitempty"`
	// Version is the partition partial's version after the event.
	Version  int64  `json:"version_after,omitempty"`
	ValidSeq uint64 `json:"valid_seq,omitempty"`
}

type tracer struct {
	mu          sync.Mutex
	rows        map[uint64]TraceRow // by RAW seq
	jsDups      []TraceRow
	corrections int64
	late        int64
}

func (t *tracer) windower(_ int, recs []windower.Trace) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range recs {
		row := TraceRow{Seq: r.RawSeq, Partition: r.Partition, EventID: r.EventID, WindowID: r.Decision.WindowID, ValidSeq: r.ValidSeq}
		switch r.Decision.Code {
		case ledger.Counted:
			row.Decision, row.Version = "counted", r.Decision.Version
		case ledger.Correction:
			row.Decision, row.Version, row.Correction = "counted", r.Decision.Version, true
			t.corrections++
		case ledger.Late:
			row.Decision, row.Version, row.Reason = "late", r.Decision.Version, wire.ReasonAfterGrace
			t.late++
		case ledger.Duplicate:
			row.Decision, row.Layer = "duplicate", "ledger"
		case ledger.Ignored:
			row.Decision = "ignored"
		case ledger.Retired:
			row.Decision, row.Reason = "dropped_retired", "window retired"
		default:
			continue // heartbeats and replays of applied messages
		}
		if _, seen := t.rows[r.RawSeq]; !seen {
			t.rows[r.RawSeq] = row
		}
	}
}

func (t *tracer) finish(rejected []reconcile.RejectedRow) []TraceRow {
	t.mu.Lock()
	defer t.mu.Unlock()
	rows := make([]TraceRow, 0, len(t.rows)+len(rejected)+len(t.jsDups))
	for _, r := range t.rows {
		rows = append(rows, r)
	}
	for _, r := range rejected {
		rows = append(rows, TraceRow{Seq: r.Seq, EventID: r.EventID, Decision: "rejected", Reason: string(r.Reason)})
	}
	rows = append(rows, t.jsDups...)
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Seq < rows[j].Seq })
	return rows
}
