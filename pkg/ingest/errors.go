package ingest

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// ErrClosed is returned by Publish after Close.
var ErrClosed = errors.New("ingest: closed")

// ErrBusy is returned by Submit while Config.MaxInFlight records wait to be
// stored: the record is not queued; send it again later.
var ErrBusy = errors.New("ingest: too many records in flight")

// ErrBlank is returned by Submit for a record of white space only.
var ErrBlank = errors.New("ingest: blank record")

// ErrAtomicDisabled reports that RAW does not allow atomic batch publishing
// (its StreamConfig.AllowAtomicPublish is off): the stream was made by an
// older version. Running the set-up job (stream.Ensure) turns it on.
var ErrAtomicDisabled = errors.New("ingest: stream RAW does not allow atomic batches; run the set-up job (stream.Ensure) to update it")

// UnconfirmedError reports the first record that ingest could not confirm
// stored in RAW (docs/spec.md §4): every record before it is stored, in
// order; it and the records after it may or may not be. Publishing the file
// again from Line on (or whole: JetStream and the ledger drop what is
// already stored) completes RAW in order.
type UnconfirmedError struct {
	// Line is the 1-based line number of the record in the file (the
	// count of Publish calls, blank lines included). It is 0 when every
	// record was confirmed and only a heartbeat after them was not.
	Line int64
	// EventID is the record's event_id, "" when it has none readable.
	EventID string
	// Err is why: the last publish error, or the context's.
	Err error
}

// Error names the record by line and event id.
func (e *UnconfirmedError) Error() string {
	if e.Line == 0 {
		return fmt.Sprintf("ingest: every record is stored in RAW, but the closing heartbeat is not confirmed: %v", e.Err)
	}
	return fmt.Sprintf("ingest: record at line %d (event_id %s) not confirmed stored in RAW (every earlier record is): %v",
		e.Line, strconv.Quote(e.EventID), e.Err)
}

// Unwrap returns the cause.
func (e *UnconfirmedError) Unwrap() error { return e.Err }

// eventIDOf reads the event_id of an NDJSON record, if it has a readable
// one (for error messages only).
func eventIDOf(rec []byte) string {
	var v struct {
		EventID any `json:"event_id"`
	}
	if json.Unmarshal(rec, &v) != nil {
		return ""
	}
	if s, ok := v.EventID.(string); ok {
		return s
	}
	return ""
}
