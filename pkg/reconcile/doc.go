// Package reconcile is the independent batch pass of SPEC section 8: it
// reads a fixed raw snapshot (an NDJSON file), applies the event contract
// (pkg/contract) with none of the streaming code's state, counts every
// hourly window, and compares the result with the final windows the
// streaming pipeline published, explaining every difference by event id.
//
// The pass is deliberately simple where it decides: records are applied one
// at a time in file order, every claimed event id held in memory. It is the
// yardstick the stream is held against, so its rules must be easy to read.
// Only the work that depends on a record alone (reading, validating,
// fingerprinting) runs on several goroutines; its results are applied in
// file order, so the batch is the one a single loop builds (pass_test.go
// holds the two to that).
package reconcile
