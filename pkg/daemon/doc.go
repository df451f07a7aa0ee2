// Package daemon runs one receiptflow service as its own process: shared
// flags, credentials and TLS for NATS and Redis, connections, Prometheus
// metrics and probes on an HTTP port (pkg/probe, as the dashboard's),
// process-level failpoints, waiting for servers that are unreachable or
// loading (docs/spec.md §4), CPU and allocation profiles on request
// (--profile-dir), and an ordered, bounded shutdown on SIGTERM.
//
// The service itself is wired by pkg/service (Build); a service that
// stops on a lost connection, a full broker store or an unsafe Redis is
// built again and restarted after the pause of service.Restarts, the
// restart policy the in-process supervisor (pkg/pipeline) follows too.
// Any other error ends the process.
package daemon
