package reconcile

// HostileStream is hostileStream for the external tests.
var HostileStream = hostileStream
