package dashboard

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/history"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// dayHour is one hour of a days fixture as a reader must see it: the
// window snapshot's figures where the bucket holds one, else its day
// rollup's entry.
type dayHour struct {
	start              time.Time
	status             window.Status
	count, corr, late  int64
	rollupOnly, noData bool
}

// daysFixture builds a bucket over [from, to): final hours up to finalTo,
// one in grace, open after; every 11th final hour without data (a gap);
// hours before cut only in their UTC day's rollup, the others as window
// snapshots (their rollup entries older, with other counts, which the
// snapshots override). It returns the windows, the rollups and the hours
// as they must be read.
func daysFixture(from, to, finalTo, cut time.Time) ([]wire.Window, []wire.Day, []dayHour) {
	var ws []wire.Window
	days := map[string]*wire.Day{}
	var order []string
	var hs []dayHour
	i := 0
	for s := from; s.Before(to); s, i = s.Add(time.Hour), i+1 {
		st := window.StatusOpen
		switch {
		case !s.Add(time.Hour).After(finalTo):
			st = window.StatusFinal
		case !s.After(finalTo):
			st = window.StatusInGrace
		}
		h := dayHour{start: s, status: st, count: int64(s.Hour()*5 + s.Day()), corr: int64(i % 3), late: int64(i % 2)}
		if st == window.StatusFinal && i%11 == 5 {
			hs = append(hs, dayHour{start: s, noData: true})
			continue
		}
		id := window.ID(window.Ms(s))
		dayID := s.Format(wire.DayLayout)
		d := days[dayID]
		if d == nil {
			ds, _ := wire.ParseDay(dayID)
			d = &wire.Day{Day: dayID, Start: ds, End: ds.Add(24 * time.Hour), Hours: map[string]wire.DayHour{}}
			days[dayID] = d
			order = append(order, dayID)
		}
		if s.Before(cut) {
			h.rollupOnly = true
			d.Hours[wire.HourKey(id)] = wire.DayHour{Count: h.count, Corrections: h.corr, LateDropped: h.late, Version: 3, Status: st}
		} else {
			// An older rollup entry: the snapshot is what counts.
			d.Hours[wire.HourKey(id)] = wire.DayHour{Count: h.count - 1, Version: 1, Status: window.StatusOpen}
			ws = append(ws, wire.Window{WindowID: id, Start: s, End: s.Add(time.Hour), Count: h.count, Corrections: h.corr,
				LateDropped: h.late, Version: 4, Status: st, FirstOutputVersion: 1})
		}
		hs = append(hs, h)
	}
	var ds []wire.Day
	for _, id := range order {
		ds = append(ds, *days[id])
	}
	return ws, ds, hs
}

// refDay is the reference for one local day, computed from the hours one
// by one with time.In, sharing nothing with pkg/history.
type refDay struct {
	day               string
	hours, windows    int
	count, corr, late int64
	status            window.Status
}

// referenceDays groups hs by local date in loc and keeps the days with
// data among the n local dates ending with the newest hour's, newest
// first; older reports whether an hour with data lies before them. A
// day's hours are found by walking UTC hours around its date; an hour
// without data is final when it ends by the end of the newest final hour
// with data (a confirmed zero), else open.
func referenceDays(loc *time.Location, hs []dayHour, n int) (out []refDay, older bool) {
	rank := map[window.Status]int{window.StatusOpen: 0, window.StatusInGrace: 1, window.StatusFinal: 2}
	at := map[time.Time]dayHour{}
	var newest, finalThrough time.Time
	var dates []string
	for _, h := range hs {
		if h.noData {
			continue
		}
		at[h.start] = h
		newest = h.start
		if h.status == window.StatusFinal {
			finalThrough = h.start.Add(time.Hour)
		}
		if d := h.start.In(loc).Format("2006-01-02"); len(dates) == 0 || dates[len(dates)-1] != d {
			dates = append(dates, d)
		}
	}
	nl := newest.In(loc)
	first := time.Date(nl.Year(), nl.Month(), nl.Day()-(n-1), 12, 0, 0, 0, loc).Format("2006-01-02")
	for i := len(dates) - 1; i >= 0; i-- {
		if dates[i] < first {
			older = true
			continue
		}
		r := refDay{day: dates[i], status: window.StatusFinal}
		midnight, _ := time.Parse("2006-01-02", dates[i])
		for s := midnight.Add(-16 * time.Hour); s.Before(midnight.Add(40 * time.Hour)); s = s.Add(time.Hour) {
			if s.In(loc).Format("2006-01-02") != dates[i] {
				continue
			}
			r.hours++
			st := window.StatusOpen
			if h, ok := at[s]; ok {
				st = h.status
				r.windows++
				r.count += h.count
				r.corr += h.corr
				r.late += h.late
			} else if !s.Add(time.Hour).After(finalThrough) {
				st = window.StatusFinal
			}
			if rank[st] < rank[r.status] {
				r.status = st
			}
		}
		out = append(out, r)
	}
	return out, older
}

func sameDays(got []history.LocalDay, want []refDay) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d days, reference %d: %+v", len(got), len(want), got)
	}
	for i, d := range got {
		r := want[i]
		if d.Day != r.day || d.Hours != r.hours || d.Windows != r.windows || d.Count != r.count ||
			d.Corrections != r.corr || d.LateDropped != r.late || d.Status != r.status {
			return fmt.Errorf("day %d: %+v, reference %+v", i, d, r)
		}
	}
	return nil
}

// TestLocalDaysAcrossDST (docs/spec.md §5.2): around each 2026 DST change
// of New York and Berlin, the page's local days (localDays, the body of
// GET /api/days) equal a reference that groups the hours by their local
// date: 23 and 25 hours on the change days, counts, corrections and late
// dropped summed, the status the least final of the hours (a gap before a
// final hour is a confirmed zero), hours past the window retention from
// their day rollup's per-hour entries, the newest day first.
func TestLocalDaysAcrossDST(t *testing.T) {
	for _, c := range []struct {
		zone, day string
		hours     int
	}{
		{"America/New_York", "2026-03-08", 23},
		{"America/New_York", "2026-11-01", 25},
		{"Europe/Berlin", "2026-03-29", 23},
		{"Europe/Berlin", "2026-10-25", 25},
	} {
		t.Run(c.zone+"/"+c.day, func(t *testing.T) {
			loc, err := history.LoadZone(c.zone)
			if err != nil {
				t.Fatal(err)
			}
			mid, _ := time.Parse("2006-01-02", c.day)
			from, to := mid.Add(-6*24*time.Hour), mid.Add(3*24*time.Hour)
			ws, ds, hs := daysFixture(from, to, mid.Add(30*time.Hour), mid.Add(-2*24*time.Hour))
			b := &history.Bucket{Windows: ws, Days: ds}
			for _, n := range []int{1, 4, DefaultDays} {
				v, err := localDays(b, loc, n)
				if err != nil {
					t.Fatal(err)
				}
				want, older := referenceDays(loc, hs, n)
				if err := sameDays(v.Days, want); err != nil {
					t.Fatalf("%d days: %v", n, err)
				}
				if v.Older != older {
					t.Errorf("%d days: older %v, reference %v", n, v.Older, older)
				}
				if n == DefaultDays {
					saw := false
					for _, d := range v.Days {
						saw = saw || (d.Day == c.day && d.Hours == c.hours)
					}
					if !saw {
						t.Errorf("no %d-hour day %s in %+v", c.hours, c.day, v.Days)
					}
				}
			}
		})
	}
}

// TestDaysAPI: GET /api/days reads the dashboard's bucket (window
// snapshots and day rollups, from its KV watch) and gives Berlin's local
// days across the Oct 25 fall-back as the reference does; a zone that is
// not whole hours, an unknown one and a bad days are a 400 naming them.
func TestDaysAPI(t *testing.T) {
	_, url := testenv.NATS(t)
	f := start(t, url, Config{Generation: "1", StaleAfter: time.Minute, Recent: 5})
	kv := f.bucket("1")
	mid := time.Date(2026, 10, 25, 0, 0, 0, 0, time.UTC)
	ws, ds, hs := daysFixture(mid.Add(-4*24*time.Hour), mid.Add(2*24*time.Hour), mid.Add(30*time.Hour), mid.Add(-2*24*time.Hour))
	for _, d := range ds {
		f.put(kv, wire.DayKey(d.Day), d)
	}
	for _, w := range ws {
		f.putWindow(kv, w)
	}
	f.putHealth(kv, time.Now().UTC())
	loc, _ := history.LoadZone("Europe/Berlin")
	want, older := referenceDays(loc, hs, 5)
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		var v DaysView
		f.getJSON("/api/days?tz=Europe/Berlin&days=5", &v)
		if v.Zone != "Europe/Berlin" || v.Older != older {
			return fmt.Errorf("zone %q older %v, want Europe/Berlin %v", v.Zone, v.Older, older)
		}
		return sameDays(v.Days, want)
	})
	var utc DaysView
	f.getJSON("/api/days", &utc) // UTC, DefaultDays
	if utc.Zone != "UTC" || len(utc.Days) != 6 || utc.Days[0].Hours != 24 || utc.Days[0].Day != "2026-10-26" {
		t.Errorf("UTC days: %+v", utc)
	}
	for q, want := range map[string]string{
		"?tz=Asia/Kolkata":   "Asia/Kolkata",
		"?tz=Mars/Olympus":   "Mars/Olympus",
		"?tz=UTC&days=0":     "days",
		"?tz=UTC&days=x":     "days",
		"?tz=UTC&days=10000": "days",
	} {
		resp, err := http.Get(f.base + "/api/days" + q)
		if err != nil {
			t.Fatal(err)
		}
		var body DaysView
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || err != nil || !strings.Contains(body.Error, want) {
			t.Errorf("%s: %s %+v %v, want a 400 naming %s", q, resp.Status, body, err, want)
		}
	}
}
