package telemetry

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Steps is a histogram of the time each step of a batch took, with one
// label, step: where a service's part of an event's way goes.
type Steps struct{ h *prometheus.HistogramVec }

// NewSteps registers the steps histogram name with reg (Register): from
// 0.1 ms up, in 16 doubling buckets.
func NewSteps(reg prometheus.Registerer, name, help string) *Steps {
	return &Steps{h: Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: name, Help: help, Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
	}, []string{"step"}))}
}

// Since observes the time from t to now as step (none when t is after
// now: another host's clock) and returns now. A nil Steps only returns
// now.
func (s *Steps) Since(step string, t time.Time) time.Time {
	now := time.Now()
	if s != nil {
		s.h.WithLabelValues(step).Observe(max(0, now.Sub(t).Seconds()))
	}
	return now
}
