// Package explain answers "why does this window hold its number"
// (docs/spec.md §6, receiptctl explain): for one hourly window, the events
// counted on time, every correction with the version it produced, every
// event routed to LATE, the copies dropped as duplicates, the conflicting
// copies rejected, the digest and the referee's verdict.
//
// It reads only what the pipeline recorded, from one of two sources: the
// artifacts of a bounded run (FromRun: windows.json, trace.ndjson,
// late.ndjson, rejected.ndjson, parity.json), or a live deployment
// (Deployment: the KV snapshot, the LATE and REJECTED streams, and the
// window's explain record that the windower keeps in Redis beside its
// partial, ledger.Explain). The CLI and the dashboard's
// GET /api/explain/{id} both call this package.
//
// Invariant: Count == OnTime + len(Corrections), and len(Corrections) is
// the snapshot's corrections. An Explanation that breaks either is never
// returned: the records disagree, and the caller gets ErrInconsistent.
//
// Definitions a reader needs:
//   - a correction's Version is the version of the window's share in its
//     partition (the partial) after the event was counted: the number
//     apply.lua returns and trace.ndjson records as version_after. The
//     published version is the sum of those over the partitions plus the
//     status step, so a correction of partition p first shows in the
//     snapshot whose partition p share has that version;
//   - Duplicates counts the copies that reached the pipeline (RAW) and
//     were dropped by the windower's ledger. Retries the broker's duplicate
//     window dropped at ingest never reach the pipeline (a run's trace
//     lists them with layer jetstream; FromRun reports them apart);
//   - Conflicts are the event ids of the window's events (counted, or
//     routed to LATE, in it) of which another copy with other content was
//     rejected conflicting_duplicate. A deployment finds them by the
//     REJECTED row's wire.HdrWindow (the counted copy's window), so they
//     outlive the window's ledger; rows without it fall back to the ledger.
package explain
