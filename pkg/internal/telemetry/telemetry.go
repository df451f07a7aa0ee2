// Package telemetry registers Prometheus collectors so that a service
// restarted in the same process (by the supervisor of receiptctl run/demo)
// keeps counting into the collectors of its predecessor.
package telemetry

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c with reg and returns the collector to use: c, or
// the equal collector registered before. A nil reg registers nothing.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if reg == nil {
		return c
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(err) // a programming error: two different collectors with one name
	}
	return c
}
