// Package history reads the retained history of a generation's KV bucket
// (docs/history.md): the hourly window snapshots still held and the day
// rollups (wire.Day), and answers range queries over them, an hour
// falling back to its day rollup's entry once its snapshot was pruned.
// zone.go shows those UTC hours in a reader's time zone (docs/spec.md
// §5.2): local hour labels and local days, exact only for zones whose
// offset is a whole number of hours over the range, which it checks.
package history

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// Source names where an Hour row comes from.
const (
	// SourceWindow: the hour's window snapshot.
	SourceWindow = "window"
	// SourceRollup: the hour's entry in its day rollup (the snapshot was
	// pruned beyond the window retention).
	SourceRollup = "rollup"
)

// Hour is one hourly row of a range query.
type Hour struct {
	WindowID    string        `json:"window_id"`
	Start       time.Time     `json:"start"`
	End         time.Time     `json:"end"`
	Status      window.Status `json:"status"`
	Count       int64         `json:"count"`
	Corrections int64         `json:"corrections"`
	LateDropped int64         `json:"late_dropped"`
	AmountCents int64         `json:"amount_cents"`
	Unpriced    int64         `json:"unpriced"`
	Version     int64         `json:"version"`
	Stale       bool          `json:"stale"`
	Source      string        `json:"source"`
	// Local is the hour's label in the reader's time zone (HourLabel),
	// when one was asked for.
	Local string `json:"local,omitempty"`
}

// Bucket is what a generation's bucket holds of its history.
type Bucket struct {
	Windows []wire.Window // sorted by start
	Days    []wire.Day    // sorted by start
}

// ErrBadBound is returned by ParseBound for a value it cannot read.
var ErrBadBound = errors.New("not a window id (2026-12-02T10), a date (2026-12-02) or an RFC 3339 time")

// ParseBound reads a range bound: a window id (2026-12-02T10, the
// window's start), a date (2026-12-02, its midnight UTC) or an RFC 3339
// time. It returns the instant in UTC or ErrBadBound.
func ParseBound(s string) (time.Time, error) {
	if ms, err := window.ParseID(s); err == nil && window.ID(ms) == s {
		return window.Time(ms), nil
	}
	if t, err := wire.ParseDay(s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC(), nil
	}
	return time.Time{}, ErrBadBound
}

// Read returns every window snapshot and day rollup kv holds (delete and
// purge markers are skipped). A value that does not decode is an error.
// It needs only a reader's rights (the dashboard user's): one watch per
// key prefix, each with its filter in the consumer's subject.
func Read(ctx context.Context, kv jetstream.KeyValue) (*Bucket, error) {
	b := &Bucket{}
	for _, prefix := range []string{wire.WindowKeyPrefix, wire.DayKeyPrefix} {
		if err := b.read(ctx, kv, prefix); err != nil {
			return nil, err
		}
	}
	sort.Slice(b.Windows, func(i, j int) bool { return b.Windows[i].Start.Before(b.Windows[j].Start) })
	sort.Slice(b.Days, func(i, j int) bool { return b.Days[i].Start.Before(b.Days[j].Start) })
	return b, nil
}

func (b *Bucket) read(ctx context.Context, kv jetstream.KeyValue, prefix string) error {
	w, err := kv.Watch(ctx, prefix+"*", jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("history: watch %s %s*: %w", kv.Bucket(), prefix, err)
	}
	defer w.Stop()
	for {
		var e jetstream.KeyValueEntry
		select {
		case got, open := <-w.Updates():
			if !open {
				return fmt.Errorf("history: watch %s closed", kv.Bucket())
			}
			e = got
		case <-ctx.Done():
			return ctx.Err()
		}
		if e == nil {
			return nil
		}
		switch {
		case strings.HasPrefix(e.Key(), wire.WindowKeyPrefix):
			var s wire.Window
			if err := json.Unmarshal(e.Value(), &s); err != nil {
				return fmt.Errorf("history: %s: %w", e.Key(), err)
			}
			b.Windows = append(b.Windows, s)
		case strings.HasPrefix(e.Key(), wire.DayKeyPrefix):
			var d wire.Day
			if err := json.Unmarshal(e.Value(), &d); err != nil {
				return fmt.Errorf("history: %s: %w", e.Key(), err)
			}
			b.Days = append(b.Days, d)
		}
	}
}

// overlaps reports whether [start, end) meets [from, to).
func overlaps(start, end, from, to time.Time) bool { return start.Before(to) && end.After(from) }

// Hours returns the hours meeting [from, to), oldest first: each hour's
// snapshot when the bucket holds it, otherwise its day rollup's entry
// (Source SourceRollup). Hours without data are not listed.
func (b *Bucket) Hours(from, to time.Time) []Hour {
	rows := map[string]Hour{}
	for _, w := range b.Windows {
		if overlaps(w.Start, w.End, from, to) {
			rows[w.WindowID] = Hour{WindowID: w.WindowID, Start: w.Start, End: w.End, Status: w.Status, Count: w.Count,
				Corrections: w.Corrections, LateDropped: w.LateDropped, AmountCents: w.AmountCents, Unpriced: w.Unpriced,
				Version: w.Version, Stale: w.Stale, Source: SourceWindow}
		}
	}
	for _, d := range b.Days {
		if !overlaps(d.Start, d.End, from, to) {
			continue
		}
		for hh, h := range d.Hours {
			id := d.Day + "T" + hh
			ms, err := window.ParseID(id)
			if err != nil {
				continue
			}
			start := window.Time(ms)
			end := start.Add(window.Width)
			if _, ok := rows[id]; ok || !overlaps(start, end, from, to) {
				continue
			}
			rows[id] = Hour{WindowID: id, Start: start, End: end, Status: h.Status, Count: h.Count,
				Corrections: h.Corrections, LateDropped: h.LateDropped, AmountCents: h.AmountCents, Unpriced: h.Unpriced,
				Version: h.Version, Source: SourceRollup}
		}
	}
	out := make([]Hour, 0, len(rows))
	for _, id := range slices.Sorted(maps.Keys(rows)) {
		out = append(out, rows[id])
	}
	return out
}

// DaysIn returns the day rollups meeting [from, to), oldest first.
func (b *Bucket) DaysIn(from, to time.Time) []wire.Day {
	out := []wire.Day{}
	for _, d := range b.Days {
		if overlaps(d.Start, d.End, from, to) {
			out = append(out, d)
		}
	}
	return out
}
