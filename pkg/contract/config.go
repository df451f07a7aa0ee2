package contract

import (
	"fmt"
	"time"
)

// Defaults of Config (docs/spec.md §2).
const (
	// DefaultMaxFutureSkew is how far after ingested_at an event may have
	// occurred before it is rejected future_timestamp.
	DefaultMaxFutureSkew = 5 * time.Minute
	// DefaultMaxSize is the largest accepted record: 64 KiB, the whole record.
	DefaultMaxSize = 64 << 10
)

// Config configures a Validator. The zero value means the defaults of docs/spec.md §2.
type Config struct {
	// MaxFutureSkew is how far after its ingested_at an event may have
	// occurred; an event further in the future is rejected
	// future_timestamp. Zero means DefaultMaxFutureSkew; negative is an
	// error.
	MaxFutureSkew time.Duration
	// MaxSize is the largest accepted record in bytes, counting the whole
	// record as its producer wrote it (see Size: surrounding whitespace and
	// ingest's ingested_at stamp do not count); a larger one is rejected
	// too_large. Zero means DefaultMaxSize; negative is an error.
	MaxSize int
}

// withDefaults returns o with zero fields set to their defaults, or an
// error for a negative field.
func (o Config) withDefaults() (Config, error) {
	if o.MaxFutureSkew < 0 {
		return o, fmt.Errorf("contract: MaxFutureSkew %v is negative", o.MaxFutureSkew)
	}
	if o.MaxSize < 0 {
		return o, fmt.Errorf("contract: MaxSize %d is negative", o.MaxSize)
	}
	if o.MaxFutureSkew == 0 {
		o.MaxFutureSkew = DefaultMaxFutureSkew
	}
	if o.MaxSize == 0 {
		o.MaxSize = DefaultMaxSize
	}
	return o, nil
}
