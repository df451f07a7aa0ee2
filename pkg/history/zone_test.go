package history

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// The 2026 DST changes the tests cross: America/New_York on Mar 8 and
// Nov 1, Europe/Berlin on Mar 29 and Oct 25.
var dstChanges = []struct {
	zone  string
	day   string // local date of the change
	hours int    // its length
}{
	{"America/New_York", "2026-03-08", 23},
	{"America/New_York", "2026-11-01", 25},
	{"Europe/Berlin", "2026-03-29", 23},
	{"Europe/Berlin", "2026-10-25", 25},
}

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := LoadZone(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// refDay is the reference for one local day, computed by walking UTC
// hours one by one with time.In: nothing shared with Days.
type refDay struct {
	hours, windows int
	count, corr    int64
	status         window.Status
}

// TestDaysAcrossDST: around each 2026 DST change of New York and Berlin,
// Days groups synthetic hours (every hour has data; statuses final, then
// in_grace, then open) into local days equal to a reference grouping UTC
// hours by their local date: 23 and 25 hours on the change days, counts
// and corrections summed, the status the least final of the hours.
func TestDaysAcrossDST(t *testing.T) {
	for _, c := range dstChanges {
		t.Run(c.zone+"/"+c.day, func(t *testing.T) {
			loc := mustZone(t, c.zone)
			mid, _ := time.Parse(dateLayout, c.day)
			from, to := mid.Add(-72*time.Hour), mid.Add(72*time.Hour)
			// Final up to 10 h after the change day's UTC midnight,
			// in grace for one more hour, open after.
			finalTo := mid.Add(10 * time.Hour)
			var hours []Hour
			ref := map[string]*refDay{}
			var order []string
			for s := from; s.Before(to); s = s.Add(time.Hour) {
				st := window.StatusOpen
				switch {
				case !s.Add(time.Hour).After(finalTo):
					st = window.StatusFinal
				case !s.After(finalTo):
					st = window.StatusInGrace
				}
				n := int64(s.Hour()*7 + s.Day())
				hours = append(hours, Hour{WindowID: window.ID(window.Ms(s)), Start: s, End: s.Add(time.Hour),
					Status: st, Count: n, Corrections: n % 3})
				d := s.In(loc).Format("2006-01-02")
				r := ref[d]
				if r == nil {
					r = &refDay{status: window.StatusFinal}
					ref[d] = r
					order = append(order, d)
				}
				r.hours++
				r.windows++
				r.count += n
				r.corr += n % 3
				if st == window.StatusOpen || (st == window.StatusInGrace && r.status == window.StatusFinal) {
					r.status = st
				}
			}
			days := Days(loc, hours, finalTo)
			if len(days) != len(order) {
				t.Fatalf("%d days, reference %d", len(days), len(order))
			}
			for i, d := range days {
				r := ref[order[i]]
				if d.Day != order[i] || d.Windows != r.windows || d.Count != r.count || d.Corrections != r.corr || d.Status != r.status {
					t.Errorf("day %d: %+v, reference %s %+v", i, d, order[i], *r)
				}
				// The first and last days are cut by the synthetic range;
				// every other day is whole.
				if i > 0 && i < len(days)-1 && d.Hours != r.hours {
					t.Errorf("%s: %d hours, reference %d", d.Day, d.Hours, r.hours)
				}
				if d.Day == c.day && d.Hours != c.hours {
					t.Errorf("%s: %d hours, want %d", d.Day, d.Hours, c.hours)
				}
				if d.Day != c.day && i > 0 && i < len(days)-1 && d.Hours != 24 {
					t.Errorf("%s: %d hours, want 24", d.Day, d.Hours)
				}
			}
			var sawStatus = map[window.Status]bool{}
			for _, d := range days {
				sawStatus[d.Status] = true
			}
			if !sawStatus[window.StatusFinal] || !sawStatus[window.StatusOpen] {
				t.Errorf("the fixture should give final and open days: %v", sawStatus)
			}
		})
	}
}

// TestDaysStatusLeastFinal: one in_grace hour makes its day in_grace, an
// open one makes it open; an hour without data counts as final only once
// a later hour is final.
func TestDaysStatusLeastFinal(t *testing.T) {
	loc := mustZone(t, "Europe/Berlin")
	// Local 2026-10-25 (25 h) is [2026-10-24T22Z, 2026-10-25T23Z).
	at := func(d, h int) time.Time { return time.Date(2026, 10, d, h, 0, 0, 0, time.UTC) }
	hour := func(s time.Time, st window.Status) Hour {
		return Hour{Start: s, End: s.Add(time.Hour), Status: st, Count: 1}
	}
	cases := []struct {
		name         string
		hours        []Hour
		finalThrough time.Time
		want         window.Status
	}{
		{"all final, gaps confirmed by a later final hour", []Hour{hour(at(24, 22), window.StatusFinal), hour(at(25, 5), window.StatusFinal)}, at(26, 1), window.StatusFinal},
		{"one hour in grace", []Hour{hour(at(24, 22), window.StatusFinal), hour(at(25, 5), window.StatusInGrace)}, at(26, 1), window.StatusInGrace},
		{"one hour open", []Hour{hour(at(24, 23), window.StatusOpen), hour(at(25, 5), window.StatusInGrace)}, at(26, 1), window.StatusOpen},
		{"the last hour has no data and nothing later is final", []Hour{hour(at(24, 22), window.StatusFinal), hour(at(25, 21), window.StatusFinal)}, at(25, 22), window.StatusOpen},
		{"every hour final up to the day's end", []Hour{hour(at(24, 22), window.StatusFinal), hour(at(25, 21), window.StatusFinal)}, at(25, 23), window.StatusFinal},
	}
	for _, c := range cases {
		days := Days(loc, c.hours, c.finalThrough)
		if len(days) != 1 || days[0].Day != "2026-10-25" || days[0].Hours != 25 || days[0].Status != c.want || days[0].Windows != len(c.hours) {
			t.Errorf("%s: %+v, want one 25-hour day %s", c.name, days, c.want)
		}
	}
}

// TestHourLabels: the local start of an hour, with the abbreviation; both
// hours of a fall-back's repeated local hour carry their offset.
func TestHourLabels(t *testing.T) {
	at := func(mo time.Month, d, h int) time.Time { return time.Date(2026, mo, d, h, 0, 0, 0, time.UTC) }
	cases := []struct {
		zone string
		utc  time.Time
		want string
	}{
		{"UTC", at(12, 2, 10), "2026-12-02 10:00 UTC"},
		{"Europe/Berlin", at(3, 29, 0), "2026-03-29 01:00 CET"},
		{"Europe/Berlin", at(3, 29, 1), "2026-03-29 03:00 CEST"},
		{"Europe/Berlin", at(10, 24, 23), "2026-10-25 01:00 CEST"},
		{"Europe/Berlin", at(10, 25, 0), "2026-10-25 02:00 CEST (+02:00)"},
		{"Europe/Berlin", at(10, 25, 1), "2026-10-25 02:00 CET (+01:00)"},
		{"Europe/Berlin", at(10, 25, 2), "2026-10-25 03:00 CET"},
		{"America/New_York", at(3, 8, 6), "2026-03-08 01:00 EST"},
		{"America/New_York", at(3, 8, 7), "2026-03-08 03:00 EDT"},
		{"America/New_York", at(11, 1, 4), "2026-11-01 00:00 EDT"},
		{"America/New_York", at(11, 1, 5), "2026-11-01 01:00 EDT (-04:00)"},
		{"America/New_York", at(11, 1, 6), "2026-11-01 01:00 EST (-05:00)"},
		{"America/New_York", at(11, 1, 7), "2026-11-01 02:00 EST"},
	}
	for _, c := range cases {
		if got := HourLabel(mustZone(t, c.zone), c.utc); got != c.want {
			t.Errorf("%s %s: %q, want %q", c.zone, c.utc.Format(time.RFC3339), got, c.want)
		}
	}
	// Over a year of hours, labels are unique: no two hours look alike.
	for _, z := range []string{"America/New_York", "Europe/Berlin"} {
		loc := mustZone(t, z)
		seen := map[string]time.Time{}
		for s := at(1, 1, 0); s.Year() == 2026; s = s.Add(time.Hour) {
			l := HourLabel(loc, s)
			if prev, ok := seen[l]; ok {
				t.Fatalf("%s: %s and %s both %q", z, prev, s, l)
			}
			seen[l] = s
		}
	}
}

// TestWholeHourZones: zones with half- or quarter-hour offsets are
// refused naming the zone; whole-hour zones are accepted over 2026, but
// not where the asked range reaches local mean time; unknown names and
// "Local" are ErrUnknownZone.
func TestWholeHourZones(t *testing.T) {
	y2026, y2027 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, z := range []string{"Asia/Kolkata", "Asia/Kathmandu", "Australia/Adelaide"} {
		err := CheckWholeHours(mustZone(t, z), y2026, y2027)
		if !errors.Is(err, ErrNotWholeHours) || !strings.Contains(err.Error(), z) {
			t.Errorf("%s: %v", z, err)
		}
	}
	for _, z := range []string{"UTC", "Europe/Berlin", "America/New_York", "Asia/Tokyo"} {
		if err := CheckWholeHours(mustZone(t, z), y2026, y2027); err != nil {
			t.Errorf("%s: %v", z, err)
		}
	}
	// Berlin kept local mean time (+00:53:28) until 1893.
	if err := CheckWholeHours(mustZone(t, "Europe/Berlin"), time.Date(1890, 1, 1, 0, 0, 0, 0, time.UTC), y2026); !errors.Is(err, ErrNotWholeHours) {
		t.Errorf("Berlin from 1890: %v", err)
	}
	// The whole range to the end of time is walked quickly enough to be a flag check.
	if err := CheckWholeHours(mustZone(t, "America/New_York"), y2026, time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)); err != nil {
		t.Errorf("New York to 9999: %v", err)
	}
	for _, z := range []string{"Mars/Olympus", "Local", "../etc/passwd"} {
		if _, err := LoadZone(z); !errors.Is(err, ErrUnknownZone) {
			t.Errorf("LoadZone(%q): %v", z, err)
		}
	}
	ps, err := Periods(mustZone(t, "Europe/Berlin"), y2026, y2027)
	if err != nil || len(ps) != 3 || ps[0].Abbrev != "CET" || ps[1].Abbrev != "CEST" || ps[1].Offset != 7200 ||
		!ps[1].Start.Equal(time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC)) || !ps[2].End.Equal(y2027) {
		t.Errorf("Berlin 2026 periods: %+v, %v", ps, err)
	}
}

// TestLocalDaysFromRollups: a bucket whose older hours survive only in
// their UTC day rollups (the snapshots pruned) and whose newer hours are
// snapshots gives every local day of New York across Nov 1, 2026 whole:
// the 25-hour day reads four hours from the rollup of Nov 1 UTC and the
// rest from the rollup of Nov 2 and the snapshots.
func TestLocalDaysFromRollups(t *testing.T) {
	loc := mustZone(t, "America/New_York")
	b := &Bucket{}
	rollups := map[string]*wire.Day{}
	var want int64
	for s := time.Date(2026, 11, 1, 4, 0, 0, 0, time.UTC); s.Before(time.Date(2026, 11, 2, 5, 0, 0, 0, time.UTC)); s = s.Add(time.Hour) {
		n := int64(s.Hour() + 1)
		want += n
		id := window.ID(window.Ms(s))
		if s.Before(time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)) || s.Hour() < 2 {
			day := s.Format(dateLayout)
			if rollups[day] == nil {
				start, _ := wire.ParseDay(day)
				rollups[day] = &wire.Day{Day: day, Start: start, End: start.Add(24 * time.Hour), Hours: map[string]wire.DayHour{}}
			}
			rollups[day].Hours[wire.HourKey(id)] = wire.DayHour{Count: n, Version: n, Status: window.StatusFinal}
			continue
		}
		b.Windows = append(b.Windows, wire.Window{WindowID: id, Start: s, End: s.Add(time.Hour), Count: n, Status: window.StatusInGrace})
	}
	for _, d := range []string{"2026-11-01", "2026-11-02"} {
		rollups[d].Total()
		b.Days = append(b.Days, *rollups[d])
	}
	days := b.LocalDays(loc, time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC), time.Date(2026, 11, 1, 13, 0, 0, 0, time.UTC))
	if len(days) != 1 || days[0].Day != "2026-11-01" || days[0].Hours != 25 || days[0].Windows != 25 || days[0].Count != want ||
		days[0].Status != window.StatusInGrace || days[0].Label != "2026-11-01 00:00 EDT" {
		t.Fatalf("local days: %+v (want count %d)", days, want)
	}
}
