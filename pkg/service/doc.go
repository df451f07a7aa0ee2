// Package service is the one place where a receiptflow service is wired:
// Build turns a service's name and its dependencies (Deps) into a value
// with Run(ctx) error, and NewStore builds the ledger store every service
// and tool reads the window state through. pkg/daemon (a service as its
// own process), pkg/pipeline (the in-process supervisor of receiptctl run,
// demo and rebuild) and the bench's in-process mode all call Build, so a
// service runs with the same configuration whichever way it is started.
//
// # Restart policy
//
// Restarts is the one restart policy, used by pkg/daemon and pkg/pipeline
// alike: after an instance stops, the next one starts after a pause that
// begins at RestartInitial and doubles (with ±50% jitter, so instances
// that lost the same server do not come back in step) up to RestartMax.
// The schedule starts over when the instance that stopped had run for
// HealthyRun (a failure after a healthy minute is a new incident, not the
// next of a loop), and after a planned crash (failpoint.ErrCrash: the
// crash is the test, nothing is wrong with the servers).
//
// Why this one: the daemon waited 100ms first and up to 5s, starting
// over after a healthy minute; the supervisor waited 20ms (40ms for a
// failure that was not a planned crash) and up to 2s, starting over after
// each planned crash. The short first pause keeps fault tests and real
// blips quick; the daemon's long cap and healthy-minute reset keep a
// service that fails on every start (one poison message, a server that
// refuses) from spinning: about one start every 5s rather than every 2s.
//
// The two callers differ only in which stops they restart. The daemon
// restarts a service after a lost connection or a full broker store (with
// this pause, then waiting for the servers) and after Redis became unsafe
// (once its eviction policy is safe again, with no pause), and ends the
// process on any other error (the process's own supervisor restarts it). The in-process supervisor stands in for that
// process supervisor, so it restarts after every stop.
package service
