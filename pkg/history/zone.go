package history

import (
	"errors"
	"fmt"
	"time"

	// Zone names resolve also in an image without a zoneinfo directory.
	_ "time/tzdata"

	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// Local-time views (docs/spec.md §5.2): windows are UTC hours; a reader's
// time zone only labels them and groups them into its calendar days. That
// is exact only where the zone's offset is a whole number of hours.

var (
	// ErrUnknownZone: the name is not an IANA time zone.
	ErrUnknownZone = errors.New("not an IANA time zone name (e.g. Europe/Berlin)")
	// ErrNotWholeHours: somewhere in the range the zone's offset from UTC
	// is not a whole number of hours, so its local hours are not windows.
	ErrNotWholeHours = errors.New("offset from UTC is not a whole number of hours: hourly windows cannot be cut into its local hours")
)

// LoadZone returns the IANA zone name ("" is UTC), or ErrUnknownZone.
// "Local" is refused: it would mean a different zone on every host.
func LoadZone(name string) (*time.Location, error) {
	if name == "" {
		return time.UTC, nil
	}
	if name == "Local" {
		return nil, fmt.Errorf("%q: %w", name, ErrUnknownZone)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("%q: %w", name, ErrUnknownZone)
	}
	return loc, nil
}

// ParseBoundIn reads a range bound as ParseBound does, except that a date
// (2026-03-29) is the start of that local day in loc; a window id and an
// RFC 3339 time name the same instant in every zone.
func ParseBoundIn(s string, loc *time.Location) (time.Time, error) {
	t, err := ParseBound(s)
	if err != nil {
		return t, err
	}
	if d, err := wire.ParseDay(s); err == nil {
		return DayStart(loc, time.Date(d.Year(), d.Month(), d.Day(), 12, 0, 0, 0, loc)), nil
	}
	return t, nil
}

// Period is a stretch of [Start, End) over which a zone keeps one offset
// (seconds east of UTC) and abbreviation.
type Period struct {
	Start  time.Time `json:"start"`
	End    time.Time `json:"end"`
	Offset int       `json:"offset_seconds"`
	Abbrev string    `json:"abbrev"`
}

// Periods returns loc's periods over [from, to), oldest first, the first
// and last cut to the range, or ErrNotWholeHours (naming the zone, the
// offset and when) if any of them is not a whole number of hours.
func Periods(loc *time.Location, from, to time.Time) ([]Period, error) {
	var out []Period
	err := walkPeriods(loc, from, to, func(p Period) {
		if n := len(out); n > 0 && out[n-1].Offset == p.Offset && out[n-1].Abbrev == p.Abbrev {
			out[n-1].End = p.End
			return
		}
		out = append(out, p)
	})
	return out, err
}

// CheckWholeHours returns ErrNotWholeHours (naming the zone) if loc's
// offset is not a whole number of hours anywhere in [from, to).
func CheckWholeHours(loc *time.Location, from, to time.Time) error {
	return walkPeriods(loc, from, to, func(Period) {})
}

func walkPeriods(loc *time.Location, from, to time.Time, fn func(Period)) error {
	for t := from.UTC(); t.Before(to); {
		lt := t.In(loc)
		abbrev, off := lt.Zone()
		if off%3600 != 0 {
			return fmt.Errorf("time zone %s: %w (UTC%s from %s)", loc, ErrNotWholeHours,
				lt.Format("-07:00"), t.Format(time.RFC3339))
		}
		_, end := lt.ZoneBounds()
		if end.IsZero() || end.After(to) || !end.After(t) {
			end = to
		}
		end = end.UTC()
		fn(Period{Start: t, End: end, Offset: off, Abbrev: abbrev})
		t = end
	}
	return nil
}

// HourLabel labels the hour starting at start with its local start in loc
// ("2026-03-29 03:00 CEST"). An hour whose local time repeats (a DST
// fall-back) gets its offset too: "2026-11-01 01:00 EDT (-04:00)".
func HourLabel(loc *time.Location, start time.Time) string {
	lt := start.In(loc)
	if repeated(loc, start) {
		return lt.Format("2006-01-02 15:04 MST (-07:00)")
	}
	return lt.Format("2006-01-02 15:04 MST")
}

// repeated reports whether the local hour of start occurs twice: another
// UTC hour within three hours shows the same local date and hour.
func repeated(loc *time.Location, start time.Time) bool {
	const wall = "2006-01-02 15"
	w := start.In(loc).Format(wall)
	for d := time.Hour; d <= 3*time.Hour; d += time.Hour {
		if start.Add(-d).In(loc).Format(wall) == w || start.Add(d).In(loc).Format(wall) == w {
			return true
		}
	}
	return false
}

// LocalDay is one calendar day of a time zone: the sum of the hourly
// windows whose start lies in it (docs/spec.md §5.2).
type LocalDay struct {
	// Day is the local date (2026-03-29); Label the local start of its
	// first hour.
	Day   string `json:"day"`
	Zone  string `json:"zone"`
	Label string `json:"label"`
	// Start and End bound the day's hours in UTC, [Start, End).
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// Hours is the day's length: 23, 24 or 25 across DST changes.
	Hours int `json:"hours"`
	// Windows is how many of its hours have data.
	Windows int `json:"windows"`
	// Status is final only when every hour is final, else the least final.
	Status      window.Status `json:"status"`
	Count       int64         `json:"count"`
	Corrections int64         `json:"corrections"`
	LateDropped int64         `json:"late_dropped"`
	AmountCents int64         `json:"amount_cents"`
	Unpriced    int64         `json:"unpriced"`
}

const dateLayout = "2006-01-02"

// DayStart returns the UTC start of the first hour of the local day
// holding t in loc (loc's offsets whole hours around it).
func DayStart(loc *time.Location, t time.Time) time.Time {
	day := t.In(loc).Format(dateLayout)
	lt := t.In(loc)
	s := time.Date(lt.Year(), lt.Month(), lt.Day(), 0, 0, 0, 0, loc).UTC().Truncate(time.Hour)
	for s.Add(-time.Hour).In(loc).Format(dateLayout) == day {
		s = s.Add(-time.Hour)
	}
	for s.In(loc).Format(dateLayout) < day {
		s = s.Add(time.Hour)
	}
	return s
}

// DaySpan returns the UTC bounds of the local days of loc meeting
// [from, to): the start of from's day and the end of the day holding the
// last instant before to.
func DaySpan(loc *time.Location, from, to time.Time) (start, end time.Time) {
	start = DayStart(loc, from)
	last := DayStart(loc, to.Add(-time.Nanosecond))
	return start, nextDay(loc, last)
}

// nextDay is the start of the local day after the one starting at s.
func nextDay(loc *time.Location, s time.Time) time.Time {
	lt := s.In(loc)
	return DayStart(loc, time.Date(lt.Year(), lt.Month(), lt.Day()+1, 12, 0, 0, 0, loc))
}

// Days groups hours into the local days of loc they start in, oldest
// first; days without an hour are not listed. An hour of a day without
// data counts as final when it ends by finalThrough (a later hour is
// final, so its watermark passed this one too: a confirmed zero), else as
// open. hours must hold every hour with data of the days it touches.
func Days(loc *time.Location, hours []Hour, finalThrough time.Time) []LocalDay {
	var out []LocalDay
	var cur *LocalDay
	have := map[time.Time]bool{}
	for _, h := range hours {
		if cur == nil || !h.Start.Before(cur.End) || h.Start.Before(cur.Start) {
			out = append(out, newDay(loc, h.Start))
			cur = &out[len(out)-1]
		}
		have[h.Start] = true
		cur.Windows++
		cur.Count += h.Count
		cur.Corrections += h.Corrections
		cur.LateDropped += h.LateDropped
		cur.AmountCents += h.AmountCents
		cur.Unpriced += h.Unpriced
		cur.Status = leastFinal(cur.Status, h.Status)
	}
	for i := range out {
		d := &out[i]
		for s := d.Start; s.Before(d.End); s = s.Add(time.Hour) {
			if !have[s] {
				st := window.StatusOpen
				if !s.Add(window.Width).After(finalThrough) {
					st = window.StatusFinal
				}
				d.Status = leastFinal(d.Status, st)
			}
		}
	}
	return out
}

func newDay(loc *time.Location, t time.Time) LocalDay {
	s := DayStart(loc, t)
	e := nextDay(loc, s)
	return LocalDay{Day: s.In(loc).Format(dateLayout), Zone: loc.String(), Label: HourLabel(loc, s),
		Start: s, End: e, Hours: int(e.Sub(s) / time.Hour), Status: window.StatusFinal}
}

func leastFinal(a, b window.Status) window.Status {
	if b.Ordinal() < a.Ordinal() {
		return b
	}
	return a
}

// FinalThrough returns the end of the newest final hour the bucket knows
// (a window, a rollup's hour or a final day), zero if none.
func (b *Bucket) FinalThrough() time.Time {
	var t time.Time
	later := func(e time.Time) {
		if e.After(t) {
			t = e
		}
	}
	for _, w := range b.Windows {
		if w.Status == window.StatusFinal {
			later(w.End)
		}
	}
	for _, d := range b.Days {
		if d.Final {
			later(d.End)
		}
		for hh, h := range d.Hours {
			if ms, err := window.ParseID(d.Day + "T" + hh); err == nil && h.Status == window.StatusFinal {
				later(window.Time(ms).Add(window.Width))
			}
		}
	}
	return t
}

// LocalDays returns the local days of loc meeting [from, to) that have
// data, each whole (its hours before from or after to included), hours
// past the window retention from their day rollups.
func (b *Bucket) LocalDays(loc *time.Location, from, to time.Time) []LocalDay {
	start, end := DaySpan(loc, from, to)
	return Days(loc, b.Hours(start, end), b.FinalThrough())
}
