package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/receiptflow/receiptflow/pkg/dashboard"
	"github.com/receiptflow/receiptflow/pkg/history"
	"github.com/receiptflow/receiptflow/pkg/window"
)

// localView is watch's --time-zone (docs/spec.md §5.2): each window's
// local label, and the zone's local days summed from every window the
// dashboard holds. nil means UTC window ids only, as before.
type localView struct {
	loc  *time.Location
	days []history.LocalDay
}

// newLocalView loads zone and checks it around now (a year either way): a
// zone that cannot be cut into whole hours is a usage error naming it.
func newLocalView(zone string, now time.Time) (*localView, error) {
	loc, err := history.LoadZone(zone)
	if err != nil {
		return nil, usageError("--time-zone %v", err)
	}
	if err := history.CheckWholeHours(loc, now.AddDate(-1, 0, 0), now.AddDate(1, 0, 0)); err != nil {
		return nil, usageError("--time-zone: %v", err)
	}
	return &localView{loc: loc}, nil
}

// update recomputes the local days from all (every window held: View(0)).
// A window outside whole hours of the zone (a replay of old data) is a
// usage error naming the zone.
func (z *localView) update(all dashboard.View) error {
	hours := make([]history.Hour, 0, len(all.Windows))
	var finalThrough time.Time
	for i := len(all.Windows) - 1; i >= 0; i-- { // oldest first
		w := all.Windows[i]
		hours = append(hours, history.Hour{WindowID: w.WindowID, Start: w.Start, End: w.End, Status: w.Status, Count: w.Count,
			Corrections: w.Corrections, LateDropped: w.LateDropped, AmountCents: w.AmountCents, Unpriced: w.Unpriced})
		if w.Status == window.StatusFinal && w.End.After(finalThrough) {
			finalThrough = w.End
		}
	}
	if len(hours) > 0 {
		if err := history.CheckWholeHours(z.loc, hours[0].Start, hours[len(hours)-1].End); err != nil {
			return usageError("--time-zone: %v", err)
		}
	}
	z.days = history.Days(z.loc, hours, finalThrough)
	return nil
}

// label is the local start of the hour starting at start.
func (z *localView) label(start time.Time) string { return history.HourLabel(z.loc, start) }

// shown returns the local days holding one of v's windows, oldest first.
func (z *localView) shown(v dashboard.View) []history.LocalDay {
	var out []history.LocalDay
	for _, d := range z.days {
		for _, w := range v.Windows {
			if !w.Start.Before(d.Start) && w.Start.Before(d.End) {
				out = append(out, d)
				break
			}
		}
	}
	return out
}

// dayLine is a local day as one line.
func dayLine(d history.LocalDay) string {
	return fmt.Sprintf("day %s %s (%d hours, %d with data) count %d %s, corrections %d, late dropped %d",
		d.Day, d.Zone, d.Hours, d.Windows, d.Count, d.Status, d.Corrections, d.LateDropped)
}

// writeDays writes the local days of v's windows under the table.
func (z *localView) writeDays(w io.Writer, v dashboard.View) {
	if z == nil {
		return
	}
	for _, d := range z.shown(v) {
		fmt.Fprintf(w, "-- %s\n", dayLine(d))
	}
}

// zonedLine adds the window's local label to its plain line.
func (z *localView) zonedLine(wv dashboard.WindowView, line string) string {
	if z == nil {
		return line
	}
	return strings.Replace(line, "window "+wv.WindowID, "window "+wv.WindowID+" ("+z.label(wv.Start)+")", 1)
}
