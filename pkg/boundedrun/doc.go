// Package boundedrun is `receiptctl run`: a run over a file of events that
// ends. Run starts an in-process pipeline (pkg/pipeline) on empty streams,
// ingests the file, waits until every stage has drained, has the batch
// referee (pkg/reconcile) judge the RAW stream the pipeline read, and
// writes the artifacts of --out: windows.json, late.ndjson,
// rejected.ndjson, trace.ndjson, metrics.json, chart.svg, parity.json and
// parity.md.
//
// The stall detector lives here, not in pkg/pipeline: the supervisor runs
// its services until it is closed and has no notion of being done, while a
// bounded run must end. Waiting for its drain, Run gives up with a
// *StuckError when a stage with work left makes no progress for
// Config.StallTimeout. Progress is each stage's own: one of its consumers'
// acknowledged floors moving past the highest it had reached, or an
// expected consumer of it appearing. It is the floor, not the backlog: a
// crash-looping service whose consumer is recreated at its checkpoint shows
// the same floor again, never a higher. And a validator that crashes after
// every publish may still publish frames of new RAW ranges, which the
// windower acknowledges without applying anything new; the windower moving
// is no progress of the validator. The detector reads the pipeline only
// through what it exports (its admin connection and crash counts).
//
// A bounded run keeps every window (pipeline.Config.KeepHistory): its
// artifacts and the parity check describe the whole input.
package boundedrun
