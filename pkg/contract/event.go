// Package contract is the receipt event contract of docs/spec.md §2: the
// canonical event, the JSON Schemas it is checked against, the semantic
// checks a schema cannot express, and the rejection reasons.
package contract

import (
	"encoding/json"
	"time"
)

// Event types. Only TypeSubmitted counts; the others are valid and only move
// the watermark.
const (
	TypeSubmitted  = "submitted"
	TypeDraftSaved = "draft_saved"
	TypeViewed     = "viewed"
)

// Event is the canonical (v2-shaped) event every valid record is upcast to.
type Event struct {
	// SchemaVersion is the version the record was written in (1 or 2).
	SchemaVersion int    `json:"schema_version"`
	EventID       string `json:"event_id"`
	ReceiptID     string `json:"receipt_id"`
	Type          string `json:"type"`
	// OccurredAt is the event time, UTC.
	OccurredAt time.Time `json:"occurred_at"`
	// IngestedAt is the time ingest accepted the record, UTC.
	IngestedAt      time.Time       `json:"ingested_at"`
	PartitionKey    string          `json:"partition_key"`
	ProducerVersion string          `json:"producer_version,omitempty"`
	Payload         json.RawMessage `json:"payload,omitempty"`
	// Fingerprint is a hash of the record's content (everything but
	// ingested_at and producer_version, in canonical form). Two records with
	// the same EventID and different Fingerprint are a conflicting duplicate.
	Fingerprint uint64 `json:"-"`
}

// Counts reports whether the event is a submission (type submitted).
func (e *Event) Counts() bool { return e.Type == TypeSubmitted }
