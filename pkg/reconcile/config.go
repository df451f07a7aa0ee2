package reconcile

import (
	"fmt"
	"time"

	"github.com/receiptflow/receiptflow/pkg/config"
	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/window"
)

// maxLineBytes is the longest line the pass hands to the validator (or
// the validator's MaxSize + 1 if that is larger). Longer lines are rejected
// too_large by the pass itself, which keeps only that much of them.
const maxLineBytes = 8 << 20

// Config configures Count.
type Config struct {
	// Validator checks each record. Nil means a validator with the
	// contract defaults.
	Validator *contract.Validator
	// DefaultIngestedAt is the received time of a file's records (a RAW
	// source carries each record's broker timestamp instead): it stands in
	// for ingested_at in records without one, as ingest would stamp it, and
	// it bounds both event times (contract.Validator.Check, docs/spec.md §2:
	// later than it plus MaxFutureSkew is future_timestamp). Pass a fixed
	// instant for a reproducible pass; the zero time means the time the
	// pass starts.
	DefaultIngestedAt time.Time
	// Partitions is the partition count P used to split window counts by
	// partition; zero means config.Defaults's.
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
	// Lateness and Grace are the watermark lateness and the grace period of
	// docs/spec.md §3 (zero: config.Defaults's): the pass
	// replays every partition's watermark with them and judges each new
	// submission on time, correction or too late itself.
	Lateness time.Duration
	Grace    time.Duration
	// Horizon is the replay horizon: a new submission whose window ended at
	// least Grace + Horizon before its partition watermark is judged
	// retired (too late, not in late_dropped). Zero: no horizon.
	Horizon time.Duration
	// HeartbeatEvery and EndOfStream place, in a file read by Count, the
	// heartbeats ingest would place (pkg/ingest): after every
	// HeartbeatEvery non-blank records one to every partition with the
	// largest event time of the valid records so far, and, with
	// EndOfStream, the end-of-stream heartbeat after the last record
	// (without it, a last one with the progress if valid records came
	// since the previous). Zero means config.Defaults's; negative
	// places none. They do not apply to AddRecord, whose records carry
	// their own heartbeats.
	HeartbeatEvery int
	EndOfStream    bool
	// SourceIdle is docs/spec.md §3.1's --source-idle: a source whose
	// progress has not grown for this long of a partition's broker time
	// stops holding that partition's watermark. Zero means
	// window.DefaultSourceIdle. A file read by Count is one source whose
	// records all arrive at DefaultIngestedAt, so it never goes idle.
	SourceIdle time.Duration
}

func (o Config) withDefaults() (Config, error) {
	d := config.Defaults()
	if o.RecordsHint < 0 {
		o.RecordsHint = 0
	}
	if o.Partitions < 0 {
		return o, fmt.Errorf("reconcile: partitions must be positive, got %d", o.Partitions)
	}
	if o.Partitions == 0 {
		o.Partitions = d.Partitions
	}
	if o.DefaultIngestedAt.IsZero() {
		o.DefaultIngestedAt = time.Now().UTC()
	}
	if o.Lateness < 0 || o.Grace < 0 || o.Horizon < 0 || o.SourceIdle < 0 {
		return o, fmt.Errorf("reconcile: lateness, grace, horizon and source idle must not be negative")
	}
	if o.SourceIdle == 0 {
		o.SourceIdle = window.DefaultSourceIdle
	}
	if o.Lateness == 0 {
		o.Lateness = d.Lateness
	}
	if o.Grace == 0 {
		o.Grace = d.Grace
	}
	if o.HeartbeatEvery == 0 {
		o.HeartbeatEvery = d.HeartbeatEvery
	}
	if o.Validator == nil {
		v, err := contract.NewValidator(contract.Config{})
		if err != nil {
			return o, fmt.Errorf("reconcile: default validator: %w", err)
		}
		o.Validator = v
	}
	return o, nil
}
