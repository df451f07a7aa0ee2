// Package frontdoor is the ingest service's front door (docs/spec.md §10):
// producers send records over HTTP (POST /v1/events) or as NATS requests
// to rf.submit, and get one answer per record once RAW has confirmed the
// records it calls stored. Both doors parse the same bodies (NDJSON, one
// JSON object, or a JSON array of objects), share one ingest.Ingester per
// instance (its records of concurrent requests go out in shared batches,
// each request's records in their order), and answer alike.
package frontdoor
