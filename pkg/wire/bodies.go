package wire

import (
	"encoding/json"
	"time"
)

// Change is the body of a CHANGES notice: partition p's checkpoint after a
// batch and the windows whose partials it changed.
type Change struct {
	Partition int      `json:"partition"`
	Seq       uint64   `json:"seq"`
	Watermark int64    `json:"watermark"`
	Windows   []string `json:"windows,omitempty"`
}

// LateEvent is the body of a LATE message.
type LateEvent struct {
	EventID   string    `json:"event_id"`
	WindowID  string    `json:"window_id"`
	Reason    string    `json:"reason"`
	Watermark time.Time `json:"watermark"`
	Partition int       `json:"partition"`
	Seq       uint64    `json:"seq"`
	// Source is the id of the source that wrote the event to RAW
	// (docs/spec.md §3.1; "" for RAW written before sources had ids).
	Source string          `json:"source,omitempty"`
	Event  json.RawMessage `json:"event,omitempty"`
}

// Reasons of LATE messages.
const (
	// ReasonAfterGrace: judged too late against the partition watermark.
	ReasonAfterGrace = "after_grace"
	// ReasonRetired: its window's state was already retired (final and past
	// the replay horizon); dropped without changing the window or its
	// late_dropped.
	ReasonRetired = "retired"
)

// Health is the pipeline health the publisher writes under HealthKey (and,
// split by topic, the other meta.* keys).
type Health struct {
	UpdatedAt time.Time `json:"updated_at"`
	// GlobalWatermark is the minimum of the partition watermarks.
	GlobalWatermark time.Time `json:"global_watermark"`
	// Watermarks by partition.
	Watermarks []time.Time `json:"watermarks"`
	// Backlog is each of the pipeline's durable consumers' unprocessed
	// messages (pending + unacked; wire.Names.OwnsConsumer);
	// for the windower's consumers of VALID a message is a frame (one
	// validator batch, up to its batch size of events).
	Backlog map[string]uint64 `json:"backlog"`
	// LedgerEntries and Windows are the state size held in Redis.
	LedgerEntries int64 `json:"ledger_entries"`
	Windows       int   `json:"windows"`
	// LateTotal is the number of messages in LATE; Corrections the sum of
	// corrections over the windows published.
	LateTotal   uint64 `json:"late_total"`
	Corrections int64  `json:"corrections"`
	// SourceLastSeen is the time of the newest RAW message; Stale is true
	// when it is older than StaleAfter.
	SourceLastSeen time.Time `json:"source_last_seen"`
	Stale          bool      `json:"stale"`
	StaleAfter     string    `json:"stale_after"`
	Generation     string    `json:"generation"`

	// Grace is the grace period the window statuses are judged with, so a
	// reader can tell which empty hours are final (confirmed zeros).
	Grace string `json:"grace"`
	// LateLastMinute is the late-event rate: messages routed to LATE in
	// the last minute (since the publisher started, during its first one).
	LateLastMinute uint64 `json:"late_per_minute"`
	// CorrectionsLastMinute is the correction volume of the last minute:
	// submissions counted as corrections, over the windows published.
	CorrectionsLastMinute int64 `json:"corrections_per_minute"`
	// CorrectionBacklog is the number of LATE messages awaiting offline
	// recomputation: the largest backlog of a durable consumer of LATE,
	// or every LATE message when no such consumer exists.
	CorrectionBacklog uint64 `json:"correction_backlog"`
	// PartitionRecent is, by partition, the submissions counted in the
	// last minute (over the windows published).
	PartitionRecent []int64 `json:"partition_recent"`
	// Hottest lists up to three partitions with the most submissions
	// counted in the last minute, busiest first (none when all are idle).
	Hottest []PartitionHeat `json:"hottest_partitions"`
	// WatermarkAheadMs is how far the furthest partition watermark is
	// ahead of the publisher's clock, in ms (0: none is). A watermark
	// follows event times, which the validator bounds by the broker's
	// receive time plus --max-future-skew: with a skew larger than the
	// lateness a future-dated input can move it past the clock, and then
	// windows close early. AheadPartitions are the partitions ahead.
	WatermarkAheadMs int64 `json:"watermark_ahead_ms,omitempty"`
	AheadPartitions  []int `json:"watermark_ahead_partitions,omitempty"`
	// Rejected is the tally of REJECTED by reason (RejectedKey); nil
	// before the publisher first counted it.
	Rejected *Rejections `json:"rejected,omitempty"`
	// LiveSources is how many sources are live in at least one partition
	// (docs/spec.md §3.1); Sources, by partition, the sources each knows.
	LiveSources int                `json:"live_sources"`
	Sources     []PartitionSources `json:"sources,omitempty"`
}

// PartitionSources are the sources a partition knows (docs/spec.md §3.1).
type PartitionSources struct {
	Partition int           `json:"partition"`
	Sources   []SourceState `json:"sources"`
}

// SourceState is one source in one partition: its progress (the largest
// event time it brought there), the broker time of its last message
// there, and whether it holds the partition's watermark (live).
type SourceState struct {
	ID       string    `json:"id"`
	Progress time.Time `json:"progress"`
	LastSeen time.Time `json:"last_seen"`
	Live     bool      `json:"live"`
}

// RejectedKey is the KV key of the publisher's Rejections tally. It is
// written by revision (compare-and-set), so that several publishers, or
// one restarted, never count a REJECTED message twice.
const RejectedKey = "meta.rejected"

// Rejections tallies the messages of a generation's REJECTED stream by
// reason (the Rf-Reason header), counted once each, in stream order, up
// to stream sequence Through. Total is the sum of ByReason; Expired counts
// messages that left the stream (its retention) before they were counted,
// whose reason is unknown.
type Rejections struct {
	ByReason map[string]uint64 `json:"by_reason"`
	Total    uint64            `json:"total"`
	Through  uint64            `json:"through_seq"`
	Expired  uint64            `json:"expired_uncounted,omitempty"`
}

// PartitionHeat is one partition's recent traffic.
type PartitionHeat struct {
	Partition int   `json:"partition"`
	Recent    int64 `json:"recent"`
}

// GenerationMeta is the value of key ActiveKey in a generation's own
// bucket (Names.Bucket), so that a reader of either bucket reads the same
// thing under that key: Generation is the active generation, as the
// pointer in ControlBucket names it; BucketGeneration is the generation
// the bucket belongs to, and Active whether that one is active. The
// publisher keeps it current; receiptctl switch writes it in the buckets
// of the generations it switches from and to.
type GenerationMeta struct {
	Generation       string `json:"generation"`
	BucketGeneration string `json:"bucket_generation"`
	Active           bool   `json:"active"`
}

// MetaOf is bucket generation gen's GenerationMeta when active is active.
func MetaOf(gen, active string) GenerationMeta {
	return GenerationMeta{Generation: active, BucketGeneration: gen, Active: gen == active}
}

// Pointer is the value of the active-generation pointer (ControlBucket,
// key ActiveKey) that readers follow (docs/spec.md §5). Setting up the
// default generation's topology writes it once (generation
// DefaultGeneration) when it is absent; a switch replaces it by revision.
type Pointer struct {
	Generation string    `json:"generation"`
	Previous   string    `json:"previous,omitempty"`
	SwitchedAt time.Time `json:"switched_at"`
	Forced     bool      `json:"forced,omitempty"`
}
