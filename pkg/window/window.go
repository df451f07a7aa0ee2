// Package window holds the event-time rules of docs/spec.md §3: hourly
// windows, partitions, watermark classification and window status. All
// instants are milliseconds since the Unix epoch (UTC), the unit the Lua
// scripts and the checkpoint use.
package window

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Width is the window size: one hour.
const Width = time.Hour

// WidthMs is Width in milliseconds.
const WidthMs = int64(Width / time.Millisecond)

// DefaultLateness and DefaultGrace are docs/spec.md §3's watermark lateness
// and grace period when a deployment sets neither (config.Defaults).
const (
	DefaultLateness = 5 * time.Minute
	DefaultGrace    = time.Hour
)

// DefaultSourceIdle is docs/spec.md §3.1's --source-idle: how long of a
// partition's broker time a source's progress may stand still before the
// source stops holding the partition's watermark.
const DefaultSourceIdle = 2 * time.Minute

// SourceForget is how long of a partition's broker time a source's
// progress may stand still before the partition forgets the source
// altogether (never less than --source-idle): a source that sends again
// after that is new there. It bounds the state a partition keeps per
// source; the windower and the batch pass both apply it.
const SourceForget = 24 * time.Hour

// IDLayout formats a window id from its start.
const IDLayout = "2006-01-02T15"

// NoWatermark is the watermark of a partition that has seen nothing yet.
const NoWatermark int64 = 0

// EndOfStream is the watermark a bounded source sends after its last event:
// it closes every window (like Flink's MAX_WATERMARK at end of input).
// 9999-12-31T23:59:59.999Z, exactly representable in a Lua number.
const EndOfStream int64 = 253402300799999

// Ms converts t to milliseconds since the epoch.
func Ms(t time.Time) int64 { return t.UnixMilli() }

// Time converts milliseconds since the epoch to a UTC time.
func Time(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

// StartMs is the start of the half-open hour [start, start+1h) holding ms.
func StartMs(ms int64) int64 {
	s := ms - ms%WidthMs
	if ms < 0 && ms%WidthMs != 0 {
		s -= WidthMs
	}
	return s
}

// ID is the window id of the window holding event time ms.
func ID(ms int64) string { return Time(StartMs(ms)).Format(IDLayout) }

// ParseID returns the start (ms) of the window with id, or an error.
func ParseID(id string) (int64, error) {
	t, err := time.ParseInLocation(IDLayout, id, time.UTC)
	if err != nil {
		return 0, fmt.Errorf("window: bad window id %q: %w", id, err)
	}
	return t.UnixMilli(), nil
}

// Bounds is one window: [Start, End) in ms.
type Bounds struct {
	ID    string
	Start int64
	End   int64
}

// Of returns the window holding event time ms.
func Of(ms int64) Bounds {
	s := StartMs(ms)
	return Bounds{ID: Time(s).Format(IDLayout), Start: s, End: s + WidthMs}
}

// Class is the classification of a new submission against its partition's
// watermark before the event is applied.
type Class int

const (
	// OnTime: W_p < end; counted.
	OnTime Class = iota
	// Correction: end <= W_p < end+grace; counted as a correction.
	Correction
	// TooLate: W_p >= end+grace; not counted, routed to LATE.
	TooLate
)

func (c Class) String() string {
	switch c {
	case OnTime:
		return "on_time"
	case Correction:
		return "correction"
	default:
		return "too_late"
	}
}

// Classify classifies a submission of a window ending at end (ms) against
// the partition watermark wp (ms), with grace in ms.
func Classify(wp, end, graceMs int64) Class {
	switch {
	case wp < end:
		return OnTime
	case wp < end+graceMs:
		return Correction
	default:
		return TooLate
	}
}

// Status is a window's status from the global watermark.
type Status string

const (
	StatusOpen    Status = "open"
	StatusInGrace Status = "in_grace"
	StatusFinal   Status = "final"
)

// Ordinal is 0 for open, 1 for in_grace, 2 for final; a snapshot's version
// adds it so that every status change raises the version.
func (s Status) Ordinal() int64 {
	switch s {
	case StatusInGrace:
		return 1
	case StatusFinal:
		return 2
	default:
		return 0
	}
}

// StatusOf is the status of a window ending at end given the global
// watermark w (all ms).
func StatusOf(w, end, graceMs int64) Status {
	switch {
	case w < end:
		return StatusOpen
	case w < end+graceMs:
		return StatusInGrace
	default:
		return StatusFinal
	}
}

// Advance returns the partition watermark after an event of time eventMs:
// max(wp, eventMs-lateness). A watermark never goes back.
func Advance(wp, eventMs, latenessMs int64) int64 {
	if c := eventMs - latenessMs; c > wp {
		return c
	}
	return wp
}

// Partition is fnv1a32(key) mod n, the partition of a partition key.
func Partition(key string, n int) int {
	return int(fnv32(key) % uint32(n))
}

func fnv32(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint32(s[i])) * 16777619
	}
	return h
}

// HotKeys declares partition keys too busy for one partition: each maps to
// the number of partitions k (2 ≤ k ≤ n) its events are spread over.
type HotKeys map[string]int

// Route is the partition of an event: Partition(key, n), except for a
// declared hot key, whose events are spread over k consecutive partitions
// starting at the key's own by fnv1a32(eventID). An event id always lands
// in one partition, so each partition's dedup ledger stays exact and the
// publisher's sum over partitions stays the window's count. Every service
// that routes (ingest, validator, the batch pass) must use the same
// HotKeys, and changing them is a change of partitioning: rebuild into a
// new generation.
func Route(key, eventID string, n int, hot HotKeys) int {
	p := Partition(key, n)
	if k := hot[key]; k > 1 {
		p = (p + int(fnv32(eventID)%uint32(min(k, n)))) % n
	}
	return p
}

// ParseHotKeys parses "key=k,key=k" (empty: none) for n partitions.
func ParseHotKeys(s string, n int) (HotKeys, error) {
	hot := HotKeys{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		key, ks, ok := strings.Cut(item, "=")
		k, err := strconv.Atoi(ks)
		if !ok || key == "" || err != nil {
			return nil, fmt.Errorf("hot key %q: want partition_key=k", item)
		}
		if k < 2 || k > n {
			return nil, fmt.Errorf("hot key %q: k must be between 2 and the partition count %d", item, n)
		}
		if _, dup := hot[key]; dup {
			return nil, fmt.Errorf("hot key %q declared twice", key)
		}
		hot[key] = k
	}
	if len(hot) == 0 {
		return nil, nil
	}
	return hot, nil
}

// String is the declaration ParseHotKeys reads, keys sorted.
func (h HotKeys) String() string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		keys[i] = k + "=" + strconv.Itoa(h[k])
	}
	return strings.Join(keys, ",")
}
