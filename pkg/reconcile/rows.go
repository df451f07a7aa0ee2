package reconcile

import (
	"time"

	"github.com/receiptflow/receiptflow/pkg/contract"
)

// ReasonAfterGrace is the reason of a LateRow for an event that arrived
// after its window's grace period.
const ReasonAfterGrace = "after_grace"

// ReasonRetired is the reason of a LateRow for an event whose window's
// state was already retired (final and past the replay horizon): it is
// dropped without changing the window, not counted in late_dropped.
const ReasonRetired = "retired"

// LateRow is one line of late.ndjson (docs/spec.md §6): an event the stream
// routed to LATE instead of counting it. Watermark is the partition
// watermark the event was judged against, Seq its stream sequence.
type LateRow struct {
	EventID   string    `json:"event_id"`
	WindowID  string    `json:"window_id"`
	Reason    string    `json:"reason"`
	Watermark time.Time `json:"watermark"`
	Partition int       `json:"partition"`
	Seq       uint64    `json:"seq"`
}

// RejectedRow is one line of rejected.ndjson (docs/spec.md §6): a message the
// validator rejected. EventID is empty when none could be read.
type RejectedRow struct {
	EventID string          `json:"event_id,omitempty"`
	Reason  contract.Reason `json:"reason"`
	Detail  string          `json:"detail"`
	Seq     uint64          `json:"seq"`
}
