package reconcile

import (
	"time"

	"github.com/receiptflow/receiptflow/pkg/contract"
)

// LateRow is one line of late.ndjson (docs/spec.md §6): an event the stream
// routed to LATE (Reason: wire.ReasonAfterGrace or wire.ReasonRetired),
// judged against the partition Watermark; Seq is its stream sequence.
type LateRow struct {
	EventID   string    `json:"event_id"`
	WindowID  string    `json:"window_id"`
	Reason    string    `json:"reason"`
	Watermark time.Time `json:"watermark"`
	Partition int       `json:"partition"`
	Seq       uint64    `json:"seq"`
	// Source is the id of the source that wrote the event to RAW
	// (docs/spec.md §3.1), when it had one.
	Source string `json:"source,omitempty"`
}

// RejectedRow is one line of rejected.ndjson (docs/spec.md §6): a message the
// validator rejected. EventID is empty when none could be read.
type RejectedRow struct {
	EventID string          `json:"event_id,omitempty"`
	Reason  contract.Reason `json:"reason"`
	Detail  string          `json:"detail"`
	Seq     uint64          `json:"seq"`
}
