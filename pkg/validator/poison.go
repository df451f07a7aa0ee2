package validator

import (
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// DefaultMaxDeliveries is Config.MaxDeliveries when it is zero.
const DefaultMaxDeliveries = 5

// validateFunc is (*contract.Validator).Check returning its result (so
// that it stays off the heap); the service calls it through a field so
// tests can make one record fail.
type validateFunc func(raw []byte, receivedAt time.Time) (contract.Checked, error)

// checkFunc is v.Check as a validateFunc.
func checkFunc(v *contract.Validator) validateFunc {
	return func(raw []byte, receivedAt time.Time) (c contract.Checked, err error) {
		err = v.Check(raw, receivedAt, &c)
		return c, err
	}
}

// poison returns the rejection of a record JetStream has delivered more than
// MaxDeliveries times, or nil. Such a record was handed to this consumer
// that often without its batch being acknowledged: whatever keeps failing,
// it must not hold up its partition for ever. It is routed to REJECTED
// without being validated again.
func (s *Service) poison(meta *jetstream.MsgMetadata, raw []byte) *contract.RejectError {
	n := s.cfg.MaxDeliveries
	if n < 0 || meta.NumDelivered <= uint64(n) {
		return nil
	}
	return contract.Reject(contract.ReasonInvalidField, contract.PeekEventID(raw),
		"poison message: not processed after %d deliveries (delivery %d, limit %d); routed to REJECTED without validating it again",
		n, meta.NumDelivered, n)
}

// validateOne validates one RAW record, given its headers and received
// time, and returns its frame record (all but RawSeq) and VALID partition
// from the one read of the record Check makes. Whatever goes wrong with this one record ends as its rejection,
// never as an error of the batch: a panic in the validator or an error that
// is not a contract violation would otherwise fail the batch on every
// delivery and block the partition. A record ingest
// cut to a bounded prefix (wire.HdrOrigSize) is too_large with its full
// size in the detail. The record's received time is the broker's: the RAW
// message's JetStream timestamp (docs/spec.md §2), so neither a producer's
// ingested_at nor this process's clock can move a watermark ahead of it.
func (s *Service) validateOne(raw []byte, hdr nats.Header, received time.Time) (it item, rej *contract.RejectError) {
	defer func() {
		if v := recover(); v != nil {
			it = item{}
			rej = contract.Reject(contract.ReasonInvalidField, contract.PeekEventID(raw),
				"validating the record panicked: %s", sanitize(fmt.Sprint(v)))
			s.cfg.Logger.Error("validator panicked on one record; rejected it", "panic", fmt.Sprint(v))
		}
	}()
	if orig := hdr.Get(wire.HdrOrigSize); orig != "" {
		size, err := strconv.ParseInt(orig, 10, 64)
		if err != nil {
			return item{}, contract.Reject(contract.ReasonInvalidField, contract.PeekEventID(raw),
				"header %s %s is not a size", wire.HdrOrigSize, sanitize(orig))
		}
		return item{}, contract.Reject(contract.ReasonTooLarge, contract.PeekEventID(raw),
			"record is %d bytes, more than the limit of %d (ingest kept the first %d bytes)",
			size, s.cfg.Validator.Config().MaxSize, len(raw))
	}
	c, err := s.validate(raw, received)
	if err == nil {
		return s.frameItem(&c), nil
	}
	if r, ok := contract.AsReject(err); ok {
		return item{}, r
	}
	return item{}, contract.Reject(contract.ReasonInvalidField, contract.PeekEventID(raw),
		"validating the record failed: %s", sanitize(err.Error()))
}

// keepBytes is how much of a record a REJECTED message carries: records
// longer than that (too_large ones only) are cut, and the full size goes in
// wire.HdrOrigSize; the whole record stays in RAW at its sequence.
func (s *Service) keepBytes() int {
	var maxPayload int64
	if nc := s.js.Conn(); nc != nil {
		maxPayload = nc.MaxPayload()
	}
	return wire.KeepBytes(s.cfg.Validator.Config().MaxSize, maxPayload)
}

// sanitize makes text safe for a header value and short: quoted, ASCII
// only, at most 200 bytes.
func sanitize(s string) string {
	q := strconv.QuoteToASCII(s)
	if len(q) > 200 {
		q = q[:197] + "..."
	}
	return q
}
