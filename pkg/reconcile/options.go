package reconcile

import (
	"fmt"
	"time"

	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/window"
)

// DefaultPartitions is the partition count P of SPEC section 3.
const DefaultPartitions = 8

// maxLineBytes is the longest line the pass hands to the validator (or
// the validator's MaxSize + 1 if that is larger). Longer lines are rejected
// too_large by the pass itself, which keeps only that much of them.
const maxLineBytes = 8 << 20

// Options configures Count.
type Options struct {
	// Validator checks each record. Nil means a validator with the
	// contract defaults.
	Validator *contract.Validator
	// DefaultIngestedAt stands in for ingested_at in records without one,
	// as ingest would stamp it; such a record is rejected future_timestamp
	// when it occurred more than the validator's MaxFutureSkew after it.
	// Pass a fixed instant for a reproducible pass. The zero time is passed
	// through as is, so a record without ingested_at is then always too far
	// in the future.
	DefaultIngestedAt time.Time
	// Partitions is the partition count P used to split window counts by
	// partition; zero means DefaultPartitions.
	Partitions int
	// HotKeys routes declared hot keys by event id, as ingest and the
	// validator do (window.Route); it must be the pipeline's declaration
	// for the per-partition counts to compare.
	HotKeys window.HotKeys
	// RecordsHint, when positive, is about how many records the input
	// holds (an estimate is enough, such as a file's size over its first
	// lines' average length). It only sizes the pass's tables up front
	// instead of growing them record by record; the result is the same.
	RecordsHint int
}

func (o Options) withDefaults() (Options, error) {
	if o.RecordsHint < 0 {
		o.RecordsHint = 0
	}
	if o.Partitions < 0 {
		return o, fmt.Errorf("reconcile: partitions must be positive, got %d", o.Partitions)
	}
	if o.Partitions == 0 {
		o.Partitions = DefaultPartitions
	}
	if o.Validator == nil {
		v, err := contract.NewValidator(contract.Options{})
		if err != nil {
			return o, fmt.Errorf("reconcile: default validator: %w", err)
		}
		o.Validator = v
	}
	return o, nil
}
