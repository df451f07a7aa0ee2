package wire

// Headers set on receiptflow's stream messages. A service reads only these
// names, never another service's constants.
const (
	// HdrHeartbeat marks a source progress heartbeat (on RAW, and copied to
	// VALID); its value is the source's progress: the largest valid event
	// time published so far, in ms since the epoch.
	HdrHeartbeat = "Rf-Heartbeat"
	// HdrSource names the source (docs/spec.md §3.1) that wrote a RAW
	// record or heartbeat: an ingest run or an ingest service instance.
	// Absent or empty: the one source of RAW written before sources had
	// ids (SourceLegacy).
	HdrSource = "Rf-Source"
	// HdrLeave is set ("1") on a source's last heartbeat: after it the
	// source is no longer live in any partition (docs/spec.md §3.1).
	HdrLeave = "Rf-Leave"
	// HdrRawSeq carries the RAW stream sequence a derived message (VALID,
	// REJECTED) came from.
	HdrRawSeq = "Rf-Raw-Seq"
	// HdrReason carries a rejection or late reason.
	HdrReason = "Rf-Reason"
	// HdrOrigSize is set by ingest on a RAW message whose record was cut to
	// a bounded prefix: the record's full size in bytes. Only records that
	// are too_large anyway are cut; the validator reports them with it.
	HdrOrigSize = "Rf-Orig-Size"

	// HdrKind is set on VALID: "s" for a submission, "o" for another valid
	// type, so the windower never decodes the body.
	HdrKind = "Rf-Kind"
	// HdrTime is set on VALID: the event time in ms since the epoch.
	HdrTime = "Rf-Time"
	// HdrEventID is set on VALID: the event id.
	HdrEventID = "Rf-Event-Id"
	// HdrDetail is set on REJECTED: a rejection's human detail.
	HdrDetail = "Rf-Detail"
	// HdrWindow is set on a REJECTED conflicting_duplicate: the window the
	// id's counted copy (the claim's holder) was counted or routed late in,
	// WindowNone when that copy is of a type that never counts. Absent when
	// the copy could not be read (gone from RAW, or its claim has no
	// sequence), and on rows written before it existed.
	HdrWindow = "Rf-Window"
)

// SourceLegacy is the id of the source of a RAW message without
// HdrSource: RAW written before sources had ids is one source.
const SourceLegacy = ""

// WindowNone is HdrWindow's value when the counted copy is in no window.
const WindowNone = "none"

// Values of HdrKind.
const (
	KindSubmission = "s"
	KindOther      = "o"
)

// Atomic batch publish headers (ADR-50, nats-server 2.12 and later): every
// message of a batch carries HdrBatchID and its 1-based HdrBatchSeq, the
// last one HdrBatchCommit "1" too.
const (
	HdrBatchID     = "Nats-Batch-Id"
	HdrBatchSeq    = "Nats-Batch-Sequence"
	HdrBatchCommit = "Nats-Batch-Commit"
)

// HdrBatchLasts is set by ingest's Committer on the commit message of an
// atomic batch to RAW: for each subject in the batch, the position
// (HdrBatchSeq) of its last message (FormatBatchLasts). The server stores
// a committed batch whole, at consecutive sequences ending at the
// commit's, so a reader of the commit knows where each partition's
// messages of the batch end, and that a partition absent from it has none
// there: the validator's publication barrier counts a partition that has
// claimed its last message of a batch as claimed through the batch's end.
const HdrBatchLasts = "Rf-Batch-Lasts"

// KeepBytes is the longest record ingest publishes whole on RAW (longer
// ones are cut to it and carry HdrOrigSize), and the most of a
// record the validator copies to REJECTED: four times the contract's
// maxSize, and never so much that the message (with room for its headers)
// could exceed the server's maxPayload (when known, > 0). A longer record is
// too_large anyway; publishing it whole would fail on a line of megabytes
// (or on its REJECTED copy) and stop the whole ingest or its partition.
func KeepBytes(maxSize int, maxPayload int64) int {
	keep := 4 * maxSize
	if room := int(maxPayload) - 8<<10; maxPayload > 0 && room > maxSize && room < keep {
		keep = room
	}
	return keep
}
