package contract

import (
	"errors"
	"fmt"
)

// Reason is the machine-readable rejection reason of docs/spec.md §2.
type Reason string

// The rejection reasons, spelled exactly as in docs/spec.md §2.
const (
	ReasonMalformedJSON        Reason = "malformed_json"
	ReasonTooLarge             Reason = "too_large"
	ReasonMissingField         Reason = "missing_field"
	ReasonInvalidField         Reason = "invalid_field"
	ReasonUnsupportedSchema    Reason = "unsupported_schema"
	ReasonUnknownType          Reason = "unknown_type"
	ReasonBadTimestamp         Reason = "bad_timestamp"
	ReasonFutureTimestamp      Reason = "future_timestamp"
	ReasonConflictingDuplicate Reason = "conflicting_duplicate"
)

// Sentinel errors, one per reason; a *RejectError matches its reason's
// sentinel with errors.Is.
var (
	ErrMalformedJSON        = errors.New(string(ReasonMalformedJSON))
	ErrTooLarge             = errors.New(string(ReasonTooLarge))
	ErrMissingField         = errors.New(string(ReasonMissingField))
	ErrInvalidField         = errors.New(string(ReasonInvalidField))
	ErrUnsupportedSchema    = errors.New(string(ReasonUnsupportedSchema))
	ErrUnknownType          = errors.New(string(ReasonUnknownType))
	ErrBadTimestamp         = errors.New(string(ReasonBadTimestamp))
	ErrFutureTimestamp      = errors.New(string(ReasonFutureTimestamp))
	ErrConflictingDuplicate = errors.New(string(ReasonConflictingDuplicate))
)

var sentinels = map[Reason]error{
	ReasonMalformedJSON:        ErrMalformedJSON,
	ReasonTooLarge:             ErrTooLarge,
	ReasonMissingField:         ErrMissingField,
	ReasonInvalidField:         ErrInvalidField,
	ReasonUnsupportedSchema:    ErrUnsupportedSchema,
	ReasonUnknownType:          ErrUnknownType,
	ReasonBadTimestamp:         ErrBadTimestamp,
	ReasonFutureTimestamp:      ErrFutureTimestamp,
	ReasonConflictingDuplicate: ErrConflictingDuplicate,
}

// RejectError is a contract violation: the record is rejected with Reason.
// EventID is set when an event_id could be read from the record.
type RejectError struct {
	Reason  Reason
	Detail  string
	EventID string
}

func (e *RejectError) Error() string {
	if e.Detail == "" {
		return string(e.Reason)
	}
	return fmt.Sprintf("%s: %s", e.Reason, e.Detail)
}

// Is makes errors.Is(err, ErrX) true for a RejectError of reason X.
func (e *RejectError) Is(target error) bool { return sentinels[e.Reason] == target }

// Reject builds a *RejectError.
func Reject(reason Reason, eventID, format string, args ...any) *RejectError {
	return &RejectError{Reason: reason, EventID: eventID, Detail: fmt.Sprintf(format, args...)}
}

// AsReject returns the *RejectError in err's chain, if any.
func AsReject(err error) (*RejectError, bool) {
	var r *RejectError
	ok := errors.As(err, &r)
	return r, ok
}
