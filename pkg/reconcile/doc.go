// Package reconcile is the independent batch pass of docs/spec.md §8: it
// reads a fixed raw snapshot (an NDJSON file, or a RAW stream range read in
// order), applies the event contract (pkg/contract) with none of the
// streaming code's state, replays every partition's watermark in RAW order
// (heartbeats and sources included, docs/spec.md §3, §3.1) and judges each
// event on time, correction or too late itself, counts every hourly
// window, and compares the result with the windows and LATE rows the
// streaming pipeline published, explaining every difference by event id.
// It never takes the stream's word for what was late.
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
//
// # The batch pass
//
// Count takes a file as ingest would publish it (docs/spec.md §8): in file
// order, each record received at Config.DefaultIngestedAt, on its
// partition, with ingest's heartbeats (Config.HeartbeatEvery, EndOfStream)
// between the records. Blank lines are skipped; records of any length are
// handled, oversized ones rejected too_large. The first valid record of an
// event_id claims it; a later valid record with the same id and content is
// a duplicate, with other content it is rejected as conflicting_duplicate.
// Each claimed submission counts once, in the window of its event time, or
// is judged too late (wire.ReasonAfterGrace, or wire.ReasonRetired past the
// replay horizon) against its partition watermark. CountRaw and AddRecord
// take a RAW snapshot instead, whose records carry their own heartbeats.
//
// The watermark is replayed per source (docs/spec.md §3.1, header
// Rf-Source): a partition keeps its broker clock and each source's
// progress there, and W_p follows the slowest source still live in it
// (its progress grew within Config.SourceIdle of broker time), so that no
// source makes another's in-order events late. A file read by Count is
// one source received at Config.DefaultIngestedAt, for which this is the
// rule of §3; Batch.Sources shows what a partition knows of its sources.
//
// # The comparison
//
// Compare never takes the stream's word for what was late. For every final
// stream window, its count, corrections, late_dropped, digest and partition
// counts must be the batch's; every LATE row of the window must match a
// LateJudgment of the batch (same event id, window, reason and watermark),
// and every LateJudgment must have its LATE row. A window the batch has
// (counted or late events) that the stream never published, and a stream
// window the batch has no event of, are unexplained; every unexplained
// difference names its event id when one event accounts for it. Non-final
// stream windows are provisional and not compared; each window gets a
// WindowVerdict.
package reconcile
