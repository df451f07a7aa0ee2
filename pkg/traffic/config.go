package traffic

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Defaults of Config.withDefaults.
const (
	DefaultEvents       = 1000
	DefaultHours        = 24
	DefaultStores       = 16
	DefaultPayloadBytes = 170
)

// defaultStart is the event time of the first event when Config.Start is
// zero. It is a function, not a package variable, so that no caller can
// change the default.
func defaultStart() time.Time { return time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC) }

// minStart keeps every generated event time, late ones included, after the
// contract's 2000-01-01 floor.
var minStart = time.Date(2000, 1, 2, 0, 0, 0, 0, time.UTC)

// Config describes the traffic to generate (Validate says which are
// impossible). Rates are probabilities per record.
type Config struct {
	// Seed selects the traffic; the same Config gives byte-identical output.
	Seed uint64
	// Events is the number of records to write, of every kind.
	Events int
	// Start is the event time of the first event (default
	// 2026-12-02T00:00:00Z).
	Start time.Time
	// Hours is the event-time span the records advance over.
	Hours int
	// Stores is the number of distinct partition keys, store-0 to
	// store-<Stores-1>.
	Stores int
	// HotShare is the share of new events from store-0, for skew; the rest
	// spread evenly over the other stores.
	HotShare float64
	// DupRate is the share of records that re-emit an earlier valid record
	// byte for byte (a retry).
	DupRate float64
	// DisorderRate is the share of new events whose event time is jittered
	// back by less than the lateness (always on time).
	DisorderRate float64
	// LateRate is the share of records that are late submissions: half of
	// them within grace (5 to 60 minutes behind the newest event time, so
	// still counted), half after grace (judged too late by the stream).
	LateRate float64
	// InvalidRate is the share of records that violate the contract,
	// cycling through the rejection reasons.
	InvalidRate float64
	// V1Share is the share of new valid events written in schema version 1.
	V1Share float64
	// OtherTypeShare is the share of new events of type draft_saved or
	// viewed, which never count.
	OtherTypeShare float64
	// PayloadBytes is the size of each record's payload object; the default
	// makes a typical record about 400 bytes.
	PayloadBytes int
}

// DefaultConfig returns a realistic mix: 10 000 records over 24 hours and
// 16 stores, 30% from the hot store, 3% retries, 10% disorder, 1% late, 1%
// invalid, 20% schema v1, 25% other types.
func DefaultConfig() Config {
	return Config{
		Seed:           1,
		Events:         10000,
		Start:          defaultStart(),
		Hours:          DefaultHours,
		Stores:         DefaultStores,
		HotShare:       0.3,
		DupRate:        0.03,
		DisorderRate:   0.1,
		LateRate:       0.01,
		InvalidRate:    0.01,
		V1Share:        0.2,
		OtherTypeShare: 0.25,
		PayloadBytes:   DefaultPayloadBytes,
	}
}

// withDefaults returns o with zero sizes set to their defaults. Zero rates
// stay zero: a zero Config writes clean, in-order traffic.
func (o Config) withDefaults() Config {
	if o.Events == 0 {
		o.Events = DefaultEvents
	}
	if o.Start.IsZero() {
		o.Start = defaultStart()
	}
	o.Start = o.Start.UTC()
	if o.Hours == 0 {
		o.Hours = DefaultHours
	}
	if o.Stores == 0 {
		o.Stores = DefaultStores
	}
	if o.PayloadBytes == 0 {
		o.PayloadBytes = DefaultPayloadBytes
	}
	return o
}

// Validate reports a Config that cannot be generated: negative sizes, a
// rate outside [0, 1], DupRate + InvalidRate + LateRate over 1, or a Start
// before 2000-01-02 (zero sizes and Start take their defaults).
func (o Config) Validate() error {
	o = o.withDefaults()
	var errs []string
	if o.Events < 0 {
		errs = append(errs, fmt.Sprintf("events %d is negative", o.Events))
	}
	if o.Hours < 0 {
		errs = append(errs, fmt.Sprintf("hours %d is negative", o.Hours))
	}
	if o.Stores < 0 {
		errs = append(errs, fmt.Sprintf("stores %d is negative", o.Stores))
	}
	if o.PayloadBytes < 0 {
		errs = append(errs, fmt.Sprintf("payload bytes %d is negative", o.PayloadBytes))
	}
	if o.Start.Before(minStart) {
		errs = append(errs, fmt.Sprintf("start %s is before %s (late events reach hours back; 2000 is the contract's floor)",
			o.Start.Format(time.RFC3339), minStart.Format(time.RFC3339)))
	}
	for _, r := range []struct {
		name string
		v    float64
	}{
		{"hot-share", o.HotShare}, {"dup-rate", o.DupRate}, {"disorder-rate", o.DisorderRate},
		{"late-rate", o.LateRate}, {"invalid-rate", o.InvalidRate}, {"v1-share", o.V1Share},
		{"other-type-share", o.OtherTypeShare},
	} {
		if !(r.v >= 0 && r.v <= 1) {
			errs = append(errs, fmt.Sprintf("%s %v is not within [0, 1]", r.name, r.v))
		}
	}
	if s := o.DupRate + o.InvalidRate + o.LateRate; s > 1 {
		errs = append(errs, fmt.Sprintf("dup-rate + invalid-rate + late-rate is %v, over 1", s))
	}
	if len(errs) > 0 {
		return errors.New("gen: " + strings.Join(errs, "; "))
	}
	return nil
}
