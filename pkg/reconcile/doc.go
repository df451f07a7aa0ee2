// Package reconcile is the independent batch pass of docs/spec.md §8: it
// reads a fixed raw snapshot (an NDJSON file, or a RAW stream range read in
// order), applies the event contract (pkg/contract) with none of the
// streaming code's state, replays every partition's watermark in RAW order
// (heartbeats included, docs/spec.md §3) and judges each event on time,
// correction or too late itself, counts every hourly window, and compares
// the result with the windows and LATE rows the streaming pipeline
// published, explaining every difference by event id. It never takes the
// stream's word for what was late.
//
// The pass is deliberately simple where it decides: records are applied one
// at a time in RAW (file) order, every claimed event id held in memory (a
// table over the ids' hashes, claims.go). It is the yardstick the stream is
// held against, so its rules must be easy to read. Only the work that
// depends on a record alone (reading the file in blocks and cutting lines,
// validating, fingerprinting, hashing the event id for the claims and the
// window digest) runs on several goroutines; its results are applied in
// order, so the batch is the one a single loop builds (pass_test.go holds
// the two to that, differential_test.go the result to what the pass
// produced before it was made fast).
package reconcile
