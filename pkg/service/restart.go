package service

import (
	"errors"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/receiptflow/receiptflow/pkg/failpoint"
)

// The restart policy's constants (see the package documentation).
const (
	RestartInitial = 20 * time.Millisecond
	RestartMax     = 5 * time.Second
	HealthyRun     = time.Minute
)

// Restarts is the pause schedule between a service instance's stop and
// the next start. Not safe for concurrent use: one per supervised service.
type Restarts struct {
	b *backoff.ExponentialBackOff
}

// NewRestarts returns a schedule that has not seen a stop yet.
func NewRestarts() *Restarts {
	return &Restarts{b: &backoff.ExponentialBackOff{
		InitialInterval:     RestartInitial,
		RandomizationFactor: 0.5,
		Multiplier:          2,
		MaxInterval:         RestartMax,
	}}
}

// Next returns the pause before the next start, after an instance that ran
// for ran stopped with err.
func (r *Restarts) Next(ran time.Duration, err error) time.Duration {
	if ran >= HealthyRun || errors.Is(err, failpoint.ErrCrash) {
		r.b.Reset()
	}
	return r.b.NextBackOff()
}
