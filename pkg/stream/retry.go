package stream

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Backoff is the schedule of a retry: the first wait is Initial, each next
// one doubles up to Max, and no wait starts that would end more than For
// after the first attempt (0: no bound but the context). Jitter spreads
// each wait by that fraction either side (0: exact waits).
type Backoff struct {
	Initial, Max, For time.Duration
	Jitter            float64
}

// BackOff returns a new exponential schedule for b, reset. It is not safe
// for concurrent use; each loop takes its own.
func (b Backoff) BackOff() *backoff.ExponentialBackOff {
	e := backoff.NewExponentialBackOff()
	e.InitialInterval = b.Initial
	e.MaxInterval = b.Max
	e.Multiplier = 2
	e.RandomizationFactor = b.Jitter
	e.Reset()
	return e
}

// RetryOp calls op until it succeeds, fails with an error retryable does
// not accept (returned as it is), or the next wait would pass b.For (the
// last error is returned). When ctx ends first it returns ctx's cause
// (context.Canceled or context.DeadlineExceeded) without waiting out the
// current pause. notify, if not nil, is called before each wait. Safe for
// concurrent use if op is.
func RetryOp[T any](ctx context.Context, b Backoff, retryable func(error) bool, notify func(err error, wait time.Duration), op func(context.Context) (T, error)) (T, error) {
	if err := context.Cause(ctx); err != nil {
		var zero T
		return zero, err
	}
	opts := []backoff.RetryOption{backoff.WithBackOff(b.BackOff()), backoff.WithMaxElapsedTime(b.For)}
	if notify != nil {
		opts = append(opts, backoff.WithNotify(notify))
	}
	return backoff.Retry(ctx, func() (T, error) {
		v, err := op(ctx)
		if err != nil && retryable != nil && !retryable(err) {
			return v, backoff.Permanent(err)
		}
		return v, err
	}, opts...)
}

// Pause waits d, or until ctx ends; it returns ctx's cause in that case and
// nil otherwise.
func Pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}
