package wire

import (
	"time"

	"github.com/receiptflow/receiptflow/pkg/internal/digest"
	"github.com/receiptflow/receiptflow/pkg/window"
)

// Partial is one partition's share of a window, as the windower's Lua
// script keeps it in Redis.
type Partial struct {
	Partition int `json:"partition"`
	// Count is the number of distinct submissions counted.
	Count int64 `json:"count"`
	// Corrections is how many of Count were counted while the partition
	// watermark was past the window end (within grace).
	Corrections int64 `json:"corrections"`
	// LateDropped is the number of distinct event ids routed to LATE.
	LateDropped int64 `json:"late_dropped"`
	// Version is the number of changes (count or late_dropped) so far.
	Version int64 `json:"version"`
	// OnTimeVersion is the number of changes made while on time.
	OnTimeVersion int64 `json:"-"`
	// Digest is the digest of the counted event ids.
	Digest digest.Digest `json:"-"`
	// Watermark is the partition watermark read with the partial.
	Watermark int64 `json:"-"`
}

// Window is the KV value of one window, under WindowKey (docs/spec.md §5).
type Window struct {
	WindowID           string        `json:"window_id"`
	Start              time.Time     `json:"start"`
	End                time.Time     `json:"end"`
	Count              int64         `json:"count"`
	Version            int64         `json:"version"`
	Status             window.Status `json:"status"`
	Watermark          time.Time     `json:"watermark"`
	UpdatedAt          time.Time     `json:"updated_at"`
	FirstOutputVersion int64         `json:"first_output_version"`
	Corrections        int64         `json:"corrections"`
	LateDropped        int64         `json:"late_dropped"`
	Stale              bool          `json:"stale"`
	// Digest is the replay-safety digest of the counted event ids.
	Digest string `json:"digest"`
	// Partitions holds the per-partition partial counts, by partition.
	Partitions []Partial `json:"partitions"`
	// Generation is the state generation the snapshot was built from.
	Generation string `json:"generation"`
}
