package wire

import (
	"fmt"
	"strings"
	"time"

	"github.com/receiptflow/receiptflow/pkg/window"
)

// DayKeyPrefix starts the KV key of every day rollup (DayKey), in the same
// per-generation bucket as the window snapshots.
const DayKeyPrefix = "day."

// DayLayout formats a day rollup's id: the UTC date of its start.
const DayLayout = "2006-01-02"

// DayKey is the KV key of the rollup of day (a DayLayout date, e.g.
// day.2026-12-02).
func DayKey(day string) string { return DayKeyPrefix + day }

// DayOf returns the id (DayLayout) of the UTC day holding window id.
func DayOf(windowID string) (string, error) {
	start, err := window.ParseID(windowID)
	if err != nil {
		return "", err
	}
	return window.Time(start).Format(DayLayout), nil
}

// ParseDay parses a day id (DayLayout) into the day's UTC start.
func ParseDay(day string) (time.Time, error) {
	t, err := time.Parse(DayLayout, day)
	if err != nil || t.Format(DayLayout) != day {
		return time.Time{}, fmt.Errorf("wire: bad day id %q (want %s)", day, DayLayout)
	}
	return t, nil
}

// HourKey is the key of an hour inside Day.Hours: the window's hour of day,
// two digits ("00" to "23").
func HourKey(windowID string) string {
	_, hh, _ := strings.Cut(windowID, "T")
	return hh
}

// DayHour is one hour of a day rollup: the counts of that hour's window
// snapshot as the publisher last wrote it.
type DayHour struct {
	Count       int64         `json:"count"`
	Corrections int64         `json:"corrections"`
	LateDropped int64         `json:"late_dropped"`
	Version     int64         `json:"version"`
	Status      window.Status `json:"status"`
	// AmountCents and Unpriced are the hour's breakdown totals (Breakdown).
	AmountCents int64 `json:"amount_cents"`
	Unpriced    int64 `json:"unpriced"`
}

// Day is the KV value of one UTC day's rollup, under DayKey. It is a pure
// function of the last snapshots of its hours (Hours), so it survives the
// pruning of those snapshots and a replay that changes no hour changes
// nothing: Count, Corrections and LateDropped are the sums over Hours,
// Windows is len(Hours), and Version is the sum of the hours' versions
// plus 1 once the day is final.
type Day struct {
	Day         string    `json:"day"`
	Start       time.Time `json:"start"`
	End         time.Time `json:"end"`
	Count       int64     `json:"count"`
	Corrections int64     `json:"corrections"`
	LateDropped int64     `json:"late_dropped"`
	// AmountCents and Unpriced sum the hours' (docs/spec.md §5.1).
	AmountCents int64 `json:"amount_cents"`
	Unpriced    int64 `json:"unpriced"`
	// Windows is how many hourly windows of the day had data.
	Windows int `json:"windows"`
	// Final: every hour of the day is final (the global watermark passed
	// the day's end plus grace, and every hour with data is final).
	Final     bool      `json:"final"`
	Version   int64     `json:"version"`
	UpdatedAt time.Time `json:"updated_at"`
	// Generation is the state generation the hours were built from.
	Generation string `json:"generation"`
	// Hours holds each hour with data, by HourKey.
	Hours map[string]DayHour `json:"hours"`
}

// Total recomputes d's sums, Windows and Version from d.Hours and d.Final.
func (d *Day) Total() {
	d.Count, d.Corrections, d.LateDropped, d.Version = 0, 0, 0, 0
	d.AmountCents, d.Unpriced = 0, 0
	for _, h := range d.Hours {
		d.Count += h.Count
		d.AmountCents += h.AmountCents
		d.Unpriced += h.Unpriced
		d.Corrections += h.Corrections
		d.LateDropped += h.LateDropped
		d.Version += h.Version
	}
	d.Windows = len(d.Hours)
	if d.Final {
		d.Version++
	}
}
