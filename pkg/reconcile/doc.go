// Package reconcile is the independent batch pass of SPEC section 8: it
// reads a fixed raw snapshot (an NDJSON file), applies the event contract
// (pkg/contract) with none of the streaming code's state, counts every
// hourly window, and compares the result with the final windows the
// streaming pipeline published, explaining every difference by event id.
//
// The pass is deliberately simple: one goroutine, file order, every claimed
// event id held in memory. It is the yardstick the stream is held against,
// so it must be easy to read rather than fast.
package reconcile
