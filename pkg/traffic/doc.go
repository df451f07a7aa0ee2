// Package traffic writes deterministic synthetic receipt traffic as NDJSON
// in arrival order (the records of `receiptctl gen`): steady event time over
// a span of hours, several partition keys with a hot one, retries, disorder,
// late events within and after grace, schema v1 and v2, other event types,
// and one invalid record of every rejection reason in turn.
//
// The same Config always gives the same bytes; nothing depends on the wall
// clock. Zero rates stay zero: a zero Config writes clean, in-order traffic.
package traffic
