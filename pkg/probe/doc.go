// Package probe serves a service's HTTP port, the same way for every
// service (validator, windower, publisher through pkg/daemon, and the
// dashboard): /healthz answers "ok" from the moment the port is open,
// /readyz answers "ready" or 503 "not ready: <reason>" from the service's
// readiness check, /metrics serves the service's registry once given, and
// every other path goes to the service's own handler once it is mounted
// (before that it answers 503 with the reason it is not ready, or 404).
//
// The server has no write timeout: the dashboard's event streams are
// long-lived and bound each write themselves.
package probe
