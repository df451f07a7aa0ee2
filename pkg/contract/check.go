package contract

import "time"

// Checked is what Check reports of a valid record: the parts of its
// canonical event a counting pass reads, without copies.
type Checked struct {
	// EventID and PartitionKey are the event's values. On the common path
	// they share memory with the raw record: valid only while it is not
	// modified; copy what must outlive it.
	EventID      []byte
	PartitionKey []byte
	// Type is one of TypeSubmitted, TypeDraftSaved, TypeViewed.
	Type string
	// OccurredAt is the event time, UTC.
	OccurredAt time.Time
	// Fingerprint is the event's Fingerprint.
	Fingerprint uint64
	// Payload is the payload's text as written (nil when absent), shared
	// with the raw record like EventID.
	Payload []byte
	// AmountCents and Priced are AmountCents(Payload), read in the same
	// pass as the rest.
	AmountCents int64
	Priced      bool
}

// Counts reports whether the event is a submission (type submitted).
func (c *Checked) Counts() bool { return c.Type == TypeSubmitted }

// Check is Validate for a pass that only counts: for a record Validate
// rejects it returns the same *RejectError; for a valid one it fills c with
// the fields of the event Validate returns, without building the event
// (no copy of the strings or the payload). c is overwritten only when the
// record is valid. receivedAt is the record's received time, as for
// Validate: it stands in for a missing ingested_at and bounds both times.
// Safe for concurrent use with distinct c.
func (v *Validator) Check(raw []byte, receivedAt time.Time, c *Checked) error {
	if !v.schemaOnly {
		var fr fastRecord
		if v.fast(raw, receivedAt, &fr) {
			id, pk := fr.vals[fxEventID], fr.vals[fxPartitionKey]
			*c = Checked{
				EventID:      raw[id.start:id.end:id.end],
				PartitionKey: raw[pk.start:pk.end:pk.end],
				Type:         fr.typ,
				OccurredAt:   fr.occurred,
				Fingerprint:  fr.fp,
				AmountCents:  fr.amount,
				Priced:       fr.priced,
			}
			if fr.has(fxPayload) {
				pl := fr.vals[fxPayload]
				c.Payload = raw[pl.start:pl.end:pl.end]
			}
			return nil
		}
	}
	var am amountRead
	e, err := v.validateSchema(raw, receivedAt, &am)
	if err != nil {
		return err
	}
	*c = Checked{
		EventID:      []byte(e.EventID),
		PartitionKey: []byte(e.PartitionKey),
		Type:         e.Type,
		OccurredAt:   e.OccurredAt,
		Fingerprint:  e.Fingerprint,
		Payload:      e.Payload,
		AmountCents:  am.cents,
		Priced:       am.priced,
	}
	return nil
}
